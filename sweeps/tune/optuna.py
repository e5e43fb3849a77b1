"""The Tune side of ``algorithm: optuna`` (``rirlab.sweeps.algorithms.optuna``): one Ray Tune Searcher that drives a
persistent Optuna study through Optuna's public ask/tell API, the scheduler that carries out its pruner, the study's
storage and the link between MLflow runs and Optuna trials.

Why its own Searcher and not Ray's OptunaSearch: Ray's reads the metric from every report (a trial reports its
train loss every ``log_every`` steps and the metric only when it evaluates), has no pruner, and repeats seeds only
through a Repeater that averages one metric; the code before reached into their private state to fix that. Here
each configuration Optuna suggests (``study.ask``) runs once per seed as a group of Tune trials, the first seed's
evaluation reports are Optuna's intermediate values (``trial.report``: what its pruner judges), and once every
seed ended Optuna is told the seed mean of each metric (``study.tell``). Its state (the groups and settings, not
the study, which lives in its storage) is what Tune's searcher save/restore keeps for --resume.

The classes ``OptunaSearchEvalOnly``, ``SeedRepeater`` and ``PerSeedGenerator`` are kept only so that Tune can
unpickle a sweep recorded before (it names them in tuner.pkl): they turn into this searcher
(``rirlab.compat.optuna`` reads the old state).

Imported only by optuna sweeps (Ray Tune and Optuna are slow to import) and by Tune itself when --resume unpickles.
"""

from __future__ import annotations

import contextvars
import logging
import os
import pickle
import time
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import optuna
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import ConcurrencyLimiter, SearchGenerator, Searcher

from rirlab.errors import UserError
from rirlab.redact import mask_url, redact_uri
from rirlab.compat import optuna as compat
from rirlab.sweeps.spec.trials import REPEATER_INDEX

logger = logging.getLogger(__name__)
TRAINING_ITERATION = "training_iteration"  # ray.tune.result: the step Optuna's intermediate values are keyed by
STATE_VERSION = 2  # of OptunaSearcher's saved state (1: Ray's OptunaSearch under a Repeater, rirlab.compat.optuna)

# The optuna searcher of the sweep this context drives (a fresh one, or the one Tune restored on --resume, which
# only Tune holds: the driver never sees it), for ``link_run``. A context variable, not a module list: each driver
# thread or context (a test, a notebook) sees the searcher it built or restored, never another one's; Tune builds,
# restores and runs the searcher in the driver's thread (Tuner.fit runs there).
_SEARCHER: contextvars.ContextVar[Optional["OptunaSearcher"]] = contextvars.ContextVar(
    "rirlab_optuna_searcher", default=None)


