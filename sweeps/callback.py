"""Driver-side Ray Tune callbacks: MLflow child runs per trial, and one live progress line per sweep."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from ray import tune

from rirlab.config import resolve
from sweeps import schema
from sweeps.artifacts import FINAL_LOGGED
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
    """One MLflow child run per Tune trial, nested under the sweep's parent run; logs every result.

    A resumed sweep continues its own runs. A run that already ended (FINISHED or FAILED) is left exactly as
    it is: the trial reports its recorded end again (``sweeps.runner.trial_fn``) and nothing is logged. No
    metric is ever logged twice at one step: a trial replaying the steps since its checkpoint (a retry, a
    resume) logs only what its run does not hold yet."""

    slot = "mlflow"

    def __init__(self, tracker: Tracker, exp_id: str, parent_id: str, space: TrialSpace,
                 checkpoint_artifacts: bool = True):
        self.tracker, self.exp_id, self.parent_id, self.space = tracker, exp_id, parent_id, space
        self.checkpoint_artifacts = checkpoint_artifacts
        self.runs: dict[str, str] = {}
        self.state: dict[str, str] = {}
        self.logged: dict[str, dict[str, int]] = {}  # per trial, per metric: the last step its run holds
        self.existing = {}
        self.ended: set[str] = set()  # trials whose run had ended before this driver started
        self.unclosed: set[str] = set()  # trials whose final result was logged but whose run was not closed
        for run in tracker.children(exp_id, parent_id):
            key = run.data.tags.get(schema.TRIAL_KEY)
            if key:
                self.existing[key] = run
                if run.info.status in ("FINISHED", "FAILED"):
                    self.state[key] = "finished" if run.info.status == "FINISHED" else "failed"
                    self.ended.add(key)
                elif run.data.tags.get(FINAL_LOGGED) == schema.TRUE:
                    self.unclosed.add(key)

    def _run_for(self, trial) -> str:
        key = trial.trial_id
        if key in self.runs:
            return self.runs[key]
        old = self.existing.get(key)
        if old is not None:
            run_id = old.info.run_id
            if key not in self.ended:
                self.tracker.reopen(run_id)
                self.tracker.set_tags(run_id, {schema.RESUMED: schema.TRUE})
                self.logged[key] = {m: max((p.step for p in self.tracker.client.get_metric_history(run_id, m)),
                                           default=-1) for m in old.data.metrics}
        else:
            from sweeps.artifacts import CONFIG_ARTIFACT, config_yaml

            record = self.space.trial(trial.config)
            resolved = resolve(record.config)
            flat = resolved.flat()
            run_id = self.tracker.start_child(self.exp_id, self.parent_id, record.name, flat, record.tags(key))
            self.tracker.client.log_text(run_id, config_yaml(flat), CONFIG_ARTIFACT)
            self.tracker.log_datasets(run_id, trial_datasets(resolved))
        self.runs[key] = run_id
        return run_id

    def on_trial_start(self, iteration, trials, trial, **info):
        self._run_for(trial)
        if trial.trial_id not in self.ended:
            self.state[trial.trial_id] = "running"

    def on_trial_recover(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        if trial.trial_id not in self.ended:
            self.tracker.set_tags(run_id, {schema.RETRIED: str(trial.num_failures)})

    def on_trial_result(self, iteration, trials, trial, result, **info):
        key = trial.trial_id
        run_id = self._run_for(trial)
        if key in self.ended or key in self.unclosed or schema.FAILURE_RESULT in result:
            return  # an ended run is final; a failure is recorded when the trial completes (FAILED + reason)
        step = int(result.get(schema.STEP, result.get("training_iteration", 0)))
        logged = self.logged.setdefault(key, {})
        numbers = [k for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        repeated = {k for k in numbers if logged.get(k, -1) >= step}
        if repeated and len(repeated) == len(numbers):
            return  # a retried or resumed trial replays the steps since its checkpoint: already logged
        self.tracker.log_result(run_id, {k: v for k, v in result.items() if k not in repeated}, step)
        logged.update({k: step for k in numbers})
        if result.get(schema.FINAL):  # the trial's end is in MLflow from here on: --resume never reruns it
            self.tracker.set_tags(run_id, {FINAL_LOGGED: schema.TRUE})

    def on_trial_complete(self, iteration, trials, trial, **info):
        key = trial.trial_id
        run_id = self._run_for(trial)
        if key in self.ended:
            return
        if key in self.unclosed:  # the driver died between the final result and here: close the run only
            self.tracker.finish(run_id, "FINISHED")
            self.state[key] = "finished"
            return
        reason = failure_of(trial)
        if reason is None and not (trial.last_result or {}).get(schema.FINAL):  # stopped by ASHA or a time limit
            self.tracker.set_tags(run_id, {schema.EARLY_STOPPED: schema.TRUE})
        ckpt = getattr(trial, "checkpoint", None)
        if self.checkpoint_artifacts and reason is None and ckpt is not None and Path(ckpt.path).is_dir():
            self.tracker.client.log_artifacts(run_id, ckpt.path, schema.CHECKPOINT_ARTIFACT)
            self._log_model(run_id, trial, ckpt.path)
        self.tracker.finish(run_id, "FINISHED" if reason is None else "FAILED", reason)
        self.state[key] = "finished" if reason is None else "failed"

    def _log_model(self, run_id: str, trial, path: str) -> None:
        """The evaluated weights as an MLflow PyTorch model; a failure there costs the model, not the run."""
        from sweeps.artifacts import log_model
        from sweeps.trainable import STATE_FILE

        try:
            log_model(self.tracker.client, run_id, path, resolve(self.space.trial(trial.config).config).flat(),
                      STATE_FILE)
        except Exception as err:  # noqa: BLE001 - the checkpoint itself is logged above
            self.tracker.set_tags(run_id, {"rirlab.model_error": f"{type(err).__name__}: {err}"[:5000]})

    def on_trial_error(self, iteration, trials, trial, **info):
        key = trial.trial_id
        run_id = self._run_for(trial)
        if key in self.ended:
            return
        self.tracker.finish(run_id, "FAILED", _trial_error(trial))
        self.state[key] = "failed"

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
    """One live line: running / pending / finished / failed, the best FINAL value of each objective so far (a
    trial's last report, never a mid-training one) and the trial that reached it, elapsed time. With
    ``trials=True`` (``--progress trials``) also one line per trial as it starts, finishes or fails."""

    slot = "progress"

    def __init__(self, name: str, total: int, metric, mode, space: TrialSpace, stream=None, trials: bool = False):
        self.name, self.total, self.space = name, total, space
        self.metrics = [metric] if isinstance(metric, str) else list(metric)
        self.modes = [mode] * len(self.metrics) if isinstance(mode, str) else list(mode)
        self.trials = trials
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.t0 = time.time()
        self.state: dict[str, str] = {}
        self.best: dict[str, tuple[float, str]] = {}  # objective -> (best final value, trial name)
        self.last_line = ""
        self.last_print = 0.0

    def seed(self, runs) -> None:
        """A resumed sweep starts from what its runs in MLflow already hold (ended trials and their finals)."""
        for run in runs:
            key = run.data.tags.get(schema.TRIAL_KEY)
            if key and run.info.status in ("FINISHED", "FAILED"):
                self.state[key] = "finished" if run.info.status == "FINISHED" else "failed"
                if run.info.status == "FINISHED" and run.data.tags.get(schema.EARLY_STOPPED) != schema.TRUE:
                    self._update_best(run.data.metrics, run.info.run_name)

    def _update_best(self, values: dict, name: str) -> None:
        for metric, mode in zip(self.metrics, self.modes):
            v = values.get(metric)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                old = self.best.get(metric)
                if old is None or (v > old[0] if mode == "max" else v < old[0]):
                    self.best[metric] = (float(v), name)

    def _line(self) -> str:
        vals = list(self.state.values())
        running, finished, failed = vals.count("running"), vals.count("finished"), vals.count("failed")
        pending = max(self.total - len(vals), 0)
        el = int(time.time() - self.t0)
        best = "; ".join(f"{m} {v:.2f} ({who})" for m in self.metrics if m in self.best for v, who in [self.best[m]])
        return (f"[{self.name} {el // 60:02d}:{el % 60:02d}] {running} running | {pending} pending | "
                f"{finished} finished | {failed} failed" + (f" | best final {best}" if best else ""))

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

    def _trial_line(self, trial, what: str) -> None:
        if not self.trials:
            return
        text = f"  trial {self.space.trial(trial.config).name}: {what}"
        if self.tty:  # above the live line, which is redrawn below it
            self.stream.write("\r" + text.ljust(len(self.last_line)) + "\n")
            self.last_line = ""
        else:
            print(text, file=self.stream, flush=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        if self.state.get(trial.trial_id) in ("finished", "failed"):
            return  # an ended trial of a resumed sweep reporting its recorded end
        self.state[trial.trial_id] = "running"
        self._trial_line(trial, "running")
        self._emit(True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(schema.FINAL) and self.state.get(trial.trial_id) == "running":
            self._update_best(result, self.space.trial(trial.config).name)
        self._emit()

    def on_trial_complete(self, iteration, trials, trial, **info):
        if self.state.get(trial.trial_id) in ("finished", "failed"):
            return
        reason = failure_of(trial)
        self.state[trial.trial_id] = "failed" if reason is not None else "finished"
        last = trial.last_result or {}
        if reason is not None:
            self._trial_line(trial, f"failed ({reason})")
        else:
            finals = ", ".join(f"{m} {last[m]:.2f}" for m in self.metrics if isinstance(last.get(m), (int, float)))
            self._trial_line(trial, ("finished" if last.get(schema.FINAL) else "stopped early") +
                             (f": {finals}" if finals else ""))
        self._emit(True)

    def on_trial_error(self, iteration, trials, trial, **info):
        if self.state.get(trial.trial_id) in ("finished", "failed"):
            return
        self.state[trial.trial_id] = "failed"
        self._trial_line(trial, f"failed ({_trial_error(trial)})")
        self._emit(True)

    def on_step_end(self, iteration, trials, **info):
        if self.tty:
            self._emit()

    def close(self) -> None:
        self._emit(True)
        if self.tty:
            self.stream.write("\n")
