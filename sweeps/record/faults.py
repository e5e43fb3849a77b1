"""A full disk under the MLflow store or the sweep's Ray Tune folder: recognised in whatever exception carries it
(sqlite's "database or disk is full", an OSError ENOSPC, a trial's error text), and turned into a stop the way
Ctrl-C stops a sweep (Tune saves its state, running trials end resumable) followed by one line that names the
full disk and the command that continues the sweep once space is freed."""

from __future__ import annotations

import errno
import re
import signal
from typing import Optional

MARKERS = ("database or disk is full", "no space left on device", "disk quota exceeded")


class SweepFault(Exception):
    """The sweep stopped on a fault of the machine, not of the spec: ``--resume`` continues it once it is fixed
    (the CLI prints the reason and that command on one line, exit 2)."""

    exit_code = 2

    def __init__(self, why: str, parent_id: Optional[str] = None):
        super().__init__(why)
        self.why, self.parent_id = why, parent_id


def disk_full(err: BaseException | str | None) -> bool:
    """Whether an exception (or its causes), or an error text, says a disk is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, str):
            return any(m in err.lower() for m in MARKERS)
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(m in str(err).lower() for m in MARKERS):
            return True
        err = err.__cause__ or err.__context__
    return False


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
    while err is not None:
        for line in str(err).splitlines():
            if any(m in line.lower() for m in MARKERS):
                return re.sub(r"^\([\w.]+\)\s*", "", line.strip())[:200]  # not sqlalchemy's "(sqlite3.Op...)"
        err = err.__cause__ or err.__context__
    return "no space left"


def stop_tune() -> None:
    """Ask a running Tuner.fit to stop as on Ctrl-C: its SIGINT handler stops the trials and saves the
    experiment's state (a trial stopped so is continued by --resume). Called from a Tune callback, which runs
    in the main thread inside fit."""
    signal.raise_signal(signal.SIGINT)
