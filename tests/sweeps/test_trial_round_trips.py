"""The driver's bookkeeping per trial (issue 50: at 1,000 tiny trials `rirlab sweep` took 2.1x a bare `Tuner.fit`,
most of it the store's round trips per trial): a trial's final values carry their marks in the same call, its end
is one write, its weights are stored once, and what readers load is all still there. Against a real MLflow sqlite
store, no Ray."""

from __future__ import annotations

import collections
import types

import pytest
import torch
from mlflow.entities import Metric, RunTag

from rirlab import contract
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record.callback import MLflowTrialCallback
from rirlab.sweeps.record.tracker import Tracker
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.schema import base_config
from tests.helpers.cli import REPO

PLAN = SweepPlan.of(load_spec(REPO / "tests" / "specs" / "tiny.yaml"))
FINAL = {"step": 40, "train/loss": 1.0, "dev/accuracy": 20.0, "test/accuracy": 30.0, "final": True}


def _store(tmp_path, new_store):
    tracker = Tracker(new_store(tmp_path / "mlruns.db"))
    exp_id = tracker.experiment_id("tiny")
    return tracker, exp_id, tracker.start_parent(exp_id, "tiny", {})


def _trial(key, checkpoint=None):
    return types.SimpleNamespace(trial_id=key, config={**base_config(PLAN.spec), "lr": 0.003, "seed": 0},
                                 last_result={}, checkpoint=checkpoint, num_failures=0)


def _calls(tracker, monkeypatch):
    """The MLflow client calls the driver makes from here on, by name (the store's round trips)."""
    calls = collections.Counter()
    for name in ("log_batch", "set_tag", "delete_tag", "set_terminated", "search_runs", "get_run", "log_artifacts",
                 "create_logged_model"):
        real = getattr(tracker.client, name)
        monkeypatch.setattr(tracker.client, name,
                            lambda *a, _real=real, _name=name, **kw: calls.update([_name]) or _real(*a, **kw))
    return calls


def _checkpoint(tmp_path):
    """A trial's checkpoint folder whose state holds the weights of the spec's model (as the trainer saves them)."""
    from rirlab.models import registry as models
    from rirlab.tasks import registry as tasks
    from rirlab.tasks.base import TaskInfo

    resolved = PLAN.resolved_of(PLAN.space.trial(_trial("x").config))
    task = tasks.get(resolved.task)
    model = models.get(resolved.model).build(resolved.model_cfg,
                                             TaskInfo(len(task.vocab), task.num_classes, task.kind))
    folder = tmp_path / "checkpoint_000000"
    folder.mkdir()
    torch.save({"model": model.state_dict(), "best_weights": None}, folder / contract.CHECKPOINT_STATE_FILE)
    return types.SimpleNamespace(path=str(folder)), model


def test_the_final_result_carries_its_marks_and_the_end_is_one_write(tmp_path, new_store, monkeypatch):
    """The final values, "final logged" and the outcome's word in one call; the run's end then only its status
    (before: the marks and the word were two more calls of their own)."""
    tracker, exp_id, parent = _store(tmp_path, new_store)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    t = _trial("a1b2c_00000")
    cb.on_trial_start(0, [], t)
    calls = _calls(tracker, monkeypatch)
    cb.on_trial_result(0, [], t, FINAL)
    assert calls == {"log_batch": 1}
    tags = tracker.client.get_run(cb.runs[t.trial_id]).data.tags
    assert tags[contract.FINAL_LOGGED] == contract.TRUE and tags[contract.OUTCOME] == contract.FINISHED_WORD
    calls.clear()
    t.last_result = FINAL
    cb.on_trial_complete(0, [], t)
    assert calls == {"set_terminated": 1}
    run = tracker.client.get_run(cb.runs[t.trial_id])
    assert run.info.status == "FINISHED" and run.data.tags[contract.OUTCOME] == contract.FINISHED_WORD


def test_a_trial_that_fails_after_its_final_result_does_not_say_finished(tmp_path, new_store):
    tracker, exp_id, parent = _store(tmp_path, new_store)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    t = _trial("a1b2c_00000")
    cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], t, FINAL)
    t.error_file = None
    cb.on_trial_error(0, [], t)
    run = tracker.client.get_run(cb.runs[t.trial_id])
    assert run.info.status == "FAILED" and contract.OUTCOME not in run.data.tags
    assert cb.counts().failed == 1


