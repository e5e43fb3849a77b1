"""Faults of a real sweep driver (real Ray, a real MLflow store): a local Ray that does not start within its time
limit is one line naming the limit and how to raise it, exit 2, no Tune folder and no store left behind; the
local Ray's trials run at the sweep's own priority, not Ray's 15 steps nicer (starved by any other process)."""

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
import ray
from sweeps.driver.cluster import ray_init
ray_init(None, Path(sys.argv[1]))
print(os.nice(0), ray.get(ray.remote(num_cpus=0)(lambda: os.nice(0)).remote()))
ray.shutdown()
"""


def test_a_local_rays_trials_run_at_the_sweeps_niceness(tmp_path):
    # Ray's default (worker_niceness 15) ran every trial at nice 15-19; under `nice -n 3` the driver and its trial
    # processes are both at 3. The probe is a Ray task in a worker process, as a trial is.
    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    proc = subprocess.run(["nice", "-n", "3", sys.executable, "-c", NICENESS_PROBE, str(tmp_path / "log")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    driver, worker = map(int, proc.stdout.split()[-2:])
    assert worker == driver >= 3, proc.stdout
