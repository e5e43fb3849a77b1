"""A full disk under the MLflow store or the sweep's Ray Tune folder: recognised in whatever exception carries it
(sqlite's "database or disk is full", an OSError ENOSPC, a trial's error text), and turned into a stop the way
Ctrl-C stops a sweep (Tune saves its state, running trials end resumable) followed by one line that names the
full disk and the command that continues the sweep once space is freed."""

from __future__ import annotations

import errno
import os
import re
import signal
from pathlib import Path
from typing import Optional

MARKERS = ("database or disk is full", "no space left on device", "disk quota exceeded")


FREE_SPACE = "free space there"


class SweepFault(Exception):
    """The sweep stopped on a fault of the machine, not of the spec: ``--resume`` continues it once it is fixed
    (the CLI prints the reason, ``fix`` and that command on one line, exit 2)."""

    exit_code = 2

    def __init__(self, why: str, parent_id: Optional[str] = None, fix: str = FREE_SPACE, store_answers: bool = True):
        super().__init__(why)
        self.why, self.parent_id, self.fix = why, parent_id, fix
        self.store_answers = store_answers  # False: the store is a server that stopped answering (nothing more is
        # written to it: each write would wait out MLflow's retries again)


LOCK_MARKER = "database is locked"
STORE_WAIT_ENV = "RIRLAB_STORE_WAIT_S"
STORE_WAIT_S = 120.0  # how long a write waits for a SQLite store another process holds before the sweep stops


def store_wait_s() -> float:
    """Seconds the driver's writes wait for a SQLite store's lock ($RIRLAB_STORE_WAIT_S, default 120): another
    process writing it (a second sweep, `mlflow gc`, a backup holding a transaction) is waited for, not an error."""
    try:
        value = float(os.environ.get(STORE_WAIT_ENV, STORE_WAIT_S))
    except ValueError:
        return STORE_WAIT_S
    return value if value > 0 else STORE_WAIT_S


def chain(err: BaseException | None):
    """An exception and its causes (``__cause__``, else ``__context__``), each once: what a fault is looked for in
    (MLflow wraps sqlite's error in SQLAlchemy's, in its own)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def store_locked(err: BaseException | None) -> bool:
    """Whether an exception (or its causes) is SQLite's "database is locked": the wait for the lock ran out."""
    return any(LOCK_MARKER in str(e).lower() for e in chain(err))


def lock_holders(path: Path) -> list[str]:
    """Other processes of this machine that have the SQLite file ``path`` open ("process PID (command)"), read
    from /proc (Linux; elsewhere, or for processes of other users, none are found)."""
    found = []
    target = str(path.resolve())
    for proc in Path("/proc").glob("[0-9]*"):
        if proc.name == str(os.getpid()):
            continue
        try:
            if not any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                continue
        except OSError:
            continue
        found.append(describe_process(int(proc.name)))
    return found


def describe_process(pid: int) -> str:
    """"process PID (its command line, on one line and cut at 80 characters)", or "process PID" when /proc cannot
    say (gone already, another user's, not Linux): how a line names another process (a lock's holder, a signal's
    sender)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        command = " ".join(raw.replace("\0", " ").split())
    except OSError:
        command = ""
    return f"process {pid}" + (f" ({command[:80]})" if command else "")


def store_lock_held(uri: str) -> SweepFault:
    """The fault of a store whose lock another process held past ``store_wait_s``: who holds it, where known."""
    from rirlab.sweeps.record.store import sqlite_path

    path = sqlite_path(uri)
    holders = lock_holders(path) if path is not None else []
    held = f" (open in {', '.join(holders[:3])})" if holders else ""
    return SweepFault(f"the MLflow store {uri} stayed locked by another process for {store_wait_s():g} s{held}",
                      fix=f"let that process finish or stop it (or wait longer: ${STORE_WAIT_ENV}; for sweeps at once "
                          f"on one store, serve it with `{serve_command(uri)}` and give each sweep --tracking-uri "
                          f"http://127.0.0.1:5000)")


def serve_command(uri: str) -> str:
    """The command that serves a SQLite store to several sweeps at once: one process then writes the file (a
    tracking server), where sweeps writing it each through their own SQLite connections wait on each other's locks."""
    return f"rirlab ui --tracking-uri {uri} --port 5000"


def store_fault(uri: str, err: BaseException) -> Optional[SweepFault]:
    """The machine's fault that made a write to the MLflow store at ``uri`` fail (its disk is full, another process
    held its lock past the wait, its tracking server stopped answering), as the SweepFault that stops the sweep;
    None for any other error."""
    if disk_full(err):
        return SweepFault(store_full(uri, err))
    if store_locked(err):
        return store_lock_held(uri)
    gone = server_unreachable(err)
    if gone is not None:
        return server_gone(uri, gone)
    return None