class OptunaSearcher(Searcher):
    """Asks a persistent Optuna study for each configuration and runs it once per seed (``repeat``): Tune trial
    ids -> seed groups -> Optuna trial numbers. Suggested configs carry ``REPEATER_INDEX``, the seed's index
    (``rirlab.sweeps.spec.trials.TrialSpace`` turns it into the seed)."""

    def __init__(self, metrics: list[str], modes: list[str], study_name: str, storage: str, sampler=None,
                 pruner=None, repeat: int = 1):
        super().__init__(metric=metrics if len(metrics) > 1 else metrics[0],
                         mode=modes if len(modes) > 1 else modes[0])
        self.metrics, self.modes, self.repeat = list(metrics), list(modes), repeat
        self.study_name, self.storage = study_name, storage
        self.sampler, self.pruner = sampler, pruner or optuna.pruners.NopPruner()
        self.space: dict = {}  # name -> Optuna distribution (from Tune's search space: set_search_properties)
        self.groups: list[dict] = []  # per suggestion: number, params, trials (Tune ids by seed index), scores, told
        self.group_of: dict[str, int] = {}  # Tune trial id -> index into groups
        self.pending_legacy_groups: Optional[dict] = None  # an old sweep's Repeater state, until its restore
        self._study = self._rdb = None  # (opened on first use: Tune pickles this searcher before the sweep starts)
        self._trials: dict[int, object] = {}  # Optuna trial number -> optuna.trial.Trial (of this driver)
        _SEARCHER.set(self)

    # ---- pickling: the study and its trials live in the storage, not in Tune's files
    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("_study", "_rdb", "_trials")}

    def __setstate__(self, state):
        self.__dict__.update(state, _study=None, _rdb=None, _trials={})
        _SEARCHER.set(self)

    # ---- the study
    @property
    def study(self):
        """The Optuna study (created in its storage on first use, or loaded: a named study continues)."""
        if self._study is None:
            self._rdb = rdb_storage(self.storage)
            self._study = optuna.create_study(
                storage=self._rdb, sampler=self.sampler, pruner=self.pruner,
                study_name=self.study_name, load_if_exists=True,
                directions=["minimize" if m == "min" else "maximize" for m in self.modes])
            with warnings.catch_warnings():  # "experimental" since Optuna 3.2: not a message for the user's terminal
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                # optuna-dashboard names the objectives after the metrics instead of "Objective 0, 1"
                self._study.set_metric_names(self.metrics)
        return self._study

    def optuna_trial(self, trial_id: str):
        """The Optuna trial that proposed a Tune trial's configuration (each seed's trial shares its group's), or
        None for a trial this searcher did not suggest."""
        group = self._group(trial_id)
        if group is None:
            return None
        number = group["number"]
        if number not in self._trials:  # a restored sweep's: rebuilt from its number
            self._trials[number] = compat.trial_of(self.study, self._rdb, number)
        return self._trials[number]

    def _group(self, trial_id: str) -> Optional[dict]:
        index = self.group_of.get(trial_id)
        return None if index is None else self.groups[index]

    # ---- Ray Tune's Searcher API
    def set_search_properties(self, metric, mode, config: dict, **spec) -> bool:
        """Tune hands over its search space: the searched keys' domains become Optuna distributions (constants
        and the seed are not searched). The metrics and modes are the spec's, given at construction."""
        if not self.space:
            self.space = distributions(config)
        return True

    def suggest(self, trial_id: str) -> Optional[dict]:
        if not self.space:
            raise RuntimeError("OptunaSearcher has no search space: Tune calls set_search_properties first")
        current = self.groups[-1] if self.groups else None
        if current is None or len(current["trials"]) >= self.repeat:
            trial = self.study.ask(fixed_distributions=self.space)
            self._trials[trial.number] = trial
            current = {"number": trial.number, "params": dict(trial.params), "trials": [], "scores": {},
                       "told": False}
            self.groups.append(current)
        current["trials"].append(trial_id)
        self.group_of[trial_id] = len(self.groups) - 1
        return {**current["params"], REPEATER_INDEX: len(current["trials"]) - 1}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """The first seed's evaluations are the configuration's intermediate values (what a pruner judges); reports
        without the metric (train loss only) and several objectives (Optuna takes none) are not passed on."""
        group = self._group(trial_id)
        if len(self.metrics) > 1 or self.metrics[0] not in result or group is None or group["told"] \
                or group["trials"][0] != trial_id:
            return
        self.optuna_trial(trial_id).report(float(result[self.metrics[0]]), step=int(result[TRAINING_ITERATION]))

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        """Once every seed of a configuration ended, Optuna is told the seed mean of each metric (NaN-free); a
        metric no seed reported: the trial failed (an error) or was pruned (stopped)."""
        group = self._group(trial_id)
        if group is None or group["told"]:
            return
        group["scores"][trial_id] = [float((result or {}).get(m, np.nan)) for m in self.metrics]
        if len(group["scores"]) < self.repeat:
            return
        with warnings.catch_warnings():  # (a metric that no seed reported: NaN, told as failed/pruned below)
            warnings.simplefilter("ignore", RuntimeWarning)
            means = np.nanmean(np.array(list(group["scores"].values()), dtype=float), axis=0)
        values = None if np.isnan(means).any() else [float(v) for v in means]
        state = optuna.trial.TrialState.COMPLETE if values is not None else \
            optuna.trial.TrialState.FAIL if error else optuna.trial.TrialState.PRUNED
        try:
            self.study.tell(group["number"], values if values is None or len(values) > 1 else values[0], state=state)
        except Exception as exc:  # noqa: BLE001 -- e.g. a trial the study was told about already (another driver)
            logger.warning("Optuna trial %s: %s", group["number"], exc)
        group["told"] = True

    def should_prune(self, trial_id: str) -> bool:
        """Whether Optuna's pruner stops this trial's configuration (judged on its first seed's reports)."""
        group = self._group(trial_id)
        return group is not None and not group["told"] and self.optuna_trial(trial_id).should_prune()

    # ---- Tune's searcher save/restore (--resume)
    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump({"version": STATE_VERSION, **self.__getstate__()}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        if compat.is_legacy_state(state):  # a sweep recorded before this searcher: Ray's OptunaSearch's state
            self.adopt(compat.legacy_settings(state), compat.legacy_groups(self.pending_legacy_groups, state))
        else:
            state.pop("version", None)
            self.__setstate__({**state, "pending_legacy_groups": None})

    def adopt(self, settings: dict, groups: list[dict]) -> None:
        """Take an old sweep's settings and seed groups (``rirlab.compat.optuna``)."""
        repeat = self.repeat
        self.__dict__.update({k: v for k, v in settings.items() if k in ("metrics", "modes", "study_name", "storage",
                                                                          "sampler", "pruner")})
        self.space = settings.get("space") or self.space
        self.groups = groups
        self.group_of = {tid: i for i, g in enumerate(groups) for tid in g["trials"]}
        self.repeat, self.pending_legacy_groups, self._study, self._rdb, self._trials = repeat, None, None, None, {}


def distributions(config: dict) -> dict:
    """Optuna distributions of the searched keys of a Tune search space (tune.choice / uniform / loguniform /
    randint, as ``rirlab.sweeps.plan.plan._domain`` writes a spec's axes); constants are not searched."""
    from ray.tune.search.sample import Categorical, Domain, Float, Integer, LogUniform

    out = {}
    for key, domain in config.items():
        if not isinstance(domain, Domain):
            continue
        if isinstance(domain, Categorical):
            out[key] = optuna.distributions.CategoricalDistribution(domain.categories)
        elif isinstance(domain, Float):
            out[key] = optuna.distributions.FloatDistribution(domain.lower, domain.upper,
                                                              log=isinstance(domain.get_sampler(), LogUniform))
        elif isinstance(domain, Integer):  # Tune's upper bound is exclusive, Optuna's inclusive
            out[key] = optuna.distributions.IntDistribution(domain.lower, domain.upper - 1,
                                                            log=isinstance(domain.get_sampler(), LogUniform))
        else:
            raise ValueError(f"{key}: Optuna cannot search a {type(domain).__name__} domain")
    return out


def search_alg(plan, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None):
    """Each Optuna suggestion runs once per seed (Optuna is told the seed mean of each metric), in a persistent
    study (``optuna_study``); Tune runs num_samples x seeds trials (``Algorithm.tune_num_samples``)."""
    spec = plan.spec
    study_name, storage = optuna_study(spec, tracking_uri, tune_path)
    sampler = optuna_sampler(spec, _trials_in_study(rdb_storage(storage), study_name))
    searcher = OptunaSearcher(spec.metrics, spec.modes, study_name, storage, sampler, optuna_pruner(spec),
                              repeat=len(spec.seed_list))
    if getattr(plan, "warm", None) is not None:  # --warm-start: the study starts from earlier finished results
        warm_start(searcher.study, plan.warm, distributions(plan.param_space()))
    return SearchGenerator(ConcurrencyLimiter(searcher, max_concurrent=spec.max_concurrent)
                           if spec.max_concurrent else searcher)


WARM_START_ATTR = "rirlab_warm_start_runs"  # user attr of a trial added by --warm-start: the MLflow runs it came from


def warm_start(study, warm, space: dict) -> tuple[int, int]:
    """Seed ``study`` with earlier sweeps' finished configurations (``rirlab.sweeps.record.warm.WarmStart``, best
    first): one with every metric's value becomes a COMPLETE trial of those values (``study.add_trial``: the
    sampler learns from it and no trial of this sweep is spent on it), one without is queued
    (``study.enqueue_trial``: among the first this sweep runs). A configuration a trial of the study already came
    from (a named study warm-started before) is not added twice. Returns (added, queued).

    The values are told as the earlier runs measured them (their seed mean): warm-start from sweeps of the same
    task and metric."""
    done = {r for t in study.get_trials(deepcopy=False) for r in t.user_attrs.get(WARM_START_ATTR, ())}
    added = queued = 0
    for point, values, runs in zip(warm.points, warm.values, warm.runs):
        if done & set(runs):
            continue
        params = {k: v for k, v in point.items() if k in space}
        attrs = {WARM_START_ATTR: list(runs)}
        if values is None:
            study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=True)
            queued += 1
            continue
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions={k: space[k] for k in params}, values=list(values), user_attrs=attrs))
        added += 1
    return added, queued


