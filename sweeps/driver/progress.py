"""The sweep's progress on the terminal: one live line (running / pending / finished / stopped early / failed, the
time left at the rate trials ended so far, the best final value so far, elapsed time), and with ``--progress trials`` a
line per trial as it starts, finishes or fails.

A sweep of more than ``MANY`` trials summarises instead of narrating (issue 50: a thousand trials): where the output is
no terminal (a log file, a batch job) the line is printed at most every ``SUMMARY_EVERY_S`` seconds, not at each of
its 2,000 starts and ends, followed by the last few trials that ended; ``--progress trials`` lists each trial's end
but not its start. A sweep of up to ``MANY`` trials prints as before."""

from __future__ import annotations

import collections
import sys
import time

from rirlab import contract
from rirlab.sweeps.spec.trials import TrialSpace
from rirlab.sweeps.record.callback import DriverCallback, trial_error, failure_of

EARLY = contract.STOPPED_EARLY_WORD
FAILURES_SHOWN = 10  # failed trials said by name and reason without --progress trials (a large sweep: the first)
ENDED = ("finished", EARLY, "failed")
MANY = 50  # trials: a larger sweep's progress summarises (the module's docstring)
SUMMARY_EVERY_S = 30.0  # a large sweep's line, where the output is no terminal: at most this often
EVENTS_SHOWN = 3  # a large sweep's summary: the trials that ended last


def duration(seconds: float) -> str:
    """mm:ss under an hour, else h:mm:ss."""
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


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
        self.failures_shown = 0  # failed trials said without --progress trials
        self.study = ""  # a continued Optuna study: "study 'st' already holds 4 trials" (search.study_before)
        self.many = total > MANY
        self.ended_now = 0  # trials this driver saw end (a resumed sweep's earlier ends are no rate of this one)
        # a large sweep's last ends, numbered: a summary says those the one before it did not
        self.events: collections.deque[tuple[int, str]] = collections.deque(maxlen=EVENTS_SHOWN)
        self.events_said = 0  # the number of the last end a summary said

    def seed(self, runs) -> None:
        """A resumed sweep starts from what its runs in MLflow already hold (ended trials and their finals)."""
        for run in runs:
            key = run.data.tags.get(contract.TRIAL_KEY)
            if key and run.info.status in ("FINISHED", "FAILED"):
                early = run.data.tags.get(contract.EARLY_STOPPED) == contract.TRUE
                self.state[key] = "failed" if run.info.status == "FAILED" else EARLY if early else "finished"
                if self.state[key] == "finished":
                    self._update_best(run.data.metrics, run.info.run_name)

    def _update_best(self, values: dict, name: str) -> None:
        for metric, mode in zip(self.metrics, self.modes):
            v = values.get(metric)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and \
                    contract.is_better(float(v), name, self.best.get(metric), mode):
                self.best[metric] = (float(v), name)

    def _line(self) -> str:
        vals = list(self.state.values())
        running, finished, failed = vals.count("running"), vals.count("finished"), vals.count("failed")
        pending = max(self.total - len(vals), 0)
        el = int(time.time() - self.t0)
        best = "; ".join(f"{m} {v:.2f} ({who})" for m in self.metrics if m in self.best for v, who in [self.best[m]])
        early = f"{vals.count(EARLY)} {EARLY} | " if EARLY in vals else ""
        return (f"[{self.name} {el // 60:02d}:{el % 60:02d}] {running} running | {pending} pending | "
                f"{finished} finished | {early}{failed} failed" + self._eta(running + pending)
                + (f" | best final {best}" if best else "") + (f" | {self.study}" if self.study else ""))

    def _eta(self, left: int) -> str:
        """" | ETA mm:ss": the trials left at the rate this driver's trials ended (none before the first end)."""
        if not left or not self.ended_now:
            return ""
        return f" | ETA {duration((time.time() - self.t0) / self.ended_now * left)}"

    def _emit(self, force: bool = False, closing: bool = False) -> None:
        line = self._line()
        if self.tty:
            if force or time.time() - self.last_print > 1:
                self.stream.write("\r" + line.ljust(len(self.last_line)))
                self.stream.flush()
                self.last_line, self.last_print = line, time.time()
        elif force and line.split("] ", 1)[1] != self.last_line.split("] ", 1)[-1]:
            if self.many and not closing and time.time() - self.last_print < SUMMARY_EVERY_S:
                return  # a large sweep's log: a summary every SUMMARY_EVERY_S, not a line per start and end
            print(line, file=self.stream, flush=True)
            for number, event in self.events if self.many else ():
                if number > self.events_said:
                    print(f"  ended: {event}", file=self.stream, flush=True)
            self.events_said = self.ended_now
            self.last_line, self.last_print = line, time.time()

    def _trial_line(self, trial, what: str, failure: bool = False) -> None:
        """A line for one trial (``--progress trials``). A failure is said in any mode, its first
        ``FAILURES_SHOWN`` at least: a user must learn why, not only that, trials failed."""
        if failure and not self.trials:
            self.failures_shown += 1
            if self.failures_shown > FAILURES_SHOWN:
                return
            if self.failures_shown == FAILURES_SHOWN:
                what += (f" (further failures are not listed here: each failed run's failure reason is in MLflow, "
                         f"`rirlab ui`; `--progress trials` lists them all)")
        elif not self.trials or (self.many and what == "running"):
            return  # (a large sweep lists its trials' ends only)
        text = f"  trial {self.space.trial(trial.config).name}: {what}"
        if self.tty:  # above the live line, which is redrawn below it
            self.stream.write("\r" + text.ljust(len(self.last_line)) + "\n")
            self.last_line = ""
        else:
            print(text, file=self.stream, flush=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        if self.state.get(trial.trial_id) in ENDED:
            return  # an ended trial of a resumed sweep reporting its recorded end
        self.state[trial.trial_id] = "running"
        self._trial_line(trial, "running")
        self._emit(True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(contract.FINAL) and self.state.get(trial.trial_id) == "running":
            self._update_best(result, self.space.trial(trial.config).name)
        self._emit()

    def on_trial_complete(self, iteration, trials, trial, **info):
        if self.state.get(trial.trial_id) in ENDED:
            return
        reason = failure_of(trial)
        last = trial.last_result or {}
        self.state[trial.trial_id] = "failed" if reason is not None else "finished" if last.get(contract.FINAL) else EARLY
        if reason is not None:
            self._trial_line(trial, f"failed ({reason})", failure=True)
            self._ended(trial, f"failed ({reason})")
        else:
            finals = ", ".join(f"{m} {last[m]:.2f}" for m in self.metrics if isinstance(last.get(m), (int, float)))
            self._trial_line(trial, self.state[trial.trial_id] + (f": {finals}" if finals else ""))
            self._ended(trial, self.state[trial.trial_id] + (f": {finals}" if finals else ""))
        self._emit(True)

    def _ended(self, trial, what: str) -> None:
        self.ended_now += 1
        self.events.append((self.ended_now, f"{self.space.trial(trial.config).name} {what}"[:200]))

    def on_trial_error(self, iteration, trials, trial, **info):
        if self.state.get(trial.trial_id) in ENDED:
            return
        self.state[trial.trial_id] = "failed"
        why = trial_error(trial)
        self._trial_line(trial, f"failed ({why})", failure=True)
        self._ended(trial, f"failed ({why})")
        self._emit(True)

    def on_step_end(self, iteration, trials, **info):
        if self.tty:
            self._emit()

    def close(self) -> None:
        self._emit(True, closing=True)
        if self.tty:
            self.stream.write("\n")
