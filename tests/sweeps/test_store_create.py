"""A new MLflow store is never half-written: Ctrl-C during its creation, and two processes creating it at once
(real processes, a real SQLite store)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[2]

# what `rirlab sweep` does first with the store: the Tracker, then the experiment lookup (MLflow creates the
# schema of a new store on first use)
CREATE = """
import os, sys, time
from pathlib import Path
import alembic.command, sqlalchemy, mlflow.store.db.utils, mlflow.store.tracking.sqlalchemy_store  # imports: before go
from rirlab.sweeps.record.tracker import Tracker
go = Path(sys.argv[2])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
for uri in sys.argv[1].split(","):  # the second command checks several stores in one process
    Tracker(uri).experiment_id(sys.argv[3])
print("done", flush=True)
"""


def _spawn(uri: str, go: Path, name: str = "sweep", cache: Optional[Path] = None) -> subprocess.Popen:
    """The command, started; with ``cache`` (a data cache of its own, without the store template it keeps: see
    sweeps/record/store.py) it runs MLflow's migrations itself, as on a machine's first new store."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    if cache is not None:
        env["RIRLAB_CACHE"] = str(cache)
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen([sys.executable, "-c", CREATE, uri, str(go), name], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _tables(db: Path) -> set:
    con = sqlite3.connect(db)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def _second_command_works(uris: list, tmp_path: Path) -> None:
    go = tmp_path / "go-after"
    go.touch()
    proc = _spawn(",".join(uris), go, "after")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "done" in out, err[-3000:]


@pytest.mark.e2e
def test_sigint_while_a_new_store_is_created_leaves_no_half_store(tmp_path, monkeypatch):
    """SIGINT at 30% and 70% of the time a store creation takes here (earlier too, until one lands inside it); after
    each, the store is absent or complete and the next command works (before: `table ... already exists` for good).
    Each command has a data cache of its own: it builds the store's schema (MLflow's migrations, the template it
    copies), the part a signal can cut in two; a template left behind is complete too."""
    from rirlab.sweeps.record import store
    from rirlab.sweeps.record.tracker import Tracker

    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path / "calibration-cache"))
    t0 = time.monotonic()
    Tracker(f"sqlite:///{tmp_path / 'calibration.db'}").experiment_id("x")  # how long a creation takes here now
    took = time.monotonic() - t0
    interrupted, uris = 0, []
    # 30% and 70%; where a loaded machine (parallel test workers) made both land after the creation, earlier ones
    for frac in (0.3, 0.7, 0.15, 0.05, 0.01):
        if interrupted and len(uris) >= 2:
            break
        d = tmp_path / f"at{frac}"
        d.mkdir()
        db, go = d / "mlruns.db", d / "go"
        proc = _spawn(f"sqlite:///{db}", go, cache=d / "cache")
        assert proc.stdout.readline().strip() == "ready"
        go.touch()
        time.sleep(frac * took)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        interrupted += "done" not in out
        if db.exists():  # the store is complete or absent, never in between
            assert {"experiments", "runs", "alembic_version"} <= _tables(db), err[-2000:]
        assert not [p.name for p in d.rglob("*") if p.name.endswith(".new")]  # no temporary file left behind
        assert all(store._is_template(t) for t in (d / "cache").rglob("*.db"))  # nor a half template
        uris.append(f"sqlite:///{db}")
    assert interrupted >= 1  # the signals did land inside the creation
    _second_command_works(uris, tmp_path)


def test_two_processes_create_the_same_fresh_store_at_once(tmp_path):
    db = tmp_path / "mlruns.db"
    uri = f"sqlite:///{db}"
    go = tmp_path / "go"
    procs = [_spawn(uri, go, f"sweep{i}", cache=tmp_path / "cache") for i in range(3)]  # (the template too)
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    go.touch()
    results = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and "done" in out, err[-3000:]
    con = sqlite3.connect(db)
    names = sorted(r[0] for r in con.execute("SELECT name FROM experiments"))
    con.close()
    assert names == ["Default", "sweep0", "sweep1", "sweep2"]


@pytest.mark.e2e
def test_a_new_store_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    """sqlite's 'database or disk is full' while MLflow built a new store was a 107-line traceback, and the fresh
    sweep's Tune folder was left behind. A real full disk: a 64 KiB tmpfs where this machine lets the test mount
    one (root in a container usually may), else the test says why it cannot run."""
    import shutil

    from tests.helpers.cli import run_cli

    full = tmp_path / "full"
    full.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                                                       capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root); the full-disk case is not reproducible")
    try:
        proc = run_cli(["sweep", REPO / "tests" / "specs" / "tiny.yaml", "--tracking-uri", f"sqlite:///{full}/m.db"],
                       cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert f"cannot create the MLflow store sqlite:///{full}/m.db (database or disk is full)" in line, line
        assert not (full / "m.db").exists() and not (tmp_path / "rirlab_runs").exists()
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)