# ---- a tracking server that stopped answering (killed, its machine lost, a proxy with nothing behind it)
# MLflow's HTTP client retries a failed request with exponential backoff for minutes (7 retries, backoff factor 2,
# 120 s per attempt: a dead server went unnoticed for ~8 minutes). The driver's defaults, each overridable by
# setting the variable: 4 retries, 0+2+4+8 s apart (+ up to 1 s jitter each), 10 s per attempt.
HTTP_BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": 4, "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": 1,
               "MLFLOW_HTTP_REQUEST_TIMEOUT": 10}


def bound_http_waits() -> None:
    """MLflow's HTTP retries bounded (``HTTP_BOUNDS``) unless the user set them: a tracking server that is gone
    stops the sweep within ``server_wait_s`` of the driver's next write, not after minutes of silence."""
    for name, value in HTTP_BOUNDS.items():
        os.environ.setdefault(name, str(value))


def _http_setting(name: str) -> float:
    try:
        return float(os.environ.get(name, HTTP_BOUNDS[name]))
    except ValueError:
        return float(HTTP_BOUNDS[name])


def server_wait_s() -> float:
    """The longest one write to a tracking server that does not answer takes before it fails, from MLflow's HTTP
    settings: every attempt timing out, plus urllib3's backoff between them (none before the first retry, then
    factor * 2^k, each with up to 1 s of jitter). One refused at once (the server's process gone) fails sooner:
    the backoff alone."""
    retries = int(_http_setting("MLFLOW_HTTP_REQUEST_MAX_RETRIES"))
    factor = _http_setting("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR")
    backoff = sum(min(120.0, factor * 2 ** k + 1) for k in range(1, retries))
    return (retries + 1) * _http_setting("MLFLOW_HTTP_REQUEST_TIMEOUT") + backoff


def server_unreachable(err: BaseException | None) -> Optional[str]:
    """Why a request to a tracking server got no answer, in a few words ("connection refused", "timed out", "no
    answer but errors"), where an exception (or its causes: MLflow wraps requests' error in its own) says so;
    else None. An answer the server gave (a 404, a bad request) is not this."""
    try:
        from requests import exceptions as rex
    except ImportError:  # (MLflow requires requests; a store without HTTP never raises these)
        return None
    for e in chain(err):
        if isinstance(e, rex.Timeout):
            return "timed out"
        if isinstance(e, rex.ConnectionError):
            return "connection refused" if "refused" in str(e).lower() else "no connection"
        if isinstance(e, rex.RetryError):
            return "it answered only with server errors"
    return None


def server_gone(uri: str, how: str) -> SweepFault:
    """The fault of a tracking server that stopped answering: its runs cannot be marked KILLED (the line says so)."""
    return SweepFault(f"the MLflow tracking server {uri} stopped answering ({how}, after MLflow's retries, at most "
                      f"{server_wait_s():.0f} s: $MLFLOW_HTTP_REQUEST_MAX_RETRIES, $MLFLOW_HTTP_REQUEST_TIMEOUT); "
                      f"the trials stopped at their last checkpoints, and their runs and the sweep's parent run "
                      f"stay RUNNING on it (a server that is down cannot mark them KILLED)",
                      fix=f"start the server again (same store: {uri})", store_answers=False)


def disk_full(err: BaseException | str | None) -> bool:
    """Whether an exception (or its causes), or an error text, says a disk is full."""
    if isinstance(err, str):
        return marker_line(err) is not None
    return any((isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or marker_line(str(e)) is not None
               for e in chain(err))


LOW_SPACE_BYTES = 2 * 2**20  # a Tune folder's disk with less free space than this counts as full


def tune_folder_full(tune_path: str) -> Optional[str]:
    """Why the disk of the sweep's Ray Tune folder counts as full (less than LOW_SPACE_BYTES free), else None."""
    import shutil

    try:
        free = shutil.disk_usage(tune_path).free
    except OSError:
        return None
    if free >= LOW_SPACE_BYTES:
        return None
    return f"the disk of the sweep's Ray Tune folder {tune_path} is full ({free / 2**20:.1f} MB free)"


def store_full(uri: str, err: BaseException) -> str:
    """Why the sweep stopped when the MLflow store at ``uri`` could not take a write (its disk is full)."""
    return f"the disk of the MLflow store {uri} is full ({fault_line(err)})"


def fault_line(err: BaseException) -> str:
    """The line of an exception (or of its first cause) that names the full disk, e.g. sqlite's "database or
    disk is full" under MLflow's SQL statement."""
    for e in chain(err):
        line = marker_line(str(e))
        if line is not None:
            return re.sub(r"^\([\w.]+\)\s*", "", line.strip())[:200]  # not sqlalchemy's "(sqlite3.Op...)"
    return "no space left"


def marker_line(text: str) -> Optional[str]:
    """The first line of an error text that says a disk is full (one of MARKERS), else None."""
    return next((line for line in text.splitlines() if any(m in line.lower() for m in MARKERS)), None)


def stop_tune() -> None:
    """Ask a running Tuner.fit to stop as on Ctrl-C: its SIGINT handler stops the trials and saves the
    experiment's state (a trial stopped so is continued by --resume). Called from a Tune callback, which runs
    in the main thread inside fit."""
    signal.raise_signal(signal.SIGINT)
