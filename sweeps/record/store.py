"""The MLflow store, checked before anything uses it: a known URI form, reachable, an MLflow store.

``check_store(uri, create)`` fails in seconds with one UserError line (the URI's password masked) where
MLflow would retry for minutes or print a traceback. A new SQLite store is built in a temporary file
beside its final path and linked into place under a lock file, so a Ctrl-C leaves either no store or a
complete one, and two sweeps starting together on a fresh store build it once. Commands that only read
(``create=False``) never create a store.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import sqlite3
import warnings
from pathlib import Path
from typing import Iterator, Optional

from rirlab.errors import UserError, command
from rirlab.redact import mask_url, redact_uri
from rirlab.compat import mlflow as compat_mlflow  # MLflow's private schema functions (none imports mlflow here)

PROBE_TIMEOUT_S = 5
SQLITE_MAGIC = b"SQLite format 3\x00"
DB_SCHEMES = ("postgresql", "mysql", "mssql")
FORMS = ("sqlite:///relative/path.db, sqlite:////absolute/path.db, http(s)://HOST:PORT, "
         "postgresql://USER@HOST/DB, mysql://..., mssql://..., file:///absolute/dir")


class StoreURI(str):
    """A tracking URI that prints with its password masked (f-strings, str(), repr(), %s): ``.raw`` is the
    real value, for MLflow and nothing else."""

    @property
    def raw(self) -> str:
        return str.__str__(self)

    @property
    def redacted(self) -> str:
        return mask_url(self.raw)

    def __str__(self) -> str:
        return self.redacted

    def __repr__(self) -> str:
        return repr(self.redacted)

    def __format__(self, spec: str) -> str:
        return format(self.redacted, spec)


def raw(uri: str) -> str:
    """The real URI behind a StoreURI (a plain str is returned as it is)."""
    return uri.raw if isinstance(uri, StoreURI) else uri


def scheme(uri: str) -> str:
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*):", raw(uri))
    return m.group(1).lower().split("+")[0] if m else ""


def validate_uri(uri: str, source: str = "--tracking-uri") -> str:
    """The URI in a form MLflow keeps data at; raises a one-line UserError otherwise. A relative SQLite path is
    made absolute (the store stays where the command was started, whatever directory later code runs in)."""
    text, shown = raw(uri), mask_url(raw(uri))
    kind = scheme(text)
    if kind == "sqlite":
        if text in ("sqlite://", "sqlite:///", "sqlite:///:memory:") or ":memory:" in text or "mode=memory" in text:
            raise UserError(f"{source} {shown}: an in-memory SQLite store keeps nothing after the command ends; "
                            f"give a file, e.g. sqlite:///mlruns.db")
        if not text.startswith("sqlite:///"):
            name = Path(text.split("://", 1)[-1]).name or "mlruns.db"
            raise UserError(f"{source} {shown}: a SQLite URI is sqlite:/// followed by the file's path: "
                            f"sqlite:///{name} (relative to this directory) or sqlite:////home/me/{name} (absolute)")
        path, _, query = text[len("sqlite:///"):].partition("?")
        absolute = Path(path).expanduser().resolve()
        return StoreURI(f"sqlite:///{absolute}" + (f"?{query}" if query else ""))
    if kind in ("http", "https"):
        if not re.match(r"^https?://[^/]+", text):
            raise UserError(f"{source} {shown}: no host; give http(s)://HOST:PORT of an MLflow tracking server")
        return StoreURI(text)
    if kind in DB_SCHEMES or kind in ("databricks", "databricks-uc", "uc"):
        return StoreURI(text)
    if kind == "file" or (kind == "" and text):
        path = text[len("file://"):] if kind == "file" else text
        if Path(path).suffix in (".db", ".sqlite", ".sqlite3"):
            raise UserError(f"{source} {shown}: a path is read as an MLflow file-store directory; for a SQLite "
                            f"file write {shlex.quote(f'sqlite:///{path}')}")
        return StoreURI(Path(path).expanduser().resolve().as_uri())
    raise UserError(f"{source} {shown}: not a tracking URI MLflow can store runs at; use one of: {FORMS}")


def sqlite_path(uri: str) -> Optional[Path]:
    text = raw(uri)
    return Path(text[len("sqlite:///"):].partition("?")[0]) if text.startswith("sqlite:///") else None


def check_store(uri: str, create: bool) -> None:
    """Probe the store of ``uri`` (in seconds); with ``create`` build it when there is none (a SQLite store
    atomically, under a lock), without ``create`` never write anything and fail when there is no store."""
    compat_mlflow.check()  # what follows calls MLflow's private schema functions: one line if it is out of range
    uri = validate_uri(uri)
    kind = scheme(uri)
    if kind == "sqlite":
        _check_sqlite(sqlite_path(uri), create)
    elif kind in ("http", "https"):
        _probe_server(uri)
    elif kind in DB_SCHEMES:
        _check_database(uri, create)
    elif kind == "file":
        path = Path(raw(uri)[len("file://"):])
        if not path.is_dir() and not create:
            raise _no_store(uri)
        if create:
            _check_writable(path if path.is_dir() else path.parent, uri)


def _no_store(uri: str) -> UserError:
    return UserError(f"no MLflow store at {mask_url(raw(uri))}; run a sweep first or pass --tracking-uri")


# ---- SQLite --------------------------------------------------------------------------------------------

def _check_sqlite(path: Path, create: bool) -> None:
    if path.is_dir():
        raise UserError(f"sqlite:///{path} is a directory, not a SQLite file; pass --tracking-uri "
                        f"{shlex.quote(f'sqlite:///{path}/mlruns.db')}")
    if not path.exists():
        if not create:
            raise _no_store(f"sqlite:///{path}")
        _create_sqlite(path)
    head = _verify_sqlite(path)
    if head is not None and not create:
        raise UserError(f"sqlite:///{path} has the schema of an earlier MLflow ({head}); a `rirlab sweep` on it "
                        f"migrates it (keeping a copy), or run: {command('mlflow', 'db', 'upgrade', f'sqlite:///{path}')}")
    if create:
        _check_writable(path.parent, f"sqlite:///{path}")
        try:
            open(path, "r+b").close()  # opened for writing, nothing written
        except OSError as err:
            raise UserError(f"cannot write to the MLflow store sqlite:///{path} ({err.strerror}); make it writable or "
                            f"pass another --tracking-uri") from None
        if head is not None:  # an older schema (a store of an earlier MLflow): migrate a copy, swap it in
            _migrate_sqlite(path, head)


@functools.lru_cache(maxsize=None)  # (alembic reads MLflow's migration scripts: 0.1 s a call; one MLflow a process)
def _latest_revision() -> str:
    return compat_mlflow.latest_schema_revision()


def _verify_sqlite(path: Path) -> Optional[str]:
    """Raise unless ``path`` is a complete MLflow store; returns its schema revision when it is older than this
    MLflow's (None when current). Reads only: the file is never changed here."""
    where = f"sqlite:///{path}"
    try:
        with open(path, "rb") as f:
            magic = f.read(len(SQLITE_MAGIC))
    except OSError as err:
        raise UserError(f"cannot read {where} ({err.strerror}); fix its permissions or pass another --tracking-uri") from None
    if magic != SQLITE_MAGIC:
        what = "an empty file" if not magic else "not a SQLite database"
        raise UserError(f"{where} is not an MLflow store ({what}); it was left untouched: pass another "
                        f"--tracking-uri, or move the file away to start a new store there")
    try:
        tables, rev, runs, _ = _read_schema(path)
    except sqlite3.Error as err:
        raise UserError(f"{where} is not an MLflow store (SQLite says: {err}); it was left untouched: pass another "
                        f"--tracking-uri, or move the file away to start a new store there") from None
    if "experiments" not in tables or "runs" not in tables or rev is None:
        if tables and runs == 0 and ("experiments" in tables or "alembic_version" in tables):
            raise UserError(f"{where} is a half-created MLflow store (its creation was interrupted; it holds no "
                            f"runs); delete it and run the command again")
        raise UserError(f"{where} is not an MLflow store (no MLflow tables in it); it was left untouched: pass "
                        f"another --tracking-uri, or move the file away to start a new store there")
    head = _latest_revision()
    if rev == head:
        return None
    if not compat_mlflow.knows_schema_revision(rev):
        import mlflow

        raise UserError(f"{where} was written by a newer MLflow (schema {rev}) than this one ({mlflow.__version__}); "
                        f"upgrade mlflow in this environment") from None
    return rev


