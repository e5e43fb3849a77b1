"""Shared fixtures of every test folder: a clean working directory, a data cache of the test's own, the in-process
CLI on that cache, one torch thread for tiny models. Paths and the subprocess CLI runner: tests/helpers/cli.py."""

from __future__ import annotations

import os
import re
import signal

import pytest

# The commands the tests start get Ctrl-C as a terminal gives it. A suite started as a background job of a script
# (`bash scripts/test.sh &`: POSIX shells start those with SIGINT ignored) would pass the ignored SIGINT on to every
# child, which rightly keeps it (`rirlab sweep` and `rirlab train` honour an ignored SIGINT), and each test that
# interrupts a command (tests/e2e/test_driver_sigterm_ctrl_c.py, tests/train/test_train_faults.py, ...) would wait
# out its timeout. Only ignored signals pass through exec, so Python's own handler here is enough.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# `rirlab sweep --dry-run` times a training step of every distinct model config for its compute estimate;
# tests of the dry run's other output skip that (tests/sweeps/test_spec_dryrun.py times on purpose)
os.environ.setdefault("RIRLAB_DRY_RUN_TIMING", "0")

# need a browser, PostgreSQL, Slurm daemons, inductor's C++ builds, minutes: run only where -m names them
OPT_IN = ("browser", "cluster", "slurm", "inductor")


def pytest_configure(config):
    """The ``one_worker`` marker. Under pytest-xdist (scripts/test.sh runs a worker per core) each worker's torch uses
    one intra-op thread: two workers of two threads each on two cores would oversubscribe them (tests that set
    threads still do)."""
    config.addinivalue_line("markers", "one_worker(key): the tests of KEY share a module-scoped fixture that is costly "
                                       "(a sweep): under xdist's work stealing they start together on one worker "
                                       "(tests/helpers/schedule.py), so it runs once")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.hookimpl(trylast=True)  # after -m's deselection: the order below is of the tests that run
def pytest_collection_modifyitems(config, items):
    """Leave out the opt-in markers' tests unless the -m expression names the marker (`pytest -m browser`,
    `-m "cluster or e2e"`); `pytest` and `pytest -m "not e2e"` run none of them. Under pytest-xdist the slow tests
    start first, spread over the workers (tests/helpers/schedule.py); without it, the collection order stays."""
    named = {m for m in OPT_IN if re.search(rf"\b{m}\b", config.option.markexpr or "")}
    keep, left_out = [], []
    for item in items:
        (left_out if any(item.get_closest_marker(m) for m in set(OPT_IN) - named) else keep).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = keep
    workerinput = getattr(config, "workerinput", None)  # set in an xdist worker only
    if workerinput is not None:
        from tests.helpers import schedule

        ids = [item.nodeid for item in items]
        e2e = {item.nodeid for item in items if item.get_closest_marker("e2e")}
        estimate = schedule.estimates(ids, e2e, schedule.read_durations())
        if workerinput.get(SCHEDULER_KEY) == "worksteal":
            groups = {item.nodeid: item.get_closest_marker("one_worker").args[0] for item in items
                      if item.get_closest_marker("one_worker")}
            order = schedule.spread(ids, estimate, int(workerinput["workercount"]), groups)
        else:
            order = schedule.longest_first(ids, estimate)
        items[:] = [items[i] for i in order]


SCHEDULER_KEY = "rirlab_dist"  # the controller's --dist, which xdist resets to "no" in its workers


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """The session is over: Python's finalization need not walk what the process holds (a worker that ran the models'
    and the sweeps' tests ends with ~750,000 tracked objects, walked several times over: 9 s of a loaded core at
    each worker's exit, 3 s frozen). The same as a sweep's driver does (``skip_final_collections`` in
    sweeps/driver/cluster.py)."""
    import gc

    gc.freeze()


@pytest.hookimpl(optionalhook=True)  # (a pytest-xdist hook; `-p no:xdist` runs without it)
def pytest_configure_node(node):
    """Tell each xdist worker which scheduler hands it tests (the order above depends on it)."""
    node.workerinput[SCHEDULER_KEY] = node.config.option.dist


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
