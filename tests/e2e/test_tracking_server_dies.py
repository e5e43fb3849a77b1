"""A sweep recording into a real local `mlflow server` that is killed for good mid-sweep (issue 53 item 3): the driver
notices within a bounded time (MLflow's HTTP retries bounded by the driver: sweeps/record/faults.py, HTTP_BOUNDS),
stops the trials at their checkpoints and ends in one line naming the server and the --resume command (exit 2), no
traceback; once the server runs again, --resume finishes every trial, one run each."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from mlflow.tracking import MlflowClient

from rirlab.sweeps.record.faults import server_wait_s
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.e2e.test_sweep_engine_runs import _wait_for
from tests.helpers.cli import RIRLAB, run_cli
from tests.helpers.mlflow_server import free_port, kill, start_server
from tests.helpers.sweep_runs import TINY, write_spec


def test_a_tracking_server_killed_mid_sweep_stops_it_in_one_line_and_resume_finishes(workdir):
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    # two trials (one seed of the two learning rates), both running when the server dies: --resume continues both
    # from their checkpoints (the trials a sweep had not started yet: test_driver_resume, test_sweep_engine_runs)
    spec = write_spec(workdir / "s.yaml", name="server_dies", seeds=1, checkpoint_every=50, max_concurrent=2,
                      fixed={**TINY["fixed"], "steps": 300, "eval_every": 150})
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT",
                        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR")}
    server = start_server(workdir, port)
    client = MlflowClient(f"sqlite:///{workdir / 'server.db'}")  # read beside the server, not through it

    def a_trial_logging():
        exp = client.get_experiment_by_name("server_dies")
        runs = client.search_runs([exp.experiment_id], "tags.`mlflow.parentRunId` != ''") if exp else []
        return any(r.info.status == "RUNNING" and "train/loss" in r.data.metrics for r in runs)

    proc = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--tracking-uri", uri, "--no-checkpoint-artifacts"],
                            cwd=workdir, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        try:
            _wait_for(a_trial_logging, 600, "a trial logging into the server", proc)
        finally:
            kill(server)  # for good
        killed = time.monotonic()
        bound = server_wait_s() * 2 + 90  # a result's write, the parent's marking, Tune's stop (a loaded machine)
        try:
            out, err = proc.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the sweep did not end within {bound:.0f} s of the server's death")
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2, out + err
    assert "Traceback" not in out + err, out + err
    errors = [line for line in err.splitlines() if line.strip()]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"error: the MLflow tracking server {uri} stopped answering"), errors
    assert "cannot mark them KILLED" in errors[0], errors
    assert errors[0].endswith(f"sweep {spec} --tracking-uri {uri} --no-checkpoint-artifacts --resume"), errors
    assert took < bound, took

    server = start_server(workdir, port)
    try:
        again = run_cli(["sweep", spec, "--tracking-uri", uri, "--resume", "--no-checkpoint-artifacts"], cwd=workdir,
                        env={"TUNE_GLOBAL_CHECKPOINT_S": "1"})
    finally:
        kill(server)
    assert again.returncode == 0, again.stdout + again.stderr
    exp = client.get_experiment_by_name("server_dies")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("rirlab.sweep") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    trials = expand(load_spec(spec).spec)
    assert sorted(r.info.run_name for r in children) == sorted(t["name"] for t in trials)  # one run each
    assert all(r.info.status == "FINISHED" and "test/accuracy" in r.data.metrics for r in children), \
        [(r.info.run_name, r.info.status) for r in children]