def _read_schema(path: Path, integrity: bool = False) -> tuple[set, Optional[str], int, bool]:
    """What the SQLite file ``path`` holds, read only: its tables, its MLflow schema revision (None without one),
    its run count, and (``integrity``: SQLite's quick_check) whether it is intact (else True). sqlite3.Error where
    it is no readable database."""
    con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        intact = not integrity or con.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        row = con.execute("SELECT version_num FROM alembic_version").fetchone() if "alembic_version" in tables else None
        runs = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] if "runs" in tables else 0
    finally:
        con.close()
    return tables, row[0] if row else None, runs, intact


def can_create(uri: str) -> None:
    """Probe, writing nothing lasting, that a command could create the (missing) store of ``uri`` later: for
    SQLite, that the nearest existing directory on the file's path is writable."""
    compat_mlflow.check()
    uri = validate_uri(uri)
    path = sqlite_path(uri)
    if path is None:
        return check_store(uri, create=True)
    if path.is_dir():
        raise UserError(f"sqlite:///{path} is a directory, not a SQLite file; pass --tracking-uri "
                        f"{shlex.quote(f'sqlite:///{path}/mlruns.db')}")
    if path.exists():
        return check_store(uri, create=True)
    directory = path.parent
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    _check_writable(directory, uri, make=False)


