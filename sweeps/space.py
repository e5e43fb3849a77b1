"""The Ray Tune search of a validated spec, as data: its param space, its search algorithm, and the
dry run that shows the trials without starting anything."""

from __future__ import annotations

import dataclasses
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
    search.pruner = optuna_pruner(spec)
    searcher = _classes()["SeedRepeater"](search, repeat=len(spec.seed_list), set_index=True)
    if spec.max_concurrent:
        searcher = ConcurrencyLimiter(searcher, max_concurrent=spec.max_concurrent)
    return _classes()["PerSeedGenerator"](searcher, repeat=len(spec.seed_list))


OPTUNA_DB = "optuna.db"


def optuna_study(spec: Spec, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None) -> tuple[str, str]:
    """(study name, storage URL) of an optuna sweep: the spec's ``optuna:`` values, else the sweep's folder name
    ``<spec>-<hash>-<time>`` and an SQLite file ``optuna.db`` beside the MLflow store when that is a SQLite file,
    else in the output directory (``optuna-dashboard sqlite:///PATH/optuna.db`` shows it)."""
    import time

    # one study per sweep (a study named after the spec alone would mix its quick and full sweeps); --resume
    # restores the searcher, and with it the study's name, from Ray Tune's state
    name = spec.optuna.study_name or (Path(tune_path).name if tune_path else f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}")
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

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created in RDB ..." on the terminal
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


def optuna_pruner(spec: Spec):
    """The spec's ``optuna.pruner`` as an Optuna pruner (NopPruner for none)."""
    import optuna

    return {"none": optuna.pruners.NopPruner, "median": optuna.pruners.MedianPruner,
            "hyperband": optuna.pruners.HyperbandPruner,
            "successive_halving": optuna.pruners.SuccessiveHalvingPruner}[spec.optuna.pruner]()


def pruning_scheduler(search_alg):
    """The Tune scheduler that carries out Optuna's pruning decisions for an optuna search from ``_search_alg``
    (None when its pruner is none): pass it as TuneConfig(scheduler=...) where the spec's scheduler is fifo."""
    import optuna

    searcher = getattr(search_alg, "searcher", None)
    while searcher is not None and not isinstance(searcher, _classes()["OptunaSearchEvalOnly"]):
        searcher = getattr(searcher, "searcher", None)
    if searcher is None or isinstance(searcher.pruner, optuna.pruners.NopPruner):
        return None
    return _classes()["OptunaPruning"](search_alg.searcher)


@functools.cache
def _classes() -> dict:
    """Ray Tune subclasses, defined on first use (importing Ray is slow) and importable by name from this module
    (Tune pickles its search algorithm with the experiment; ``--resume`` loads it back)."""
    import numpy as np
    import optuna
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler
    from ray.tune.search import Repeater, SearchGenerator
    from ray.tune.search.optuna import OptunaSearch

    class OptunaSearchEvalOnly(OptunaSearch):
        """Ray's OptunaSearch reads the metric from every report; a trial reports its train loss every
        ``log_every`` steps and the metric (dev accuracy) only when it evaluates: pass only those to Optuna."""

        pruner = None  # set by _search_alg; Ray's OptunaSearch creates its study with NopPruner

        def on_trial_result(self, trial_id: str, result: dict):
            if isinstance(self.metric, str) and self.metric not in result:
                return
            super().on_trial_result(trial_id, result)

        def _setup_study(self, mode):
            super()._setup_study(mode)
            if self.pruner is not None:
                self._ot_study.pruner = self.pruner

        def should_prune(self, trial_id: str) -> bool:
            ot_trial = self._ot_trials.get(trial_id)
            return ot_trial is not None and trial_id not in self._completed_trials and ot_trial.should_prune()

    class SeedRepeater(Repeater):
        """Repeater that also averages several objectives (multi-objective Optuna) over the seeds, and passes the
        intermediate results of each configuration's first seed to Optuna (what its pruner judges)."""

        def on_trial_result(self, trial_id: str, result: dict):
            group = self._trial_id_to_group.get(trial_id)
            if group is not None and trial_id == group.primary_trial_id:
                self.searcher.on_trial_result(trial_id, result)

        def should_prune(self, trial_id: str) -> bool:
            group = self._trial_id_to_group.get(trial_id)
            return group is not None and self.searcher.should_prune(group.primary_trial_id)

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

    class OptunaPruning(FIFOScheduler):
        """Stops a trial once Optuna's pruner prunes its configuration (judged on the first seed's reports)."""

        def __init__(self, searcher):
            super().__init__()
            self.searcher = searcher  # the SeedRepeater (or a ConcurrencyLimiter around it)

        def on_trial_result(self, tune_controller, trial, result: dict) -> str:
            inner = self.searcher
            while not hasattr(inner, "should_prune"):
                inner = inner.searcher
            try:
                return TrialScheduler.STOP if inner.should_prune(trial.trial_id) else TrialScheduler.CONTINUE
            except (KeyError, optuna.exceptions.OptunaError):
                return TrialScheduler.CONTINUE

    out = {}
    for cls in (OptunaSearchEvalOnly, SeedRepeater, PerSeedGenerator, OptunaPruning):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
        out[cls.__name__] = cls
    return out


