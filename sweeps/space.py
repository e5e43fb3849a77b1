"""The Ray Tune search of a validated spec, as data: its param space, its search algorithm, and the
dry run that shows the trials without starting anything."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Optional

from rirlab.config import resolve
from rirlab.errors import UserError
from sweeps.spec import LoadedSpec
from sweeps.specfile import VARIANT_KEY, Spec, base_config, expand, grid_points, random_points


def param_space(spec: Spec) -> dict:
    """The Tune search space, as data: a flat dict of real config keys. Constants, a domain per searched
    key, the seeds; a grid names its variants under ``variant`` (their overrides apply in TrialSpace.trial)."""
    from ray import tune

    space = {**base_config(spec), **{key: _domain(axis) for key, axis in spec.search.items()}}
    if spec.algorithm == "grid":  # every trial is one of grid_points (_search_alg): the domains only declare the keys
        if spec.variants:
            space[VARIANT_KEY] = tune.choice([v.name for v in spec.variants])
        space["seed"] = tune.choice(spec.seed_list)
    elif spec.algorithm == "random":  # each drawn configuration (_search_alg) runs once per seed
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


def _search_alg(spec: Spec, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None):
    """grid: exactly the spec's trials (``grid_points``, after variants and ``when:``), in spec order;
    random: the configurations drawn on the driver (``random_points``, what the dry run shows), each run once per
    seed with identical values; optuna: each Optuna suggestion runs once per seed (a Repeater: Optuna is told the
    seed-mean of the metric), in a persistent study (``optuna_study``)."""
    from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter

    if spec.algorithm == "grid":
        return BasicVariantGenerator(points_to_evaluate=grid_points(spec), max_concurrent=spec.max_concurrent or 0)
    if spec.algorithm == "random":
        return BasicVariantGenerator(points_to_evaluate=random_points(spec), max_concurrent=spec.max_concurrent or 0)
    study_name, storage = optuna_study(spec, tracking_uri, tune_path)
    search = _classes()["OptunaSearchEvalOnly"](
        metric=spec.metrics if len(spec.metrics) > 1 else spec.metrics[0],
        mode=spec.modes if len(spec.modes) > 1 else spec.modes[0],
        sampler=optuna_sampler(spec), study_name=study_name, storage=_rdb_storage(storage))
    searcher = _classes()["SeedRepeater"](search, repeat=len(spec.seed_list), set_index=True)
    if spec.max_concurrent:
        searcher = ConcurrencyLimiter(searcher, max_concurrent=spec.max_concurrent)
    return _classes()["PerSeedGenerator"](searcher, repeat=len(spec.seed_list))


OPTUNA_DB = "optuna.db"


def optuna_study(spec: Spec, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None) -> tuple[str, str]:
    """(study name, storage URL) of an optuna sweep: the spec's ``optuna:`` values, else the sweep's folder name
    ``<spec>-<hash>-<time>`` and an SQLite file ``optuna.db`` beside the MLflow store when that is a SQLite file,
    else in the output directory (``optuna-dashboard sqlite:///…/optuna.db`` shows it)."""
    name = spec.optuna.study_name or (Path(tune_path).name if tune_path else spec.name)
    if spec.optuna.storage:
        return name, spec.optuna.storage
    if tracking_uri and tracking_uri.startswith("sqlite:///") and tracking_uri != "sqlite:///:memory:":
        db = Path(tracking_uri.removeprefix("sqlite:///")).expanduser()
        return name, f"sqlite:///{(db.resolve().parent / OPTUNA_DB)}"
    root = Path(tune_path).parent if tune_path else Path("rirlab_runs")
    root.mkdir(parents=True, exist_ok=True)
    return name, f"sqlite:///{root.resolve() / OPTUNA_DB}"


def _rdb_storage(url: str):
    import optuna

    try:
        return optuna.storages.RDBStorage(url)
    except Exception as err:  # a bad URL or a database that cannot be opened: before any trial starts
        raise UserError(f"optuna.storage {url!r} cannot be opened ({str(err).splitlines()[0]}); give a database URL "
                        f"Optuna accepts, e.g. sqlite:///optuna.db") from None


def optuna_sampler(spec: Spec):
    """The spec's ``optuna.sampler`` (a name from specfile.SAMPLERS), seeded with the first seed."""
    import optuna

    seed = spec.seed_list[0]
    return {"tpe": lambda: optuna.samplers.TPESampler(seed=seed),
            "random": lambda: optuna.samplers.RandomSampler(seed=seed),
            "qmc": lambda: optuna.samplers.QMCSampler(seed=seed),
            "gp": lambda: optuna.samplers.GPSampler(seed=seed),
            "nsgaii": lambda: optuna.samplers.NSGAIISampler(seed=seed)}[spec.optuna.sampler]()


@functools.cache
def _classes() -> dict:
    """Ray Tune subclasses, defined on first use (importing Ray is slow) and importable by name from this module
    (Tune pickles its search algorithm with the experiment; ``--resume`` loads it back)."""
    import numpy as np
    from ray.tune.search import Repeater, SearchGenerator
    from ray.tune.search.optuna import OptunaSearch

    class OptunaSearchEvalOnly(OptunaSearch):
        """Ray's OptunaSearch reads the metric from every report; a trial reports its train loss every
        ``log_every`` steps and the metric (dev accuracy) only when it evaluates: pass only those to Optuna."""

        def on_trial_result(self, trial_id: str, result: dict):
            if isinstance(self.metric, str) and self.metric not in result:
                return
            super().on_trial_result(trial_id, result)

    class SeedRepeater(Repeater):
        """Repeater that also averages several objectives (multi-objective Optuna) over the seeds."""

        def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, **kwargs):
            metrics = self.searcher.metric if isinstance(self.searcher.metric, list) else [self.searcher.metric]
            group = self._trial_id_to_group[trial_id]
            group.report(trial_id, [float((result or {}).get(m, np.nan)) for m in metrics])
            if group.finished_reporting():
                means = np.nanmean(np.array(group.scores(), dtype=float).reshape(-1, len(metrics)), axis=0)
                values = {m: (None if np.isnan(v) else float(v)) for m, v in zip(metrics, means)}
                self.searcher.on_trial_complete(group.primary_trial_id,
                                                result=values if None not in values.values() else None, **kwargs)

    class PerSeedGenerator(SearchGenerator):
        """num_samples counts configurations: each is repeated once per seed, so Tune runs num_samples x seeds."""

        def __init__(self, searcher, repeat: int = 1):
            super().__init__(searcher)
            self._repeat = repeat

        def add_configurations(self, experiments):
            super().add_configurations(experiments)
            self._total_samples *= self._repeat

        def __getstate__(self):  # Tune pickles its search algorithm with the Tuner; the argument parser is rebuilt
            return {k: v for k, v in self.__dict__.items() if k != "_parser"}

        def __setstate__(self, state):
            from ray.tune.experiment.config_parser import _make_parser

            self.__dict__.update(state, _parser=_make_parser())

    out = {}
    for cls in (OptunaSearchEvalOnly, SeedRepeater, PerSeedGenerator):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
        out[cls.__name__] = cls
    return out


def __getattr__(name: str):
    if name in ("OptunaSearchEvalOnly", "SeedRepeater", "PerSeedGenerator"):
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
