"""A tracking server that stops answering mid-sweep (issue 53 item 3), without Ray: MLflow's HTTP retries bounded by
the driver (overridable), the error MLflow raises once they run out recognised as that fault, and the callback
stopping the sweep on it as on a full disk. The real server killed mid-sweep: tests/e2e/test_tracking_server_dies.py."""

from __future__ import annotations

import logging
import socket
import time
import types

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from rirlab.errors import UserError
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record import faults
from rirlab.sweeps.record.callback import MLflowTrialCallback
from rirlab.sweeps.record.tracker import Tracker
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.schema import base_config
from tests.helpers.cli import REPO

HTTP = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_HTTP_REQUEST_TIMEOUT")


@pytest.fixture
def http_env(monkeypatch):
    for name in HTTP:
        monkeypatch.delenv(name, raising=False)  # (restored after the test, whatever the code set)
    return monkeypatch


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed


def _error_of_a_dead_server(url):
    with pytest.raises(MlflowException) as err:
        MlflowClient(url).get_run("0" * 32)
    return err.value


def test_a_tracker_on_a_server_bounds_mlflows_retries_unless_the_user_set_them(http_env):
    url = _dead_url()
    http_env.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")  # the user's: kept
    with pytest.raises(UserError):  # a dead server at the start: refused as before, in one line
        Tracker(url)
    import os

    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "4"
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "3"
    # the stated bound follows the settings: every attempt timing out, plus the backoff between them
    assert faults.server_wait_s() == 5 * 3 + (2 + 1) + (4 + 1) + (8 + 1)
    http_env.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    assert faults.server_wait_s() == 3


def test_a_sqlite_tracker_leaves_mlflows_http_settings_alone(http_env, tmp_path):
    import os

    Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    assert not any(name in os.environ for name in HTTP)


def test_the_error_of_a_dead_server_is_the_fault_that_names_it_and_says_runs_stay_running(http_env):
    url = _dead_url()
    faults.bound_http_waits()
    started = time.monotonic()
    err = _error_of_a_dead_server(url)
    assert time.monotonic() - started < faults.server_wait_s()  # refused: the backoff alone, ~15 s, not minutes
    assert faults.server_unreachable(err) == "connection refused"
    fault = faults.store_fault(url, err)
    assert fault is not None and fault.exit_code == 2
    assert fault.why.startswith(f"the MLflow tracking server {url} stopped answering (connection refused")
    assert "cannot mark them KILLED" in fault.why and "\n" not in fault.why
    assert fault.fix.startswith("start the server again")
    # an answer the server gave is no such fault
    assert faults.store_fault(url, MlflowException("RESOURCE_DOES_NOT_EXIST: run not found")) is None


def test_urllib3s_retry_warnings_are_not_printed(http_env):
    url = _dead_url()
    with pytest.raises(UserError):
        Tracker(url)
    log = logging.getLogger("urllib3.connectionpool")
    record = log.makeRecord(log.name, logging.WARNING, __file__, 1, "Retrying (%r) after connection broken by '%r'",
                            ("Retry(total=3)", "NewConnectionError"), None)
    assert not log.filter(record)
    assert log.filter(log.makeRecord(log.name, logging.WARNING, __file__, 1, "Connection pool is full", (), None))


def test_the_callback_stops_the_sweep_when_the_server_stops_answering(http_env, tmp_path, monkeypatch):
    plan = SweepPlan.of(load_spec(REPO / "tests" / "specs" / "tiny.yaml"))
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("tiny")
    parent = tracker.start_parent(exp_id, "tiny", {})
    stops = []
    monkeypatch.setattr(faults, "stop_tune", lambda: stops.append(1))
    cb = MLflowTrialCallback(tracker, exp_id, parent, plan, checkpoint_artifacts=False)
    trial = types.SimpleNamespace(trial_id="t", config={**base_config(plan.spec), "lr": 0.003, "seed": 0},
                                  last_result={}, checkpoint=None, num_failures=0)
    cb.on_trial_start(0, [], trial)
    http_env.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    dead = _error_of_a_dead_server(_dead_url())

    asked = []

    def refuse(*args, **kwargs):
        asked.append(1)
        raise dead

    monkeypatch.setattr(tracker.client, "log_batch", refuse)
    cb.on_trial_result(0, [], trial, {"step": 5, "train/loss": 2.0})  # no exception: the sweep stops instead
    assert stops == [1] and cb.fault is not None and "stopped answering" in cb.fault.why
    cb.on_trial_result(0, [], trial, {"step": 10, "train/loss": 1.0})  # nothing more is written, nor stopped twice
    assert stops == [1]
    assert cb.mark_interrupted() is False  # the server cannot mark the runs KILLED: said, not raised
    assert len(asked) == 1  # nor is it asked again (each write would wait out MLflow's retries once more)


def test_a_driver_write_that_finds_the_server_gone_ends_in_that_fault_without_asking_it_again(http_env, tmp_path):
    """Outside the callback (the parent's own writes: reopening it, its cluster tags, its end) the same fault, with
    the parent's id (so the CLI prints the --resume command), and no KILLED marking that would wait once more."""
    from rirlab.sweeps.driver.sweep import SweepDriver

    url = _dead_url()
    http_env.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    dead = _error_of_a_dead_server(url)
    driver = object.__new__(SweepDriver)
    driver.tracker, driver.parent_id, driver.earlier, driver.tune_path = types.SimpleNamespace(uri=url), "p", None, \
        str(tmp_path)
    driver._mark_killed = lambda *a, **k: pytest.fail("asked a server that stopped answering to mark the run")
    with pytest.raises(faults.SweepFault) as raised:
        driver._fail(dead)
    assert raised.value.parent_id == "p" and "stopped answering" in raised.value.why