class OptunaPruning(FIFOScheduler):
    """Stops a trial once Optuna's pruner prunes its configuration (judged on the first seed's reports)."""

    def __init__(self, searcher):
        super().__init__()
        self.searcher = searcher  # the OptunaSearcher (or a ConcurrencyLimiter around it)

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        inner = self.searcher
        while not hasattr(inner, "should_prune"):
            inner = inner.searcher
        try:
            return TrialScheduler.STOP if inner.should_prune(trial.trial_id) else TrialScheduler.CONTINUE
        except (KeyError, optuna.exceptions.OptunaError):
            return TrialScheduler.CONTINUE


def pruning_scheduler(search_alg):
    """The Tune scheduler that carries out Optuna's pruning decisions for an optuna search from ``search_alg``
    (None when its pruner is none): pass it as TuneConfig(scheduler=...) where the spec's scheduler is fifo."""
    searcher = getattr(search_alg, "searcher", None)
    inner = searcher
    while inner is not None and not isinstance(inner, OptunaSearcher):
        inner = getattr(inner, "searcher", None)
    if inner is None or isinstance(inner.pruner, optuna.pruners.NopPruner):
        return None
    return OptunaPruning(searcher)


def link_run(trial_id: str, run_id: str) -> dict[str, str]:
    """Link a Tune trial's MLflow run and its Optuna trial both ways: the run id is added to the Optuna trial's
    user attr ``contract.OPTUNA_RUN_IDS_ATTR`` (optuna-dashboard shows it), and the tags returned (the Optuna
    trial's number and study) go on the run. Empty when no Optuna trial is known for it."""
    from rirlab import contract

    searcher = _SEARCHER.get()
    ot_trial = searcher.optuna_trial(trial_id) if searcher is not None else None
    if ot_trial is None:
        return {}
    tags = {contract.OPTUNA_TRIAL_NUMBER: str(ot_trial.number), contract.OPTUNA_STUDY: ot_trial.study.study_name}
    try:  # a trial Optuna was already told about (a resumed sweep's) keeps its attrs as they are
        ids = list(ot_trial.user_attrs.get(contract.OPTUNA_RUN_IDS_ATTR, []))
        if run_id not in ids:
            ot_trial.set_user_attr(contract.OPTUNA_RUN_IDS_ATTR, ids + [run_id])
    except (RuntimeError, optuna.exceptions.OptunaError):
        pass
    return tags


