"""Ctrl-C and SIGTERM during a sweep: both stop it the way Ray Tune's own SIGINT handler does (trials stopped,
Tune's state saved, the parent run ended KILLED), so that ``--resume`` continues it; an interrupt that Python
had to drop inside ``ray.init`` is raised again."""

from __future__ import annotations

import signal
import sys


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM after the sweep's parent run exists: ``--resume`` continues it."""

    def __init__(self, parent_id: str):
        super().__init__(parent_id)
        self.parent_id = parent_id


_TERMINATED: list[int] = []
_INTERRUPTED: list[int] = []


def terminated() -> bool:
    """Whether this driver was stopped by SIGTERM (exit 143 rather than Ctrl-C's 130)."""
    return bool(_TERMINATED)


def stop_on_sigterm_like_ctrl_c() -> None:
    """SIGTERM (what a scheduler or `kill` sends) stops the sweep the way Ctrl-C does: Ray Tune's own SIGINT
    handler stops the trials and saves its state, or outside Tune.fit a KeyboardInterrupt. (ray.init installs
    its own SIGTERM handler, which exits at once: call this again after it.) Ctrl-C outside Tune is also
    remembered: one that lands where Python drops the KeyboardInterrupt (a fork handler inside ray.init) is
    raised again by ``raise_if_interrupted``."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _on_term)
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_int):
        signal.signal(signal.SIGINT, _on_int)
    if sys.unraisablehook is not _unraisable:
        _unraisable.default = sys.unraisablehook
        sys.unraisablehook = _unraisable


def _unraisable(info) -> None:
    """A KeyboardInterrupt Python had to drop is raised again by ``raise_if_interrupted``: no traceback for it."""
    if not (info.exc_type is KeyboardInterrupt and _INTERRUPTED):
        _unraisable.default(info)


def _on_term(signum, frame):
    _TERMINATED.append(signum)
    signal.raise_signal(signal.SIGINT)


def _on_int(signum, frame):
    _INTERRUPTED.append(signum)
    raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    if _INTERRUPTED:
        raise KeyboardInterrupt


