"""Build and run the Ray Tune experiment of a validated spec, recording it in MLflow from the driver."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from rirlab.config import TrainConfig, resolve
from rirlab.errors import UserError
from sweeps import schema
from sweeps.spec import LoadedSpec
from sweeps.space import _search_alg, param_space
from sweeps.space import dry_run as _dry_run
from sweeps.specfile import Spec, TrialSpace, base_config, expand, grid_points, swept_keys
from sweeps.tracking import Tracker

OUTPUT_ROOT = "rirlab_runs"
dry_run = _dry_run  # the CLI imports it from here; it lives in sweeps.space


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
    for name in ("ray", "ray.tune", "ray.train", "ray.data"):
        lg = logging.getLogger(name)
        lg.handlers = [handler]
        lg.propagate = False
        lg.setLevel(logging.INFO)
    if ray.is_initialized():
        return
    from sweeps.tracking import worker_env

    kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address in (None, "local"):
        # no --address: always a fresh local Ray sized to this machine, never an unrelated `ray start` cluster;
        # workers get the same environment as on a cluster ($RIRLAB_CACHE made absolute: trials run in their own
        # directories)
        ray.init(address="local", runtime_env={"env_vars": worker_env(tracking_uri)}, **kwargs)
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
    except ConnectionError as err:  # wrong address, or a token that is not the cluster's (token authentication)
        raise UserError(f"cannot join the Ray cluster at {address} ({str(err).splitlines()[0]}); check the address "
                        f"and give this process the cluster's token: RAY_AUTH_MODE=token with RAY_AUTH_TOKEN or "
                        f"RAY_AUTH_TOKEN_PATH (see cluster/README.md)") from None


def _check_reachable(address: str) -> None:
    """HOST:PORT or ray://HOST:PORT must accept a TCP connection (Ray itself would wait for minutes)."""
    hostport = address.split("://", 1)[-1]
    if address == "auto" or ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except (OSError, ValueError) as err:
        raise UserError(f"--address {address}: nothing answers there ({err}); start the cluster (ray start --head) "
                        f"or fix the address (HOST:PORT of the head's GCS, e.g. 10.0.0.5:6379)") from None


def run_sweep(loaded: LoadedSpec, tracking_uri: str, address: Optional[str] = None, resume: bool = False,
              checkpoint_artifacts: bool = True, output_root: str = OUTPUT_ROOT) -> dict:
    """Run (or --resume) the sweep; returns counts of finished / failed trials."""
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", "1")
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "5")  # snapshot Tune's state often: --resume needs it
    from ray import tune

    spec = loaded.spec
    tracker = Tracker(tracking_uri)
    exp_id = tracker.experiment_id(spec.name, create=False)
    parent = tracker.find_parent(exp_id, loaded.hash) if resume and exp_id else None
    if resume and parent is None:
        raise UserError(f"--resume: no earlier sweep of {loaded.path} (spec hash {loaded.hash}) in {tracking_uri}; "
                        f"run it without --resume first (same --quick/--set flags)")
    restore = False
    if parent is not None:
        tune_path = parent.data.tags.get(schema.TUNE_PATH, "")
        restore = bool(tune_path) and tune.Tuner.can_restore(tune_path)
        if not restore and tracker.children(exp_id, parent.info.run_id):
            raise UserError(f"--resume: the Ray Tune state of run {parent.info.run_id} ({tune_path or 'unknown'}) is "
                            f"gone; start the sweep again without --resume")
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        tune_path = str(Path(output_root).resolve() / f"{spec.name}-{loaded.hash}-{stamp}")
    _ray_init(address, Path(tune_path), tracking_uri)  # a wrong --address fails here, before MLflow is written
    if parent is not None:
        parent_id = parent.info.run_id
        tracker.reopen(parent_id)  # (no Tune state and no trial yet: the sweep starts afresh under the same run)
    else:
        exp_id = tracker.experiment_id(spec.name)
        parent_id = _start_parent(tracker, exp_id, loaded, tune_path, stamp)
    try:
        return _fit(loaded, tracker, exp_id, parent_id, tune_path, restore, checkpoint_artifacts)
    except BaseException:
        # whatever stops the driver (Ctrl-C before Tune took over, an error) leaves no parent run RUNNING
        tracker.set_tags(parent_id, {schema.INTERRUPTED: schema.TRUE})
        tracker.finish(parent_id, "KILLED")
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
    return parent_id


def task_splits(spec: Spec):
    """The evaluation splits (split, paper label) of the sweep's task from the task registry, recorded on
    the parent so that analysis needs no registry; None when the trials do not share one task."""
    from rirlab.tasks import registry

    tasks = {t.config["task"] for t in expand(spec, sample_random=True)}  # set in every trial (load_spec checked)
    return list(registry.get(tasks.pop()).splits) if len(tasks) == 1 else None


def _new_tuner(loaded: LoadedSpec, train_fn, tune_path: str, callbacks: list):
    from ray import tune

    spec = loaded.spec
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
            search_alg=_search_alg(spec), scheduler=_scheduler(loaded),
            num_samples=len(grid_points(spec)) if spec.algorithm == "grid" else spec.num_samples,
            max_concurrent_trials=spec.max_concurrent if spec.algorithm != "grid" else None,  # grid: in _search_alg
            trial_dirname_creator=lambda t: f"trial_{t.trial_id}"),
        run_config=run_config)


def _fit(loaded: LoadedSpec, tracker: Tracker, exp_id: str, parent_id: str, tune_path: str, restore: bool,
         checkpoint_artifacts: bool) -> dict:
    from ray import tune

    from sweeps.callback import MLflowTrialCallback, ProgressCallback, bound
    from sweeps.trainable import bind

    spec = loaded.spec
    import ray

    tracker.set_tags(parent_id, {schema.CLUSTER_RESOURCES: json.dumps(ray.cluster_resources(), sort_keys=True)})
    space = TrialSpace.of(spec)
    resources = {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu}
    train_fn = tune.with_resources(bind(space, spec.checkpoint_every), resources)
    mlflow_cb = MLflowTrialCallback(tracker, exp_id, parent_id, space, checkpoint_artifacts=checkpoint_artifacts)
    n_trials = len(expand(spec, sample_random=True))
    progress = ProgressCallback(spec.name, n_trials, spec.metrics[0], spec.modes[0], space)
    try:
        # Tune saves its callbacks with the experiment (pickle; deep copies too): while bound, they load back
        # as these two live ones, in a fresh Tuner and in a restored one alike
        with bound(mlflow_cb, progress) as callbacks:
            if restore:
                tuner = tune.Tuner.restore(tune_path, trainable=train_fn, resume_unfinished=True, resume_errored=True)
            else:
                tuner = _new_tuner(loaded, train_fn, tune_path, callbacks)
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
        tracker.finish(parent_id, "FINISHED")
    return counts

