"""--rerun-failed on an optuna sweep (issue 50 item 4): what the rerun measured is told to the Optuna study as a new
finished trial of the same configuration, so the study does not keep the failure as that configuration's only
record (Optuna refuses a second result for a closed trial). A real MLflow sqlite store and Optuna storage, no Ray."""

from __future__ import annotations

import types

import optuna

from rirlab import contract
from rirlab.sweeps.driver import rerun
from rirlab.sweeps.record.tracker import Tracker

STUDY = "o-abc-20261205"


def _spec(tmp_path):
    return types.SimpleNamespace(name="o", metrics=["dev/accuracy"], modes=["max"], seed_list=[0, 1],
                                 optuna=types.SimpleNamespace(study_name=None, storage=f"sqlite:///{tmp_path / 'o.db'}"))


def _child(tracker, exp, parent, name, number, status, acc=None, rerun_of=None):
    tags = {contract.TRIAL_KEY: name, contract.OPTUNA_STUDY: STUDY, contract.OPTUNA_TRIAL_NUMBER: str(number)}
    if rerun_of:
        tags[contract.RERUN_OF] = rerun_of
    run = tracker.start_child(exp, parent, name, {"lr": 0.01}, tags)
    if acc is not None:
        tracker.log_result(run, {"dev/accuracy": acc, "final": True}, 40)
    tracker.finish(run, status)
    return run


def _sweep_with_a_failed_configuration(tmp_path):
    """Optuna trial 0 finished (both seeds); trial 1's seed 1 failed, so the study closed trial 1 as FAIL."""
    spec = _spec(tmp_path)
    study = optuna.create_study(study_name=STUDY, storage=spec.optuna.storage, direction="maximize")
    dists = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)}
    for number, state in ((0, optuna.trial.TrialState.COMPLETE), (1, optuna.trial.TrialState.FAIL)):
        trial = study.ask(dists)
        study.tell(trial, 50.0 if state == optuna.trial.TrialState.COMPLETE else None, state=state)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = tracker.experiment_id("o")
    parent = tracker.start_parent(exp, "o", {contract.TUNE_PATH: str(tmp_path / "runs" / STUDY)})
    _child(tracker, exp, parent, "a0", 0, "FINISHED", 50.0)
    _child(tracker, exp, parent, "a1", 0, "FINISHED", 50.0)
    _child(tracker, exp, parent, "b0", 1, "FINISHED", 60.0)
    failed = _child(tracker, exp, parent, "b1", 1, "FAILED")
    return spec, tracker, exp, parent, failed


def test_a_rerun_of_an_optuna_sweep_tells_the_study_its_results(tmp_path):
    spec, tracker, exp, parent, failed = _sweep_with_a_failed_configuration(tmp_path)
    assert rerun.tell_study(tracker, exp, parent, spec, tracker.uri.raw) == ""  # nothing rerun yet: nothing told
    new = _child(tracker, exp, parent, "b1", 1, "FINISHED", 70.0, rerun_of=failed)  # the rerun's attempt

    line = rerun.tell_study(tracker, exp, parent, spec, tracker.uri.raw)
    assert line.startswith(f"told Optuna study {STUDY!r} the rerun results of trial(s) 1 (fail)"), line
    study = optuna.load_study(study_name=STUDY, storage=spec.optuna.storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 2  # before: trial 1's only record was its failure
    told = complete[-1]
    assert told.value == 65.0  # the seed mean of the latest attempts (60 and the rerun's 70)
    assert told.params == study.trials[1].params and told.user_attrs[rerun.RERUN_ATTR] == 1
    assert new in told.user_attrs[contract.OPTUNA_RUN_IDS_ATTR] and failed not in told.user_attrs[
        contract.OPTUNA_RUN_IDS_ATTR]
    # told once: a resumed or repeated rerun adds nothing
    assert rerun.tell_study(tracker, exp, parent, spec, tracker.uri.raw) == ""
    assert len(optuna.load_study(study_name=STUDY, storage=spec.optuna.storage).trials) == 3


def test_a_rerun_that_failed_again_tells_the_study_nothing(tmp_path):
    spec, tracker, exp, parent, failed = _sweep_with_a_failed_configuration(tmp_path)
    _child(tracker, exp, parent, "b1", 1, "FAILED", rerun_of=failed)
    assert rerun.tell_study(tracker, exp, parent, spec, tracker.uri.raw) == ""
    assert len(optuna.load_study(study_name=STUDY, storage=spec.optuna.storage).trials) == 2
