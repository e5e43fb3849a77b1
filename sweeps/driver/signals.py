"""Ctrl-C and SIGTERM during a sweep: both stop it the way Ray Tune's own SIGINT handler does (trials stopped,
Tune's state saved, the parent run ended KILLED), so that ``--resume`` continues it.

Before Ray Tune runs (Ray starting, the parent run being written) a signal must never be lost. Python's
handler alone was not enough: a Ctrl-C sent while ``ray.init`` started Ray's processes could vanish (the sweep
then ran every trial and exited 0). So, from the start of the driver until Tune takes over (``startup_window``),
SIGINT is blocked in the main thread, and so in every thread started meanwhile (Ray's, MLflow's), and a watcher
thread takes it: the kernel keeps a blocked signal pending until taken, whatever handler or library code runs
at that moment. The watcher records it (``raise_if_interrupted`` raises it at the next check) and interrupts the
main thread at once. It never sleeps inside ``signal.sigtimedwait``: CPython's (3.11 to 3.13 at least) returns
the uninitialised ``siginfo_t`` on its stack when the wait ends in EINTR after its deadline (a thread that could
not run for a moment on a loaded machine, a process stopped and continued), a SIGINT nobody sent "from process
-1623728833"; it sleeps on an Event and takes a SIGINT only once ``sigpending`` shows one, without waiting. SIGTERM is handled as Ctrl-C (exit 143 rather than 130); Ray's
own SIGTERM handler (``sys.exit``) is kept out during ``ray.init``.

The state here is module-level on purpose, and the only such state of the driver: which signals came
(``_INTERRUPTED``, ``_TERMINATED``, ``_SENDERS``), the open ``shielded`` blocks (``_SHIELD``) and the startup
window's watcher (``_WINDOW``) belong to the process, not to one sweep. A signal handler gets only the signal
number and the frame, and the watcher thread must see what the main thread does at once, so there is no object
they could reach it through; the CLI also reads it after the driver has gone (the exit code, 130 or 143).
Everything else a sweep holds is owned by its ``SweepDriver``."""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
from typing import Optional


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM after the sweep's parent run exists: ``--resume`` continues it."""

    def __init__(self, parent_id: str):
        super().__init__(parent_id)
        self.parent_id = parent_id


_TERMINATED: list[int] = []
_INTERRUPTED: list[int] = []
_SENDERS: list[int] = []  # the sender's pid of each SIGINT the watcher took (0: the kernel or unknown, e.g. a terminal)
SI_USER, SI_QUEUE, SI_TKILL = 0, -1, -6  # the si_code of kill / sigqueue / tgkill: only these carry the sender's pid
POLL_S = 0.05  # how often the watcher looks for a pending SIGINT


def terminated() -> bool:
    """Whether this driver was stopped by SIGTERM (exit 143 rather than Ctrl-C's 130)."""
    return bool(_TERMINATED)


def interrupted() -> bool:
    """Whether Ctrl-C or SIGTERM reached this driver (taken by the handler or by the start-up watcher)."""
    return bool(_INTERRUPTED or _TERMINATED)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def stop_on_sigterm_like_ctrl_c() -> None:
    """SIGTERM (what a scheduler or `kill` sends) stops the sweep the way Ctrl-C does: Ray Tune's own SIGINT
    handler stops the trials and saves its state, or outside Tune.fit a KeyboardInterrupt. (ray.init installs
    its own SIGTERM handler, which exits at once: call this again after it.) Ctrl-C outside Tune is also
    remembered: one that lands where Python drops the KeyboardInterrupt (a fork handler inside ray.init) is
    raised again by ``raise_if_interrupted``."""
    if not _main_thread():
        return
    signal.signal(signal.SIGTERM, _on_term)
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_int):
        signal.signal(signal.SIGINT, _on_int)
    if sys.unraisablehook is not _unraisable:
        _unraisable.default = sys.unraisablehook
        sys.unraisablehook = _unraisable