def _check_writable(directory: Path, uri: str, make: bool = True) -> None:
    """A command that writes needs to create files in the store's directory (SQLite's journal, artifacts)."""
    shown = mask_url(raw(uri))
    try:
        if make:
            directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".rirlab-write-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise UserError(f"cannot write to {directory} for the MLflow store {shown} ({err.strerror}); make it "
                        f"writable or pass a --tracking-uri in a writable directory") from None


@contextlib.contextmanager
def store_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``.<name>.lock`` beside the store file: one process creates or migrates at a time."""
    import fcntl

    lock = path.with_name(f".{path.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _build(tmp: Path, source: Optional[Path] = None) -> None:
    """Create (or, from a copy of ``source``, migrate) a complete MLflow schema in ``tmp``."""
    import logging
    import shutil

    import sqlalchemy
    from sqlalchemy.pool import NullPool

    for noisy in (compat_mlflow.DB_LOGGER, "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if source is not None:
        shutil.copy2(source, tmp)
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp}", poolclass=NullPool)
    try:
        with warnings.catch_warnings():  # alembic's notes on old constraints: nothing for the user to act on
            warnings.simplefilter("ignore")
            if source is None:
                compat_mlflow.initialize_tables(engine)
            else:
                compat_mlflow.upgrade_db(engine)
    finally:
        engine.dispose()


# A new store's schema is the same every time: MLflow's alembic migrations, one after another, all of them
# (1.4 s on an idle core, 5-10 s on a busy one, paid by every sweep on a new store). The first one built is kept
# as an empty template in the data cache ($RIRLAB_CACHE, else ~/.cache/rirlab; under mlflow-stores/), named by
# the versions of MLflow, SQLAlchemy and alembic and the schema revision it holds; each later new store is a copy
# of it through SQLite's backup API (milliseconds; SQLite's own error, e.g. a full disk, where it fails). A
# template is copied only while it reads back as a complete, intact store of this MLflow's latest revision
# holding no run: another MLflow names another file, and a damaged one is built again. Where the cache cannot be
# written the store is built in place, as before.

TEMPLATES = "mlflow-stores"


def _template_path() -> Path:
    """Where the empty template of this MLflow's schema is kept (it need not exist)."""
    import alembic
    import mlflow
    import sqlalchemy

    root = Path(os.environ.get("RIRLAB_CACHE") or Path.home() / ".cache" / "rirlab").expanduser()
    versions = f"mlflow{mlflow.__version__}-sqlalchemy{sqlalchemy.__version__}-alembic{alembic.__version__}"
    return root / TEMPLATES / f"empty-{versions}-{_latest_revision()}.db"


