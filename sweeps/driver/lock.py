"""One driver per sweep: a lock on the sweep's Ray Tune folder, held from before Ray starts until the driver ends.

Two drivers of one sweep (two ``--resume`` started together, or a ``--resume`` while the first driver still runs)
would each restore Tune's state and record the same trials: a trial with two FINISHED runs, metric steps logged
twice. The second is refused in one line before it starts Ray or writes to MLflow. The lock is an ``flock`` on a
file in the Tune folder, released by the kernel when its driver ends, however it ends (a SIGKILL included).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Iterator, Optional

from rirlab.errors import UserError

LOCK_FILE = ".rirlab-driver.lock"


@contextlib.contextmanager
def sweep_lock(tune_path: str, parent_id: Optional[str] = None) -> Iterator[None]:
    """Hold the sweep's lock (its Tune folder is made if missing); a UserError when another driver holds it."""
    import fcntl

    if not tune_path:  # a parent run of an earlier rirlab that named no Tune folder: nothing to lock
        yield
        return
    Path(tune_path).mkdir(parents=True, exist_ok=True)
    lock = Path(tune_path) / LOCK_FILE
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise UserError(f"--resume: sweep run {parent_id} is being run by another `rirlab sweep` (process "
                            f"{holder}, lock {lock}); wait for it to end, or stop it with Ctrl-C, then resume") \
                from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock
