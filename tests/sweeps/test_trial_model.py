"""A trial's MLflow model (issue 50): its worker saves the evaluated model beside its final checkpoint, and the
driver only logs it (it rebuilt the model, reloaded the checkpoint and ran ``mlflow.pytorch.save_model`` per trial,
blocking Ray Tune's loop: 7.0 s of 20 tiny trials' 11.6 s in the driver's callbacks). What users load is the same:
``runs:/<run>/model`` and ``models:/<id>`` give the evaluated weights. And a driver killed between a trial's final
values and its end: --resume logs the checkpoint and the model before it closes the run (it closed the run only).
The trial runs in this process (a fake ``tune``), the driver's callback against a real MLflow sqlite store."""

from __future__ import annotations

import shutil
import types

import pytest
import torch

from rirlab import contract, saved_model
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record import artifacts
from rirlab.sweeps.record.callback import MLflowTrialCallback
from rirlab.sweeps.record.tracker import Tracker
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.schema import base_config
from rirlab.train import load_checkpoint
from tests.helpers.cli import REPO

PLAN = SweepPlan.of(load_spec(REPO / "tests" / "specs" / "tiny.yaml"))
CONFIG = {**base_config(PLAN.spec), "lr": 0.003, "seed": 0, "select_by": "accuracy"}  # (the best dev weights)


@pytest.fixture(scope="module")
def trial(tmp_path_factory, one_thread):
    """The tiny spec's trial run by the sweep's trainable: its folder (checkpoint_000000 at step 20, the final one
    checkpoint_000001) and its final result."""
    from rirlab.sweeps.tune import trainable as tr

    folder = tmp_path_factory.mktemp("trial") / "trial_0000"
    folder.mkdir()
    saved, results = [], []

    def report(metrics, checkpoint=None):
        results.append(metrics)
        if checkpoint is not None:
            shutil.copytree(checkpoint, folder / f"checkpoint_{len(saved):06d}")
            saved.append(folder / f"checkpoint_{len(saved):06d}")

    fake = types.SimpleNamespace(get_checkpoint=lambda: None, report=report,
                                 Checkpoint=types.SimpleNamespace(from_directory=lambda d: d))
    real = tr.tune
    tr.tune = fake
    try:
        tr.trainable(CONFIG, space=PLAN.space, checkpoint_every=20)
    finally:
        tr.tune = real
    assert [p.name for p in saved] == ["checkpoint_000000", "checkpoint_000001"] and results[-1][contract.FINAL]
    return folder, saved, results[-1]


def evaluated(checkpoint) -> dict:
    state = load_checkpoint(checkpoint / contract.CHECKPOINT_STATE_FILE)
    return saved_model.evaluated_weights(state, CONFIG)


def same_weights(model, weights: dict) -> bool:
    got = model.state_dict()
    return got.keys() == weights.keys() and all(torch.equal(got[k], weights[k].cpu()) for k in got)


def test_the_worker_saves_the_evaluated_model_beside_the_final_checkpoint_only(trial):
    _, saved, _ = trial
    assert not (saved[0] / contract.CHECKPOINT_MODEL_FILE).exists()
    model = torch.load(saved[-1] / contract.CHECKPOINT_MODEL_FILE, weights_only=False)
    assert not model.training and same_weights(model, evaluated(saved[-1]))
    state = load_checkpoint(saved[-1] / contract.CHECKPOINT_STATE_FILE)
    assert state["best_weights"] is not None and not same_weights(model, state["model"])  # the best dev ones


def _store(tmp_path, new_store):
    tracker = Tracker(new_store(tmp_path / "mlruns.db"))
    exp_id = tracker.experiment_id("tiny")
    return tracker, exp_id, tracker.start_parent(exp_id, "tiny", {})


def _trial(key, final, checkpoint=None, path=None):
    return types.SimpleNamespace(trial_id=key, config=CONFIG, last_result=final, num_failures=0, path=path,
                                 checkpoint=types.SimpleNamespace(path=str(checkpoint)) if checkpoint else None)


def _loaded(tracker, exp_id, run_id):
    """The run's MLflow model as users load it: through the run and through its logged model."""
    import mlflow
    import mlflow.pytorch

    (logged,) = tracker.client.search_logged_models([exp_id], filter_string=f"source_run_id = '{run_id}'")
    assert logged.status == "READY"
    mlflow.set_tracking_uri(tracker.uri.raw)
    try:
        return [mlflow.pytorch.load_model(u) for u in (f"runs:/{run_id}/{contract.MODEL_ARTIFACT}",
                                                       f"models:/{logged.model_id}")]
    finally:
        mlflow.set_tracking_uri(None)


