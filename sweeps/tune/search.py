"""The Ray Tune search of a sweep plan, as the spec's algorithm supplies it (``rirlab.sweeps.algorithms``): grid and random
hand Tune the plan's points, optuna asks a persistent Optuna study (``rirlab.sweeps.tune.optuna``). These functions are
what the Tuner, the driver and the CLI call; none of them names an algorithm."""

from __future__ import annotations

from typing import Optional

from rirlab.sweeps import algorithms
from rirlab.sweeps.plan.plan import SweepPlan


def search_alg(plan: SweepPlan, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None):
    """The Tune search algorithm of the plan. grid: exactly the plan's trials (after variants and ``when:``), in
    spec order; random: the configurations drawn on the driver (what the dry run shows), each run once per seed
    with identical values; optuna: each Optuna suggestion runs once per seed, in a persistent study."""
    return plan.algorithm.search_alg(plan, tracking_uri, tune_path)


def pruning_scheduler(plan: SweepPlan, search) -> Optional[object]:
    """A Tune scheduler the search algorithm needs to carry out its own stopping decisions (Optuna's pruner), or
    None: used where the spec's scheduler is fifo."""
    return plan.algorithm.scheduler(search)


def check_storage(plan: SweepPlan, tracking_uri: str, tune_path: str) -> None:
    """The algorithm's checks before the parent run exists (optuna: a study storage that is not the MLflow store
    and that Optuna can open); nothing for grid and random."""
    plan.algorithm.preflight(plan, tracking_uri, tune_path)


def study_before(spec, tracking_uri: Optional[str] = None) -> str:
    """What the sweep continues, as one phrase (a named Optuna study: ``study 'st' already holds 4 trials``); ""
    when nothing (grid, random, an unnamed study, or one not yet in its storage)."""
    return algorithms.get(spec.algorithm).continued(spec, tracking_uri)
