"""The tracking URI and its store are checked before anything starts: one line, exit 2, in seconds, the store
untouched, passwords masked; read-only commands never create a store."""

from __future__ import annotations

import ctypes
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rirlab.cli import main
from rirlab.errors import UserError
from rirlab.sweeps.record.store import StoreURI, check_store, validate_uri
from rirlab.sweeps.record.tracker import Tracker, resolve_tracking_uri

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "specs" / "tiny.yaml"
SECRET = "hunter2-9f8e7d6c"


def sweep(*args):
    return CliRunner().invoke(main, ["sweep", str(TINY), *map(str, args)])


def one_line_error(result, *needles):
    """Exit 2 and one line on stderr (stdout may hold the sweep's banner line)."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("uri, needle", [
    ("sqlite://", "in-memory"),
    ("sqlite:///:memory:", "in-memory"),
    ("sqlite://mlruns.db", "sqlite:///mlruns.db"),
    ("foo://x", "sqlite:///"),
    ("mlruns.db", "sqlite:///mlruns.db"),
])
def test_bad_tracking_uri_is_one_line_and_writes_nothing(workdir, uri, needle):
    one_line_error(sweep("--tracking-uri", uri), f"--tracking-uri {uri}", needle)
    assert list(workdir.iterdir()) == []


def test_bad_uri_from_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite://")
    with pytest.raises(UserError, match=r"^\$MLFLOW_TRACKING_URI sqlite://: an in-memory"):
        resolve_tracking_uri(None)


def test_unreachable_server_fails_in_seconds_with_the_password_masked(workdir):
    t0 = time.time()
    result = sweep("--tracking-uri", f"http://alice:{SECRET}@127.0.0.1:9")
    line = one_line_error(result, "http://alice:***@127.0.0.1:9", "does not answer")
    assert time.time() - t0 < 30  # MLflow alone retries for about 4 minutes
    assert SECRET not in result.output and SECRET not in line
    assert list(workdir.iterdir()) == []


def test_corrupted_sqlite_store_is_left_untouched(workdir):
    db = workdir / "mlruns.db"
    junk = b"not a database\x00" * 200
    db.write_bytes(junk)
    before = db.stat().st_mtime_ns
    one_line_error(sweep("--tracking-uri", f"sqlite:///{db}"), "is not an MLflow store", "left untouched")
    assert db.read_bytes() == junk and db.stat().st_mtime_ns == before
    with pytest.raises(UserError, match="is not an MLflow store"):
        Tracker(f"sqlite:///{db}", create=False)


@pytest.mark.parametrize("name, tables, message", [
    ("other.db", "CREATE TABLE t (x);", "not an MLflow store .no MLflow tables"),  # a foreign sqlite database
    ("mlruns.db", "CREATE TABLE experiments (x); CREATE TABLE alembic_version (version_num);",
     "half-created MLflow store .* delete it"),  # a store an earlier version began to create
], ids=["foreign", "half_created"])
def test_a_sqlite_database_that_is_no_mlflow_store_is_refused_untouched(tmp_path, name, tables, message):
    db = tmp_path / name
    con = sqlite3.connect(db)
    con.executescript(tables)
    con.close()
    before = db.read_bytes()
    with pytest.raises(UserError, match=message):
        check_store(f"sqlite:///{db}", create=True)
    assert db.read_bytes() == before


def test_read_only_commands_never_create_a_store(tmp_path):
    db = tmp_path / "mlruns.db"
    with pytest.raises(UserError, match=r"^no MLflow store at sqlite:///.*mlruns\.db; run a sweep first or pass --tracking-uri$"):
        Tracker(f"sqlite:///{db}", create=False)
    with pytest.raises(UserError, match="no MLflow store"):
        check_store(f"sqlite:///{db}", create=False)
    assert list(tmp_path.iterdir()) == []
    Tracker(f"sqlite:///{db}")  # a command that writes probes the directory, and creates the store ...
    assert list(tmp_path.iterdir()) == []
    Tracker(f"sqlite:///{db}").experiment_id("x")  # ... at its first write
    assert db.exists()
    Tracker(f"sqlite:///{db}", create=False).experiment_id("x", create=False)


def _without_root_override():
    """Run the child as root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, so permission bits apply to it."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # PR_CAPBSET_DROP
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            os._exit(99)


