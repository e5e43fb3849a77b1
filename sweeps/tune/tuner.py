"""The Ray Tune experiment of a sweep plan: the Tuner (search algorithm, scheduler, run config) of a fresh sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rirlab import contract
from rirlab.sweeps.plan.plan import SweepPlan, asha_max_t
from rirlab.sweeps.tune.search import pruning_scheduler, search_alg


def new_tuner(plan: SweepPlan, train_fn, tune_path: str, callbacks: list, tracking_uri: Optional[str] = None,
              points: Optional[list[dict]] = None):
    """The Tuner of a fresh sweep (``--resume`` restores the saved one instead). ``points``: a --rerun-failed
    experiment, exactly these trials' Tune configs (``rerun_space``), whatever the spec's algorithm; its searcher
    (an Optuna study) is not asked."""
    from ray import tune

    spec = plan.spec
    if points is not None:
        from ray.tune.search import BasicVariantGenerator

        search = BasicVariantGenerator(points_to_evaluate=[dict(p) for p in points],
                                       max_concurrent=spec.max_concurrent or 0)
        metric, mode = plan.algorithm.tune_metric(spec)
        if metric is None:  # (the searcher was given them: a scheduler still needs them)
            metric, mode = spec.metrics[0], spec.modes[0]
        return _tuner(plan, train_fn, tune_path, callbacks, search, scheduler(plan), metric, mode, len(points),
                      rerun_space(plan), None)  # (the generator limits the concurrency)
    # an Optuna study lives beside the MLflow store (sqlite) or in the sweep's folder, named after the sweep
    search = search_alg(plan, tracking_uri=tracking_uri, tune_path=tune_path)
    metric, mode = plan.algorithm.tune_metric(spec)
    return _tuner(plan, train_fn, tune_path, callbacks, search, scheduler(plan) or pruning_scheduler(plan, search),
                  metric, mode, plan.num_samples, plan.param_space(),
                  plan.algorithm.tune_max_concurrent(spec))  # (grid: its search_alg limits it)


def _tuner(plan, train_fn, tune_path, callbacks, search, sched, metric, mode, num_samples, space, concurrent):
    from ray import tune

    spec = plan.spec
    run_config = tune.RunConfig(
        name=Path(tune_path).name, storage_path=str(Path(tune_path).parent),
        failure_config=tune.FailureConfig(max_failures=spec.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=spec.keep_checkpoints or None),
        stop={"time_total_s": spec.budget.time_limit_s} if spec.budget.time_limit_s else None,
        callbacks=callbacks, verbose=0)
    return tune.Tuner(
        train_fn, param_space=space,
        tune_config=tune.TuneConfig(
            metric=metric, mode=mode, search_alg=search, scheduler=sched, num_samples=num_samples,
            max_concurrent_trials=concurrent, trial_dirname_creator=lambda t: f"trial_{t.trial_id}",
            reuse_actors=spec.reuse_workers),
        run_config=run_config)


def rerun_space(plan: SweepPlan) -> dict:
    """A --rerun-failed experiment's search space: the sweep's, every grid a choice and the seed a choice of the
    spec's seeds, so that each handed-out config (which sets every swept key) is exactly one trial (a grid_search
    would multiply each, and a constant seed would be overridden with a warning)."""
    from ray import tune

    space = {k: tune.choice(list(v["grid_search"])) if isinstance(v, dict) and set(v) == {"grid_search"} else v
             for k, v in plan.param_space().items()}
    space["seed"] = tune.choice(list(plan.spec.seed_list))
    return space


def scheduler(plan: SweepPlan):
    """The spec's ``scheduler: asha`` as Tune's ASHAScheduler over training steps (None for fifo)."""
    spec = plan.spec
    if spec.scheduler.type != "asha":
        return None
    from ray.tune.schedulers import ASHAScheduler

    max_t = asha_max_t(plan.base, plan.resolved[0] if plan.resolved else None)
    return ASHAScheduler(time_attr=contract.STEP, max_t=max_t,
                         grace_period=spec.scheduler.grace_period, reduction_factor=spec.scheduler.reduction_factor)


# Ray Tune copies these from the driver's environment into every trainable's runtime_env (see
# rirlab/compat/ray.py), and Ray writes a runtime_env, env_vars included, into its world-readable
# runtime_env_agent.log. Trials never need them (only the driver writes to MLflow and its artifact store).
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN")


def keep_secrets_out_of_tune() -> None:
    """Stop Ray Tune from copying cloud credentials of the driver's environment to the trials (and so into Ray's
    logs); the driver keeps them for its own MLflow artifact uploads."""
    from rirlab.compat import ray as compat_ray

    compat_ray.drop_propagated_env(SECRET_ENV)