def __getattr__(name: str):
    if name in ("OptunaSearchEvalOnly", "SeedRepeater", "PerSeedGenerator", "OptunaPruning"):
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TIMING_BUDGET_S = 8.0  # the dry run times one training step per distinct model config for at most this long
TIMING_BATCH = 4  # ... at this batch size (scaled linearly to the trial's batch size)
TIMING_ENV = "RIRLAB_DRY_RUN_TIMING"  # 0: no timing (the estimate then says so)


def dry_run(loaded: LoadedSpec, out=sys.stdout, timing: Optional[bool] = None) -> None:
    """What the sweep will run, started nowhere: one line of header, a table with one row per trial (one column
    per swept value, the trial's training steps), then the compute estimate (``compute_estimate``)."""
    from sweeps.schema import short_value

    spec = loaded.spec
    trials = expand(spec, sample_random=True)
    how = {"grid": "grid", "random": f"random search ({spec.num_samples} configurations drawn here, each run per seed)",
           "optuna": f"Optuna ({spec.num_samples} suggestions, each run per seed; the values below are a preview, "
                     f"Optuna chooses the real ones)"}[spec.algorithm]
    print(f"{spec.name}: {len(trials)} trials (spec hash {loaded.hash}) by {how}", file=out)
    resolved = [resolve(t.config) for t in trials]
    steps = [trial_steps(r) for r in resolved]
    columns = list(dict.fromkeys(k for t in trials for k in t.swept))
    rows = [[str(i + 1), *(short_value(t.swept[k]) if k in t.swept else "-" for k in columns), f"{n:,}"]
            for i, (t, n) in enumerate(zip(trials, steps))]
    header = ["#", *columns, "steps"]
    widths = [max(len(r[j]) for r in [header, *rows]) for j in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(c.rjust(w) if j == 0 or j == len(header) - 1 else c.ljust(w)
                        for j, (c, w) in enumerate(zip(r, widths))).rstrip(), file=out)
    shared = {k: v for k, v in base_config(spec).items() if k not in columns}
    if shared:
        print("every trial: " + ", ".join(f"{k}={short_value(v)}" for k, v in shared.items()), file=out)
    print(compute_estimate(spec, resolved, steps, timing), file=out)


