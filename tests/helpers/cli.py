"""Paths of the checkout and the two ways the tests call `rirlab`: as a user would (a separate process running the
console script) and in-process through click's CliRunner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
TINY_SPEC = REPO / "tests" / "specs" / "tiny.yaml"  # a sweep of tiny, fast trials
_SCRIPT = Path(sys.executable).parent / "rirlab"  # the console script a user runs
RIRLAB = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "rirlab.cli"]


def run_cli(args, cwd, env=None, timeout=900, check=False) -> subprocess.CompletedProcess:
    """Run `rirlab ARGS` as a user would (a separate process), returning the completed process."""
    full_env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    full_env.update(PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.run([*RIRLAB, *map(str, args)], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"rirlab {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def invoke(*args, catch_exceptions=True):
    """`rirlab ARGS` in this process (click's CliRunner); the click Result."""
    from click.testing import CliRunner

    from rirlab.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=catch_exceptions)


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path}"
