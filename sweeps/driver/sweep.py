"""Run (or ``--resume``) the sweep of a plan: Ray started, the parent run opened, the Tuner fitted with the MLflow
and progress callbacks, and the parent ended with its counts, best trial and report.

``SweepDriver`` is the one object that does it (and owns what it holds meanwhile); ``run_sweep`` is its entry point
and returns a ``SweepResult``, which the CLI prints."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from rirlab import contract
from rirlab.errors import UserError
from rirlab.redact import redact_all, redact_uri
from rirlab.sweeps.driver.cluster import check_address, check_resources, RayLog, ray_init
from rirlab.compat import ray as compat_ray
from rirlab.sweeps.driver.legacy import legacy_module_names
from rirlab.sweeps.driver.lock import sweep_lock
from rirlab.sweeps.record.faults import SweepFault, disk_full, store_fault, tune_folder_full
from rirlab.sweeps.driver.signals import (SweepInterrupted, close_startup_window, keep_sigterm_handler, shielded,
                                   raise_if_interrupted, startup_window, stop_on_sigterm_like_ctrl_c)
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record.store import raw
from rirlab.sweeps.record.tracker import Tracker

OUTPUT_ROOT = "rirlab_runs"


def new_tune_path(output_root: str, name: str, spec_hash: str) -> str:
    """A fresh Ray Tune folder per sweep: the time and a random suffix, so two sweeps of one spec started in the
    same second each keep their own state (and each can be resumed)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return str(Path(output_root).resolve() / f"{name}-{spec_hash}-{stamp}-{secrets.token_hex(3)}")


def _no_parent_message(tracker: Tracker, exp_id: Optional[str], plan: SweepPlan, uri: str,
                       flag: str = "--resume", group: Optional[str] = None) -> str:
    """Why --resume (or ``flag``) finds nothing: no sweep of this spec at all, or one of an earlier version of the
    spec; for a one-trial job (--trial), no job of that trial (in that group)."""
    same = tracker.client.search_runs([exp_id], filter_string=contract.parent_filter(plan.hash),
                                      max_results=1) if exp_id else []
    if same and plan.trial_index is not None:  # sweeps of this spec, none of this trial (in this group)
        of = f"--trial {plan.trial_index}" + (f" --group {group}" if group else "")
        return (f"{flag}: no earlier job of {of} of {plan.loaded.path} (spec hash {plan.hash}) in {uri}; run it "
                f"without {flag} first (same --quick/--set flags)")
    if same:  # only one-trial jobs of this spec (find_parent passes them over)
        tags = same[0].data.tags
        return (f"{flag}: the sweeps of {plan.loaded.path} (spec hash {plan.hash}) in {uri} ran one trial per job; "
                f"give the job's own --trial and --group (the latest: --trial {tags.get(contract.TRIAL_INDEX)} "
                f"--group {tags.get(contract.SWEEP_GROUP)})")
    last = None
    if exp_id:
        runs = tracker.client.search_runs([exp_id], filter_string=contract.parent_filter(),
                                          order_by=["attributes.start_time DESC"], max_results=1)
        last = runs[0] if runs else None
    if last is None:
        return (f"{flag}: no earlier sweep of {plan.loaded.path} (spec hash {plan.hash}) in {uri}; run it without "
                f"{flag} first (same --quick/--set flags)")
    tags = last.data.tags
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last.info.start_time / 1000))
    flags = (" --quick" if tags.get(contract.QUICK) == "True" else "") + "".join(
        f" --set {shlex.quote(f'{k}={v}')}" for k, v in json.loads(tags.get(contract.OVERRIDES) or "{}").items())
    what = "resume that sweep" if flag == "--resume" else "rerun that sweep's failed trials"
    return (f"{flag}: the spec changed since the last sweep of {plan.spec.name} (run {last.info.run_id}, "
            f"{when}, spec hash {tags.get(contract.SPEC_HASH)}; now {plan.hash}); to {what}, put back the "
            f"spec it ran (saved in that run's artifacts under {contract.SPEC_ARTIFACT_DIR}/) and use its flags"
            f"{flags or ' (none)'}; to start a new sweep of this spec, leave out {flag}")


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """How a sweep that ran to its end (or to a Ctrl-C Ray Tune took gracefully) ended: what the CLI prints and
    picks its exit code from. ``evaluated`` is None where no evaluation-only cell was run (the sweep has none, or it
    was interrupted first): the done line then says nothing of them."""

    parent_run_id: str
    finished: int = 0
    stopped_early: int = 0  # ended by ASHA or a time limit: neither finished nor failed, not counted in tables
    failed: int = 0
    errors: int = 0  # Tune's own count of trials that ended in an error
    interrupted: bool = False  # Ctrl-C or SIGTERM stopped it: --resume continues it
    stopped: int = 0  # running trials the interruption stopped
    evaluated: Optional[int] = None
    eval_failed: int = 0
    eval_waiting: int = 0  # evaluation-only cells whose source trial did not finish
    damaged: tuple = ()  # the checkpoint files trials stopped on, unreadable (--resume --restart-damaged trains them)

    @property
    def trained_nothing(self) -> bool:
        """No trial finished (or stopped early) and no evaluation-only cell was evaluated: the CLI exits 1."""
        return self.finished + self.stopped_early == 0 and not self.evaluated

    def done_line(self) -> str:
        """The line the CLI prints when the sweep ended."""
        evaluated = ""
        if self.evaluated is not None:
            evaluated = (f"; evaluation-only cells: {self.evaluated} evaluated"
                         + (f", {self.eval_failed} failed" if self.eval_failed else "")
                         + (f", {self.eval_waiting} without a finished trial" if self.eval_waiting else ""))
        early = f"{self.stopped_early} stopped early (not counted), " if self.stopped_early else ""
        return (f"done: {self.finished} finished, {early}{self.failed} failed{evaluated}; parent run "
                f"{self.parent_run_id}")


