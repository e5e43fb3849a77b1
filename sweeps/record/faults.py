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

    def __init__(self, why: str, parent_id: Optional[str] = None, fix: str = FREE_SPACE):
        super().__init__(why)
        self.why, self.parent_id, self.fix = why, parent_id, fix


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
                      fix=f"let that process finish or stop it (or wait longer: ${STORE_WAIT_ENV})")


def store_fault(uri: str, err: BaseException) -> Optional[SweepFault]:
    """The machine's fault that made a write to the MLflow store at ``uri`` fail (its disk is full, or another
    process held its lock past the wait), as the SweepFault that stops the sweep; None for any other error."""
    if disk_full(err):
        return SweepFault(store_full(uri, err))
    if store_locked(err):
        return store_lock_held(uri)
    return None


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
