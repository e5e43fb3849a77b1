"""The Ray Tune search of a validated spec, as data: its param space, its search algorithm, and the
dry run that shows the trials without starting anything."""

from __future__ import annotations

import json
import sys

from rirlab.config import resolve
from sweeps.spec import LoadedSpec
from sweeps.specfile import VARIANT_KEY, Spec, base_config, expand, grid_points


def param_space(spec: Spec) -> dict:
    """The Tune search space, as data: a flat dict of real config keys. Constants, a domain per searched
    key, the seeds; a grid names its variants under ``variant`` (their overrides apply in TrialSpace.trial)."""
    from ray import tune

    space = {**base_config(spec), **{key: _domain(axis) for key, axis in spec.search.items()}}
    if spec.algorithm == "grid":  # every trial is one of grid_points (_search_alg): the domains only declare the keys
        if spec.variants:
            space[VARIANT_KEY] = tune.choice([v.name for v in spec.variants])
        space["seed"] = tune.choice(spec.seed_list)
    elif spec.algorithm == "random":
        space["seed"] = tune.grid_search(spec.seed_list)
    else:  # optuna: the Repeater's index picks the seed of each repeat
        space["seed"] = spec.seed_list[0]
    return space


def _domain(axis):
    from ray import tune

    v = axis.values
    if axis.kind in ("grid", "choice"):
        return tune.choice(v)
    if axis.kind == "uniform":
        return tune.uniform(*v)
    if axis.kind == "loguniform":
        return tune.loguniform(*v)
    return tune.randint(v[0], v[1] + 1)  # randint bounds are inclusive in specs


def _search_alg(spec: Spec):
    """grid: exactly the spec's trials (``grid_points``, after variants and ``when:``), in spec order;
    optuna: Optuna, repeated once per seed; random: Tune's own sampling."""
    if spec.algorithm == "grid":
        from ray.tune.search import BasicVariantGenerator

        return BasicVariantGenerator(points_to_evaluate=grid_points(spec), max_concurrent=spec.max_concurrent or 0)
    if spec.algorithm != "optuna":
        return None
    from ray.tune.search import Repeater
    from ray.tune.search.optuna import OptunaSearch

    metric = spec.metrics if len(spec.metrics) > 1 else spec.metrics[0]
    mode = spec.modes if len(spec.modes) > 1 else spec.modes[0]
    search = OptunaSearch(metric=metric, mode=mode, seed=spec.seed_list[0])
    if len(spec.seed_list) > 1:
        return Repeater(search, repeat=len(spec.seed_list), set_index=True)
    return search


def dry_run(loaded: LoadedSpec, out=sys.stdout) -> None:
    spec = loaded.spec
    trials = expand(spec, sample_random=True)
    if spec.algorithm == "grid":
        print(f"{spec.name}: {len(trials)} trials (spec hash {loaded.hash})", file=out)
    else:
        print(f"{spec.name}: {spec.num_samples} samples x {len(spec.seed_list)} seeds = {len(trials)} trials by "
              f"{spec.algorithm} search (spec hash {loaded.hash}); the values below are a local preview, "
              f"Ray Tune draws its own", file=out)
    for i, t in enumerate(trials):
        cfg = resolve(t.config).flat()
        print(f"[{i + 1}] {t.name}", file=out)
        print("    " + json.dumps(cfg, sort_keys=True, default=str), file=out)