def test_marks_written_after_a_split_result_come_last(tmp_path, new_store, monkeypatch):
    """A final result over MLflow's limits is several calls: its marks go in a call of their own after them, so a
    driver killed between two of them leaves no mark saying the final values are all in the store."""
    tracker, exp_id, parent = _store(tmp_path, new_store)
    run = tracker.start_child(exp_id, parent, "t", {"lr": 0.1}, {})
    sent = []
    real = tracker.client.log_batch
    monkeypatch.setattr(tracker.client, "log_batch", lambda run_id, metrics=(), params=(), tags=(), **kw:
                        sent.append(({m.key for m in metrics}, {t.key for t in tags})) or
                        real(run_id, metrics=metrics, params=params, tags=tags, **kw))
    mark = [RunTag(contract.FINAL_LOGGED, contract.TRUE)]
    tracker.log_batch(run, metrics=[Metric(f"m/{i}", 1.0, 0, 1) for i in range(2500)], last_tags=mark)
    assert len(sent) == 4 and sent[-1] == (set(), {contract.FINAL_LOGGED})
    assert all(contract.FINAL_LOGGED not in tags for _, tags in sent[:-1])
    sent.clear()
    tracker.log_batch(run, metrics=[Metric("m/x", 1.0, 0, 1)], last_tags=mark)  # one call: the mark in it
    assert sent == [({"m/x"}, {contract.FINAL_LOGGED})]


def test_the_weights_are_stored_once_and_load_from_the_run_and_the_logged_model(tmp_path, new_store, monkeypatch):
    """MLflow 3 keeps a model's files under its logged model; ``runs:/<run>/model`` resolves to it. The driver wrote
    them a second time under the run's own ``model/`` folder (half of a tiny trial's store) and read the run back
    to name the logged model; neither now. What users load, the checkpoint `rirlab evaluate` reads, and the
    logged model the UI lists are all there."""
    import mlflow
    import mlflow.pytorch

    tracker, exp_id, parent = _store(tmp_path, new_store)
    ckpt, built = _checkpoint(tmp_path)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN)
    t = _trial("a1b2c_00000", ckpt)
    cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], t, FINAL)
    t.last_result = FINAL
    calls = _calls(tracker, monkeypatch)
    cb.on_trial_complete(0, [], t)
    run_id = cb.runs[t.trial_id]
    assert calls["get_run"] == 0 and calls["log_artifacts"] == 0  # (the checkpoint: straight into the run's folder)
    run = tracker.client.get_run(run_id)
    assert contract.MODEL_ERROR not in run.data.tags
    repo_root = tracker.client.get_run(run_id).info.artifact_uri.removeprefix("file://")
    import pathlib

    stored = {p.name for p in pathlib.Path(repo_root).iterdir()}
    assert contract.MODEL_ARTIFACT not in stored and contract.CHECKPOINT_ARTIFACT in stored, stored
    (logged,) = tracker.client.search_logged_models([exp_id], filter_string=f"source_run_id = '{run_id}'")
    assert logged.status == "READY" and logged.tags[contract.TRIAL_NAME_TAG] == run.info.run_name
    assert logged.name == contract.MODEL_ARTIFACT
    mlflow.set_tracking_uri(tracker.uri.raw)
    try:
        for uri in (f"runs:/{run_id}/{contract.MODEL_ARTIFACT}", f"models:/{logged.model_id}"):
            model = mlflow.pytorch.load_model(uri)
            assert not model.training
            assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), built.state_dict().values()))
    finally:
        mlflow.set_tracking_uri(None)


