"""Every use rirlab makes of Ray below its public API, and the Ray versions that use was checked on.

Checked on Ray 2.60.0 (the version ``tests/sweeps`` and ``tests/e2e`` ran on); 2.40 is the oldest rirlab has
claimed to support since its first setup.cfg. A Ray outside ``SUPPORTED`` is refused before Ray starts
(``check()``), and ``tests/train/test_compat.py`` fails naming any attribute below that a new Ray removed.

The private parts, and why no public API does their job:

- ``ray.tune.execution.class_cache.ENV_VARS_TO_PROPAGATE``: the environment variables Tune copies from the driver
  into every trainable's runtime_env, which Ray writes into its world-readable ``runtime_env_agent.log``. Tune has
  no option to leave a variable out; cloud credentials the driver needs for its own artifact uploads must not be
  copied (``drop_propagated_env``).
- ``ray._private.utils.set_sigterm_handler``: ``ray.init`` installs a SIGTERM handler that exits at once (status
  15: no line, no run marked KILLED, nothing to resume from). ``ray.init`` has no option to keep the caller's
  handler, so the function is made a no-op while it runs (``keep_sigterm_handler``). This works because Ray
  calls it through the module (``ray._private.utils.set_sigterm_handler(...)`` in ``ray._private.worker``).
- ``ray.tune.execution.experiment_state._ExperimentCheckpointManager.on_trial_checkpoint``: given
  ``CheckpointConfig(num_to_keep=N)``, Tune saves its whole experiment state (every trial so far, the searcher's
  state) and waits for its copy after every N-th checkpoint of any trial (``TuneController._create_checkpoint_manager``
  passes ``num_to_keep`` as ``sync_every_n_trial_checkpoints``). The state grows with the trials (about 26 KB a
  trial), so a sweep of N trials wrote O(N^2) bytes: 4.1-4.3x bare Tune's wall time at 1,000 tiny trials against
  1.5x at 100 (benchmarks/README.md, "On a quiet core"). Tune has no option for it, and ``num_to_keep`` cannot go:
  it bounds the disk. ``state_saved_on_its_period`` makes that method a no-op while ``Tuner.fit`` runs; Tune still
  saves on its period (``TUNE_GLOBAL_CHECKPOINT_S``), and the window the forced save narrowed, a driver killed after
  Tune deleted a trial's older checkpoint and before its state names the newer one, is what
  ``sweeps/driver/checkpoints.py`` repairs on --resume.
"""

from __future__ import annotations

import contextlib
from typing import Iterable

from rirlab.compat import Supported

SUPPORTED = Supported("ray", lowest="2.40", below="2.61", extras="[tune]")

# (module, attribute) of every private name used below: each must exist on the installed Ray (test_compat.py)
PRIVATE = (
    ("ray.tune.execution.class_cache", "ENV_VARS_TO_PROPAGATE"),
    ("ray._private.utils", "set_sigterm_handler"),
    ("ray.tune.execution.experiment_state", "_ExperimentCheckpointManager"),
)


def check() -> None:
    """Raise one line (UnsupportedVersion) when the installed Ray is outside ``SUPPORTED``."""
    SUPPORTED.check()


def drop_propagated_env(names: Iterable[str]) -> None:
    """Stop Ray Tune from copying the driver's environment variables ``names`` into the trials' runtime_env (and
    so into Ray's logs); the driver's own environment keeps them. Applies to Tuners created afterwards in this
    process."""
    from ray.tune.execution import class_cache

    class_cache.ENV_VARS_TO_PROPAGATE = frozenset(class_cache.ENV_VARS_TO_PROPAGATE) - set(names)


@contextlib.contextmanager
def keep_sigterm_handler():
    """While this block runs (around ``ray.init``), Ray cannot replace the process's SIGTERM handler."""
    import ray._private.utils as ray_utils

    original = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original


# ---- Ray Tune's settings that exist only as environment variables (sweeps/driver/sweep.py) -----------------

TUNE_ENV = {
    "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",  # results without the sweep's metric (a failure result) are fine
    "RAY_AIR_NEW_OUTPUT": "0",  # Tune's own console output off: the driver prints its progress line
    "TUNE_MAX_PENDING_TRIALS_PG": "1",  # one pending trial at a time: a searcher's suggestions stay in order
    "TUNE_GLOBAL_CHECKPOINT_S": "5",  # snapshot Tune's state often: --resume restores from it
    # CheckpointConfig(num_to_keep=N) (the spec's keep_checkpoints, 1 unless set) makes Tune snapshot its state
    # after every trial checkpoint, which rirlab turns off (state_saved_on_its_period), and warn when such snapshots
    # come closer than this many seconds apart (a driver killed between the deletion of the old checkpoint and the
    # next snapshot leaves a state naming a deleted one: sweeps/driver/checkpoints.py)
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
}


@contextlib.contextmanager
def state_saved_on_its_period():
    """While this block runs (around ``Tuner.fit``), Ray Tune saves its experiment state on its period only, not
    after every trial checkpoint as well (module docstring: O(N^2) bytes over a sweep of N trials)."""
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager as manager

    original = manager.on_trial_checkpoint
    manager.on_trial_checkpoint = lambda self, trial: None
    try:
        yield
    finally:
        manager.on_trial_checkpoint = original


def tune_environment() -> None:
    """Ray Tune's settings the driver needs, set unless the user set them: read by Tune from the environment
    (no public API for them; their names and meaning are Ray-version dependent, hence here)."""
    import os

    for name, value in TUNE_ENV.items():
        os.environ.setdefault(name, value)


def local_checkpoint_path(trial):
    """The folder of the checkpoint a (restored) Tune trial will start from, where it lies on the local disk; None
    when it has none or it lies elsewhere (a cloud ``storage_path``). Public API: ``Trial.checkpoint``
    (``ray.tune.Checkpoint``: ``path``, ``filesystem``)."""
    checkpoint = getattr(trial, "checkpoint", None)
    if checkpoint is None or getattr(checkpoint.filesystem, "type_name", "") != "local":
        return None
    return checkpoint.path


def no_retry(trial) -> int:
    """Let ``trial``'s next error end it (status ERROR) instead of a retry; returns the retries it was allowed, for
    ``allow_retries`` to put back once that error is handled. For a failure known to repeat (a damaged checkpoint):
    Tune has no per-error retry policy, only ``Trial.max_failures`` (public attribute, read by
    ``Trial.should_recover`` when the error arrives; saved with the trial's state)."""
    before = trial.max_failures
    trial.max_failures = 0
    return before


def allow_retries(trial, max_failures: int) -> None:
    """Undo ``no_retry``: a resumed trial is retried as its spec says."""
    trial.max_failures = max_failures
