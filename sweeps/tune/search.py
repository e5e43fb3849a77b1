"""The Ray Tune search of a sweep plan: the search algorithm (grid and random hand Tune the plan's points;
optuna asks a persistent Optuna study), its sampler and pruner, and the scheduler that carries out the pruning."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rirlab.errors import UserError
from rirlab.redact import mask_url, redact_uri
from sweeps.plan.plan import SweepPlan
from sweeps.spec.schema import Spec


def search_alg(plan: SweepPlan, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None):
    """grid: exactly the plan's trials (after variants and ``when:``), in spec order; random: the configurations
    drawn on the driver (what the dry run shows), each run once per seed with identical values; optuna: each
    Optuna suggestion runs once per seed (a Repeater: Optuna is told the seed-mean of the metric), in a
    persistent study (``optuna_study``)."""
    from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter

    spec = plan.spec
    if spec.algorithm in ("grid", "random"):
        return BasicVariantGenerator(points_to_evaluate=[dict(p) for p in plan.points],
                                     max_concurrent=spec.max_concurrent or 0)
    from sweeps.tune.optuna import OptunaSearchEvalOnly, PerSeedGenerator, SeedRepeater

    study_name, storage = optuna_study(spec, tracking_uri, tune_path)
    rdb = _rdb_storage(storage)
    search = OptunaSearchEvalOnly(
        metric=spec.metrics if len(spec.metrics) > 1 else spec.metrics[0],
        mode=spec.modes if len(spec.modes) > 1 else spec.modes[0],
        sampler=optuna_sampler(spec, _trials_in_study(rdb, study_name)), study_name=study_name, storage=rdb)
    search.pruner = optuna_pruner(spec)
    searcher = SeedRepeater(search, repeat=len(spec.seed_list), set_index=True)
    if spec.max_concurrent:
        searcher = ConcurrencyLimiter(searcher, max_concurrent=spec.max_concurrent)
    return PerSeedGenerator(searcher, repeat=len(spec.seed_list))


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


def study_before(spec: Spec, tracking_uri: Optional[str] = None) -> str:
    """A sweep that continues a named Optuna study (``optuna.study_name``) says so: ``study 'st' already holds 4
    trials``; "" for another algorithm, an unnamed study (one per sweep) or a study not yet in its storage."""
    if spec.algorithm != "optuna" or not spec.optuna.study_name:
        return ""
    name, url = optuna_study(spec, tracking_uri, tune_path="rirlab_runs/-")  # (a named study: the path is unused)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        return ""  # (nothing is created to find that out)
    try:
        n = _trials_in_study(_rdb_storage(url), name)
    except Exception:  # noqa: BLE001 -- an unreadable storage: the sweep itself says so before any trial
        return ""
    return f"study '{name}' already holds {n} trial{'s' * (n != 1)}" if n else ""


def _rdb_storage(url: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created in RDB ..." on the terminal
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as err:  # a bad URL or a database that cannot be opened: before any trial starts
        shown, why = mask_url(url), redact_uri(str(err).splitlines()[0])  # the URL first: its password then known
        raise UserError(f"optuna.storage {shown!r} cannot be opened ({why}); give a database URL "
                        f"Optuna accepts, e.g. sqlite:///optuna.db") from None


def _same_database(a: str, b: str) -> bool:
    """Whether two database URLs name one database (sqlite: the same file)."""
    from sqlalchemy.engine import make_url

    try:
        x, y = make_url(a), make_url(b)
    except Exception:  # noqa: BLE001 -- not a database URL (an MLflow server): not the same database
        return False
    if x.get_backend_name() != y.get_backend_name():
        return False
    if x.get_backend_name() == "sqlite":
        return bool(x.database) and bool(y.database) and Path(x.database).expanduser().resolve() == \
            Path(y.database).expanduser().resolve()
    return (x.host, x.port, x.database) == (y.host, y.port, y.database)


def check_storage(plan: SweepPlan, tracking_uri: str, tune_path: str) -> None:
    """An optuna sweep's study storage, checked before the parent run exists: not the MLflow store itself (Optuna
    would add its tables to it) and a database Optuna can open. Other algorithms: nothing to check."""
    if plan.spec.algorithm != "optuna":
        return
    _, url = optuna_study(plan.spec, tracking_uri, tune_path)
    if _same_database(url, tracking_uri):
        raise UserError(f"optuna.storage {mask_url(url)!r} is the MLflow store; give Optuna a database of its own "
                        f"(e.g. sqlite:///optuna.db), or leave optuna.storage out for a file beside the store")
    _rdb_storage(url).remove_session()


def _trials_in_study(storage, study_name: str) -> int:
    """How many trials the named study already holds (0 for a new study)."""
    try:
        return len(storage.get_all_trials(storage.get_study_id_from_name(study_name), deepcopy=False))
    except KeyError:
        return 0


def optuna_sampler(spec: Spec, done: int = 0):
    """The spec's ``optuna.sampler`` (a name from ``sweeps.spec.schema.SAMPLERS``), seeded with the first seed plus
    the number of trials the study already holds: a sweep that continues a persistent study (the same
    ``optuna.study_name`` and storage) draws new configurations instead of re-proposing the first sweep's (a
    sampler seeded alike replays its random start-up draws), while a fresh study stays reproducible."""
    import optuna

    seed = spec.seed_list[0] + done
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
    """The Tune scheduler that carries out Optuna's pruning decisions for an optuna search from ``search_alg``
    (None when its pruner is none): pass it as TuneConfig(scheduler=...) where the spec's scheduler is fifo."""
    searcher = getattr(search_alg, "searcher", None)
    if searcher is None:  # grid / random: no Optuna
        return None
    import optuna

    from sweeps.tune.optuna import OptunaPruning, OptunaSearchEvalOnly

    while searcher is not None and not isinstance(searcher, OptunaSearchEvalOnly):
        searcher = getattr(searcher, "searcher", None)
    if searcher is None or isinstance(searcher.pruner, optuna.pruners.NopPruner):
        return None
    return OptunaPruning(search_alg.searcher)