def trial_steps(resolved) -> int:
    """Training steps of a resolved trial: ``steps``, or with ``epochs`` epochs x ceil(n_train / batch_size)
    (an upper bound where the recipe stops early)."""
    t = resolved.train
    n_train = getattr(resolved.task_cfg, "n_train", None)
    if t.epochs and n_train:
        return t.epochs * -(-int(n_train) // t.batch_size)
    return t.steps


def compute_estimate(spec: Spec, resolved: list, steps: list[int], timing: Optional[bool] = None) -> str:
    """trials x steps x step time, as device-hours. The step time is measured here, on this machine's device: one
    training step of each distinct model config (after a warm-up step, the fastest of up to three; a first step
    over 1 s is taken as it is) on a random batch of TIMING_BATCH sequences of half the task's maximum training
    length, scaled linearly to the trial's batch size; evaluation time is not included. Configs left once
    TIMING_BUDGET_S is spent take the mean per-sequence time of the timed ones."""
    import os

    if timing is None:
        timing = os.environ.get(TIMING_ENV, "1") != "0"
    total_steps = sum(steps)
    head = f"compute: {len(steps)} trials, {total_steps:,} training steps in all"
    if not timing or not resolved:
        return head + f" (step time not measured: {TIMING_ENV}=0)"
    import time

    import torch

    device = "cuda" if torch.cuda.is_available() and resolved[0].train.device != "cpu" else "cpu"
    per_seq: dict[str, Optional[float]] = {}  # model config -> ms per sequence in one training step
    t_end = time.monotonic() + TIMING_BUDGET_S
    for r in resolved:
        key = json.dumps([r.model, dataclasses.asdict(r.model_cfg)], sort_keys=True, default=str)
        if key not in per_seq:
            per_seq[key] = _time_step(r, device) if time.monotonic() < t_end else None
    measured = [v for v in per_seq.values() if v is not None]
    if not measured:
        return head + " (step time not measured: timing one step failed)"
    fallback = sum(measured) / len(measured)
    hours = 0.0
    for r, n in zip(resolved, steps):
        key = json.dumps([r.model, dataclasses.asdict(r.model_cfg)], sort_keys=True, default=str)
        ms = (per_seq[key] if per_seq[key] is not None else fallback) * r.train.batch_size
        hours += n * ms / 3.6e6
    res = spec.resources
    unit = f"{hours * res.gpu:,.3g} GPU-hours" if res.gpu > 0 else f"{hours * res.cpu:,.3g} CPU-hours"
    timed = f"{len(measured)} of {len(per_seq)} model configs timed" if len(measured) < len(per_seq) \
        else f"{len(measured)} model config{'s' if len(measured) > 1 else ''} timed"
    return (f"{head}; about {_duration(hours)} of trial time = {unit} at {res.cpu:g} cpu / {res.gpu:g} gpu per trial "
            f"(step time measured here on {device}: one training step at batch {TIMING_BATCH} scaled to each "
            f"trial's batch size, {timed}; evaluations and early stopping not counted)")


def _duration(hours: float) -> str:
    return f"{hours:,.1f} h" if hours >= 1 else f"{hours * 60:.1f} min" if hours * 60 >= 1 else f"{hours * 3600:.0f} s"


def _time_step(resolved, device: str) -> Optional[float]:
    """ms per sequence of one training step of the resolved trial's model (None when it cannot be timed here)."""
    import time

    import torch

    from rirlab.bench import LISTOPS_CLASSES, LISTOPS_VOCAB, one_step, random_batch
    from rirlab.models import registry
    from rirlab.tasks.base import TaskInfo

    try:
        model = registry.get(resolved.model).build(resolved.model_cfg, TaskInfo(LISTOPS_VOCAB, LISTOPS_CLASSES,
                                                                                 "classify")).to(device)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        length = max(2, int(getattr(resolved.task_cfg, "max_train_len", 100)) // 2)
        batch = random_batch(TIMING_BATCH, length, device)
        threads = torch.get_num_threads()
        if resolved.train.num_threads:
            torch.set_num_threads(resolved.train.num_threads)  # as the trial will run
        try:
            times = []
            for _ in range(4):  # a warm-up step, then the fastest of up to three (this machine may be busy); a slow
                if device == "cuda":  # first step (over a second) is taken as it is, an overestimate
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                one_step(model, opt, batch, True)
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                if sum(times) > 1.0:
                    break
            times = times[1:] or times
        finally:
            torch.set_num_threads(threads)
        return 1000 * min(times) / TIMING_BATCH
    except Exception:  # a model this machine cannot build or run at this size: no estimate for it
        return None
