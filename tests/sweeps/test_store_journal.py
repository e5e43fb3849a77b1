"""SQLite's write-ahead log while a sweep writes its store (issue 50: ~20 commits a trial, each ~40 ms of syncs in
the rollback journal's mode, and `rirlab runs` meeting the writer's lock): used only where /proc/mounts says the
store is on a local filesystem (WAL can corrupt a store on NFS, Lustre, GPFS or CIFS), every commit still synced
(synchronous FULL), the choice said in one line, and the rollback journal set back at the end, so the file alone is
the store again. Figures: benchmarks/sqlite_journal.py."""

from __future__ import annotations

import sqlite3

from mlflow.tracking import MlflowClient

from rirlab import contract
from rirlab.sweeps.record import store
from rirlab.sweeps.record.store import filesystem_of, journal_plan
from rirlab.sweeps.record.tracker import Tracker

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
proc /proc proc rw 0 0
fs1:/export/lab /mnt/lab nfs4 rw,vers=4.2 0 0
/dev/vdb /mnt/lab/scratch xfs rw 0 0
/dev/vdc /mnt/my\\040disk btrfs rw 0 0
lustre@tcp:/fs /lustre lustre rw 0 0
"""


def journal_mode(db) -> str:
    """The journal mode of the SQLite file ``db`` (a connection of its own, closed at once)."""
    con = sqlite3.connect(db)
    try:
        return con.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        con.close()


def _mounts(tmp_path, monkeypatch, kind: str) -> None:
    """/proc/mounts as it would read with ``tmp_path`` on a filesystem of type ``kind``."""
    fake = tmp_path / "mounts"
    fake.write_text(MOUNTS + f"server:/x {tmp_path.resolve()} {kind} rw 0 0\n")
    monkeypatch.setattr(store, "MOUNTS", str(fake))


def test_the_filesystem_of_a_path_is_its_longest_mount_point(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    assert filesystem_of("/home/me/mlruns.db", str(mounts)) == "ext4"
    assert filesystem_of("/mnt/lab/sweeps/new/mlruns.db", str(mounts)) == "nfs4"  # (not created yet)
    assert filesystem_of("/mnt/lab/scratch/mlruns.db", str(mounts)) == "xfs"
    assert filesystem_of("/mnt/labx/mlruns.db", str(mounts)) == "ext4"  # a prefix of the name is not the mount
    assert filesystem_of("/mnt/my disk/mlruns.db", str(mounts)) == "btrfs"  # \040 in /proc/mounts: a space
    assert filesystem_of("/x", str(tmp_path / "none")) is None  # no /proc/mounts (not Linux)


def test_the_write_ahead_log_only_on_a_local_filesystem_said_in_one_line(tmp_path, monkeypatch):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    monkeypatch.setattr(store, "MOUNTS", str(mounts))
    wal, line = journal_plan(store.Path("/home/me/mlruns.db"))
    assert wal and "\n" not in line and "write-ahead log" in line and "ext4" in line
    for path, kind in (("/mnt/lab/mlruns.db", "nfs4"), ("/lustre/me/mlruns.db", "lustre")):
        wal, line = journal_plan(store.Path(path))
        assert not wal and "\n" not in line and "rollback journal" in line and kind in line
    monkeypatch.setattr(store, "MOUNTS", str(tmp_path / "none"))
    wal, line = journal_plan(store.Path("/home/me/mlruns.db"))
    assert not wal and "unknown filesystem" in line


def test_a_store_on_a_local_filesystem_is_written_ahead_synced_and_left_one_file(tmp_path, monkeypatch, new_store):
    _mounts(tmp_path, monkeypatch, "ext4")
    db = tmp_path / "mlruns.db"
    tracker = Tracker(new_store(db))
    assert "write-ahead log" in tracker.write_ahead()
    exp = tracker.experiment_id("wal")
    parent = tracker.start_parent(exp, "wal sweep", {})
    child = tracker.start_child(exp, parent, "lr=0.1", {"lr": 0.1}, {contract.TRIAL_KEY: "k"})
    tracker.client.log_metric(child, "train/loss", 1.0, step=5)
    assert journal_mode(db) == "wal"
    engine = tracker.client._tracking_client.store.engine
    with engine.connect() as con:
        assert con.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL: each commit synced before it returns
    tracker.end_write_ahead()
    assert journal_mode(db) == "delete" and not db.with_name("mlruns.db-wal").exists()
    # the file alone holds every write: read from a copy of it without its -wal / -shm
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    client = MlflowClient(f"sqlite:///{copy}")
    assert [m.step for m in client.get_metric_history(child, "train/loss")] == [5]
    assert client.get_run(parent).data.tags[contract.SWEEP_TAG] == contract.PARENT


def test_a_new_store_is_made_then_written_ahead(tmp_path, monkeypatch):
    """A sweep's first write builds its store (a refused command leaves none): the journal follows that."""
    _mounts(tmp_path, monkeypatch, "xfs")
    db = tmp_path / "new" / "mlruns.db"
    tracker = Tracker(f"sqlite:///{db}")
    assert "write-ahead log" in tracker.write_ahead() and not db.exists()
    tracker.experiment_id("wal")
    assert journal_mode(db) == "wal"
    tracker.end_write_ahead()
    assert journal_mode(db) == "delete"


