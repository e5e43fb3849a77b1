"""The Ray Tune trainable: a plain function of a flat config dict that runs ``rirlab.train.run_trial``.

Sweep-level settings (how a Tune config maps to a trial, how often to checkpoint) are bound with
``tune.with_parameters``, never carried as config keys. Checkpoints travel as a torch-saved state dict
inside a Ray Tune Checkpoint directory; a retried or resumed trial starts from the last one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
from ray import tune

from rirlab.train import NonFiniteLoss, run_trial
from sweeps import schema
from sweeps.specfile import TrialSpace

STATE_FILE = "state.pt"


def trainable(config: dict, space: TrialSpace = TrialSpace(), checkpoint_every: int = 0, driver_cwd: str = "") -> None:
    """One trial. ``checkpoint_every`` 0 means "only the final state" (kept as the run's checkpoint artifact).
    A relative ``cache_dir`` means the driver's directory (``driver_cwd``), not the trial's own one."""
    trial = space.trial(config)
    trial_config = dict(trial.config)
    if driver_cwd and trial_config.get("cache_dir") and not os.path.isabs(os.path.expanduser(trial_config["cache_dir"])):
        trial_config["cache_dir"] = os.path.join(driver_cwd, trial_config["cache_dir"])
    state = None
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(Path(d) / STATE_FILE, map_location="cpu", weights_only=False)

    def report(metrics: dict, checkpoint=None) -> None:
        if checkpoint is None:
            tune.report(metrics)
            return
        with tempfile.TemporaryDirectory() as d:
            torch.save(checkpoint, Path(d) / STATE_FILE)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))

    try:
        run_trial(trial_config, report, state=state, checkpoint_every=checkpoint_every or 10**12)
    except NonFiniteLoss as err:
        # deterministic: a retry would fail the same way, so the trial ends (not raises) with its reason,
        # which the driver records as the run's FAILED status and failure-reason tag
        tune.report({schema.FAILURE_RESULT: str(err)})
