"""The Ray Tune trainable: a plain function of a flat config dict that runs ``rirlab.train.run_trial``; and the
sweep's wrapper around it (``trial_fn``: a trial MLflow already holds the end of is not trained again;
``--system-metrics`` samples the worker's machine into the trial's run).

Sweep-level settings (how a Tune config maps to a trial, how often to checkpoint) are bound with
``tune.with_parameters``, never carried as config keys. Checkpoints travel as a torch-saved state dict
inside a Ray Tune Checkpoint directory; a retried or resumed trial starts from the last one. The state carries
the trial's resolved config and run name, so ``rirlab evaluate CHECKPOINT`` needs neither the spec nor Ray's
params.json.

A checkpoint that cannot be read (``state.pt`` truncated or deleted, the folder Tune names gone) is a deterministic
failure: the trial reports it (``contract.DAMAGED_RESULT``: the file and why, in one line) and stops without
retries (``sweeps/driver/checkpoints.py``); ``--resume --restart-damaged previous|scratch`` then starts it from
an earlier readable checkpoint of its folder or from step 0 (``restart_damaged``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch
from ray import tune

from rirlab import contract
from rirlab.train import NonFiniteLoss, load_checkpoint, run_trial, unreadable_checkpoint
from rirlab.sweeps.spec.trials import TrialSpace

RESTART_DAMAGED_FLAG = "--restart-damaged"
# --restart-damaged: where a trial whose checkpoint is damaged starts again (the CLI's choices, spelled there too:
# it does not import this torch-importing module for its --help)
RESTART_DAMAGED = ("previous", "scratch")

log = logging.getLogger(__name__)


class DamagedCheckpoint(Exception):
    """The checkpoint a trial resumes from cannot be read: the same on every retry, so the trial stops (the message
    names the file and the flag that restarts it; ``path``: the file)."""

    def __init__(self, why: str, path: Path):
        super().__init__(why)
        self.path = path


def damaged_reason(path: Path, err: BaseException) -> str:
    """One line: which checkpoint file is damaged, how, and what restarts its trial."""
    if isinstance(err, FileNotFoundError) or not path.exists():
        what = f"checkpoint {path} is missing"
    elif path.stat().st_size == 0:  # (torch says only "EOFError: ")
        what = f"checkpoint {path} is damaged (empty: 0 bytes)"
    else:
        what = unreadable_checkpoint(path, err).replace(" is not a readable rirlab checkpoint", " is damaged", 1)
        # torch's first sentence says it ("... failed finding central directory"); its advice after it is noise
        what = f"checkpoint {re.sub(r'(?<=[a-z])[.] [A-Z].*[)]$', ')', what)}"
    return (f"{what}; resume the sweep with {RESTART_DAMAGED_FLAG} previous (an earlier checkpoint of this trial, "
            f"where one is kept) or {RESTART_DAMAGED_FLAG} scratch (step 0) to train this trial again")


def restored_state(checkpoint_dir: Path, restart_damaged: Optional[str] = None) -> Optional[dict]:
    """The trainer state a resumed trial starts from: its checkpoint's ``state.pt``. Where that cannot be read,
    DamagedCheckpoint, unless ``restart_damaged`` says where to start instead: ``previous``, the newest earlier
    ``checkpoint_<k>`` beside it that reads; ``scratch`` (or no earlier one), None: step 0."""
    path = Path(checkpoint_dir) / contract.CHECKPOINT_STATE_FILE
    try:
        return load_checkpoint(path)  # weights and plain data only
    except Exception as err:  # noqa: BLE001 - a truncated file raises EOFError, RuntimeError, OSError, ...
        why = damaged_reason(path, err)
    if restart_damaged not in RESTART_DAMAGED:
        raise DamagedCheckpoint(why, path)
    if restart_damaged == "previous":
        for earlier in _earlier_checkpoints(Path(checkpoint_dir)):
            try:
                state = load_checkpoint(earlier / contract.CHECKPOINT_STATE_FILE)
            except Exception:  # noqa: BLE001 - damaged too: an earlier one
                continue
            log.warning("%s; %s previous: continuing from %s", why, RESTART_DAMAGED_FLAG, earlier)
            return state
    log.warning("%s; %s %s: starting from step 0", why, RESTART_DAMAGED_FLAG, restart_damaged)
    return None


def _earlier_checkpoints(checkpoint_dir: Path) -> list[Path]:
    """The trial folder's checkpoints numbered below ``checkpoint_dir``'s, newest first."""
    m = contract.CHECKPOINT_DIR.fullmatch(checkpoint_dir.name)
    if m is None or not checkpoint_dir.parent.is_dir():
        return []
    k = int(m.group(1))
    found = [(int(n.group(1)), p) for p in checkpoint_dir.parent.iterdir()
             if (n := contract.CHECKPOINT_DIR.fullmatch(p.name)) and int(n.group(1)) < k]
    return [p for _, p in sorted(found, reverse=True)]


def trainable(config: dict, space: TrialSpace = TrialSpace(), checkpoint_every: int = 0, driver_cwd: str = "",
              restart_damaged: Optional[str] = None) -> None:
    """One trial. ``checkpoint_every`` 0 means "only the final state" (kept as the run's checkpoint artifact).
    A relative ``cache_dir`` means the driver's directory (``driver_cwd``), not the trial's own one.
    ``restart_damaged`` (--restart-damaged): where to start when the checkpoint cannot be read (``restored_state``);
    None: the trial reports it and stops."""
    trial = space.trial(config)
    trial_config = dict(trial.config)
    if driver_cwd and trial_config.get("cache_dir") and not os.path.isabs(os.path.expanduser(trial_config["cache_dir"])):
        trial_config["cache_dir"] = os.path.join(driver_cwd, trial_config["cache_dir"])
    state = None
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            try:
                state = restored_state(Path(d), restart_damaged)
            except DamagedCheckpoint as err:
                # reported first: the driver then ends the trial at this error without retries (a retry reads the
                # same file), and records why on its run
                tune.report({contract.FAILURE_RESULT: str(err), contract.DAMAGED_RESULT: str(err.path)})
                raise

    def report(metrics: dict, checkpoint=None) -> None:
        if checkpoint is None:
            tune.report(metrics)
            return
        checkpoint = {**checkpoint, contract.STATE_TRIAL: trial.name}  # with its config: what it is (rirlab evaluate)
        with tempfile.TemporaryDirectory() as d:
            torch.save(checkpoint, Path(d) / contract.CHECKPOINT_STATE_FILE)
            if metrics.get(contract.FINAL):
                _save_final_model(checkpoint, d)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))

    try:
        run_trial(trial_config, report, state=state, checkpoint_every=checkpoint_every or 10**12)
    except NonFiniteLoss as err:
        # deterministic: a retry would fail the same way, so the trial ends (not raises) with its reason,
        # which the driver records as the run's FAILED status and failure-reason tag
        tune.report({contract.FAILURE_RESULT: str(err)})


def _save_final_model(state: dict, folder: str) -> None:
    """The trial's evaluated model beside its final checkpoint's state (``contract.CHECKPOINT_MODEL_FILE``), made
    here, where the weights are, in parallel with other trials: the driver only logs it as the run's MLflow model
    (it rebuilt the model and reloaded the checkpoint itself, blocking Ray Tune's loop). A failure costs the file,
    never the trial: the driver then builds the model as before, and records why where that fails too."""
    from rirlab.saved_model import save_final_model

    try:
        save_final_model(state, folder)
    except Exception as err:  # noqa: BLE001
        log.warning("the trial's model was not saved with its final checkpoint (the driver builds it): %s: %s",
                    type(err).__name__, err)
        (Path(folder) / contract.CHECKPOINT_MODEL_FILE).unlink(missing_ok=True)


def trial_fn(config: dict, space: TrialSpace = TrialSpace(), checkpoint_every: int = 0, driver_cwd: str = "",
             done: Optional[dict] = None, monitor: Optional[dict] = None,
             restart_damaged: Optional[str] = None) -> None:
    """The sweep's Ray Tune trainable: ``trainable`` above, except for a trial whose end MLflow
    already holds (``done``: its final result, or its failure; a driver killed before Tune could save the
    trial's end restores it as unfinished): that trial reports its recorded end again and never trains.
    ``restart_damaged``: the driver's --restart-damaged, bound like the rest (never a config key: the spec's hash and
    the trials' configs stay what they were)."""
    key = tune.get_context().get_trial_id()
    if done and key in done:
        tune.report(done[key])
        return
    with _system_metrics(monitor, key):
        trainable(config, space=space, checkpoint_every=checkpoint_every, driver_cwd=driver_cwd,
                  restart_damaged=restart_damaged)


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
