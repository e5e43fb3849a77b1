"""Faults of a real sweep driver (real Ray, a real MLflow store): a local Ray that does not start within its time
limit is one line naming the limit and how to raise it, exit 2, no Tune folder and no store left behind; the
local Ray's trials run at the sweep's own priority, not Ray's 15 steps nicer (starved by any other process), in
the only worker processes it starts."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.cli import REPO, run_cli

TINY = REPO / "tests" / "specs" / "tiny.yaml"


def test_a_local_ray_that_does_not_start_in_time_is_one_line_exit_2_and_leaves_nothing(workdir):
    # the boundary, for real: Ray's own wait for its GCS server set to 0 s times out as on an overloaded machine
    proc = run_cli(["sweep", TINY], cwd=workdir, env={"RAY_gcs_server_port_wait_time_s": "0"}, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "the local Ray did not start" in lines[0] and "RAY_gcs_server_port_wait_time_s=120" in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not list(workdir.glob("rirlab_runs/*")), "an empty Tune folder was left behind"
    assert not (workdir / "mlruns.db").exists(), "the store was written before Ray was up"


NICENESS_PROBE = """
import os, sys
from pathlib import Path
import psutil, ray
from rirlab.sweeps.driver.cluster import ray_init


class Trial:
    def probe(self):
        return os.nice(0), os.getpid()


def name(process):  # the program and its script (the raylet's own arguments name the worker scripts)
    try:
        return " ".join(process.cmdline()[:2])
    except psutil.Error:  # (exited meanwhile)
        return ""


ray_init(None, Path(sys.argv[1]))
niceness, pid = ray.get(ray.remote(num_cpus=1)(Trial).remote().probe.remote())
names = {p.pid: name(p) for p in psutil.Process().children(recursive=True)}
workers = [p for p, n in names.items() if "_worker.py" in n or n.startswith("ray::") and "Agent" not in n]
print(os.nice(0), niceness, pid, *workers)
ray.shutdown()
"""


def test_a_local_rays_trials_run_at_the_sweeps_niceness_in_the_only_worker_it_starts(tmp_path):
    # Ray's default (worker_niceness 15) ran every trial at nice 15-19; under `nice -n 3` the driver and its trial
    # processes are both at 3. The probe is a Ray actor in a worker process, as a trial is. Its worker is the only
    # one: Ray's default prestarted one more per CPU for the first driver, idle through a whole sweep (Ray Tune
    # starts each trial's worker itself), each importing Ray for nothing beside the sweep's start.
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_worker_niceness", "RAY_prestart_worker_first_driver")}
    proc = subprocess.run(["nice", "-n", "3", sys.executable, "-c", NICENESS_PROBE, str(tmp_path / "log")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    driver, worker, pid, *workers = map(int, proc.stdout.splitlines()[-1].split())
    assert worker == driver >= 3, proc.stdout
    assert workers == [pid], f"Ray worker processes {workers} beside the trial's {pid}"


HOLD = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("COMMIT")
"""


def test_a_store_held_past_the_stated_wait_stops_in_one_line_and_resume_finishes_it(workdir, new_store):
    """Another process holding the SQLite store (here 25 s, past a stated wait of 2 s) ended a sweep in 262 lines
    and 7 tracebacks with runs RUNNING (issue 53 item 2): now one line naming the holder and the resume command,
    exit 2; once the holder is gone, --resume finishes the sweep and no run stays RUNNING."""
    import yaml
    from mlflow.tracking import MlflowClient

    spec = workdir / "held.yaml"
    tiny = yaml.safe_load(TINY.read_text())
    spec.write_text(yaml.safe_dump({**tiny, "name": "held", "seeds": 1, "search": {}, "checkpoint_every": 20,
                                    "fixed": {**tiny["fixed"], "steps": 400}}, sort_keys=False))
    uri = new_store(workdir / "mlruns.db")
    env = {**os.environ, "RIRLAB_STORE_WAIT_S": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    from tests.helpers.cli import RIRLAB

    sweep = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts", "--progress", "trials"],
                             cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in sweep.stdout:  # once the trial runs (its child run exists), another process takes the store
        lines.append(line)
        if ": running" in line:
            break
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(workdir / "mlruns.db"), "25"], stdout=subprocess.PIPE,
                              text=True)
    try:
        out, err = sweep.communicate(timeout=600)
    finally:
        holder.kill()
        holder.wait()
    assert sweep.returncode == 2, "".join(lines) + out + err
    assert "Traceback" not in out + err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "stayed locked by another process for 2 s" in errors[0], err
    assert f"process {holder.pid}" in errors[0] and "--resume" in errors[0], errors[0]
    resumed = run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, check=True)
    assert "done: 1 finished" in resumed.stdout, resumed.stdout
    runs = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("held").experiment_id])
    assert runs and all(r.info.status == "FINISHED" for r in runs), [r.info.status for r in runs]