@pytest.mark.parametrize("mlflow2", [False, True])
def test_without_logged_models_the_weights_are_the_runs_model_folder(tmp_path, new_store, monkeypatch, mlflow2):
    """An MLflow 2 client has no logged models: the weights are the run's ``model/`` as before. An MLflow 3 client
    against a server that refuses them (an MLflow 2 server): the same, and the run says why."""
    import mlflow
    import mlflow.pytorch

    tracker, exp_id, parent = _store(tmp_path, new_store)
    ckpt, _ = _checkpoint(tmp_path)
    if mlflow2:
        monkeypatch.delattr(type(tracker.client), "create_logged_model")
    else:
        def refused(*a, **kw):
            raise RuntimeError("404 Not Found: /api/2.0/mlflow/logged-models")
        monkeypatch.setattr(tracker.client, "create_logged_model", refused)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN)
    t = _trial("a1b2c_00000", ckpt)
    cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], t, FINAL)
    t.last_result = FINAL
    cb.on_trial_complete(0, [], t)
    run_id = cb.runs[t.trial_id]
    listed = {a.path for a in tracker.client.list_artifacts(run_id)}
    assert contract.MODEL_ARTIFACT in listed, listed
    error = tracker.client.get_run(run_id).data.tags.get(contract.MODEL_ERROR)
    assert (error is None) if mlflow2 else ("404 Not Found" in error and "model/" in error), error
    mlflow.set_tracking_uri(tracker.uri.raw)
    try:
        assert not mlflow.pytorch.load_model(f"runs:/{run_id}/{contract.MODEL_ARTIFACT}").training
    finally:
        mlflow.set_tracking_uri(None)


def test_a_whole_trial_never_reads_its_run_back_and_its_artifacts_are_where_mlflow_reads_them(tmp_path, new_store,
                                                                                             monkeypatch):
    """Start to end, the driver knows every run it created (its id, experiment, name, artifact folder): no
    ``get_run`` (MLflow's client read the run back to find its artifact folder at the first artifact, 60-120 ms
    here) and no search. The config and the checkpoint are where MLflow's own client finds them."""
    import yaml

    tracker, exp_id, parent = _store(tmp_path, new_store)
    ckpt, _ = _checkpoint(tmp_path)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN)
    t = _trial("a1b2c_00000", ckpt)
    calls = _calls(tracker, monkeypatch)
    cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], t, FINAL)
    t.last_result = FINAL
    cb.on_trial_complete(0, [], t)
    assert calls["get_run"] == 0 and calls["search_runs"] == 0, calls
    run_id = cb.runs[t.trial_id]
    listed = {a.path for a in tracker.client.list_artifacts(run_id)}
    assert {contract.CONFIG_ARTIFACT, contract.CHECKPOINT_ARTIFACT} <= listed, listed
    assert f"{contract.CHECKPOINT_ARTIFACT}/{contract.CHECKPOINT_STATE_FILE}" in {
        a.path for a in tracker.client.list_artifacts(run_id, contract.CHECKPOINT_ARTIFACT)}
    config = yaml.safe_load(open(tracker.client.download_artifacts(run_id, contract.CONFIG_ARTIFACT, str(tmp_path))))
    assert config["lr"] == 0.003 and config["model"] == "rir_grc"
    # a run whose artifacts are not local files (a server's mlflow-artifacts:/, S3): MLflow's client writes them
    tracker._artifact_uris[run_id] = "s3://bucket/0/abc/artifacts"
    assert tracker._local_artifacts(run_id) is None
    assert tracker._local_artifacts("a run this driver did not create") is None


def test_a_trials_round_trips_to_the_store_are_these_nine(tmp_path, new_store, monkeypatch):
    """Every MLflow client call of one finished trial, start to end (a bound counted, not timed; issue 50): the run,
    its params, its datasets, its results with their marks, its end, and the four calls of the logged model (the
    config and the checkpoint are file copies into the run's local folder). Before: 16 calls (a twin search, the
    config and the checkpoint through the client, which read the run back, two tag writes of their own, the
    weights copied to the run's model/ too, a get_run to name the logged model), 26 SQLite commits against 18 now."""
    tracker, exp_id, parent = _store(tmp_path, new_store)
    ckpt, _ = _checkpoint(tmp_path)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN)
    t = _trial("a1b2c_00000", ckpt)
    calls = []
    client = tracker.client
    for name in dir(client):
        method = getattr(client, name)
        if not name.startswith("_") and callable(method):
            monkeypatch.setattr(client, name, lambda *a, _m=method, _n=name, **kw: calls.append(_n) or _m(*a, **kw))
    cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], t, FINAL)  # (a tiny trial's one result; more are written together: test_log_flush)
    t.last_result = FINAL
    cb.on_trial_complete(0, [], t)
    assert calls == ["create_run", "log_batch", "log_inputs", "log_batch", "create_logged_model",
                     "log_model_artifacts", "finalize_logged_model", "log_outputs", "set_terminated"], calls
