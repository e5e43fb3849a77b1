"""A SQLite store another process holds (a second sweep writing it, a backup holding a transaction): the driver's
writes wait the stated ``$RIRLAB_STORE_WAIT_S`` (default 120 s), not the 20 s MLflow sets at the start of every
session, and past that wait the write's error becomes the one-line fault that names the holder (issue 53 item 2:
another process holding the store for 40 s ended a sweep in 262 lines of tracebacks, runs left RUNNING)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from sqlalchemy import text

from rirlab.sweeps.record.faults import STORE_WAIT_ENV, store_fault, store_locked
from rirlab.sweeps.record.tracker import Tracker

HOLD = textwrap.dedent("""
    import sqlite3, sys, time
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
    con.execute("COMMIT")
""")


def _busy_timeout_ms(tracker: Tracker) -> int:
    store = tracker.client._tracking_client.store
    with store.ManagedSessionMaker() as session:  # MLflow's own session: its start-up pragmas ran
        return session.execute(text("PRAGMA busy_timeout")).scalar()


@pytest.mark.parametrize("env, expected_ms", [(None, 120_000), ("7.5", 7_500), ("nonsense", 120_000)])
def test_the_drivers_sessions_wait_the_stated_time_for_a_lock(tmp_path, new_store, monkeypatch, env, expected_ms):
    if env is None:
        monkeypatch.delenv(STORE_WAIT_ENV, raising=False)
    else:
        monkeypatch.setenv(STORE_WAIT_ENV, env)
    tracker = Tracker(new_store(tmp_path / f"s{expected_ms}.db"))
    assert _busy_timeout_ms(tracker) == expected_ms  # MLflow alone: 20000


def test_a_lock_held_past_the_wait_is_a_fault_naming_the_holder(tmp_path, new_store, monkeypatch):
    monkeypatch.setenv(STORE_WAIT_ENV, "1")
    db = tmp_path / "held.db"
    tracker = Tracker(new_store(db))
    exp = tracker.client.create_experiment("x")
    run = tracker.client.create_run(exp)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        with pytest.raises(Exception) as caught:
            tracker.set_tags(run.info.run_id, {"a": "b"})
        assert time.monotonic() - started < 15  # the stated 1 s (plus MLflow's own retries), not 20 s or forever
        assert store_locked(caught.value)
        fault = store_fault(tracker.uri, caught.value)
        assert fault is not None and "\n" not in fault.why
        assert f"process {holder.pid} (" in fault.why and "stayed locked by another process for 1 s" in fault.why
        assert STORE_WAIT_ENV in fault.fix
    finally:
        holder.kill()
        holder.wait()
    tracker.set_tags(run.info.run_id, {"a": "b"})  # released: the store takes it
    assert tracker.client.get_run(run.info.run_id).data.tags["a"] == "b"


def test_other_errors_are_not_store_faults(tmp_path):
    assert store_fault(f"sqlite:///{tmp_path / 'x.db'}", ValueError("bad value")) is None