@contextlib.contextmanager
def sigterm_like_ctrl_c():
    """``stop_on_sigterm_like_ctrl_c`` for a block (`rirlab train`); the SIGINT and SIGTERM handlers come back
    after it, so a command run in-process leaves its caller's own."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    stop_on_sigterm_like_ctrl_c()
    try:
        yield
    finally:
        if _main_thread():
            signal.signal(signal.SIGINT, before[0])
            signal.signal(signal.SIGTERM, before[1])


def _unraisable(info) -> None:
    """A KeyboardInterrupt Python had to drop is raised again by ``raise_if_interrupted``: no traceback for it."""
    if not (info.exc_type is KeyboardInterrupt and interrupted()):
        _unraisable.default(info)


def _on_term(signum, frame):
    _TERMINATED.append(signum)
    if signal.getsignal(signal.SIGINT) is _on_int:  # outside Tune: stop here, as Ctrl-C would
        _on_int(signal.SIGINT, frame)
    signal.raise_signal(signal.SIGINT)  # inside Tune.fit: its own handler stops the trials


def _on_int(signum, frame):
    _INTERRUPTED.append(signum)
    if not _SHIELD:  # inside ``shielded`` it is raised at the block's end
        raise KeyboardInterrupt


_SHIELD: list[int] = []  # open ``shielded`` blocks (the main thread's only)
_SHIELD_LOCK = threading.Lock()  # the watcher decides "interrupt now" and the main thread enters a block atomically


@contextlib.contextmanager
def shielded(raise_at_end: bool = True):
    """A block a Ctrl-C or SIGTERM must not cut in two: a write to the tracking store. A KeyboardInterrupt raised
    inside a SQLite statement (the watcher's ``interrupt_main`` lands at the main thread's next bytecode, which may
    be inside SQLAlchemy) left that connection holding the database's lock, so marking the parent run KILLED then
    failed with "database is locked" after SQLite's timeout and the sweep exited 1 with a traceback instead of 130.
    A signal arriving during the block is recorded and, with ``raise_at_end``, raised as KeyboardInterrupt when the
    block ends normally; without it (the clean-up after a first Ctrl-C) it is only recorded."""
    if not _main_thread():
        yield
        return
    before = len(_INTERRUPTED) + len(_TERMINATED)
    depth = len(_SHIELD)
    try:
        with _SHIELD_LOCK:
            _SHIELD.append(1)
        yield
    finally:
        del _SHIELD[depth:]
    if raise_at_end and len(_INTERRUPTED) + len(_TERMINATED) > before:
        raise KeyboardInterrupt


def sender() -> Optional[str]:
    """Who sent the last SIGINT the start-up watcher took, when another process did (not a terminal's Ctrl-C, not
    this driver itself): "process PID (its command line)"; else None. A sweep stopped by a scheduler or a stray
    signal says so instead of looking like the user's Ctrl-C."""
    from rirlab.sweeps.record.faults import describe_process

    pid = _SENDERS[-1] if _SENDERS else 0
    if pid in (0, os.getpid()):
        return None
    return describe_process(pid)


def raise_if_interrupted() -> None:
    if interrupted():
        raise KeyboardInterrupt


class _Watcher:
    """The thread that takes SIGINT (blocked everywhere else) while the window is open."""

    def __init__(self):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rirlab-signals", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(POLL_S):
            if signal.SIGINT not in signal.sigpending():
                continue
            taken = signal.sigtimedwait({signal.SIGINT}, 0)  # a zero timeout never sleeps, so never ends in EINTR
            if taken is None or taken.si_signo != signal.SIGINT:
                continue
            _SENDERS.append(taken.si_pid if taken.si_code in (SI_USER, SI_QUEUE, SI_TKILL) else 0)
            with _SHIELD_LOCK:
                _INTERRUPTED.append(signal.SIGINT)
                if not _SHIELD:  # inside ``shielded`` the block's end raises it
                    _thread.interrupt_main()  # the main thread raises KeyboardInterrupt at its next bytecode


_WINDOW: list[_Watcher] = []


def open_startup_window() -> None:
    """From here until ``close_startup_window`` a Ctrl-C cannot be lost (see the module's docstring)."""
    if not _main_thread() or _WINDOW:
        return
    stop_on_sigterm_like_ctrl_c()
    watcher = _Watcher()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # before the watcher starts: it inherits the block
    watcher.thread.start()
    _WINDOW.append(watcher)


def close_startup_window() -> None:
    """Tune is about to run (its own SIGINT handler takes over) or the driver is ending: SIGINT unblocked in
    the main thread again; one that arrived meanwhile is raised by ``raise_if_interrupted``."""
    if not _main_thread() or not _WINDOW:
        return
    watcher = _WINDOW.pop()
    watcher.stop.set()
    watcher.thread.join()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def startup_window():
    open_startup_window()
    try:
        yield
    finally:
        close_startup_window()


@contextlib.contextmanager
def keep_sigterm_handler():
    """``ray.init`` replaces the SIGTERM handler with one that exits at once (exit 15, nothing marked): keep ours
    while it runs (the patch of Ray's private function lives in rirlab/compat/ray.py)."""
    from rirlab.compat import ray as compat_ray

    with compat_ray.keep_sigterm_handler():
        yield
