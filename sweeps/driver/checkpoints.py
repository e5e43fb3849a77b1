"""A resumed sweep's trial checkpoints as Ray Tune's saved state names them.

With ``CheckpointConfig(num_to_keep=1)`` (the spec's ``keep_checkpoints`` unless set) Tune deletes a trial's
previous checkpoint as soon as the trial reports a new one (with N kept, the oldest of them), and writes its
experiment state (which names each trial's latest checkpoint) a moment later, in the controller's next step and a
background sync. A driver killed in that window (a lost machine, ``kill -9``) leaves a state naming
``checkpoint_<k>``, which is gone, while ``checkpoint_<k+1>``, complete, sits beside it: Tune's restore then fails
the trial with "Could not recover from checkpoint as it does not exist on storage anymore" (seen in CI:
``test_driver_killed_mid_sweep_then_resume_gives_one_finished_run_per_trial``).

Before a restored trial starts, ``restore_named_checkpoints`` puts the newer checkpoint where the state looks for
it (a rename: atomic, nothing copied), so the trial continues from the newest state it wrote. A newer checkpoint
is complete: Ray copies a checkpoint to the trial folder before the driver hears of it, and deletes the older one
only after.

A named checkpoint with no newer one beside it (deleted by hand, lost with a disk) would fail the trial inside Tune
("does not exist on storage anymore", retried to no avail). ``recreate_missing_checkpoint`` makes it an empty
folder instead, so the trial itself finds its ``state.pt`` missing and treats it as any damaged checkpoint
(``rirlab.sweeps.tune.trainable.restored_state``): one line naming the file and ``--restart-damaged``, no retry,
and with that flag the trial starts from an earlier checkpoint or from scratch. The alternative, dropping the
checkpoint from Tune's trial state, would edit Tune's private bookkeeping and give that case its own path and its
own message; the empty folder leaves Tune's state as Tune wrote it.

A trial that reports its checkpoint damaged (``contract.DAMAGED_RESULT``) is not retried: the restorer lowers its
retries (``compat.ray.no_retry``) until the error that follows is handled, then puts them back.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from rirlab import contract
from rirlab.sweeps.record.callback import DriverCallback

log = logging.getLogger(__name__)


def _index(path: Path) -> Optional[int]:
    m = contract.CHECKPOINT_DIR.fullmatch(path.name)
    return int(m.group(1)) if m else None


def _missing(named: Path) -> Optional[int]:
    """The index k of ``named`` when it is a ``checkpoint_<k>`` folder that is missing from an existing trial
    folder (the only case either repair below touches), else None."""
    k = _index(named)
    return None if k is None or named.exists() or not named.parent.is_dir() else k


def restore_named_checkpoint(named: str | os.PathLike) -> Optional[Path]:
    """Where the checkpoint folder ``named`` is missing and its trial folder holds a newer complete one (a state
    file inside), move the newest such one to ``named``; return the folder moved, else None."""
    from rirlab.train import latest_checkpoint  # (torch: already loaded by the driver's trainable)

    named = Path(named)
    k = _missing(named)
    if k is None:
        return None
    state = latest_checkpoint(named.parent)  # the trial folder's newest complete checkpoint
    if state is None or _index(state.parent) <= k:
        return None
    os.replace(state.parent, named)
    return state.parent


def recreate_missing_checkpoint(named: str | os.PathLike) -> bool:
    """Where the checkpoint folder ``named`` (a ``checkpoint_<k>`` in an existing trial folder) is missing, create
    it empty (its trial then reports its state file missing); True if it did."""
    named = Path(named)
    if _missing(named) is None:
        return False
    named.mkdir()
    return True


class CheckpointRestorer(DriverCallback):
    """At a restored sweep's first step, before any trial restarts: ``restore_named_checkpoint`` for each trial
    (else ``recreate_missing_checkpoint``). Throughout: a trial that reported a damaged checkpoint is not
    retried."""

    slot = "checkpoints"

    def __init__(self, stream=None):
        self.stream = stream
        self.done = False
        self.retries: dict[str, int] = {}  # trials whose retries no_retry took away: how many they had

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if contract.DAMAGED_RESULT in result and trial.trial_id not in self.retries:
            from rirlab.compat import ray as compat_ray

            self.retries[trial.trial_id] = compat_ray.no_retry(trial)  # the error that follows ends it

    def on_trial_error(self, iteration, trials, trial, **info):
        if trial.trial_id in self.retries:
            from rirlab.compat import ray as compat_ray

            compat_ray.allow_retries(trial, self.retries.pop(trial.trial_id))  # saved so: a --resume retries it

    def on_step_begin(self, iteration, trials, **info):
        if self.done:
            return
        self.done = True
        from rirlab.compat import ray as compat_ray

        for trial in trials:
            named = compat_ray.local_checkpoint_path(trial)
            moved = restore_named_checkpoint(named) if named else None
            if named and moved is None and recreate_missing_checkpoint(named):
                log.warning("trial %s: Tune's saved state names %s, which is gone (nothing newer beside it): the "
                            "trial reports it damaged", trial.trial_id, named)
            if moved is not None:
                line = (f"trial {trial.trial_id}: Tune's saved state named {Path(named).name}, deleted after "
                        f"{moved.name} was written; continuing from {moved.name}")
                log.warning(line)
                if self.stream is not None:
                    print(line, file=self.stream, flush=True)