# ---- the study's storage

OPTUNA_DB = "optuna.db"


def optuna_study(spec, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None) -> tuple[str, str]:
    """(study name, storage URL) of an optuna sweep: the spec's ``optuna:`` values, else the sweep's folder name
    ``<spec>-<hash>-<time>`` and an SQLite file ``optuna.db`` beside the MLflow store when that is a SQLite file,
    else in the output directory (``optuna-dashboard sqlite:///PATH/optuna.db`` shows it)."""
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


def study_before(spec, tracking_uri: Optional[str] = None) -> str:
    """A sweep that continues a named Optuna study (``optuna.study_name``) says so: ``study 'st' already holds 4
    trials``; "" for an unnamed study (one per sweep) or a study not yet in its storage."""
    if not spec.optuna.study_name:
        return ""
    name, url = optuna_study(spec, tracking_uri, tune_path="rirlab_runs/-")  # (a named study: the path is unused)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        return ""  # (nothing is created to find that out)
    try:
        n = _trials_in_study(rdb_storage(url), name)
    except Exception:  # noqa: BLE001 -- an unreadable storage: the sweep itself says so before any trial
        return ""
    return f"study '{name}' already holds {n} trial{'s' * (n != 1)}" if n else ""


STORE_WAIT_ENV = "RIRLAB_STORE_WAIT_S"  # the MLflow store's wait too (rirlab.sweeps.record.faults.store_wait_s)
STORE_WAIT_S = 120.0


