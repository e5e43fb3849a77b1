"""A resumed sweep's trial checkpoints as Ray Tune's saved state names them.

With ``CheckpointConfig(num_to_keep=1)`` Tune deletes a trial's previous checkpoint as soon as the trial reports a
new one, and writes its experiment state (which names each trial's latest checkpoint) a moment later, in the
controller's next step and a background sync. A driver killed in that window (a lost machine, ``kill -9``) leaves a
state naming ``checkpoint_<k>``, which is gone, while ``checkpoint_<k+1>``, complete, sits beside it: Tune's
restore then fails the trial with "Could not recover from checkpoint as it does not exist on storage anymore"
(seen in CI: ``test_driver_killed_mid_sweep_then_resume_gives_one_finished_run_per_trial``).

Before a restored trial starts, ``restore_named_checkpoints`` puts the newer checkpoint where the state looks for
it (a rename: atomic, nothing copied), so the trial continues from the newest state it wrote. A newer checkpoint
is complete: Ray copies a checkpoint to the trial folder before the driver hears of it, and deletes the older one
only after. A named checkpoint with no newer one beside it is left to Tune (a user deleted it).
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


def restore_named_checkpoint(named: str | os.PathLike) -> Optional[Path]:
    """Where the checkpoint folder ``named`` is missing and its trial folder holds a newer complete one (a state
    file inside), move the newest such one to ``named``; return the folder moved, else None."""
    named = Path(named)
    k = _index(named)
    if k is None or named.exists() or not named.parent.is_dir():
        return None
    newer = [(i, p) for p in named.parent.iterdir()
             if (i := _index(p)) is not None and i > k and (p / contract.CHECKPOINT_STATE_FILE).is_file()]
    if not newer:
        return None
    _, newest = max(newer)
    os.replace(newest, named)
    return newest


class CheckpointRestorer(DriverCallback):
    """At a restored sweep's first step, before any trial restarts: ``restore_named_checkpoint`` for each trial."""

    slot = "checkpoints"

    def __init__(self, stream=None):
        self.stream = stream
        self.done = False

    def on_step_begin(self, iteration, trials, **info):
        if self.done:
            return
        self.done = True
        from rirlab.compat import ray as compat_ray

        for trial in trials:
            named = compat_ray.local_checkpoint_path(trial)
            moved = restore_named_checkpoint(named) if named else None
            if moved is not None:
                line = (f"trial {trial.trial_id}: Tune's saved state named {Path(named).name}, deleted after "
                        f"{moved.name} was written; continuing from {moved.name}")
                log.warning(line)
                if self.stream is not None:
                    print(line, file=self.stream, flush=True)