@pytest.mark.parametrize("existing", [False, True])
def test_read_only_store_directory_fails_in_seconds(tmp_path, existing):
    ro = tmp_path / "ro"
    ro.mkdir()
    if existing:
        Tracker(f"sqlite:///{ro / 'mlruns.db'}").experiment_id("x")
    ro.chmod(0o555)
    script = ("import sys\nfrom rirlab.errors import UserError\nfrom rirlab.sweeps.record.tracker import Tracker\n"
              "try:\n    Tracker(sys.argv[1]).experiment_id('sweep')\nexcept UserError as e:\n    print(e)\n    sys.exit(2)\n")
    try:
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-c", script, f"sqlite:///{ro / 'mlruns.db'}"], capture_output=True,
                              text=True, timeout=90, preexec_fn=_without_root_override,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        took = time.time() - t0
    finally:
        ro.chmod(0o755)
    if proc.returncode == 99:
        pytest.skip("cannot drop root's permission override here")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"cannot write to {ro} for the MLflow store") and took < 30


def test_store_uri_prints_masked_and_keeps_the_real_value():
    uri = validate_uri(f"postgresql://mlflow:{SECRET}@10.0.0.5:5432/mlflow")
    assert isinstance(uri, StoreURI) and isinstance(uri, str)
    for shown in (str(uri), repr(uri), f"{uri}", "%s" % uri, f"{uri:>10}"):
        assert SECRET not in shown and "mlflow:***@10.0.0.5" in shown
    assert uri.raw == f"postgresql://mlflow:{SECRET}@10.0.0.5:5432/mlflow" and type(uri.raw) is str
    from sqlalchemy.engine import make_url

    assert make_url(uri).password == SECRET  # libraries reading the string itself get the real one


def test_relative_sqlite_uri_is_made_absolute(workdir):
    assert resolve_tracking_uri("sqlite:///sub/m.db") == f"sqlite:///{workdir / 'sub' / 'm.db'}"
    assert resolve_tracking_uri(None) == f"sqlite:///{workdir / 'mlruns.db'}"


def test_store_of_an_earlier_mlflow_is_migrated_on_a_copy_and_swapped_in(tmp_path):
    import sqlalchemy
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

    db = tmp_path / "mlruns.db"
    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    InitialBase.metadata.create_all(engine)
    config = _get_alembic_config(f"sqlite:///{db}")
    with engine.begin() as con:
        config.attributes["connection"] = con
        command.upgrade(config, "451aebb31d03")  # an early revision (MLflow 1.x)
    engine.dispose()
    with pytest.raises(UserError, match="schema of an earlier MLflow .451aebb31d03.; a `rirlab sweep` on it migrates it"):
        check_store(f"sqlite:///{db}", create=False)
    check_store(f"sqlite:///{db}", create=True)
    assert (tmp_path / "mlruns.db.451aebb31d03.bak").exists()
    check_store(f"sqlite:///{db}", create=False)  # current now
    Tracker(f"sqlite:///{db}").experiment_id("after-migration")


def test_refused_resume_and_unreachable_address_leave_no_store_behind(workdir):
    one_line_error(sweep("--resume"), "--resume: no earlier sweep")
    one_line_error(sweep("--address", "127.0.0.1:9"), "--address 127.0.0.1:9")
    assert not (workdir / "mlruns.db").exists()


def test_store_left_half_migrated_is_one_line_and_untouched(tmp_path):
    """Tables of later migrations present but the recorded revision earlier: what a Ctrl-C during MLflow's own
    schema creation left (each migration's DDL commits before its revision is written)."""
    db = tmp_path / "mlruns.db"
    check_store(f"sqlite:///{db}", create=True)
    con = sqlite3.connect(db)
    con.execute("UPDATE alembic_version SET version_num = '451aebb31d03'")
    con.commit()
    con.close()
    before = db.read_bytes()
    with pytest.raises(UserError, match=r"is a half-created MLflow store .*; delete it and run the command again$"):
        check_store(f"sqlite:///{db}", create=True)
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".mlruns.db.lock", "mlruns.db"]
