"""Driver-side Ray Tune callbacks: MLflow child runs per trial, and one live progress line per sweep."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ray import tune

from rirlab.config import resolve
from sweeps.spec import trial_name
from sweeps.tracking import KEY_TAG, Tracker
from sweeps.trainable import materialize, swept_of


def _trial_error(trial) -> str:
    for attr in ("error_file", "pickled_error_file"):
        path = getattr(trial, attr, None)
        if path and Path(path).is_file() and not str(path).endswith(".pkl"):
            text = Path(path).read_text(errors="replace").strip().splitlines()
            return text[-1] if text else "unknown error"
    return "trial raised an error (see the Ray logs in the sweep's output directory)"


class DriverCallback(tune.Callback):
    """Holds live clients and streams: saved into Tune's state as an empty shell, rebuilt by each driver."""

    def __getstate__(self):
        return {}


class MLflowTrialCallback(DriverCallback):
    """One MLflow child run per Tune trial, nested under the sweep's parent run; logs every result."""

    def __init__(self, tracker: Tracker, exp_id: str, parent_id: str, checkpoint_artifacts: bool = True):
        self.tracker, self.exp_id, self.parent_id = tracker, exp_id, parent_id
        self.checkpoint_artifacts = checkpoint_artifacts
        self.runs: dict[str, str] = {}
        self.state: dict[str, str] = {}
        self.failed_reason: dict[str, str] = {}
        self.last_step: dict[str, int] = {}  # per trial: last step logged, so replays after a restore are not logged twice
        self.existing = {}
        for run in tracker.children(exp_id, parent_id):
            key = run.data.tags.get(KEY_TAG)
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
                self.tracker.set_tags(run_id, {"rirlab.resumed": "true"})
            history = self.tracker.client.get_metric_history(run_id, "train/loss")
            self.last_step[key] = max((m.step for m in history), default=-1)
        else:
            flat = resolve(materialize(trial.config)).flat()
            swept = swept_of(trial.config)
            tags = {KEY_TAG: key, "rirlab.swept": json.dumps(swept, default=str)}
            if swept.get("variant"):
                tags["rirlab.variant"] = str(swept["variant"])
            run_id = self.tracker.start_child(self.exp_id, self.parent_id, trial_name(swept), flat, tags)
        self.runs[key] = run_id
        return run_id

    def on_trial_start(self, iteration, trials, trial, **info):
        self._run_for(trial)
        self.state[trial.trial_id] = "running"

    def on_trial_recover(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        self.tracker.set_tags(run_id, {"rirlab.retried": str(trial.num_failures)})

    def on_trial_result(self, iteration, trials, trial, result, **info):
        run_id = self._run_for(trial)
        if "rirlab_failed" in result:
            self.failed_reason[trial.trial_id] = result["rirlab_failed"]
            return
        step = int(result.get("step", result.get("training_iteration", 0)))
        if step <= self.last_step.get(trial.trial_id, -1) and not result.get("final"):
            return  # a retried or resumed trial replays the steps since its checkpoint: identical, already logged
        self.last_step[trial.trial_id] = step
        self.tracker.log_result(run_id, result, step)

    def on_trial_complete(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        reason = self.failed_reason.get(trial.trial_id)
        last = trial.last_result or {}
        if reason is None and not last.get("final"):  # stopped by the scheduler (ASHA) or a time limit
            self.tracker.set_tags(run_id, {"rirlab.early_stopped": "true"})
        ckpt = getattr(trial, "checkpoint", None)
        if self.checkpoint_artifacts and reason is None and ckpt is not None and Path(ckpt.path).is_dir():
            self.tracker.client.log_artifacts(run_id, ckpt.path, "checkpoint")
        self.tracker.finish(run_id, "FAILED" if reason else "FINISHED", reason)
        self.state[trial.trial_id] = "failed" if reason else "finished"

    def on_trial_error(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        self.tracker.finish(run_id, "FAILED", _trial_error(trial))
        self.state[trial.trial_id] = "failed"

    def mark_interrupted(self) -> None:
        """Ctrl-C: trials still running end as KILLED in MLflow; --resume reopens them."""
        for key, st in self.state.items():
            if st == "running" and key in self.runs:
                self.tracker.set_tags(self.runs[key], {"rirlab.interrupted": "true"})
                self.tracker.finish(self.runs[key], "KILLED")

    def counts(self) -> dict:
        vals = list(self.state.values())
        return {"finished": vals.count("finished"), "failed": vals.count("failed")}


class ProgressCallback(DriverCallback):
    """One live line: running / pending / finished / failed, best metric so far, elapsed time."""

    def __init__(self, name: str, total: int, metric: str, mode: str, stream=None):
        self.name, self.total, self.metric, self.mode = name, total, metric, mode
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
            self.best, self.best_name = float(v), trial_name(swept_of(trial.config))
        self._emit()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.state[trial.trial_id] = "failed" if "rirlab_failed" in (trial.last_result or {}) else "finished"
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
