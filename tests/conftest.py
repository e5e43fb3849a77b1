"""Shared fixtures of every test folder: a clean working directory, a data cache of the test's own, the in-process
CLI on that cache, one torch thread for tiny models. Paths and the subprocess CLI runner: tests/helpers/cli.py."""

from __future__ import annotations

import os
import re

import pytest

# `rirlab sweep --dry-run` times a training step of every distinct model config for its compute estimate;
# tests of the dry run's other output skip that (tests/sweeps/test_spec_dryrun.py times on purpose)
os.environ.setdefault("RIRLAB_DRY_RUN_TIMING", "0")

# need a browser, PostgreSQL, Slurm daemons, inductor's C++ builds, minutes: run only where -m names them
OPT_IN = ("browser", "cluster", "slurm", "inductor")


def pytest_configure(config):
    """Under pytest-xdist (scripts/test.sh runs a worker per core) each worker's torch uses one intra-op thread: two
    workers of two threads each on two cores would oversubscribe them (tests that set threads still do)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Leave out the opt-in markers' tests unless the -m expression names the marker (`pytest -m browser`,
    `-m "cluster or e2e"`); `pytest` and `pytest -m "not e2e"` run none of them."""
    named = {m for m in OPT_IN if re.search(rf"\b{m}\b", config.option.markexpr or "")}
    keep, left_out = [], []
    for item in items:
        (left_out if any(item.get_closest_marker(m) for m in set(OPT_IN) - named) else keep).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = keep


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A clean current directory (default MLflow store sqlite:///mlruns.db lands here)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The data cache of this test alone ($RIRLAB_CACHE under tmp_path), and no $RIRLAB_DATA of the user's."""
    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RIRLAB_DATA", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def cli(cache):
    """`rirlab ARGS` in-process on the test's own cache; exceptions propagate (a crash is not an exit code)."""
    from click.testing import CliRunner

    from rirlab.cli import main

    runner = CliRunner()  # click >= 8.2: result.stdout and result.stderr apart
    return lambda *args: runner.invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def new_store():
    """``new_store(PATH)``: an empty MLflow sqlite store at PATH with every schema migration applied, copied from one
    made once per process (creating a store runs MLflow's migrations: seconds in each test); returns its URI.
    Tests of store creation itself (concurrent creation, a full disk, old schemas) create theirs for real."""
    from tests.helpers.analysis_store import copy_empty_store

    return copy_empty_store


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread is many times faster than two on a shared 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