def _is_template(path: Path) -> bool:
    """``path`` is a complete MLflow store of this MLflow's latest schema revision, intact, without a run."""
    if not path.is_file():
        return False
    try:
        tables, rev, runs, intact = _read_schema(path, integrity=True)
    except sqlite3.Error:
        return False
    return intact and {"experiments", "runs"} <= tables and rev == _latest_revision() and runs == 0


def _template() -> Optional[Path]:
    """The empty template of this MLflow's schema, built now where there is none (or a stale or damaged one);
    None where the data cache cannot hold it."""
    try:
        path = _template_path()
    except Exception:  # noqa: BLE001 - no version to name it by: no template
        return None
    if _is_template(path):
        return path
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _build(tmp)
        os.replace(tmp, path)  # atomic: a process copying the template sees the old file or the new one
    except Exception:  # noqa: BLE001 - a read-only or full cache: the store is built in place instead
        return None
    finally:
        with contextlib.suppress(OSError):  # (Ctrl-C mid-build: no half template left behind)
            tmp.unlink(missing_ok=True)
    return path if _is_template(path) else None


def _build_new(tmp: Path) -> None:
    """A complete, empty MLflow store in ``tmp``: a copy of the template, or built there where there is none."""
    template = _template()
    if template is None:
        _build(tmp)
        return
    src = sqlite3.connect(f"{template.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()


def _create_sqlite(path: Path) -> None:
    _check_writable(path.parent, f"sqlite:///{path}")
    with store_lock(path):
        if path.exists():  # another process built it while this one waited for the lock
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
        try:
            try:
                _build_new(tmp)
            except Exception as err:  # a full disk or a lost folder mid-build: one line, no half-made store
                why = str(getattr(err, "orig", None) or err).strip().splitlines()[0][:200]  # sqlite's own words
                raise UserError(f"cannot create the MLflow store sqlite:///{path} ({why}); free space there or pass "
                                f"another --tracking-uri") from None
            try:
                os.link(tmp, path)  # atomic; never replaces a store someone made without the lock meanwhile
            except FileExistsError:
                pass
            except OSError:  # a filesystem without hard links
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def _migrate_sqlite(path: Path, revision: str) -> None:
    """Bring a store of an earlier MLflow to this MLflow's schema: migrate a copy, then swap it in atomically
    (the original is kept beside it as ``<name>.<old revision>.bak``)."""
    with store_lock(path):
        if _verify_sqlite(path) is None:  # migrated by another process meanwhile
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.migrating")
        try:
            try:
                _build(tmp, source=path)
            except Exception as err:  # e.g. a store whose creation an earlier rirlab or MLflow left half-done
                con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
                runs = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
                con.close()
                if runs == 0:
                    raise UserError(f"sqlite:///{path} is a half-created MLflow store (its creation was interrupted; "
                                    f"it holds no runs); delete it and run the command again") from None
                raise UserError(f"cannot migrate sqlite:///{path} to this MLflow's schema ({_first_line(err)}); it was "
                                f"left unchanged (the migration ran on a copy): run mlflow db upgrade on a backup") from None
            os.link(path, path.with_name(f"{path.name}.{revision}.bak"))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


# ---- SQLite's write-ahead log while a sweep writes -----------------------------------------------------------
#
# MLflow's SQLite store commits each write in SQLite's default rollback-journal mode: the journal written and synced,
# the database written and synced, the journal deleted, about 40 ms a commit on this project's machine and ~20
# commits per trial (benchmarks/README.md, "SQLite's journal on the driver"). In write-ahead-log mode (WAL) a commit
# appends to one file and syncs it once (``synchronous=FULL``: still on the disk when the commit returns), and a
# reader (`rirlab runs` during a sweep) never waits for the writer, nor the writer for it. SQLite's WAL needs the
# shared memory of one machine's kernel: on a network filesystem (NFS, Lustre, GPFS, CIFS) it can corrupt the store
# (sqlite.org/wal.html), so a sweep uses it only where /proc/mounts says the store's folder is on a local
# filesystem, and sets the rollback journal back when it ends: a store at rest is one self-contained file, which a
# reader without write access to its folder (another user, a read-only copy) can open, as before.

LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs", "bcachefs",
                               "tmpfs", "ramfs", "overlay", "apfs", "hfs", "hfsplus"})
