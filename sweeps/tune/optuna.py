"""Ray Tune subclasses that an ``algorithm: optuna`` sweep runs with (``sweeps.tune.search.search_alg``).

Imported only by optuna sweeps (importing Ray Tune's Optuna glue is slow) and by Tune itself when ``--resume``
unpickles a saved search algorithm, which names these classes by this module. They reach into the private
state of Ray's ``OptunaSearch`` / ``Repeater`` / ``SearchGenerator`` (``_ot_study``, ``_ot_trials``,
``_completed_trials``, ``_trial_id_to_group``, ``_total_samples``, ``_parser``): Ray offers no public hook for
passing only evaluation reports to Optuna, for a pruner, or for counting samples per configuration; the
pinned Ray version is what tests/sweeps exercise.
"""

from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import optuna
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Repeater, SearchGenerator
from ray.tune.search.optuna import OptunaSearch


class OptunaSearchEvalOnly(OptunaSearch):
    """Ray's OptunaSearch reads the metric from every report; a trial reports its train loss every
    ``log_every`` steps and the metric (dev accuracy) only when it evaluates: pass only those to Optuna."""

    pruner = None  # set by search_alg; Ray's OptunaSearch creates its study with NopPruner

    def on_trial_result(self, trial_id: str, result: dict):
        if isinstance(self.metric, str) and self.metric not in result:
            return
        super().on_trial_result(trial_id, result)

    def _setup_study(self, mode):
        super()._setup_study(mode)
        if self.pruner is not None:
            self._ot_study.pruner = self.pruner
        # optuna-dashboard names the objectives after the metrics instead of "Objective 0, 1"
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2: not a message for the user's terminal
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._ot_study.set_metric_names(self.metric if isinstance(self.metric, list) else [self.metric])

    def should_prune(self, trial_id: str) -> bool:
        ot_trial = self._ot_trials.get(trial_id)
        return ot_trial is not None and trial_id not in self._completed_trials and ot_trial.should_prune()


_LIVE: list["SeedRepeater"] = []  # the optuna searcher of this driver's sweep (a fresh or a restored one)


class SeedRepeater(Repeater):
    """Repeater that also averages several objectives (multi-objective Optuna) over the seeds, and passes the
    intermediate results of each configuration's first seed to Optuna (what its pruner judges)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _LIVE[:] = [self]

    def __setstate__(self, state):  # --resume: Tune unpickles the saved searcher
        self.__dict__.update(state)
        _LIVE[:] = [self]

    def optuna_trial(self, trial_id: str):
        """The Optuna trial that proposed a Tune trial's configuration (each seed's trial shares its group's)."""
        group = self._trial_id_to_group.get(trial_id)
        return None if group is None else self.searcher._ot_trials.get(group.primary_trial_id)

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


def link_run(trial_id: str, run_id: str) -> dict[str, str]:
    """Link a Tune trial's MLflow run and its Optuna trial both ways: the run id is added to the Optuna trial's
    user attr ``contract.OPTUNA_RUN_IDS_ATTR`` (optuna-dashboard shows it), and the tags returned (the Optuna
    trial's number and study) go on the run. Empty when no Optuna trial is known for it."""
    from rirlab import contract

    ot_trial = _LIVE[0].optuna_trial(trial_id) if _LIVE else None
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
