"""The Ray Tune trainable: a plain function of a flat config dict that runs ``rirlab.train.run_trial``; and the
sweep's wrapper around it (``trial_fn``: a trial MLflow already holds the end of is not trained again;
``--system-metrics`` samples the worker's machine into the trial's run).

Sweep-level settings (how a Tune config maps to a trial, how often to checkpoint) are bound with
``tune.with_parameters``, never carried as config keys. Checkpoints travel as a torch-saved state dict
inside a Ray Tune Checkpoint directory; a retried or resumed trial starts from the last one. The state carries
the trial's resolved config and run name, so ``rirlab evaluate CHECKPOINT`` needs neither the spec nor Ray's
params.json.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch
from ray import tune

from rirlab import contract
from rirlab.train import NonFiniteLoss, load_checkpoint, run_trial
from rirlab.sweeps.spec.trials import TrialSpace


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
            state = load_checkpoint(Path(d) / contract.CHECKPOINT_STATE_FILE)  # weights and plain data only

    def report(metrics: dict, checkpoint=None) -> None:
        if checkpoint is None:
            tune.report(metrics)
            return
        checkpoint = {**checkpoint, contract.STATE_TRIAL: trial.name}  # with its config: what it is (rirlab evaluate)
        with tempfile.TemporaryDirectory() as d:
            torch.save(checkpoint, Path(d) / contract.CHECKPOINT_STATE_FILE)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))

    try:
        run_trial(trial_config, report, state=state, checkpoint_every=checkpoint_every or 10**12)
    except NonFiniteLoss as err:
        # deterministic: a retry would fail the same way, so the trial ends (not raises) with its reason,
        # which the driver records as the run's FAILED status and failure-reason tag
        tune.report({contract.FAILURE_RESULT: str(err)})


def trial_fn(config: dict, space: TrialSpace = TrialSpace(), checkpoint_every: int = 0, driver_cwd: str = "",
             done: Optional[dict] = None, monitor: Optional[dict] = None) -> None:
    """The sweep's Ray Tune trainable: ``trainable`` above, except for a trial whose end MLflow
    already holds (``done``: its final result, or its failure; a driver killed before Tune could save the
    trial's end restores it as unfinished): that trial reports its recorded end again and never trains."""
    key = tune.get_context().get_trial_id()
    if done and key in done:
        tune.report(done[key])
        return
    with _system_metrics(monitor, key):
        trainable(config, space=space, checkpoint_every=checkpoint_every, driver_cwd=driver_cwd)


@contextlib.contextmanager
def _system_metrics(monitor: Optional[dict], trial_key: str):
    """--system-metrics: MLflow's system-metrics monitor (CPU, memory, disk, network, GPU where there is one)
    samples the machine this trial runs on into its child run, every ``monitor["interval"]`` seconds. The one
    thing a trial writes to MLflow itself; a store it cannot reach costs the samples, never the trial."""
    sampler = None
    if monitor:
        try:
            sampler = _start_sampler(monitor, trial_key)
        except Exception as err:  # noqa: BLE001
            logging.getLogger(__name__).warning("no system metrics for trial %s: %s", trial_key, err)
    try:
        yield
    finally:
        if sampler is not None:
            sampler.finish()


def _start_sampler(monitor: dict, trial_key: str):
    from mlflow.tracking import MlflowClient

    from rirlab.compat import mlflow as compat_mlflow

    client = MlflowClient(monitor["uri"])
    flt = f"{contract.children_filter(monitor['parent_id'])} and tags.`{contract.TRIAL_KEY}` = '{trial_key}'"
    end = time.time() + 60  # the driver creates the run as the trial starts
    while time.time() < end:
        runs = client.search_runs([monitor["exp_id"]], filter_string=flt, max_results=1)
        if runs:
            sampler = compat_mlflow.system_metrics_sampler(runs[0].info.run_id, monitor["interval"], monitor["uri"])
            sampler.start()
            return sampler
        time.sleep(0.5)
    return None