MOUNTS = "/proc/mounts"


def filesystem_of(path: Path, mounts: Optional[str] = None) -> Optional[str]:
    """The type of the filesystem ``path`` is on (which need not exist yet): the mount point of ``mounts`` that is the
    longest prefix of its real path, the last listed where two mount the same point; None where ``mounts`` cannot be
    read (no /proc: not Linux)."""
    try:
        lines = Path(mounts or MOUNTS).read_text().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])  # \040: a space in the path
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def journal_plan(db: Path) -> tuple[bool, str]:
    """(whether a sweep writes the SQLite store ``db`` with SQLite's write-ahead log, the one line saying so)."""
    kind = filesystem_of(db.parent)
    if kind in LOCAL_FILESYSTEMS:
        return True, (f"store journal: SQLite's write-ahead log while the sweep writes ({kind}, a local filesystem; "
                      f"the rollback journal again at its end)")
    where = "an unknown filesystem (no /proc/mounts)" if kind is None else f"{kind}, not a local filesystem"
    return False, f"store journal: SQLite's rollback journal ({db.parent} is on {where}: no write-ahead log there)"


def set_journal(db: Path, mode: str, wait_s: float) -> Optional[str]:
    """``PRAGMA journal_mode=<mode>`` on the SQLite file ``db``, waiting up to ``wait_s`` for another process's
    lock; the mode the file is in after (leaving WAL needs every other connection closed: "wal" while another
    process has the store open), None where SQLite refused (locked past the wait, read-only, no such file: never
    created here)."""
    try:
        con = sqlite3.connect(f"{Path(db).as_uri()}?mode=rw", uri=True, timeout=wait_s)
        try:
            return con.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return None


# ---- servers and databases -----------------------------------------------------------------------------

def _probe_server(uri: str) -> None:
    """One request to the tracking server's REST API, no retries, a short timeout."""
    shown = mask_url(raw(uri))
    try:
        resp = compat_mlflow.probe_server(raw(uri), "/api/2.0/mlflow/experiments/search", params={"max_results": 1},
                                          timeout=PROBE_TIMEOUT_S)
    except Exception as err:  # connection refused, DNS, TLS, timeout (MLflow wraps them)
        reason = _first_line(err)
        raise UserError(f"the MLflow tracking server {shown} does not answer ({reason}); start it or fix "
                        f"--tracking-uri / $MLFLOW_TRACKING_URI") from None
    if resp.status_code == 401:
        raise UserError(f"the MLflow tracking server {shown} refused the credentials (401); set "
                        f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)")
    if resp.status_code == 404:
        raise UserError(f"{shown} answers but is not an MLflow tracking server (404 on its REST API); fix the URI")
    if resp.status_code >= 500:
        raise UserError(f"the MLflow tracking server {shown} fails ({resp.status_code}); see its log")


def _check_database(uri: str, create: bool) -> None:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    shown = mask_url(raw(uri))
    args = {"connect_timeout": PROBE_TIMEOUT_S} if scheme(uri) in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(raw(uri), poolclass=NullPool, connect_args=args)
    except ModuleNotFoundError as err:
        raise UserError(f"{shown}: its database driver is not installed ({err.name}); pip install it") from None
    except Exception as err:
        raise UserError(f"{shown}: not a database URI SQLAlchemy accepts ({_first_line(err)}); fix --tracking-uri") from None
    try:
        with engine.connect() as con:
            tables = set(sqlalchemy.inspect(con).get_table_names())
    except Exception as err:
        raise UserError(f"the database {shown} does not answer ({_first_line(err)}); start it or fix "
                        f"--tracking-uri / $MLFLOW_TRACKING_URI") from None
    finally:
        engine.dispose()
    if not create and "experiments" not in tables:
        raise _no_store(uri)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    line = text[-1] if text and "Max retries" not in text[-1] else (text[0] if text else type(err).__name__)
    m = re.search(r"\[Errno -?\d+\] [^'\")]+|Connection refused|timed out|Name or service not known", str(err))
    return redact_uri(m.group(0) if m else line)[:300]