def test_a_store_on_a_network_filesystem_keeps_the_rollback_journal(tmp_path, monkeypatch, new_store):
    _mounts(tmp_path, monkeypatch, "nfs4")
    db = tmp_path / "mlruns.db"
    tracker = Tracker(new_store(db))
    line = tracker.write_ahead()
    assert "rollback journal" in line and "nfs4" in line
    exp = tracker.experiment_id("nfs")
    tracker.start_parent(exp, "nfs sweep", {})
    assert journal_mode(db) == "delete"
    tracker.end_write_ahead()
    assert journal_mode(db) == "delete"


def test_another_process_holding_the_store_open_keeps_it_written_ahead_and_readable(tmp_path, monkeypatch, new_store):
    """Leaving WAL needs every other connection closed: with a reader still connected (`rirlab ui`, a second sweep)
    the store stays in WAL mode, which SQLite reads as it is, and the last sweep to end sets it back."""
    _mounts(tmp_path, monkeypatch, "ext4")
    db = tmp_path / "mlruns.db"
    tracker = Tracker(new_store(db))
    tracker.write_ahead()
    exp = tracker.experiment_id("held")
    parent = tracker.start_parent(exp, "held sweep", {})
    reader = sqlite3.connect(db)
    reader.execute("SELECT COUNT(*) FROM runs").fetchone()
    try:
        tracker.end_write_ahead()
        assert journal_mode(db) == "wal"
        assert reader.execute("SELECT COUNT(*) FROM runs WHERE run_uuid = ?", (parent,)).fetchone() == (1,)
    finally:
        reader.close()
    again = Tracker(f"sqlite:///{db}")
    again.write_ahead()
    again.client.set_tag(parent, "again", "1")
    again.end_write_ahead()  # (MLflow keeps one engine per URI in a process: the first tracker's connections too)
    assert journal_mode(db) == "delete"


def test_a_sweep_that_never_made_its_store_leaves_none(tmp_path, monkeypatch):
    """A sweep refused before its first write (a full disk building the store, Ray not starting) ends its journal
    too: that must not create an empty file where the store would have been."""
    _mounts(tmp_path, monkeypatch, "ext4")
    db = tmp_path / "mlruns.db"
    tracker = Tracker(f"sqlite:///{db}")
    assert "write-ahead log" in tracker.write_ahead()
    tracker.end_write_ahead()
    assert not db.exists()


def test_a_store_other_machines_write_too_keeps_the_rollback_journal(tmp_path, monkeypatch, new_store):
    """Trials sampling system metrics on a cluster's other nodes write the store from there (over a shared
    filesystem), which SQLite's write-ahead log cannot serve, whatever the driver's own mount says."""
    _mounts(tmp_path, monkeypatch, "ext4")
    db = tmp_path / "mlruns.db"
    tracker = Tracker(new_store(db))
    line = tracker.write_ahead(other_machines=True)
    assert "rollback journal" in line and "other machines" in line
    tracker.start_parent(tracker.experiment_id("cluster"), "cluster sweep", {})
    assert journal_mode(db) == "delete"
