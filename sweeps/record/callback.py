"""Driver-side Ray Tune callbacks: MLflow child runs per trial, and one live progress line per sweep."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import re
import time
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ray import tune

from rirlab import contract
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record.artifacts import config_yaml, log_model
from rirlab.sweeps.record.faults import SweepFault, disk_full, store_fault
from rirlab.sweeps.record.tracker import Tracker


def _faults_stop_the_sweep(method):
    """A full disk under the store, a store another process keeps locked past the stated wait (or a trial's error
    saying the Tune folder's disk is full) stops the sweep as Ctrl-C does instead of killing the driver with
    tracebacks: nothing more is written, the driver ends with one line (``SweepFault``) and ``--resume`` continues
    every unfinished trial. A second Ctrl-C lands after the callback's writes, never inside a SQLite statement
    (which left the store locked: the runs stayed RUNNING and the driver ended in tracebacks)."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if self.fault is not None:
            return None
        try:
            with self.shield():
                return method(self, *args, **kwargs)
        except Exception as err:  # noqa: BLE001 - only the machine's faults are handled; anything else is raised
            fault = store_fault(self.tracker.uri, err)
            if fault is None:
                raise
            self.stop_for(fault)
            return None

    return guarded


def failure_of(trial):
    """The reason a completed trial failed (its last result names it), else None."""
    return (trial.last_result or {}).get(contract.FAILURE_RESULT)


def trial_error(trial) -> str:
    """Why a trial ended in an error, in one line (its run's failure reason, the progress line's word)."""
    for attr in ("error_file", "pickled_error_file"):
        path = getattr(trial, attr, None)
        if path and Path(path).is_file() and not str(path).endswith(".pkl"):
            return error_line(Path(path).read_text(errors="replace"))
    return "trial raised an error (see the Ray logs in the sweep's output directory)"


# Ray's memory monitor kills a worker when the node's memory use crosses a share of its limit
# (RAY_memory_usage_threshold, 0.95 by default) and writes a page of text whose last line is general advice; its
# facts are in two lines (Ray 2.40-2.60: "Memory on the node (...) was 5.33GB used / 23.54GB limit (0.226589)"
# and "OOM kill reason: Memory usage ...B exceeded threshold of ...B (2.0% of ...B limit)").
_RAY_OOM = "were killed due to the node running low on memory"
_RAY_OOM_USED = re.compile(r"was ([\d.]+\s*[KMGT]?B) used / ([\d.]+\s*[KMGT]?B) limit")
_RAY_OOM_THRESHOLD = re.compile(r"exceeded threshold of \d+B \(([\d.]+%)")


def error_line(text: str) -> str:
    """One line of a trial's error text (Ray's error.txt): what ended it, with what to do where rirlab knows.
    Most errors end in their exception's line; a kill by Ray's memory monitor is said with its figures."""
    if _RAY_OOM in text:
        used, threshold = _RAY_OOM_USED.search(text), _RAY_OOM_THRESHOLD.search(text)
        figures = f"the machine's memory use, {used.group(1)} of {used.group(2)}, " if used else "the machine's memory use "
        return (f"killed by Ray's memory monitor: {figures}crossed its kill threshold"
                + (f" ({threshold.group(1)} of the limit, RAY_memory_usage_threshold)" if threshold else "")
                + "; run fewer trials at once (max_concurrent, or more resources.cpu per trial) or smaller ones "
                  "(batch_size, hidden_size), or free the machine's memory")
    lines = text.strip().splitlines()
    return lines[-1] if lines else "unknown error"


def trial_datasets(resolved) -> list[dict]:
    """The datasets a trial reads (``Task.datasets``: name, source, params, digest, rows), as dicts for MLflow."""
    import dataclasses

    from rirlab.tasks import registry

    return [dataclasses.asdict(d) for d in registry.get(resolved.task).datasets(resolved.task_cfg)]


# The callbacks of the sweep this context drives, by slot. A context variable, not a module dict: ``bound`` owns the
# mapping for the time Tune builds, restores and runs the experiment (all in the driver's thread: Tuner.fit runs
# there), and resets it when it ends, so nothing outlives the sweep and a second driver in the process (a test, a
# notebook) sees only its own. The read-only mapping is never changed in place: ``bound`` sets a new one.
_BOUND: contextvars.ContextVar[Mapping[str, "DriverCallback"]] = contextvars.ContextVar(
    "rirlab_bound_callbacks", default=MappingProxyType({}))


def bound_callback(slot: str) -> tune.Callback:
    """What a saved DriverCallback loads back as: the callback this driver bound to its slot (a no-op
    callback when none is bound, e.g. when Tune's state is read outside a sweep)."""
    return _BOUND.get().get(slot) or tune.Callback()


@contextlib.contextmanager
def bound(*callbacks: "DriverCallback"):
    """Bind this driver's callbacks while Ray Tune builds, restores and runs the experiment."""
    token = _BOUND.set(MappingProxyType({**_BOUND.get(), **{cb.slot: cb for cb in callbacks}}))
    try:
        yield list(callbacks)
    finally:
        _BOUND.reset(token)


# How long a trial's reports may wait in the driver before they are written (seconds; $RIRLAB_LOG_FLUSH_S): the bound
# on what logging costs a trial that reports every step (benchmarks/README.md, "Logging cost per training step")
LOG_FLUSH_ENV = "RIRLAB_LOG_FLUSH_S"
LOG_FLUSH_S = 2.0


def log_flush_s() -> float:
    """$RIRLAB_LOG_FLUSH_S, else ``LOG_FLUSH_S``; 0 writes every result as it arrives."""
    try:
        value = float(os.environ.get(LOG_FLUSH_ENV, LOG_FLUSH_S))
    except ValueError:
        return LOG_FLUSH_S
    return max(value, 0.0)


@dataclasses.dataclass(frozen=True)
class TrialCounts:
    """The trials one driver saw end: finished, stopped early (by ASHA or a time limit: ended, not counted in
    tables) and failed."""

    finished: int = 0
    stopped_early: int = 0
    failed: int = 0


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
    it is: the trial reports its recorded end again (``rirlab.sweeps.tune.trainable.trial_fn``) and nothing is logged. No
    metric is ever logged twice at one step: a trial replaying the steps since its checkpoint (a retry, a
    resume) logs only what its run does not hold yet.

    A --rerun-failed experiment's trial (``reruns``: the runs it replaces, by swept values) gets a new run created
    with ``rirlab.rerun_of`` naming the run it replaces; replaced runs are neither counted nor written to.

    What logging costs a trial: Ray Tune runs this callback on each result before it lets the trial go on, so a
    write is on the trial's step path (a synchronous ``log_batch`` took 80-118 ms on a loaded 2-core machine, about a
    tiny model's step: benchmarks/logging_cost.py). With ``flush_every_s`` > 0 (the driver's ``log_flush_s()``) a trial's reports wait here and
    are written together, in one round trip, at the latest ``flush_every_s`` after the oldest of them, and at once
    at every checkpoint, at the trial's final result, end or error, at Ctrl-C and at the experiment's end. No step
    is lost by it: Tune registers a checkpoint after this callback saw the result that carries it
    (``should_checkpoint``: written here first), so every step up to the checkpoint a trial resumes from is in MLflow
    when Tune can record that checkpoint, and the steps after it, which a driver killed before writing them loses,
    are the ones the resumed trial replays; the run's per-metric last steps, read again on --resume, keep them from
    being logged twice. Writes stay synchronous and in order, in the driver's thread.

    Why not MLflow's asynchronous logging (``log_batch(synchronous=False)``, MLFLOW_ENABLE_ASYNC_LOGGING): MLflow
    hands its queued batches to a pool of 10 threads (``AsyncLoggingQueue``), so a later step can reach the store
    before an earlier one; a driver killed then leaves a gap below the run's last step, which a resumed trial's
    replay skips as logged (the no-step-lost rule reads the last step per metric), and the step is lost for good.
    Its failures are logged by its thread instead of raised at the call, so a full disk or a locked store would not
    stop the sweep as ``_faults_stop_the_sweep`` does, and a Ctrl-C could not be kept out of the middle of a write."""

    slot = "mlflow"

    def __init__(self, tracker: Tracker, exp_id: str, parent_id: str, plan: SweepPlan,
                 checkpoint_artifacts: bool = True, tune_path: str | None = None, link=None,
                 shield=contextlib.nullcontext, reruns=None, flush_every_s: float = 0.0):
        self.tracker, self.exp_id, self.parent_id, self.plan = tracker, exp_id, parent_id, plan
        self.flush_every_s = flush_every_s  # 0: every result written as it arrives
        self.pending: dict[str, list[tuple[dict, int]]] = {}  # per trial: results not written yet (with their steps)
        self.pending_since: dict[str, float] = {}  # per trial: when its oldest pending result arrived (monotonic)
        self.shield = shield  # a block a Ctrl-C must not cut in two (the driver's signals.shielded)
        self.link = link  # (trial id, run id) -> tags for a new run: the searcher's side of it (Optuna's trial)
        self.tune_path = tune_path  # watched for a full disk (Tune's state, checkpoints and results live there)
        self.checkpoint_artifacts = checkpoint_artifacts
        self.runs: dict[str, str] = {}
        self.state: dict[str, str] = {}
        self.logged: dict[str, dict[str, int]] = {}  # per trial, per metric: the last step its run holds
        self.existing = {}
        self.ended: set[str] = set()  # trials whose run had ended before this driver started
        self.unclosed: set[str] = set()  # trials whose final result was logged but whose run was not closed
        self.resumed: set[str] = set()  # trials whose run this driver reopened (metrics logged before it)
        self.early: set[str] = set()  # trials stopped early (ASHA or a time limit): ended, neither finished nor failed
        self.said_finished: set[str] = set()  # trials whose final result's batch carried the outcome "finished"
        self.fault: SweepFault | None = None  # the machine's fault that stopped the sweep (nothing is written after it)
        self.damaged: dict[str, tuple[str, str]] = {}  # trials stopped on a damaged checkpoint: (file, why)
        children = tracker.children(exp_id, parent_id)
        # --rerun-failed (rirlab.sweeps.driver.rerun): the runs a later attempt replaced, and those this experiment's
        # trials replace (by their swept values) as they start. Neither is counted nor written to again
        done = contract.superseded(children)
        self.reruns: dict[str, list] = {}
        for rerun in reruns or ():
            if rerun.run_id not in done:  # (a resumed rerun: the runs already replaced are done)
                self.reruns.setdefault(rerun.signature, []).append(rerun)
        self.replaced_runs: dict = {}  # trial key -> its replaced run (not in ``existing``: not counted)
        self.replaced = done | {r.run_id for pending in self.reruns.values() for r in pending}
        for run in children:
            key = run.data.tags.get(contract.TRIAL_KEY)
            if key and run.info.run_id in self.replaced:  # (its trial is not in this Tune experiment: should it
                self.ended.add(key)  # come back, its run is left as it is)
                self.replaced_runs[key] = run
            elif key and not run.data.tags.get(contract.EVALUATES):  # (an evaluation-only row's run is no trial)
                self.existing[key] = run
                if run.info.status == "FAILED" and run.data.tags.get(contract.DAMAGED_CHECKPOINT):
                    continue  # stopped on a damaged checkpoint: not an end, Tune resumes it (errored trial)
                if run.info.status in ("FINISHED", "FAILED"):
                    self.state[key] = "finished" if run.info.status == "FINISHED" else "failed"
                    self.ended.add(key)
                    if run.data.tags.get(contract.EARLY_STOPPED) == contract.TRUE:
                        self.early.add(key)
                elif run.data.tags.get(contract.FINAL_LOGGED) == contract.TRUE:
                    self.unclosed.add(key)
                    if run.data.tags.get(contract.OUTCOME) == contract.FINISHED_WORD:
                        self.said_finished.add(key)

    def _run_for(self, trial) -> str:
        key = trial.trial_id
        if key in self.runs:
            return self.runs[key]
        old = self.existing.get(key) or self.replaced_runs.get(key)
        if old is not None:
            run_id = old.info.run_id
            if key not in self.ended:
                self.tracker.reopen(run_id)
                for tag in (contract.DAMAGED_CHECKPOINT, contract.FAILURE_REASON):  # tried again: no failure yet
                    if old.data.tags.get(contract.DAMAGED_CHECKPOINT) and tag in old.data.tags:
                        self.tracker.client.delete_tag(run_id, tag)
                self.tracker.set_tags(run_id, {contract.RESUMED: contract.TRUE})
                self.logged[key] = {m: self._last_step(run_id, m) for m in old.data.metrics}
                self.resumed.add(key)
        else:
            record = self.plan.space.trial(trial.config)
            resolved = self.plan.resolved_of(record)
            flat = resolved.flat()
            tags, rerun = record.tags(key), self._replaces(record)
            if rerun is not None:  # created with the link: readers never see both attempts counted
                tags.update({**rerun.inherit, contract.RERUN_OF: rerun.run_id, contract.ATTEMPT: str(rerun.attempt)})
            run_id = self.tracker.start_child(self.exp_id, self.parent_id, record.name, flat, tags)
            if rerun is not None:
                self.tracker.set_tags(rerun.run_id, {
                    contract.SUPERSEDED_BY: run_id,
                    contract.NOTE: f"Trained again as run {run_id} (attempt {rerun.attempt}, --rerun-failed): "
                                   f"tables and counts read that run instead of this one."})
            self.tracker.log_text(run_id, config_yaml(flat), contract.CONFIG_ARTIFACT)
            self.tracker.log_datasets(run_id, trial_datasets(resolved))
            if self.link is not None:
                tags = self.link(key, run_id)
                if tags:
                    self.tracker.set_tags(run_id, tags)
        self.runs[key] = run_id
        return run_id

    def _replaces(self, record):
        """The run a --rerun-failed trial of these swept values replaces (taken once), or None."""
        from rirlab.sweeps.spec.trials import swept_signature

        pending = self.reruns.get(swept_signature(record.swept))
        return pending.pop(0) if pending else None

    def _open_run(self, trial):
        """The trial's run while this driver records it; None where the run had ended before this driver started
        (a resumed sweep's finished trial: nothing of it is written again)."""
        run_id = self._run_for(trial)
        return None if trial.trial_id in self.ended else run_id

    def _last_step(self, run_id: str, metric: str) -> int:
        return max((p.step for p in self.tracker.client.get_metric_history(run_id, metric)), default=-1)

    def stop_for(self, fault: SweepFault) -> None:
        """Stop the sweep as Ctrl-C does, once, for a fault of the machine (the driver raises ``fault`` after it)."""
        if self.fault is None:
            from rirlab.sweeps.record.faults import stop_tune

            self.fault = fault
            stop_tune()

    def on_step_begin(self, iteration, trials, **info):
        """Before Tune writes checkpoints and results into a Tune folder whose disk is full (trials failing one
        by one, half-written files that --resume cannot read), stop the sweep."""
        from rirlab.sweeps.record.faults import tune_folder_full

        if self.fault is None and self.tune_path:
            why = tune_folder_full(self.tune_path)
            if why:
                self.stop_for(SweepFault(why))

    @_faults_stop_the_sweep
    def on_trial_start(self, iteration, trials, trial, **info):
        self._run_for(trial)
        if trial.trial_id not in self.ended:
            self.state[trial.trial_id] = "running"

    @_faults_stop_the_sweep
    def on_trial_recover(self, iteration, trials, trial, **info):
        run_id = self._run_for(trial)
        if trial.trial_id not in self.ended:
            self.tracker.set_tags(run_id, {contract.RETRIED: str(trial.num_failures)})

    @_faults_stop_the_sweep
    def on_trial_result(self, iteration, trials, trial, result, **info):
        key = trial.trial_id
        run_id = self._run_for(trial)
        if contract.DAMAGED_RESULT in result and key not in self.ended:  # recorded when its error ends it
            self.damaged[key] = (str(result[contract.DAMAGED_RESULT]), str(result.get(contract.FAILURE_RESULT, "")))
        if key in self.ended or key in self.unclosed or contract.FAILURE_RESULT in result:
            return  # an ended run is final; a failure is recorded when the trial completes (FAILED + reason)
        step = int(result.get(contract.STEP, result.get("training_iteration", 0)))
        logged = self.logged.setdefault(key, {})
        numbers = [k for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if key in self.resumed:  # a metric the run's latest values do not list may still have steps in its history
            for k in numbers:
                if k not in logged:
                    logged[k] = self._last_step(run_id, k)
        repeated = {k for k in numbers if logged.get(k, -1) >= step}
        if repeated and len(repeated) == len(numbers):
            if result.get("should_checkpoint"):  # (written before Tune records the checkpoint, as below)
                self._flush(key)
            return  # a retried or resumed trial replays the steps since its checkpoint: already logged
        self.pending.setdefault(key, []).append(({k: v for k, v in result.items() if k not in repeated}, step))
        self.pending_since.setdefault(key, time.monotonic())
        # a repeated metric's run already holds a later step: keep that mark, or the next replayed step is logged
        # (the mark says "written or pending": a driver that dies reads the marks again from the run)
        logged.update({k: step for k in numbers if k not in repeated})
        if result.get(contract.FINAL):  # the trial's end is in MLflow from here on: --resume never reruns it. The
            # marks go with the final values (in their last call), one round trip; the outcome's word too, which an
            # error after this result takes back (``_unsay_finished``)
            self._flush(key, {contract.FINAL_LOGGED: contract.TRUE, contract.OUTCOME: contract.FINISHED_WORD})
            self.said_finished.add(key)
        elif result.get("should_checkpoint") or self._due(key):
            self._flush(key)

    def _due(self, key: str) -> bool:
        since = self.pending_since.get(key)
        return since is not None and time.monotonic() - since >= self.flush_every_s

    def _flush(self, key: str, last_tags: dict[str, str] | None = None) -> None:
        """Write a trial's pending results in one round trip (taken off first: a write that fails is not retried
        by the next flush, the sweep stops on it and --resume replays those steps); ``last_tags`` with them, in
        their last call (``Tracker.log_batch``)."""
        results = self.pending.pop(key, None)
        self.pending_since.pop(key, None)
        if key in self.runs and (results or last_tags):
            self.tracker.log_results(self.runs[key], results or [], last_tags)

    def _unsay_finished(self, run_id: str, key: str) -> None:
        """A trial that failed after its final result was logged: its run no longer says "finished"."""
        if key in self.said_finished:
            self.said_finished.discard(key)
            self.tracker.client.delete_tag(run_id, contract.OUTCOME)

    def flush(self) -> None:
        """Write every trial's pending results (Ctrl-C, the experiment's end)."""
        for key in list(self.pending):
            self._flush(key)

    def on_step_end(self, iteration, trials, **info):
        """A trial that reports rarely is written within ``flush_every_s`` of its report all the same (Tune's loop
        calls this many times a second: nothing but the check unless a trial's reports are due)."""
        due = [k for k in self.pending if self._due(k)]
        if due:
            self._flush_keys(due)

    @_faults_stop_the_sweep
    def _flush_keys(self, keys) -> None:
        for key in keys:
            self._flush(key)

    @_faults_stop_the_sweep
    def _flush_all(self) -> None:
        self.flush()

    @_faults_stop_the_sweep
    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self._flush(trial.trial_id)

    @_faults_stop_the_sweep
    def on_trial_complete(self, iteration, trials, trial, **info):
        run_id, key = self._open_run(trial), trial.trial_id
        if run_id is None:
            return
        self._flush(key)
        if key in self.unclosed:  # the driver died between the final result and here: what the end logs, then close
            folder = final_checkpoint(trial)
            if self.checkpoint_artifacts and folder is not None:
                self._log_checkpoint(run_id, trial, folder, resumed=True)
            self.tracker.finish(run_id, "FINISHED")
            self.state[key] = "finished"
            return
        reason = failure_of(trial)
        last = trial.last_result or {}
        if reason is None and not last.get(contract.FINAL):  # stopped by ASHA or a time limit
            self.early.add(key)
            self.tracker.set_tags(run_id, {contract.EARLY_STOPPED: contract.TRUE, contract.NOTE: early_note(last),
                                           contract.OUTCOME: contract.STOPPED_EARLY_WORD})
        elif reason is None and key not in self.said_finished:  # (said with the final result, as a rule)
            self.tracker.set_tags(run_id, {contract.OUTCOME: contract.FINISHED_WORD})
        elif reason is not None:
            self._unsay_finished(run_id, key)
        ckpt = getattr(trial, "checkpoint", None)
        if self.checkpoint_artifacts and reason is None and ckpt is not None and Path(ckpt.path).is_dir():
            self._log_checkpoint(run_id, trial, ckpt.path)
        self.tracker.finish(run_id, "FINISHED" if reason is None else "FAILED", reason)
        self.state[key] = "finished" if reason is None else "failed"

    def _log_checkpoint(self, run_id: str, trial, path: str, resumed: bool = False) -> None:
        """The trial's final checkpoint as the run's ``checkpoint/`` (its evaluated model, which the worker saved
        beside it, left out there: it is the run's MLflow model) and the run's MLflow model. ``resumed``: a run an
        earlier driver may have logged either of them to before it died (read first: neither is logged twice)."""
        done = self._logged_outputs(run_id) if resumed else set()
        if contract.CHECKPOINT_ARTIFACT not in done:
            self.tracker.log_artifacts(run_id, path, contract.CHECKPOINT_ARTIFACT,
                                       exclude=(contract.CHECKPOINT_MODEL_FILE,))
        if contract.MODEL_ARTIFACT not in done:
            self._log_model(run_id, trial, path)

    def _logged_outputs(self, run_id: str) -> set[str]:
        """Which of the run's checkpoint and MLflow model it holds (its artifacts' names; MLflow 3: a logged model
        whose source is the run)."""
        client = self.tracker.client
        held = {a.path for a in client.list_artifacts(run_id)}
        if hasattr(client, "search_logged_models") and client.search_logged_models(
                [self.exp_id], filter_string=f"source_run_id = '{run_id}'", max_results=1):
            held.add(contract.MODEL_ARTIFACT)
        return held

    def _log_model(self, run_id: str, trial, path: str) -> None:
        """The evaluated weights as an MLflow PyTorch model; a failure there costs the model, not the run."""
        try:
            record = self.plan.space.trial(trial.config)
            log_model(self.tracker.client, run_id, path, self.plan.resolved_of(record), self.exp_id, record.name)
        except Exception as err:  # noqa: BLE001 - the checkpoint itself is logged above
            self.tracker.set_tags(run_id, {contract.MODEL_ERROR: f"{type(err).__name__}: {err}"[:5000]})

    @_faults_stop_the_sweep
    def on_trial_error(self, iteration, trials, trial, **info):
        from rirlab.sweeps.record.faults import tune_folder_full

        run_id, key = self._open_run(trial), trial.trial_id
        if run_id is None:
            return
        self._flush(key)
        if key in self.damaged:  # a damaged checkpoint (not retried): FAILED with why, resumable with the flag
            path, why = self.damaged[key]
            self._unsay_finished(run_id, key)
            self.tracker.set_tags(run_id, {contract.DAMAGED_CHECKPOINT: path})
            self.tracker.finish(run_id, "FAILED", why)
            self.state[key] = "failed"
            return
        error = trial_error(trial)
        full = tune_folder_full(self.tune_path) if self.tune_path else None
        if full or disk_full(error):  # the machine's fault, not the trial's: the run stays unfinished
            self.state[key] = "running"
            self.stop_for(SweepFault(full or f"a disk a trial writes to is full ({_full_line(error)})"))  # the data
            # cache's too
            return
        self._unsay_finished(run_id, key)
        self.tracker.finish(run_id, "FAILED", error)
        self.state[key] = "failed"

    def on_experiment_end(self, trials, **info):
        """A trial Tune had finished while the store could not take its end (its disk was full) is restored as
        TERMINATED and never runs again: log what the store misses from its last result and close its run.

        Only such a trial: one this driver ran (it has a state here) is not. Tune's clean-up after Ctrl-C marks the
        trials it stops TERMINATED before this callback, so a resumed sweep's interrupted trial looked finished."""
        self._flush_all()
        for trial in trials:
            key = trial.trial_id
            if trial.status != "TERMINATED" or key not in self.existing or key in self.ended \
                    or key in self.state or self.fault is not None:
                continue
            if trial.last_result:
                self.on_trial_result(0, trials, trial, trial.last_result)
            self.on_trial_complete(0, trials, trial)

    def mark_interrupted(self) -> bool:
        """Ctrl-C: trials still running end as KILLED in MLflow; --resume reopens them. False when the store
        could not take it (its disk is full, another process holds it, a tracking server stopped answering: the runs
        stay RUNNING, which --resume continues as well); a server that stopped answering is not asked again."""
        if self.fault is not None and not self.fault.store_answers:
            return False
        if self.fault is None:
            try:
                self.flush()
            except Exception as err:  # noqa: BLE001
                if store_fault(self.tracker.uri, err) is None:
                    raise
                return False
        for key, st in self.state.items():
            if st == "running" and key in self.runs:
                try:
                    self.tracker.set_tags(self.runs[key], {contract.INTERRUPTED: contract.TRUE})
                    self.tracker.finish(self.runs[key], "KILLED")
                except Exception as err:  # noqa: BLE001
                    if store_fault(self.tracker.uri, err) is None:
                        raise
                    return False
        return True

    def counts(self) -> TrialCounts:
        """Trials finished, stopped early (ended by ASHA or a time limit, not counted in tables) and failed."""
        early = sum(1 for k, st in self.state.items() if st == "finished" and k in self.early)
        return TrialCounts(finished=list(self.state.values()).count("finished") - early, stopped_early=early,
                           failed=list(self.state.values()).count("failed"))


def final_checkpoint(trial) -> str | None:
    """The folder of a trial's final checkpoint: the one its worker saved the evaluated model in
    (``contract.CHECKPOINT_MODEL_FILE``, only ever beside the final state), Tune's latest checkpoint of the trial
    or, where Tune had not recorded it when its driver died, the highest numbered one of the trial's folder
    holding it; None where there is none (a checkpoint written before rirlab saved the model there)."""
    ckpt = getattr(trial, "checkpoint", None)
    path = getattr(ckpt, "path", None)
    if path and (Path(path) / contract.CHECKPOINT_MODEL_FILE).is_file():
        return path
    folder = Path(path).parent if path else getattr(trial, "path", None)
    if not folder or not Path(folder).is_dir():
        return None
    from rirlab.train import latest_checkpoint

    found = latest_checkpoint(folder, holding=contract.CHECKPOINT_MODEL_FILE)
    return str(found.parent) if found else None


def early_note(last: dict) -> str:
    """The MLflow note of a trial run stopped early: the UI shows its status as Finished, the note says otherwise."""
    step = last.get(contract.STEP, last.get("training_iteration"))
    return (f"**{contract.STOPPED_EARLY_WORD.capitalize()}** (by the scheduler, ASHA, or the time limit)"
            + (f" at step {step}" if step is not None else "") + ": its last values are not final; tables, the best "
            f"trial and the Pareto plot leave it out.")


def _full_line(error: str) -> str:
    """The line of a trial's error text that says which disk is full (e.g. the data cache's), without its type."""
    from rirlab.sweeps.record.faults import marker_line

    line = marker_line(error) or error
    return re.sub(r"^[\w.]*(Error|Exception)\w*: ", "", line.strip())[:300]
