"""Sweeps at once on one SQLite store (issue 50 item 4): the Optuna study file two optuna sweeps share beside the
store waits for the other's lock as the MLflow store does, instead of failing after SQLite's 5 s with "database is
locked"; a lock held past the wait stops the sweep with one line that says how to serve the store to several sweeps.
Two real sweeps at once: tests/e2e/test_driver_concurrent.py."""

from __future__ import annotations

import subprocess
import sys
import time

import optuna

from rirlab.sweeps.record.faults import store_lock_held
from rirlab.sweeps.tune.optuna import rdb_storage

HOLD = ("import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('holding', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "c.execute('ROLLBACK')\n")


def test_an_optuna_study_waits_for_another_sweeps_lock_on_its_sqlite_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RIRLAB_STORE_WAIT_S", "60")
    path = tmp_path / "optuna.db"
    url = f"sqlite:///{path}"
    optuna.create_study(study_name="a", storage=rdb_storage(url))  # the schema, as the first sweep makes it
    storage = rdb_storage(url)  # the second sweep's
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path), "8"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        study = optuna.create_study(study_name="b", storage=storage)  # before: "database is locked" after 5 s
        study.tell(study.ask(), 1.0)
        assert time.monotonic() - started > 5  # it waited for the lock (8 s), past sqlite3's own 5 s
    finally:
        holder.kill()
        holder.wait()
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["a", "b"]


def test_a_store_locked_past_the_wait_says_how_to_serve_it_to_several_sweeps(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    fault = store_lock_held(uri)
    assert "\n" not in fault.fix
    assert f"`rirlab ui --tracking-uri {uri} --port 5000`" in fault.fix
    assert "--tracking-uri http://127.0.0.1:5000" in fault.fix


def test_a_study_database_another_sweep_created_at_the_same_moment_is_opened_again(tmp_path, monkeypatch):
    """Two optuna sweeps started together both create the new optuna.db's schema; the second failed on the first's
    version row (seen in tests/e2e/test_driver_concurrent.py: "UNIQUE constraint failed: alembic_version") and its
    sweep ended before any trial. It is opened again and finds the schema made."""
    from rirlab.errors import UserError

    real = optuna.storages.RDBStorage
    calls = []

    class Racing(real):  # (a subclass: Optuna checks isinstance(storage, RDBStorage))
        def __init__(self, url, **kwargs):
            calls.append(url)
            super().__init__(url, **kwargs)
            if len(calls) == 1:  # as if the other sweep had made the schema between our check and our insert
                raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed: alembic_version.version_num")

    monkeypatch.setattr(optuna.storages, "RDBStorage", Racing)
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.create_study(study_name="a", storage=rdb_storage(url))
    assert len(calls) == 2

    class Broken(real):
        def __init__(self, url, **kwargs):
            calls.append(url)
            raise RuntimeError("unable to open database file")

    calls.clear()
    monkeypatch.setattr(optuna.storages, "RDBStorage", Broken)  # anything else: one line at once, not retried
    try:
        rdb_storage(url)
    except UserError as err:
        assert "cannot be opened (unable to open database file)" in str(err)
    else:
        raise AssertionError("no UserError")
    assert len(calls) == 1