def lock_wait_s() -> float:
    """Seconds a write to a SQLite study waits for another process's lock: the MLflow store's wait
    ($RIRLAB_STORE_WAIT_S, default 120; read here too, as this layer does not import the record side)."""
    try:
        value = float(os.environ.get(STORE_WAIT_ENV, STORE_WAIT_S))
    except ValueError:
        return STORE_WAIT_S
    return value if value > 0 else STORE_WAIT_S


# what a second process creating a database's schema at the same time as another one meets (SQLite, PostgreSQL)
_SCHEMA_RACE = ("alembic_version", "already exists", "duplicate key value")


def rdb_storage(url: str):
    """Optuna's RDBStorage of ``url``; a storage that cannot be opened is a one-line UserError naming it (its
    password masked).

    A SQLite study waits ``lock_wait_s`` for another process's lock (Python's sqlite3 gives up after 5 s): two optuna
    sweeps on one SQLite store share the ``optuna.db`` beside it, and on a loaded machine one's ask or tell waited
    longer than that for the other's and failed with "database is locked", ending the sweep in a traceback. Two
    sweeps that open a new database at once both create its schema: the one that comes second fails on a row or table
    the other just made (``UNIQUE constraint failed: alembic_version``, ``table ... already exists``), and is opened
    again, which then finds the schema made (Optuna creates it only where missing)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created in RDB ..." on the terminal
    kwargs = {"connect_args": {"timeout": lock_wait_s()}} if url.startswith("sqlite:") else {}
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except Exception as err:  # a bad URL or a database that cannot be opened: before any trial starts
            if attempt < 4 and any(m in str(err) for m in _SCHEMA_RACE):
                time.sleep(0.2 * (attempt + 1))  # another sweep made the schema meanwhile: open it again
                continue
            shown, why = mask_url(url), redact_uri(str(err).splitlines()[0])  # the URL first: its password known
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


def check_storage(spec, tracking_uri: str, tune_path: str) -> None:
    """An optuna sweep's study storage, checked before the parent run exists: not the MLflow store itself (Optuna
    would add its tables to it) and a database Optuna can open."""
    _, url = optuna_study(spec, tracking_uri, tune_path)
    if _same_database(url, tracking_uri):
        raise UserError(f"optuna.storage {mask_url(url)!r} is the MLflow store; give Optuna a database of its own "
                        f"(e.g. sqlite:///optuna.db), or leave optuna.storage out for a file beside the store")
    rdb_storage(url).remove_session()


def _trials_in_study(storage, study_name: str) -> int:
    """How many trials the named study already holds (0 for a new study)."""
    try:
        return len(storage.get_all_trials(storage.get_study_id_from_name(study_name), deepcopy=False))
    except KeyError:
        return 0


def optuna_sampler(spec, done: int = 0):
    """The spec's ``optuna.sampler`` (a name from ``rirlab.sweeps.algorithms.optuna.SAMPLERS``), seeded with the first seed
    plus the number of trials the study already holds: a sweep that continues a persistent study (the same
    ``optuna.study_name`` and storage) draws new configurations instead of re-proposing the first sweep's (a
    sampler seeded alike replays its random start-up draws), while a fresh study stays reproducible."""
    seed = spec.seed_list[0] + done
    return {"tpe": lambda: optuna.samplers.TPESampler(seed=seed),
            "random": lambda: optuna.samplers.RandomSampler(seed=seed),
            "qmc": lambda: optuna.samplers.QMCSampler(seed=seed),
            "gp": lambda: optuna.samplers.GPSampler(seed=seed),
            "nsgaii": lambda: optuna.samplers.NSGAIISampler(seed=seed)}[spec.optuna.sampler]()


def optuna_pruner(spec):
    """The spec's ``optuna.pruner`` as an Optuna pruner (NopPruner for none)."""
    return {"none": optuna.pruners.NopPruner, "median": optuna.pruners.MedianPruner,
            "hyperband": optuna.pruners.HyperbandPruner,
            "successive_halving": optuna.pruners.SuccessiveHalvingPruner}[spec.optuna.pruner]()


