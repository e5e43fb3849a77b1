"""Driver-side Ray Tune callbacks: MLflow child runs per trial, and one live progress line per sweep."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from ray import tune

from rirlab.config import resolve
from sweeps import schema
from sweeps.specfile import TrialSpace
from sweeps.tracking import Tracker


def failure_of(trial):
    """The reason a completed trial failed (its last result names it), else None."""
    return (trial.last_result or {}).get(schema.FAILURE_RESULT)


def _trial_error(trial) -> str:
    for attr in ("error_file", "pickled_error_file"):
        path = getattr(trial, attr, None)
        if path and Path(path).is_file() and not str(path).endswith(".pkl"):
            text = Path(path).read_text(errors="replace").strip().splitlines()
            return text[-1] if text else "unknown error"
    return "trial raised an error (see the Ray logs in the sweep's output directory)"


def trial_datasets(resolved) -> list[dict]:
    """The datasets a trial reads (``Task.datasets``: name, source, params, digest, rows), as dicts for MLflow."""
    import dataclasses

    from rirlab.tasks import registry

    return [dataclasses.asdict(d) for d in registry.get(resolved.task).datasets(resolved.task_cfg)]


_BOUND: dict[str, "DriverCallback"] = {}


def bound_callback(slot: str) -> tune.Callback:
    """What a saved DriverCallback loads back as: the callback this driver bound to its slot (a no-op
    callback when none is bound, e.g. when Tune's state is read outside a sweep)."""
    return _BOUND.get(slot) or tune.Callback()


@contextlib.contextmanager
def bound(*callbacks: "DriverCallback"):
    """Bind this driver's callbacks while Ray Tune builds, restores and runs the experiment."""
    _BOUND.update({cb.slot: cb for cb in callbacks})
    try:
        yield list(callbacks)
    finally:
        for cb in callbacks:
            _BOUND.pop(cb.slot, None)


class DriverCallback(tune.Callback):
    """A callback holding live clients and streams, which must not be saved with Tune's state.

    Ray Tune pickles its callbacks into the experiment state and, on ``Tuner.restore``, runs the
    unpickled ones. A DriverCallback pickles as its slot name only and unpickles as the callback the
    current driver bound to that slot (``bound``): a fresh and a resumed sweep both report through this
    driver's own MLflow client and progress line, through the public pickle protocol only."""

    slot = ""

    def __reduce__(self):
        return bound_callback, (self.slot,)


class MLflowTrialCallback(DriverCallback):
    """One MLflow child run per Tune trial, nested under the sweep's parent run; logs every result."""

    slot = "mlflow"

    def __init__(self, tracker: Tracker, exp_id: str, parent_id: str, space: TrialSpace,
                 checkpoint_artifacts: bool = True):
        self.tracker, self.exp_id, self.parent_id, self.space = tracker, exp_id, parent_id, space
        self.checkpoint_artifacts = checkpoint_artifacts
        self.runs: dict[str, str] = {}
        self.state: dict[str, str] = {}
        self.last_step: dict[str, int] = {}  # per trial: last step logged, so replays after a restore are not logged twice
        self.existing = {}
        for run in tracker.children(exp_id, parent_id):
            key = run.data.tags.get(schema.TRIAL_KEY)
            if key:
                self.existing[key] = run
                if run.info.status in ("FINISHED", "FAILED"):
                    self.state[key] = "finished" if run.info.status == "FINISHED" else "failed"

    def _run_for(self, trial) -> str:
        key = trial.trial_id
        if key in self.runs:
            return self.runs[key]
        old = self.existing.get(key)
        if old is not None:
            run_id = old.info.run_id
            if old.info.status != "FINISHED":
                self.tracker.reopen(run_id)
                self.tracker.set_tags(run_id, {schema.RESUMED: schema.TRUE})
            history = self.tracker.client.get_metric_history(run_id, schema.TRAIN_LOSS)
            self.last_step[key] = max((m.step for m in history), default=-1)
        else:
            record = self.space.trial(trial.config)
            resolved = resolve(record.config)
            run_id = self.tracker.start_child(self.exp_id, self.parent_id, record.name, resolved.flat(),
                                              record.tags(key))
            self.tracker.log_datasets(run_id, trial_datasets(resolved))
        self.runs[key] = run_id
        return run_id

    def on_trial_start(self, iteration, trials, trial, **info):
        self._run_for(trial)
        self.state[trial.trial_id] = "running"

    def on_trial_recover(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        self.tracker.set_tags(run_id, {schema.RETRIED: str(trial.num_failures)})

    def on_trial_result(self, iteration, trials, trial, result, **info):
        run_id = self._run_for(trial)
        if schema.FAILURE_RESULT in result:
            return  # recorded when the trial completes: status FAILED and the reason's tag
        step = int(result.get(schema.STEP, result.get("training_iteration", 0)))
        if step <= self.last_step.get(trial.trial_id, -1) and not result.get(schema.FINAL):
            return  # a retried or resumed trial replays the steps since its checkpoint: identical, already logged
        self.last_step[trial.trial_id] = step
        self.tracker.log_result(run_id, result, step)

    def on_trial_complete(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        reason = failure_of(trial)
        if reason is None and not (trial.last_result or {}).get(schema.FINAL):  # stopped by ASHA or a time limit
            self.tracker.set_tags(run_id, {schema.EARLY_STOPPED: schema.TRUE})
        ckpt = getattr(trial, "checkpoint", None)
        if self.checkpoint_artifacts and reason is None and ckpt is not None and Path(ckpt.path).is_dir():
            self.tracker.client.log_artifacts(run_id, ckpt.path, schema.CHECKPOINT_ARTIFACT)
        self.tracker.finish(run_id, "FINISHED" if reason is None else "FAILED", reason)
        self.state[trial.trial_id] = "finished" if reason is None else "failed"

    def on_trial_error(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        self.tracker.finish(run_id, "FAILED", _trial_error(trial))
        self.state[trial.trial_id] = "failed"

    def mark_interrupted(self) -> None:
        """Ctrl-C: trials still running end as KILLED in MLflow; --resume reopens them."""
        for key, st in self.state.items():
            if st == "running" and key in self.runs:
                self.tracker.set_tags(self.runs[key], {schema.INTERRUPTED: schema.TRUE})
                self.tracker.finish(self.runs[key], "KILLED")

    def counts(self) -> dict:
        vals = list(self.state.values())
        return {"finished": vals.count("finished"), "failed": vals.count("failed")}


class ProgressCallback(DriverCallback):
    """One live line: running / pending / finished / failed, best metric so far, elapsed time."""

    slot = "progress"

    def __init__(self, name: str, total: int, metric: str, mode: str, space: TrialSpace, stream=None):
        self.name, self.total, self.metric, self.mode, self.space = name, total, metric, mode, space
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.t0 = time.time()
        self.state: dict[str, str] = {}
        self.best = None
        self.best_name = ""
        self.last_line = ""
        self.last_print = 0.0

    def _line(self) -> str:
        vals = list(self.state.values())
        running, finished, failed = vals.count("running"), vals.count("finished"), vals.count("failed")
        pending = max(self.total - len(vals), 0)
        el = int(time.time() - self.t0)
        best = f" | best {self.metric} {self.best:.2f} ({self.best_name})" if self.best is not None else ""
        return (f"[{self.name} {el // 60:02d}:{el % 60:02d}] {running} running | {pending} pending | "
                f"{finished} finished | {failed} failed{best}")

    def _emit(self, force: bool = False) -> None:
        line = self._line()
        if self.tty:
            if force or time.time() - self.last_print > 1:
                self.stream.write("\r" + line.ljust(len(self.last_line)))
                self.stream.flush()
                self.last_line, self.last_print = line, time.time()
        elif force and line.split("] ", 1)[1] != self.last_line.split("] ", 1)[-1]:
            print(line, file=self.stream, flush=True)
            self.last_line = line

    def on_trial_start(self, iteration, trials, trial, **info):
        self.state[trial.trial_id] = "running"
        self._emit(True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        v = result.get(self.metric)
        if isinstance(v, (int, float)) and (self.best is None or (v > self.best if self.mode == "max" else v < self.best)):
            self.best, self.best_name = float(v), self.space.trial(trial.config).name
        self._emit()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.state[trial.trial_id] = "failed" if failure_of(trial) is not None else "finished"
        self._emit(True)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.state[trial.trial_id] = "failed"
        self._emit(True)

    def on_step_end(self, iteration, trials, **info):
        if self.tty:
            self._emit()

    def close(self) -> None:
        self._emit(True)
        if self.tty:
            self.stream.write("\n")
