"""A sweep's driver ends without the interpreter's last garbage collections over everything it holds (seconds of
CPU at the end of every sweep; sweeps/driver/cluster.py, ``skip_final_collections``), and its atexit handlers
still run."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.cli import REPO

DRIVER = """
import atexit, gc, sys
from pathlib import Path
atexit.register(lambda: print("at exit: tracked", len(gc.get_objects()), flush=True))  # registered first: runs last
import ray
ray.init = lambda *a, **k: print("ray.init", flush=True)  # the driver's start without a real Ray
from rirlab.sweeps.driver.cluster import ray_init
held = [[i] for i in range(200_000)]  # what a driver holds at its end (a sweep's: ~675,000 objects)
ray_init(None, Path(sys.argv[1]))
ray_init(None, Path(sys.argv[1]))  # (a second start in one process: once is enough)
print("tracked", len(gc.get_objects()), flush=True)
"""


def test_a_driver_leaves_what_it_holds_to_the_os_at_exit_and_its_exit_handlers_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "log")], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["ray.init", "ray.init"] and lines[2].startswith("tracked "), proc.stdout
    assert lines[3].startswith("at exit: tracked "), proc.stdout  # the exit handlers ran
    before, after = int(lines[2].split()[-1]), int(lines[3].split()[-1])
    assert before > 200_000 and after < 20_000, proc.stdout  # frozen at exit: the collections walk none of them
