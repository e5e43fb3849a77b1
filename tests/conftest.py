"""Shared fixtures: paths, a CLI runner that calls the real `rirlab` entry point, MLflow store helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# `rirlab sweep --dry-run` times a training step of every distinct model config for its compute estimate;
# tests of the dry run's other output skip that (tests/test_spec_dryrun.py times on purpose)
os.environ.setdefault("RIRLAB_DRY_RUN_TIMING", "0")
SHARED = REPO.parent / "shared"
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


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A clean current directory (default MLflow store sqlite:///mlruns.db lands here)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path}"
