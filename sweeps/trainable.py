"""The Ray Tune trainable: turns a Tune config into a flat rirlab config and runs ``rirlab.train.run_trial``.

Checkpoints travel as a torch-saved state dict inside a Ray Tune Checkpoint
directory; a retried or resumed trial starts from the last one.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from ray import tune

from rirlab.train import NonFiniteLoss, run_trial
from sweeps.spec import condition_holds

STATE_FILE = "state.pt"
META = "__rirlab__"


def materialize(config: dict) -> dict:
    """Flat rirlab config of a Tune config: an explicit grid trial, or constants + sampled values."""
    if "trial" in config:
        return dict(config["trial"]["config"])
    meta = config.get(META, {})
    flat = {k: v for k, v in config.items() if k not in (META, "__trial_index__")}
    for key, when in meta.get("when", {}).items():
        if not condition_holds(when, flat):
            flat.pop(key, None)
    if "__trial_index__" in config:
        flat["seed"] = meta["seeds"][config["__trial_index__"]]
    return flat


def swept_of(config: dict) -> dict:
    if "trial" in config:
        return dict(config["trial"]["swept"])
    flat = materialize(config)
    return {k: flat[k] for k in config.get(META, {}).get("swept", []) if k in flat} | {"seed": flat.get("seed", 0)}


def trainable(config: dict) -> None:
    flat = materialize(config)
    # checkpoint_every 0 in a spec means "only the final state" (kept as the run's checkpoint artifact)
    checkpoint_every = config.get(META, {}).get("checkpoint_every", 0) or 10**12
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
        run_trial(flat, report, state=state, checkpoint_every=checkpoint_every)
    except NonFiniteLoss as err:  # deterministic: retrying would fail again, so end the trial as failed
        tune.report({"rirlab_failed": str(err)})
