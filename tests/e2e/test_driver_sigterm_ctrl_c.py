"""Signals to a real sweep driver (real Ray, a real MLflow sqlite store): SIGTERM stops it the way Ctrl-C
does (trials KILLED, the resume hint, exit 143); Ctrl-C before the parent run exists prints no resume command."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.helpers.cli import REPO, RIRLAB

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


def _start(workdir, spec):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(predicate, proc, timeout, what, every=0.5):
    """Poll PREDICATE every EVERY seconds: a query of the store costs this process about 0.1 s of CPU, taken from the
    sweep it waits for, so the store is polled twice a second; a file's existence can be polled faster."""
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        assert proc.poll() is None, f"exited {proc.returncode} before {what}: {proc.communicate()}"
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def _finish(proc):
    try:
        return proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_sigterm_stops_the_sweep_like_ctrl_c_with_exit_143(workdir, new_store):
    spec = workdir / "t.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "name": "term", "seeds": 1, "search": {},
                                    "fixed": {**TINY["fixed"], "steps": 5000}}, sort_keys=False))
    db = workdir / "mlruns.db"
    new_store(db)  # the store exists before polling it

    def running_child():
        client = MlflowClient(f"sqlite:///{db}")
        exp = client.get_experiment_by_name("term")
        return exp is not None and any("mlflow.parentRunId" in r.data.tags and r.data.metrics
                                       for r in client.search_runs([exp.experiment_id]))

    proc = _start(workdir, spec)
    try:
        _wait_for(running_child, proc, 300, "a trial reporting")
        proc.send_signal(signal.SIGTERM)
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 143, out + err
    assert f"rirlab sweep {spec} --no-checkpoint-artifacts --resume" in err, err  # as it was started
    client = MlflowClient(f"sqlite:///{db}")
    runs = client.search_runs([client.get_experiment_by_name("term").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("rirlab.sweep") == "parent"]
    (child,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert parent.info.status == "KILLED" and child.info.status == "KILLED"
    assert child.data.tags.get("rirlab.interrupted") == "true"


def test_ctrl_c_in_a_resumed_sweep_keeps_its_trial_unfinished(workdir, new_store):
    """Ctrl-C in a --resume'd sweep: the running trial ends KILLED (interrupted, resumable), as in a fresh one.
    Tune's clean-up marks the trials it stops TERMINATED before the experiment-end callback, which took a resumed
    trial for one Tune had finished while the store was full: its run closed FINISHED, tagged stopped early, with no
    test metric, and the next --resume treated it as done (a real 3-hour trial was lost that way)."""
    spec = workdir / "r.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "name": "again", "seeds": 1, "search": {},
                                    "fixed": {**TINY["fixed"], "steps": 5000}}, sort_keys=False))
    db = workdir / "mlruns.db"
    new_store(db)

    def child():
        client = MlflowClient(f"sqlite:///{db}")
        exp = client.get_experiment_by_name("again")
        runs = [] if exp is None else client.search_runs([exp.experiment_id])
        return next((r for r in runs if "mlflow.parentRunId" in r.data.tags and r.data.metrics), None)

    def steps():
        run = child()
        return [] if run is None else MlflowClient(f"sqlite:///{db}").get_metric_history(run.info.run_id, "train/loss")

    proc = _start(workdir, spec)
    try:
        _wait_for(lambda: child() is not None, proc, 300, "a trial reporting")
        proc.send_signal(signal.SIGINT)
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 130 and child().info.status == "KILLED", out + err
    before = len(steps())
    proc = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts", "--resume"], cwd=workdir,
                            env={k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(lambda: len(steps()) > before, proc, 300, "the resumed trial reporting")
        proc.send_signal(signal.SIGINT)
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 130 and "interrupted: 1 running trial(s) stopped" in err, out + err
    run = child()
    assert run.info.status == "KILLED", (run.info.status, out + err)
    assert run.data.tags.get("rirlab.interrupted") == "true" and "rirlab.early_stopped" not in run.data.tags


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl_c", "sigterm"])
def test_ctrl_c_before_the_parent_run_exists_prints_no_resume_command(workdir, sig, code):
    """Sent the moment Ray starts (its log file exists; the parent run is created only after Ray is up): the
    signal ends the sweep. Before the start-up window, SIGINT ignored for moments inside ray.init lost it on a
    loaded machine, and the sweep ran every trial and exited 0; SIGTERM there hit Ray's own handler (exit 15)."""
    spec = workdir / "c.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "name": "early"}, sort_keys=False))
    proc = _start(workdir, spec)
    try:
        _wait_for(lambda: list(workdir.glob("rirlab_runs/*/ray_driver.log")), proc, 300, "Ray starting", every=0.1)
        proc.send_signal(sig)
    finally:
        out, err = _finish(proc)
    assert proc.returncode == code, out + err
    assert "--resume" not in out + err and "nothing was recorded" in err, out + err
    assert err.strip().count("\n") == 0, err
    if sig == signal.SIGINT:  # a signal from another process names it (a scheduler's, not the user's Ctrl-C)
        assert f"by SIGINT from process {os.getpid()} (" in err, err
    if (workdir / "mlruns.db").exists():
        client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
        exp = client.get_experiment_by_name("early")
        assert exp is None or not client.search_runs([exp.experiment_id])
    assert not list(workdir.glob("rirlab_runs/*")), "the sweep's empty Tune folder was left behind"