def test_the_driver_logs_the_workers_model_without_building_it(trial, tmp_path, new_store, monkeypatch):
    """Neither the model's build nor the checkpoint's load on the driver; the run's checkpoint/ without the model
    file (stored once: as the logged model); each trial's model folder its own MLmodel id."""
    folder, saved, final = trial
    tracker, exp_id, parent = _store(tmp_path, new_store)
    monkeypatch.setattr(artifacts, "evaluated_model", lambda *a: pytest.fail("the driver built the model"))
    monkeypatch.setattr("rirlab.train.load_checkpoint", lambda *a: pytest.fail("the driver read the checkpoint"))
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN)
    uuids = set()
    for key in ("a1b2c_00000", "a1b2c_00001"):
        t = _trial(key, final, saved[-1])
        cb.on_trial_start(0, [], t)
        cb.on_trial_result(0, [], t, final)
        cb.on_trial_complete(0, [], t)
        run_id = cb.runs[key]
        assert contract.MODEL_ERROR not in tracker.client.get_run(run_id).data.tags
        assert {a.path for a in tracker.client.list_artifacts(run_id, contract.CHECKPOINT_ARTIFACT)} == {
            f"{contract.CHECKPOINT_ARTIFACT}/{contract.CHECKPOINT_STATE_FILE}"}
        for model in _loaded(tracker, exp_id, run_id):
            assert not model.training and same_weights(model, evaluated(saved[-1]))
        uuids.add(_mlmodel(tracker, run_id)["model_uuid"])
    assert len(uuids) == 2


def _mlmodel(tracker, run_id) -> dict:
    import mlflow
    import yaml

    mlflow.set_tracking_uri(tracker.uri.raw)
    try:
        path = mlflow.artifacts.download_artifacts(f"runs:/{run_id}/{contract.MODEL_ARTIFACT}/MLmodel")
    finally:
        mlflow.set_tracking_uri(None)
    return yaml.safe_load(open(path))


@pytest.mark.parametrize("logged_before", [False, True])
def test_resume_logs_the_checkpoint_and_model_of_a_trial_whose_end_the_driver_missed(trial, tmp_path, new_store,
                                                                                      logged_before):
    """The driver died after the trial's final values (``final_logged``) and before its end, Tune not having
    recorded the final checkpoint (the trial's checkpoint is the step-20 one, or none): the resumed driver finds
    the final one in the trial's folder, logs it and the model, then closes the run. ``logged_before``: the dead
    driver had logged both already: not twice."""
    folder, saved, final = trial
    tracker, exp_id, parent = _store(tmp_path, new_store)
    key = "a1b2c_00000"
    first = MLflowTrialCallback(tracker, exp_id, parent, PLAN)
    t = _trial(key, final, saved[-1])
    first.on_trial_start(0, [], t)
    first.on_trial_result(0, [], t, final)
    run_id = first.runs[key]
    if logged_before:
        first._log_checkpoint(run_id, t, str(saved[-1]))
    # --resume: a new driver on the same store; Tune restored the trial with an earlier checkpoint (or none)
    for checkpoint in (saved[0], None):
        second = MLflowTrialCallback(tracker, exp_id, parent, PLAN)
        assert key in second.unclosed
        t = _trial(key, final, checkpoint, path=str(folder))
        second.on_trial_start(0, [], t)
        second.on_trial_result(0, [], t, final)
        second.on_trial_complete(0, [], t)
        run = tracker.client.get_run(run_id)
        assert run.info.status == "FINISHED" and second.counts().finished == 1
        tracker.reopen(run_id)  # (again, with the other checkpoint Tune may have restored)
    logged = tracker.client.search_logged_models([exp_id], filter_string=f"source_run_id = '{run_id}'")
    assert len(logged) == 1
    assert {a.path for a in tracker.client.list_artifacts(run_id, contract.CHECKPOINT_ARTIFACT)} == {
        f"{contract.CHECKPOINT_ARTIFACT}/{contract.CHECKPOINT_STATE_FILE}"}
    with open(tracker.client.download_artifacts(run_id, f"{contract.CHECKPOINT_ARTIFACT}/"
                                                f"{contract.CHECKPOINT_STATE_FILE}", str(tmp_path)), "rb") as f:
        assert torch.load(f, weights_only=True)["step"] == final[contract.STEP]
    for model in _loaded(tracker, exp_id, run_id):
        assert same_weights(model, evaluated(saved[-1]))


def test_a_trial_whose_model_cannot_be_saved_still_ends_and_leaves_no_file(tmp_path, monkeypatch):
    """The worker's save failing costs the file, never the trial (the driver then builds the model as before)."""
    from rirlab.sweeps.tune import trainable as tr

    monkeypatch.setattr(saved_model, "write_model_file", lambda model, path: (open(path, "wb").write(b"half"),
                                                                            1 / 0))
    state = {contract.STATE_CONFIG: CONFIG, "model": {}, "best_weights": None}
    monkeypatch.setattr(saved_model, "evaluated_model", lambda resolved, state: torch.nn.Linear(1, 1))
    tr._save_final_model(state, str(tmp_path))
    assert not (tmp_path / contract.CHECKPOINT_MODEL_FILE).exists()