def run_sweep(plan: SweepPlan, tracking_uri: str, address: Optional[str] = None, resume: bool = False,
              checkpoint_artifacts: bool = True, output_root: str = OUTPUT_ROOT, progress: str = "line",
              system_metrics: bool = False, report: Optional[Callable[[str, str], None]] = None,
              restart_damaged: Optional[str] = None, rerun_failed: bool = False,
              group: Optional[str] = None) -> SweepResult:
    """Run (or --resume, or --rerun-failed) the sweep (``SweepDriver.run``); returns its ``SweepResult``. A plan of
    one trial (``SweepPlan.one_trial``) runs as that trial's job of ``group``."""
    return SweepDriver(plan, tracking_uri, address=address, resume=resume, checkpoint_artifacts=checkpoint_artifacts,
                       output_root=output_root, progress=progress, system_metrics=system_metrics,
                       report=report, restart_damaged=restart_damaged, rerun_failed=rerun_failed, group=group).run()


class SweepDriver:
    """One sweep from start to end: refusals before anything starts, Ray, the parent run, the Tuner fitted with the
    MLflow and progress callbacks, and the parent ended with its counts, best trial and report.

    It holds what the steps share (the plan, the store, the experiment, the parent run, the Tune folder, whether
    Tune's state is restored, the options) and what it owns while it runs: the sweep's lock (``held``), Ray's
    driver log (``ray_log``) and, while Tune builds, restores and runs the experiment, the live callbacks that Tune's
    pickled ones load back as (``rirlab.sweeps.record.callback.bound``: a context variable set for the time of the
    fit, which is how a ``--resume`` gets this driver's MLflow client and progress line back from tuner.pkl).

    Ctrl-C or SIGTERM once the parent run exists raises SweepInterrupted (before it, KeyboardInterrupt: nothing to
    resume). ``report(uri, parent_id)`` attaches the finished sweep's report (the CLI passes analysis's table and
    plot); a failure there is a warning. Until Ray Tune runs, no Ctrl-C or SIGTERM can be lost
    (``signals.startup_window``). A machine's fault (a full disk, a store locked too long) raises SweepFault.

    ``rerun_failed``: the last sweep's unfinished trials trained again from scratch in a Tune folder of their own,
    under the same parent run (``rirlab.sweeps.driver.rerun`` says why); NothingToRerun where there is none.

    A plan of one trial of a grid (``--trial I``, ``plan.trial_index``) is one job of ``group``: a parent run of its
    own, tagged with the index and the group, which --resume (a requeued array task) finds by both. The jobs of a
    group never write to one shared run: N jobs racing to find-or-create one parent would need a lock the store
    does not give (sqlite's file lock does not reach across machines; a server has none), and their Tune folders,
    end states and best trials are each their own anyway. The readers put them together instead
    (``rirlab.analysis.runs``: a group's parents are one sweep), which needs no coordination at all."""

    def __init__(self, plan: SweepPlan, tracking_uri: str, address: Optional[str] = None, resume: bool = False,
                 checkpoint_artifacts: bool = True, output_root: str = OUTPUT_ROOT, progress: str = "line",
                 system_metrics: bool = False, report: Optional[Callable[[str, str], None]] = None,
                 restart_damaged: Optional[str] = None, rerun_failed: bool = False, group: Optional[str] = None):
        self.plan, self.tracking_uri, self.address, self.resume = plan, tracking_uri, address, resume
        self.group = group  # --trial: the group of one-trial jobs this one belongs to
        self.restart_damaged = restart_damaged  # --restart-damaged: where a trial with a damaged checkpoint restarts
        self.rerun_failed, self.reruns = rerun_failed, []  # --rerun-failed: the trials it trains again
        self.checkpoint_artifacts, self.output_root = checkpoint_artifacts, output_root
        self.progress_mode, self.system_metrics, self.report = progress, system_metrics, report
        self.tracker: Optional[Tracker] = None
        self.exp_id: Optional[str] = None
        self.earlier = None  # --resume: the parent run of the sweep it continues
        self.parent_id: Optional[str] = None  # the parent run, once it exists
        self.tune_path = ""
        self.restore = False  # Tune's state of the sweep is restored (--resume, and Tune had saved it)
        self.ray_log = RayLog()

    # ---- start to end
    def run(self) -> SweepResult:
        with startup_window(), contextlib.ExitStack() as held:  # held: the sweep's lock (one driver per sweep)
            self._refuse_early()
            held.callback(self.tracker.end_write_ahead)  # the rollback journal back, however the sweep ends
            self._take_tune_folder(held)
            self._start_ray()
            try:
                self._open_parent()
                return self._fit()
            except BaseException as err:
                self._fail(err)
                raise  # (_fail raises)

    def _refuse_early(self) -> None:
        """Everything refused before Ray starts or MLflow is written: a bad address, the user's input, a --resume
        with nothing to continue, an evaluation-only row with no trained weights."""
        raise_if_interrupted()
        check_address(self.address)
        _preflight(self.plan, local=self.address in (None, "local"))  # e.g. a GloVe file a text task needs:
        # missing, refused before Ray starts or MLflow is written
        compat_ray.tune_environment()  # Ray Tune's settings by environment variable (version-dependent names)
        plan = self.plan
        self.tracker = tracker = Tracker(self.tracking_uri)
        self.exp_id = tracker.experiment_id(plan.spec.name, create=False)
        again = self.resume or self.rerun_failed
        self.earlier = tracker.find_parent(self.exp_id, plan.hash, plan.trial_index, self.group) \
            if again and self.exp_id else None
        if again and self.earlier is None:
            raise UserError(_no_parent_message(tracker, self.exp_id, plan, self.tracking_uri,
                                               "--resume" if self.resume else "--rerun-failed", self.group))
        if self.rerun_failed:
            from rirlab.sweeps.driver import rerun

            rerun.check_parent(self.earlier)
            self.reruns = rerun.failed_trials(tracker, self.exp_id, self.earlier, plan)  # (or NothingToRerun)
        if plan.evaluations:  # rows it evaluates but does not train: trained before, or refused
            from rirlab.sweeps.driver.evaluations import missing_sources

            missing = missing_sources(plan, tracker)
            if missing:
                ev = missing[0]
                raise UserError(f"variant '{ev.record.variant}' evaluates the weights of trial {ev.source.name}, "
                                f"which this sweep does not train and no finished run in {tracker.uri} was trained "
                                f"like; train it in this sweep too (--set "
                                f"{shlex.quote(f'variant=[{ev.source.variant},{ev.record.variant}]')})")

    def _take_tune_folder(self, held: contextlib.ExitStack) -> None:
        """The sweep's Tune folder (a new one, or the one --resume continues) and its lock, kept until this driver
        ends: a second driver of the sweep is refused."""
        from ray import tune

        if self.rerun_failed:  # the sweep's current folder locked too: no --resume of it meanwhile
            current = self.earlier.data.tags.get(contract.TUNE_PATH, "")
            if current and Path(current).is_dir():
                held.enter_context(sweep_lock(current, self.earlier.info.run_id))
        if self.earlier is None or self.rerun_failed:
            self.tune_path = new_tune_path(self.output_root, self.plan.spec.name, self.plan.hash)
            held.enter_context(sweep_lock(self.tune_path))  # kept until this driver ends: a --resume meanwhile is
            # refused
            return
        parent_id = self.earlier.info.run_id
        self.tune_path = tune_path = self.earlier.data.tags.get(contract.TUNE_PATH, "")
        restore = bool(tune_path) and tune.Tuner.can_restore(tune_path)
        if not restore and self.plan.n_trials and self.tracker.children(self.exp_id, parent_id):
            again = "rerun its failed trials with --rerun-failed" if self.earlier.data.tags.get(contract.RERUNS) \
                else "start the sweep again without --resume"  # (a rerun stopped before Tune saved its state)
            raise UserError(f"--resume: the Ray Tune state of run {parent_id} ({tune_path or 'unknown'}) is "
                            f"gone; {again}")
        held.enter_context(sweep_lock(tune_path, parent_id))  # a second driver of it: refused here
        self.restore = bool(tune_path) and tune.Tuner.can_restore(tune_path)  # (saved meanwhile by a driver now
        # ended)

    def _start_ray(self) -> None:
        """Ray started (or joined) and what needs it checked, before MLflow is written; a fresh sweep stopped here
        leaves no folder behind."""
        try:
            if self.earlier is None:  # an Optuna storage that cannot serve: refused before Ray starts or MLflow is
                # written (it needs neither)
                from rirlab.sweeps.tune.search import check_storage

                check_storage(self.plan, raw(self.tracking_uri), self.tune_path)
            with keep_sigterm_handler():  # Ray's would exit at once (status 15), leaving no line and no cleanup
                ray_init(self.address, Path(self.tune_path), self.tracking_uri, ray_log=self.ray_log)  # a wrong
                # --address or a Ray that does not start fails here, before MLflow is written
            stop_on_sigterm_like_ctrl_c()
            raise_if_interrupted()  # a Ctrl-C or SIGTERM during ray.init: stop before anything is recorded
            check_resources(self.plan.spec, self.address)  # a trial no node can hold: refused before MLflow is
            # written
        except BaseException:
            if self.earlier is None or self.rerun_failed:  # nothing ran: leave no sweep folder behind
                self._discard()
            raise

    def _open_parent(self) -> None:
        """The parent run: reopened (--resume; no Tune state and no trial yet: the sweep starts afresh under the
        same run), or started."""
        tracker, plan = self.tracker, self.plan
        # a SQLite store on a local filesystem, written from this machine only: SQLite's write-ahead log meanwhile
        journal = tracker.write_ahead(other_machines=self.system_metrics and self.address not in (None, "local"))
        if journal:
            print(journal, flush=True)
        if self.earlier is not None:
            self.parent_id = self.earlier.info.run_id
            tracker.reopen(self.parent_id)
            if self.rerun_failed:
                from rirlab.sweeps.driver import rerun

                print(rerun.describe(self.reruns, self.parent_id), flush=True)
                rerun.start(tracker, self.earlier, self.tune_path, self.reruns)
            return
        self.exp_id = tracker.experiment_id(plan.spec.name)
        started = time.time()
        try:
            with shielded():  # a Ctrl-C meanwhile is raised once the parent is written, its id known
                self.parent_id = _start_parent(tracker, self.exp_id, plan, self.tune_path,
                                               time.strftime("%Y%m%d-%H%M%S"), self.group)
        except BaseException:
            # Ctrl-C (or an error) while the parent was being written: the run may exist before its id reached
            # us; found by its spec hash, start time and Tune folder, it is ended like any other (and --resume
            # continues it)
            self.parent_id = _parent_started_since(tracker, self.exp_id, plan.hash, started, self.tune_path)
            raise

    def _fail(self, err: BaseException) -> None:
        """Whatever stopped the driver once the parent run may exist: raised again, as the line the CLI prints. A
        full disk or a store locked too long: SweepFault (the parent, where it exists, KILLED); nothing recorded:
        the error itself (a fresh sweep leaves no folder); else the parent is marked KILLED (a second Ctrl-C must
        not cut that in two) and a Ctrl-C is raised as SweepInterrupted."""
        tracker, parent_id = self.tracker, self.parent_id
        # the machine's fault in the driver's own writes (the store's disk full, its lock held past the wait)
        fault = None if isinstance(err, SweepFault) else store_fault(tracker.uri, err)
        if fault is not None and disk_full(err) and tune_folder_full(self.tune_path):  # Tune's own writes failed
            if parent_id is not None:
                with contextlib.suppress(Exception):
                    self._mark_killed()
            raise SweepFault(tune_folder_full(self.tune_path), parent_id) from None
        if parent_id is None:  # nothing recorded (the CLI says so): a fresh sweep leaves no folder either
            if self.earlier is None:
                self._discard()
            if fault is not None:
                raise fault from None
            raise err
        if isinstance(err, SweepFault):
            raise err
        if fault is not None and not fault.store_answers:  # a server that stopped answering: not asked again
            fault.parent_id = parent_id
            raise fault from None
        # whatever stops the driver (Ctrl-C before Tune took over, an error) leaves no parent run RUNNING
        try:
            self._mark_killed()
        except Exception as mark_err:  # noqa: BLE001
            fault = fault or store_fault(tracker.uri, mark_err)
            if fault is None:
                raise
        if fault is not None:
            fault.parent_id = parent_id
            raise fault from None
        if isinstance(err, KeyboardInterrupt) and not isinstance(err, SweepInterrupted):
            raise SweepInterrupted(parent_id) from None
        raise err

    def _discard(self) -> None:
        """A fresh sweep stopped before anything was recorded: Ray stopped, its Tune folder (and the output root,
        when this sweep made it and it is empty) removed."""
        import shutil

        import ray

        try:  # a second Ctrl-C (or a Ray that failed half-way) must not keep the folder
            with contextlib.suppress(Exception):
                ray.shutdown()
        finally:
            self.ray_log.detach()
            shutil.rmtree(self.tune_path, ignore_errors=True)
            with contextlib.suppress(OSError):
                Path(self.tune_path).parent.rmdir()

    # ---- the fit
    def _fit(self) -> SweepResult:
        import ray

        from rirlab.sweeps.driver.progress import ProgressCallback
        from rirlab.sweeps.record.callback import MLflowTrialCallback, log_flush_s
        from rirlab.sweeps.tune.search import study_before
        from rirlab.sweeps.tune.tuner import keep_secrets_out_of_tune

        plan, spec, tracker, parent_id = self.plan, self.plan.spec, self.tracker, self.parent_id
        raise_if_interrupted()
        keep_secrets_out_of_tune()
        tracker.set_tags(parent_id, {contract.CLUSTER_RESOURCES: json.dumps(ray.cluster_resources(), sort_keys=True)})
        best_recorded = self.restore and any(k.startswith(contract.BEST_PREFIX)
                                             for k in tracker.client.get_run(parent_id).data.metrics)
        train_fn = self._trainable()
        link = plan.algorithm.run_linker()  # optuna: each run names its Optuna trial, and the Optuna trial its runs
        from rirlab.sweeps.driver import rerun

        reruns = rerun.load(self.tune_path)  # a --rerun-failed folder (a fresh one, or one --resume continues)
        mlflow_cb = MLflowTrialCallback(tracker, self.exp_id, parent_id, plan,
                                        checkpoint_artifacts=self.checkpoint_artifacts, tune_path=self.tune_path,
                                        link=None if reruns is not None else link, shield=shielded, reruns=reruns,
                                        flush_every_s=log_flush_s())
        progress = ProgressCallback(spec.name, plan.n_trials, spec.metrics, spec.modes, plan.space,
                                    trials=self.progress_mode == "trials")
        progress.seed(mlflow_cb.existing.values())
        if not self.restore and reruns is None:  # a continued Optuna study says how many trials it held before (its
            # own, after a --resume; a rerun asks no study)
            progress.study = study_before(spec, raw(tracker.uri))
        errors = self._run_tune(train_fn, mlflow_cb, progress)
        progress.close()
        trials = mlflow_cb.counts()
        running = [k for k, st in mlflow_cb.state.items() if st == "running"]
        result = SweepResult(
            parent_run_id=parent_id, finished=trials.finished, stopped_early=trials.stopped_early,
            failed=trials.failed, errors=errors,
            interrupted=bool(running) or trials.finished + trials.stopped_early + trials.failed < plan.n_trials,
            stopped=len(running),  # stopped: running trials that the interruption stopped (the CLI says so)
            damaged=tuple(path for path, _ in mlflow_cb.damaged.values()))
        if mlflow_cb.fault is not None:  # a full disk stopped it (as Ctrl-C would): mark what the store still takes
            with contextlib.suppress(Exception):
                if mlflow_cb.mark_interrupted():
                    self._end_interrupted(result)
            mlflow_cb.fault.parent_id = parent_id
            raise mlflow_cb.fault
        if not result.interrupted and plan.evaluations:  # evaluation-only rows: once the trials they test finished
            from rirlab.sweeps.driver.evaluations import evaluation_banner, run_evaluations

            print(evaluation_banner(plan), flush=True)
            ev = run_evaluations(plan, tracker, self.exp_id, parent_id, lambda line: print(line, flush=True))
            result = dataclasses.replace(result, evaluated=ev.evaluated, eval_failed=ev.failed,
                                         eval_waiting=ev.waiting)
        tracker.set_tags(parent_id, {contract.TRIALS_FINISHED: str(result.finished),
                                     contract.TRIALS_FAILED: str(result.failed)})
        if reruns is not None and spec.algorithm == "optuna":  # what the rerun measured, told to the study
            told = rerun.tell_study(tracker, self.exp_id, parent_id, spec, raw(tracker.uri))
            if told:
                print(told, flush=True)
        if result.interrupted:
            # Ctrl-C (Ray Tune stops gracefully and saves its state): unfinished trials end KILLED in MLflow;
            # --resume reopens the same runs and continues each trial from its last checkpoint.
            mlflow_cb.mark_interrupted()
            self._end_interrupted(result)
        else:
            # a --resume of a finished sweep ends no trial: its best, recorded already, is not logged a second time
            self._finish(ended_now=bool(set(mlflow_cb.state) - mlflow_cb.ended) or not best_recorded)
        return result

    def _trainable(self):
        """The trial function with its resources and what it needs from the driver (the trials whose end MLflow
        holds, on --resume; the system-metrics monitor)."""
        from ray import tune

        from rirlab.sweeps.tune.trainable import trial_fn

        spec, tracker = self.plan.spec, self.tracker
        done = _recorded_ends(tracker, self.exp_id, self.parent_id) if self.restore else {}
        monitor = None
        if self.system_metrics:
            monitor = {"uri": raw(tracker.uri), "exp_id": self.exp_id, "parent_id": self.parent_id,
                       "interval": float(os.environ.get("RIRLAB_SYSTEM_METRICS_INTERVAL_S", "10"))}
        trainable = tune.with_parameters(trial_fn, space=self.plan.space, checkpoint_every=spec.checkpoint_every,
                                         driver_cwd=os.getcwd(), done=done, monitor=monitor,
                                         restart_damaged=self.restart_damaged)
        return tune.with_resources(trainable, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})

    def _run_tune(self, train_fn, mlflow_cb, progress) -> int:
        """Ray Tune's run of the trials (a new Tuner, or the restored one on --resume); returns Tune's count of
        trials that ended in an error."""
        from ray import tune

        from rirlab.sweeps.driver.checkpoints import CheckpointRestorer
        from rirlab.sweeps.record.callback import bound
        from rirlab.sweeps.tune.tuner import new_tuner

        plan, tune_path = self.plan, self.tune_path
        try:
            if plan.n_trials == 0:  # evaluation-only rows alone (their trials trained by earlier sweeps): no Tune
                # experiment
                close_startup_window()
                raise_if_interrupted()
                return 0
            # Tune saves its callbacks with the experiment (pickle; deep copies too): while bound, they load back
            # as these live ones, in a fresh Tuner and in a restored one alike (a state saved before the
            # checkpoint restorer existed lists two: it restores without it)
            # a sweep recorded before the sweep side moved into the rirlab package names its pickled classes
            # sweeps.*: reachable while its Tune state is read (restore, then the searcher's state inside fit)
            with bound(mlflow_cb, progress, CheckpointRestorer(stream=progress.stream)) as callbacks, \
                    (legacy_module_names() if self.restore else contextlib.nullcontext()):
                if self.restore:
                    # the space again: Tune does not keep it, and where the driver died before Tune first saved its
                    # state (a full disk, a kill at startup) the restored run starts its searcher afresh on this space
                    if _damaged_tuner_state(tune_path):  # Tune's state stays readable: rebuilt from the plan
                        new_tuner(plan, train_fn, tune_path, callbacks, tracking_uri=raw(self.tracker.uri),
                                  points=_rerun_points(tune_path))
                    tuner = tune.Tuner.restore(tune_path, trainable=train_fn, param_space=plan.param_space(),
                                               resume_unfinished=True, resume_errored=True)
                else:
                    tuner = new_tuner(plan, train_fn, tune_path, callbacks, tracking_uri=raw(self.tracker.uri),
                                      points=_rerun_points(tune_path))
                close_startup_window()  # Tune's own SIGINT handler takes over inside fit
                raise_if_interrupted()
                with compat_ray.state_saved_on_its_period():  # not after every trial checkpoint: O(N^2) bytes
                    grid = tuner.fit()
            return len(grid.errors)
        except KeyboardInterrupt:  # a second Ctrl-C: Ray gives up waiting
            return 0
        except Exception:
            # after a full disk stopped the sweep, Tune itself may fail on what it half wrote there (building its
            # results it unpickles each failed trial's error file: "pickle data was truncated"): the fault's line
            if mlflow_cb.fault is None:
                why = tune_folder_full(tune_path)
                if why is None:
                    raise
                mlflow_cb.fault = SweepFault(why)
            return 0

    def _end_interrupted(self, result: SweepResult) -> None:
        self._mark_killed({contract.TRIALS_FINISHED: str(result.finished), contract.TRIALS_FAILED: str(result.failed)})

    def _mark_killed(self, tags: Optional[dict] = None) -> None:
        """The parent run marked interrupted (with ``tags``) and ended KILLED: --resume continues it. A second
        Ctrl-C must not cut the marking in two (it is recorded, not raised)."""
        with shielded(raise_at_end=False):
            self.tracker.set_tags(self.parent_id, {**(tags or {}), contract.INTERRUPTED: contract.TRUE})
            self.tracker.finish(self.parent_id, "KILLED")

    def _finish(self, ended_now: bool) -> None:
        """The sweep ended: its best trial recorded on the parent (where a trial ended now), the parent FINISHED,
        then its report attached. The trials are recorded already: a failure here is a warning."""
        from rirlab.sweeps.record import artifacts

        tracker, parent_id, spec = self.tracker, self.parent_id, self.plan.spec

        def warn(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

        try:  # every trial is recorded already: a summary that cannot be written costs only the summary
            if ended_now:
                artifacts.record_best(tracker.client, self.exp_id, parent_id, spec.metrics, spec.modes)
        except Exception as err:  # noqa: BLE001
            warn(f"warning: the best trial could not be recorded on the parent run ({type(err).__name__}: {err})"
                 .splitlines()[0])
        tracker.finish(parent_id, "FINISHED")  # before the report, whose footer shows the parent's status
        if self.report is not None:
            try:  # the sweep itself succeeded: its report is a convenience
                self.report(tracker.uri, parent_id)
            except Exception as err:  # noqa: BLE001
                why = str(err).splitlines()[0] if str(err) else ""
                warn(f"warning: the sweep finished but its table/plot could not be attached to the parent run "
                     f"({type(err).__name__}: {why}); run rirlab tables instead")


def _preflight(plan: SweepPlan, local: bool = True) -> None:
    """Each task's checks of the user's input (``Task.preflight_all``) over the distinct task configs of the trials
    a real sweep will run, before any trial: e.g. a GloVe file missing, of another dimension than its name says,
    with a bad line of a wanted word, or with no word of the vocabulary (read once here for all the trials); on a
    local Ray, every data cache folder the trials write takes a file."""
    from rirlab.tasks import cache
    from rirlab.tasks import registry as tasks

    if local:
        for root in {tasks.get(r.task).cache_dir(r.task_cfg) for r in plan.resolved}:
            cache.check_writable(root)

    configs: dict[str, dict] = {}
    for resolved in plan.resolved:
        configs.setdefault(resolved.task, {}).setdefault(repr(resolved.task_cfg), resolved.task_cfg)
    for task, cfgs in configs.items():
        tasks.get(task).preflight_all(list(cfgs.values()))
        raise_if_interrupted()  # a Ctrl-C during a long read (a 5.6 GB GloVe file): stop before Ray starts


def _parent_started_since(tracker: Tracker, exp_id: str, spec_hash: str, since: float,
                          tune_path: Optional[str] = None) -> Optional[str]:
    """The RUNNING parent run of this spec hash that this driver started at or after ``since`` (seconds), if any;
    with ``tune_path``, the one of this driver's Tune folder (the jobs of a --trial group start parents of one
    spec hash at the same time: the latest may be another job's)."""
    runs = tracker.client.search_runs([exp_id], filter_string=contract.parent_filter(spec_hash),
                                      order_by=["attributes.start_time DESC"], max_results=1 if not tune_path else 1000)
    if tune_path:
        runs = [r for r in runs if r.data.tags.get(contract.TUNE_PATH) == tune_path][:1]
    if runs and runs[0].info.status == "RUNNING" and runs[0].info.start_time >= int(since * 1000) - 1000:
        return runs[0].info.run_id
    return None


def _start_parent(tracker: Tracker, exp_id: str, plan: SweepPlan, tune_path: str, stamp: str,
                  group: Optional[str] = None) -> str:
    spec, loaded = plan.spec, plan.loaded
    tags = {contract.SPEC_HASH: plan.hash, contract.SPEC_PATH: str(loaded.path), contract.QUICK: str(loaded.quick),
            contract.TUNE_PATH: tune_path, contract.SWEPT_KEYS: json.dumps(plan.swept_keys),
            contract.ALGORITHM: spec.algorithm, contract.METRIC: ",".join(spec.metrics),
            contract.SEEDS: str(len(spec.seed_list)),
            contract.OVERRIDES: json.dumps(redact_all(loaded.overrides), default=str)}
    if plan.splits is not None:
        tags[contract.SPLITS] = contract.encode_splits(plan.splits)
    if plan.warm is not None:  # (a source, not part of the spec: the hash stays the spec's)
        tags[contract.WARM_START] = plan.warm.tag()
    name = f"{spec.name} {stamp}"
    if plan.trial_index is not None:  # one job of a group (--trial): the readers put the group's parents together
        tags.update({contract.TRIAL_INDEX: str(plan.trial_index), contract.SWEEP_GROUP: group or "",
                     contract.GRID_TRIALS: str(plan.grid_trials)})
        name = f"{spec.name} {group} trial {plan.trial_index}"
    parent_id = tracker.start_parent(exp_id, name, tags)
    # a password in a URL (optuna.storage) is recorded masked: in the spec's text, the effective spec, the params
    tracker.client.log_text(parent_id, redact_uri(loaded.text), f"{contract.SPEC_ARTIFACT_DIR}/{loaded.path.name}")
    effective = redact_all(spec.model_dump(mode="json"))
    tracker.client.log_text(parent_id, json.dumps(effective, indent=2), contract.EFFECTIVE_SPEC_ARTIFACT)
    from rirlab.sweeps.record import artifacts

    artifacts.record_spec(tracker.client, exp_id, parent_id, effective)
    return parent_id


def _rerun_points(tune_path: str) -> Optional[list[dict]]:
    """The Tune configs a --rerun-failed folder trains (None for a sweep's own folder)."""
    from rirlab.sweeps.driver import rerun

    reruns = rerun.load(tune_path)
    return None if reruns is None else [r.point() for r in reruns]


def _damaged_tuner_state(tune_path: str) -> bool:
    """Whether the sweep's ``tuner.pkl`` (Tune's settings, not its trials' states) cannot be read (a truncated
    write, a full disk): ``--resume`` then writes it again from the spec, with a warning naming it."""
    import pickle

    path = Path(tune_path) / "tuner.pkl"
    try:
        pickle.loads(path.read_bytes())
        return False
    except Exception as err:  # noqa: BLE001 - a damaged pickle raises almost anything
        print(f"warning: Ray Tune's {path} is damaged ({type(err).__name__}); written again from the spec, the "
              f"trials' own states kept", file=sys.stderr, flush=True)
        return True


def _recorded_ends(tracker: Tracker, exp_id: str, parent_id: str) -> dict:
    """Trials whose end MLflow holds (run FINISHED or FAILED, or its final result logged): trial key -> the
    result that ends them again."""
    done = {}
    for run in tracker.children(exp_id, parent_id):
        key = run.data.tags.get(contract.TRIAL_KEY)
        final = run.info.status != "FAILED" and run.data.tags.get(contract.FINAL_LOGGED) == contract.TRUE
        if not key or (run.info.status not in ("FINISHED", "FAILED") and not final):
            continue
        if run.info.status == "FAILED" and run.data.tags.get(contract.DAMAGED_CHECKPOINT):
            continue  # stopped on a damaged checkpoint: Tune resumes it (errored), the trial decides (the flag)
        if run.info.status == "FAILED":
            done[key] = {contract.FAILURE_RESULT: run.data.tags.get(contract.FAILURE_REASON, "failed")}
            continue
        steps = [m.step for m in tracker.client.get_metric_history(run.info.run_id, contract.TRAIN_LOSS)]
        done[key] = {**run.data.metrics, contract.STEP: max(steps, default=0),
                     contract.FINAL: run.data.tags.get(contract.EARLY_STOPPED) != contract.TRUE}
    return done