# ---- sweeps recorded before this searcher: Tune's tuner.pkl names these classes of this module

class OptunaSearchEvalOnly:
    """Was Ray's OptunaSearch subclassed: unpickles into an OptunaSearcher with the old one's settings."""

    def __setstate__(self, state: dict):
        fresh = _blank(compat.legacy_settings(state))
        self.__class__ = OptunaSearcher
        OptunaSearcher.__setstate__(self, fresh)


def _blank(settings: dict) -> dict:
    """A fresh OptunaSearcher's state with an old sweep's settings (its groups come with its restore)."""
    fresh = OptunaSearcher(settings["metrics"], settings["modes"], settings["study_name"], settings["storage"],
                           settings["sampler"], settings["pruner"])
    fresh.space = settings["space"]
    return fresh.__getstate__()


class SeedRepeater(Searcher):
    """Was Ray's Repeater subclassed: unpickles into a pass-through to the OptunaSearcher below it, which now
    groups the seeds itself. It stays in the chain because Tune restores each wrapper's saved state by class name
    (``name:SeedRepeater``): the old Repeater's seed groups reach the searcher that way."""

    def __setstate__(self, state: dict):
        self.searcher, self.repeat = state["searcher"], state.get("repeat", 1)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        self.searcher.repeat = self.repeat

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        self.searcher.repeat = self.repeat
        return self.searcher.set_search_properties(metric, mode, config, **spec)

    def suggest(self, trial_id):
        return self.searcher.suggest(trial_id)

    def on_trial_result(self, trial_id, result):
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def should_prune(self, trial_id) -> bool:
        return self.searcher.should_prune(trial_id)

    def get_state(self) -> dict:
        return {"repeat": self.repeat}  # (the groups are the searcher's own now, in its saved state)

    def set_state(self, state: dict) -> None:
        if "_groups" in state:  # the old Repeater's state: the seed groups, which the searcher's restore takes
            self.searcher.pending_legacy_groups = state

    def save(self, checkpoint_path):
        self.searcher.save(checkpoint_path)

    def restore(self, checkpoint_path):
        self.searcher.restore(checkpoint_path)


class PerSeedGenerator(SearchGenerator):
    """Was a SearchGenerator that ran each of Tune's num_samples once per seed: unpickles into one that still does
    (an old sweep's Tuner passes Tune the number of configurations)."""

    def __setstate__(self, state: dict):
        SearchGenerator.__init__(self, state["searcher"])  # (a fresh argument parser: the old one was not pickled)
        self.__dict__.update({k: v for k, v in state.items() if k != "_parser"})

    def add_configurations(self, experiments):
        super().add_configurations(experiments)
        compat.scale_total_samples(self, self._repeat)
