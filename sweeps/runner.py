"""Build and run the Ray Tune experiment of a validated spec, recording it in MLflow from the driver."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from rirlab.config import TrainConfig, resolve
from rirlab.errors import UserError
from sweeps import schema
from sweeps.spec import LoadedSpec
from sweeps.space import _search_alg, param_space, pruning_scheduler
from sweeps.specfile import Spec, TrialSpace, base_config, expand, grid_points, swept_keys
from sweeps.tracking import Tracker

OUTPUT_ROOT = "rirlab_runs"


def _scheduler(loaded: LoadedSpec):
    spec = loaded.spec
    if spec.scheduler.type != "asha":
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr=schema.STEP, max_t=asha_max_t(base_config(spec)), grace_period=spec.scheduler.grace_period,
                         reduction_factor=spec.scheduler.reduction_factor)


def asha_max_t(base: dict) -> int:
    """ASHA's step cap: ``steps``, or with ``epochs`` set (which overrides steps) an upper bound of
    epochs x batches per epoch, so ASHA never cuts a trial the recipe would still train."""
    if base.get("epochs") is None:
        return int(base.get("steps", TrainConfig().steps))  # budget.steps is folded in there
    n_train = base.get("n_train")
    if n_train is None:  # the task's default, when the task has a training-set size
        n_train = getattr(resolve(base).task_cfg, "n_train", None)
    batch = int(base.get("batch_size", TrainConfig().batch_size))
    return int(base["epochs"]) * -(-int(n_train) // batch) if n_train else 10**9


def _ray_init(address: Optional[str], log_dir: Path, tracking_uri: Optional[str] = None) -> None:
    import ray

    if address not in (None, "local"):
        _check_reachable(address)
    log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_dir / "ray_driver.log")
    _log_ray_to(handler)
    if ray.is_initialized():
        return
    from sweeps.tracking import worker_env

    kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address in (None, "local"):
        # no --address: always a fresh local Ray sized to this machine, never an unrelated `ray start` cluster;
        # workers get the same environment as on a cluster ($RIRLAB_CACHE made absolute: trials run in their own
        # directories)
        ray.init(address="local", runtime_env={"env_vars": worker_env(tracking_uri)}, **kwargs)
        _log_ray_to(handler)
        return
    # a running cluster (ray start, `ray up`, KubeRay, Slurm): workers need only the Python environment; the
    # trial code travels as py_modules (this checkout's rirlab and sweeps, so every node runs the driver's
    # version) with the top-level packages of $RIRLAB_PLUGINS, MLflow's URI and credentials as env_vars (the
    # trial configs themselves travel with the trials)
    import importlib

    import rirlab
    import sweeps

    plugins = {m.strip().split(".")[0] for m in os.environ.get("RIRLAB_PLUGINS", "").split(",") if m.strip()}
    modules = [rirlab, sweeps] + [importlib.import_module(p) for p in sorted(plugins - {"rirlab", "sweeps"})]
    runtime_env = {"py_modules": modules, "excludes": ["__pycache__", "*.pyc"], "env_vars": worker_env(tracking_uri)}
    try:
        ray.init(address=address, runtime_env=runtime_env, **kwargs)
        _log_ray_to(handler)
    except (ConnectionError, ValueError, RuntimeError) as err:  # not a Ray head there, or a token that is not
        # the cluster's (token authentication)
        why = (str(err).splitlines() or [type(err).__name__])[0]
        raise UserError(f"cannot join the Ray cluster at {address} ({why}); check the address "
                        f"and give this process the cluster's token: RAY_AUTH_MODE=token with RAY_AUTH_TOKEN or "
                        f"RAY_AUTH_TOKEN_PATH (see cluster/README.md)") from None


def _log_ray_to(handler: logging.Handler) -> None:
    """Ray's driver-side logging goes to the sweep's ray_driver.log, never to the terminal. (Called again after
    ray.init: with configure_logging=False it empties the "ray" logger's handlers, and a warning it logs then,
    such as the token-authentication notice, would reach stderr through Python's last-resort handler.)"""
    for name in ("ray", "ray._private", "ray.tune", "ray.train", "ray.data"):
        lg = logging.getLogger(name)
        lg.handlers = [handler]
        lg.propagate = False
        lg.setLevel(logging.INFO)


_ADDRESS = re.compile(r"^(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-]*):(\d{1,5})$")


def check_address(address: Optional[str]) -> None:
    """--address is local, auto, HOST:PORT or ray://HOST:PORT (checked before anything starts)."""
    if address in (None, "local", "auto") or _ADDRESS.match(address):
        return
    raise UserError(f"--address {address!r} is not a Ray address; give HOST:PORT of the head's GCS (e.g. "
                    f"10.0.0.5:6379), ray://HOST:10001 for Ray Client, auto for the cluster this machine belongs to, "
                    f"or leave it out for a local Ray")


def _check_reachable(address: str) -> None:
    """HOST:PORT or ray://HOST:PORT must accept a TCP connection (Ray itself would wait for minutes)."""
    hostport = address.split("://", 1)[-1]
    if address == "auto" or ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except (OSError, ValueError) as err:
        raise UserError(f"--address {address}: nothing answers there ({err}); start the cluster (ray start --head) "
                        f"or fix the address (HOST:PORT of the head's GCS, e.g. 10.0.0.5:6379)") from None


def check_resources(spec: Spec, address: Optional[str]) -> None:
    """A trial must fit on one node (cpu and gpu of one placement-group bundle). On a local Ray nothing would
    ever run: refuse. On a cluster an autoscaler may still add a node that fits: say so at once, in one line."""
    import ray

    cpu, gpu = spec.resources.cpu, spec.resources.gpu
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(r.get("CPU", 0) >= cpu and r.get("GPU", 0) >= gpu for r in nodes):
        return
    biggest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    have = f"cpu {biggest.get('CPU', 0):g}, gpu {biggest.get('GPU', 0):g}"
    need = f"resources: {{cpu: {cpu:g}, gpu: {gpu:g}}}"
    if address in (None, "local"):
        raise UserError(f"{need} per trial does not fit this machine (Ray sees {have}); lower the spec's resources "
                        f"(gpu: 0 on a machine without a GPU) or run on a cluster with --address")
    print(f"warning: {need} per trial fits no node of the cluster at {address} (the largest has {have}); trials "
          f"stay pending until a node that fits joins (an autoscaler's); Ctrl-C to stop", file=sys.stderr, flush=True)


def new_tune_path(output_root: str, name: str, spec_hash: str) -> str:
    """A fresh Ray Tune folder per sweep: the time and a random suffix, so two sweeps of one spec started in the
    same second each keep their own state (and each can be resumed)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return str(Path(output_root).resolve() / f"{name}-{spec_hash}-{stamp}-{secrets.token_hex(3)}")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM after the sweep's parent run exists: ``--resume`` continues it."""

    def __init__(self, parent_id: str):
        super().__init__(parent_id)
        self.parent_id = parent_id


_TERMINATED: list[int] = []
_INTERRUPTED: list[int] = []


def terminated() -> bool:
    """Whether this driver was stopped by SIGTERM (exit 143 rather than Ctrl-C's 130)."""
    return bool(_TERMINATED)


def stop_on_sigterm_like_ctrl_c() -> None:
    """SIGTERM (what a scheduler or `kill` sends) stops the sweep the way Ctrl-C does: Ray Tune's own SIGINT
    handler stops the trials and saves its state, or outside Tune.fit a KeyboardInterrupt. (ray.init installs
    its own SIGTERM handler, which exits at once: call this again after it.) Ctrl-C outside Tune is also
    remembered: one that lands where Python drops the KeyboardInterrupt (a fork handler inside ray.init) is
    raised again by ``raise_if_interrupted``."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _on_term)
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_int):
        signal.signal(signal.SIGINT, _on_int)
    if sys.unraisablehook is not _unraisable:
        _unraisable.default = sys.unraisablehook
        sys.unraisablehook = _unraisable


def _unraisable(info) -> None:
    """A KeyboardInterrupt Python had to drop is raised again by ``raise_if_interrupted``: no traceback for it."""
    if not (info.exc_type is KeyboardInterrupt and _INTERRUPTED):
        _unraisable.default(info)


def _on_term(signum, frame):
    _TERMINATED.append(signum)
    signal.raise_signal(signal.SIGINT)


def _on_int(signum, frame):
    _INTERRUPTED.append(signum)
    raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    if _INTERRUPTED:
        raise KeyboardInterrupt


def _no_parent_message(tracker: Tracker, exp_id: Optional[str], loaded: LoadedSpec, uri: str) -> str:
    """Why --resume finds nothing: no sweep of this spec at all, or one of an earlier version of the spec."""
    last = None
    if exp_id:
        runs = tracker.client.search_runs([exp_id], filter_string=schema.parent_filter(),
                                          order_by=["attributes.start_time DESC"], max_results=1)
        last = runs[0] if runs else None
    if last is None:
        return (f"--resume: no earlier sweep of {loaded.path} (spec hash {loaded.hash}) in {uri}; run it without "
                f"--resume first (same --quick/--set flags)")
    tags = last.data.tags
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last.info.start_time / 1000))
    flags = (" --quick" if tags.get(schema.QUICK) == "True" else "") + "".join(
        f" --set {k}={v}" for k, v in json.loads(tags.get(schema.OVERRIDES) or "{}").items())
    return (f"--resume: the spec changed since the last sweep of {loaded.spec.name} (run {last.info.run_id}, "
            f"{when}, spec hash {tags.get(schema.SPEC_HASH)}; now {loaded.hash}); to resume that sweep, put back the "
            f"spec it ran (saved in that run's artifacts under {schema.SPEC_ARTIFACT_DIR}/) and use its flags"
            f"{flags or ' (none)'}; to start a new sweep of this spec, leave out --resume")


def run_sweep(loaded: LoadedSpec, tracking_uri: str, address: Optional[str] = None, resume: bool = False,
              checkpoint_artifacts: bool = True, output_root: str = OUTPUT_ROOT, progress: str = "line",
              system_metrics: bool = False) -> dict:
    """Run (or --resume) the sweep; returns counts of finished / failed trials. Ctrl-C or SIGTERM once the
    parent run exists raises SweepInterrupted (before it, KeyboardInterrupt: nothing to resume)."""
    stop_on_sigterm_like_ctrl_c()
    check_address(address)
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", "1")
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "5")  # snapshot Tune's state often: --resume needs it
    # CheckpointConfig(num_to_keep=1) makes Tune snapshot its state after every trial checkpoint (so the state
    # never names a deleted checkpoint: what --resume restores from) and warn when such snapshots come closer
    # than this many seconds apart. On this storage they are small local files: wanted, not a bottleneck.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    from ray import tune

    spec = loaded.spec
    tracker = Tracker(tracking_uri)
    exp_id = tracker.experiment_id(spec.name, create=False)
    parent = tracker.find_parent(exp_id, loaded.hash) if resume and exp_id else None
    if resume and parent is None:
        raise UserError(_no_parent_message(tracker, exp_id, loaded, tracking_uri))
    restore = False
    if parent is not None:
        tune_path = parent.data.tags.get(schema.TUNE_PATH, "")
        restore = bool(tune_path) and tune.Tuner.can_restore(tune_path)
        if not restore and tracker.children(exp_id, parent.info.run_id):
            raise UserError(f"--resume: the Ray Tune state of run {parent.info.run_id} ({tune_path or 'unknown'}) is "
                            f"gone; start the sweep again without --resume")
    else:
        tune_path = new_tune_path(output_root, spec.name, loaded.hash)
    _ray_init(address, Path(tune_path), tracking_uri)  # a wrong --address fails here, before MLflow is written
    stop_on_sigterm_like_ctrl_c()  # again: ray.init replaced it
    raise_if_interrupted()  # a Ctrl-C that ray.init swallowed: stop before anything is recorded
    try:
        check_resources(spec, address)  # a trial no node can hold: refused before MLflow is written
    except UserError:
        if parent is None:  # nothing ran: leave no sweep folder behind
            import shutil

            import ray

            ray.shutdown()
            shutil.rmtree(tune_path, ignore_errors=True)
            with contextlib.suppress(OSError):
                Path(tune_path).parent.rmdir()  # the output root, when this made it and it is empty
        raise
    if parent is not None:
        parent_id = parent.info.run_id
        tracker.reopen(parent_id)  # (no Tune state and no trial yet: the sweep starts afresh under the same run)
    else:
        exp_id = tracker.experiment_id(spec.name)
        parent_id = _start_parent(tracker, exp_id, loaded, tune_path, time.strftime("%Y%m%d-%H%M%S"))
    try:
        return _fit(loaded, tracker, exp_id, parent_id, tune_path, restore, checkpoint_artifacts, progress,
                    system_metrics)
    except BaseException as err:
        # whatever stops the driver (Ctrl-C before Tune took over, an error) leaves no parent run RUNNING
        tracker.set_tags(parent_id, {schema.INTERRUPTED: schema.TRUE})
        tracker.finish(parent_id, "KILLED")
        if isinstance(err, KeyboardInterrupt) and not isinstance(err, SweepInterrupted):
            raise SweepInterrupted(parent_id) from None
        raise


def _start_parent(tracker: Tracker, exp_id: str, loaded: LoadedSpec, tune_path: str, stamp: str) -> str:
    spec = loaded.spec
    tags = {schema.SPEC_HASH: loaded.hash, schema.SPEC_PATH: str(loaded.path), schema.QUICK: str(loaded.quick),
            schema.TUNE_PATH: tune_path, schema.SWEPT_KEYS: ",".join(swept_keys(spec)),
            schema.ALGORITHM: spec.algorithm, schema.METRIC: ",".join(spec.metrics),
            schema.SEEDS: str(len(spec.seed_list)), schema.OVERRIDES: json.dumps(loaded.overrides, default=str)}
    splits = task_splits(spec)
    if splits is not None:
        tags[schema.SPLITS] = schema.encode_splits(splits)
    parent_id = tracker.start_parent(exp_id, f"{spec.name} {stamp}", tags)
    tracker.client.log_text(parent_id, loaded.text, f"{schema.SPEC_ARTIFACT_DIR}/{loaded.path.name}")
    tracker.client.log_text(parent_id, json.dumps(spec.model_dump(mode="json"), indent=2), schema.EFFECTIVE_SPEC_ARTIFACT)
    from sweeps import artifacts

    artifacts.record_spec(tracker.client, exp_id, parent_id, spec.model_dump(mode="json"))
    return parent_id


def task_splits(spec: Spec):
    """The evaluation splits (split, paper label) of the sweep's task from the task registry, recorded on
    the parent so that analysis needs no registry; None when the trials do not share one task."""
    from rirlab.tasks import registry

    tasks = {t.config["task"] for t in expand(spec, sample_random=True)}  # set in every trial (load_spec checked)
    return list(registry.get(tasks.pop()).splits) if len(tasks) == 1 else None


def _new_tuner(loaded: LoadedSpec, train_fn, tune_path: str, callbacks: list, tracking_uri: Optional[str] = None):
    from ray import tune

    spec = loaded.spec
    # an Optuna study lives beside the MLflow store (sqlite) or in the sweep's folder, named after the sweep
    search_alg = _search_alg(spec, tracking_uri=tracking_uri, tune_path=tune_path)
    single = len(spec.metrics) == 1
    run_config = tune.RunConfig(
        name=Path(tune_path).name, storage_path=str(Path(tune_path).parent),
        failure_config=tune.FailureConfig(max_failures=spec.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        stop={"time_total_s": spec.budget.time_limit_s} if spec.budget.time_limit_s else None,
        callbacks=callbacks, verbose=0)
    return tune.Tuner(
        train_fn, param_space=param_space(spec),
        tune_config=tune.TuneConfig(
            metric=spec.metrics[0] if single and spec.algorithm != "optuna" else None,
            mode=spec.modes[0] if single and spec.algorithm != "optuna" else None,
            search_alg=search_alg, scheduler=_scheduler(loaded) or pruning_scheduler(search_alg),
            num_samples=len(grid_points(spec)) if spec.algorithm == "grid" else spec.num_samples,
            max_concurrent_trials=spec.max_concurrent if spec.algorithm != "grid" else None,  # grid: in _search_alg
            trial_dirname_creator=lambda t: f"trial_{t.trial_id}"),
        run_config=run_config)


def trial_fn(config: dict, space: TrialSpace = TrialSpace(), checkpoint_every: int = 0, driver_cwd: str = "",
             done: Optional[dict] = None, monitor: Optional[dict] = None) -> None:
    """The sweep's Ray Tune trainable: ``sweeps.trainable.trainable``, except for a trial whose end MLflow
    already holds (``done``: its final result, or its failure; a driver killed before Tune could save the
    trial's end restores it as unfinished): that trial reports its recorded end again and never trains."""
    from ray import tune

    from sweeps.trainable import trainable

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
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
    from mlflow.tracking import MlflowClient

    client = MlflowClient(monitor["uri"])
    flt = f"{schema.children_filter(monitor['parent_id'])} and tags.`{schema.TRIAL_KEY}` = '{trial_key}'"
    end = time.time() + 60  # the driver creates the run as the trial starts
    while time.time() < end:
        runs = client.search_runs([monitor["exp_id"]], filter_string=flt, max_results=1)
        if runs:
            sampler = SystemMetricsMonitor(runs[0].info.run_id, sampling_interval=monitor["interval"],
                                           resume_logging=True, tracking_uri=monitor["uri"])
            sampler.start()
            return sampler
        time.sleep(0.5)
    return None


def _recorded_ends(tracker: Tracker, exp_id: str, parent_id: str) -> dict:
    """Trials whose end MLflow holds (run FINISHED or FAILED, or its final result logged): trial key -> the
    result that ends them again."""
    from sweeps.artifacts import FINAL_LOGGED

    done = {}
    for run in tracker.children(exp_id, parent_id):
        key = run.data.tags.get(schema.TRIAL_KEY)
        final = run.info.status != "FAILED" and run.data.tags.get(FINAL_LOGGED) == schema.TRUE
        if not key or (run.info.status not in ("FINISHED", "FAILED") and not final):
            continue
        if run.info.status == "FAILED":
            done[key] = {schema.FAILURE_RESULT: run.data.tags.get(schema.FAILURE_REASON, "failed")}
            continue
        steps = [m.step for m in tracker.client.get_metric_history(run.info.run_id, schema.TRAIN_LOSS)]
        done[key] = {**run.data.metrics, schema.STEP: max(steps, default=0),
                     schema.FINAL: run.data.tags.get(schema.EARLY_STOPPED) != schema.TRUE}
    return done


def _fit(loaded: LoadedSpec, tracker: Tracker, exp_id: str, parent_id: str, tune_path: str, restore: bool,
         checkpoint_artifacts: bool, progress_mode: str = "line", system_metrics: bool = False) -> dict:
    from ray import tune

    from sweeps.callback import MLflowTrialCallback, ProgressCallback, bound

    spec = loaded.spec
    import ray

    raise_if_interrupted()
    tracker.set_tags(parent_id, {schema.CLUSTER_RESOURCES: json.dumps(ray.cluster_resources(), sort_keys=True)})
    space = TrialSpace.of(spec)
    resources = {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu}
    done = _recorded_ends(tracker, exp_id, parent_id) if restore else {}
    monitor = None
    if system_metrics:
        monitor = {"uri": str(getattr(tracker.uri, "raw", tracker.uri)), "exp_id": exp_id, "parent_id": parent_id,
                   "interval": float(os.environ.get("RIRLAB_SYSTEM_METRICS_INTERVAL_S", "10"))}
    trainable = tune.with_parameters(trial_fn, space=space, checkpoint_every=spec.checkpoint_every,
                                     driver_cwd=os.getcwd(), done=done, monitor=monitor)
    train_fn = tune.with_resources(trainable, resources)
    mlflow_cb = MLflowTrialCallback(tracker, exp_id, parent_id, space, checkpoint_artifacts=checkpoint_artifacts)
    n_trials = len(expand(spec, sample_random=True))
    progress = ProgressCallback(spec.name, n_trials, spec.metrics, spec.modes, space, trials=progress_mode == "trials")
    progress.seed(mlflow_cb.existing.values())
    try:
        # Tune saves its callbacks with the experiment (pickle; deep copies too): while bound, they load back
        # as these two live ones, in a fresh Tuner and in a restored one alike
        with bound(mlflow_cb, progress) as callbacks:
            if restore:
                tuner = tune.Tuner.restore(tune_path, trainable=train_fn, resume_unfinished=True, resume_errored=True)
            else:
                tuner = _new_tuner(loaded, train_fn, tune_path, callbacks,
                                   tracking_uri=str(getattr(tracker.uri, "raw", tracker.uri)))
            grid = tuner.fit()
        errors = len(grid.errors)
    except KeyboardInterrupt:  # a second Ctrl-C: Ray gives up waiting
        errors = 0
    progress.close()
    counts = mlflow_cb.counts()
    counts.update(parent_run_id=parent_id, errors=errors)
    running = [k for k, st in mlflow_cb.state.items() if st == "running"]
    counts["interrupted"] = bool(running) or counts["finished"] + counts["failed"] < n_trials
    tracker.set_tags(parent_id, {schema.TRIALS_FINISHED: str(counts["finished"]),
                                 schema.TRIALS_FAILED: str(counts["failed"])})
    if counts["interrupted"]:
        # Ctrl-C (Ray Tune stops gracefully and saves its state): unfinished trials end KILLED in MLflow;
        # --resume reopens the same runs and continues each trial from its last checkpoint.
        mlflow_cb.mark_interrupted()
        tracker.set_tags(parent_id, {schema.INTERRUPTED: schema.TRUE})
        tracker.finish(parent_id, "KILLED")
        flags = (" --quick" if loaded.quick else "") + "".join(f" --set {k}={v}" for k, v in loaded.overrides.items())
        print(f"interrupted: {len(running)} running trial(s) stopped, their last checkpoints kept; continue with:\n"
              f"  rirlab sweep {loaded.path}{flags} --resume", file=sys.stderr)
    else:
        from sweeps import artifacts

        def warn(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)

        try:  # every trial is recorded already: a summary that cannot be written costs only the summary
            artifacts.record_best(tracker.client, exp_id, parent_id, spec.metrics, spec.modes)
        except Exception as err:  # noqa: BLE001
            warn(f"warning: the best trial could not be recorded on the parent run ({type(err).__name__}: {err})"
                 .splitlines()[0])
        artifacts.log_parent_report(tracker.uri, parent_id, warn)
        tracker.finish(parent_id, "FINISHED")
    return counts

