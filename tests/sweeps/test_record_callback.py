"""The driver's MLflow callback on a resumed sweep, against a real MLflow sqlite store (no Ray): a run that
ended, or whose final result was logged before the driver died, is never trained or logged again; a replayed
step is never logged twice."""

from __future__ import annotations

import types

from rirlab import contract
from rirlab.sweeps.record.callback import MLflowTrialCallback
from rirlab.sweeps.driver.sweep import _recorded_ends
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record.tracker import Tracker
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.schema import base_config
from tests.helpers.cli import REPO


PLAN = SweepPlan.of(load_spec(REPO / "tests" / "specs" / "tiny.yaml"))
SPEC = PLAN.spec


def _trial(key, lr):
    return types.SimpleNamespace(trial_id=key, config={**base_config(SPEC), "lr": lr, "seed": 0}, last_result={},
                                 checkpoint=None, num_failures=0)


def _steps(tracker, run_id, key):
    return [m.step for m in tracker.client.get_metric_history(run_id, key)]


def test_a_resumed_sweep_neither_reruns_nor_relogs_what_mlflow_holds(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("tiny")
    parent = tracker.start_parent(exp_id, "tiny", {})
    final = {"step": 40, "train/loss": 1.0, "dev/accuracy": 20.0, "test/accuracy": 30.0, "final": True}
    first = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    a, b, c = _trial("a", 0.003), _trial("b", 0.001), _trial("c", 0.002)
    for t in (a, b, c):
        first.on_trial_start(0, [], t)
    for t in (a, b, c):
        first.on_trial_result(0, [], t, {"step": 20, "train/loss": 2.0, "dev/accuracy": 10.0})
    first.on_trial_result(0, [], a, final)
    a.last_result = final
    first.on_trial_complete(0, [], a)  # a: FINISHED
    first.on_trial_result(0, [], b, final)  # b: final logged, then the driver died before closing the run
    runs = {k: first.runs[k] for k in "abc"}

    ends = _recorded_ends(tracker, exp_id, parent)
    assert set(ends) == {"a", "b"}  # c has no end: it continues from its checkpoint
    assert ends["a"]["test/accuracy"] == 30.0 and ends["a"]["step"] == 40 and ends["a"]["final"] is True

    again = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    for t in (a, b, c):
        again.on_trial_start(0, [], t)
        again.on_trial_result(0, [], t, {"step": 20, "train/loss": 2.0, "dev/accuracy": 10.0})  # a replay
        again.on_trial_result(0, [], t, {**ends.get(t.trial_id, final)})
        t.last_result = final
        again.on_trial_complete(0, [], t)
    for key, run_id in runs.items():
        for metric in ("train/loss", "dev/accuracy", "test/accuracy"):
            steps = _steps(tracker, run_id, metric)
            assert len(steps) == len(set(steps)), (key, metric, steps)
        assert tracker.client.get_run(run_id).info.status == "FINISHED"
    assert "rirlab.resumed" not in tracker.client.get_run(runs["a"]).data.tags
    counts = again.counts()
    assert (counts.finished, counts.stopped_early, counts.failed) == (3, 0, 0)
    assert contract.TRUE == tracker.client.get_run(runs["c"]).data.tags["rirlab.final_logged"]


def test_a_resumed_trial_replaying_several_steps_logs_none_of_them_again(tmp_path):
    """A trial resumed from a checkpoint several results behind what its run holds replays all of them. Each result
    carries Ray's bookkeeping (never an MLflow metric, so the run cannot say it holds it): that must not lower the
    step the run is known to hold, or every replayed step after the first is logged twice (seen on a real
    EBT-GRC trial: 12 train steps twice after each of two --resume)."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("tiny")
    parent = tracker.start_parent(exp_id, "tiny", {})
    t = _trial("t", 0.003)

    def result(step):
        return {"step": step, "train/loss": 1.0 / step, "training_iteration": step // 10, "time_this_iter_s": 0.5}

    first = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    first.on_trial_start(0, [], t)
    for step in (10, 20, 30, 40):
        first.on_trial_result(0, [], t, result(step))
    run_id = first.runs["t"]  # the driver dies here; the trial's checkpoint is at step 10

    again = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    again.on_trial_start(0, [], t)
    for step in (20, 30, 40, 50):
        again.on_trial_result(0, [], t, result(step))
    assert _steps(tracker, run_id, "train/loss") == [10, 20, 30, 40, 50]
    assert "training_iteration" not in tracker.client.get_run(run_id).data.metrics


def test_a_run_created_twice_by_a_retried_request_is_one_run(tmp_path, new_store):
    """A tracking server that loses its answer to ``runs/create`` (a proxy answering 503 after forwarding it): MLflow's
    client retries, the server makes the run again, and a trial had two child runs, one RUNNING forever with no
    metrics (a sweep two parents). The run made by the lost request is deleted; the trial keeps one run."""
    from mlflow.entities import ViewType

    tracker = Tracker(new_store(tmp_path / "mlruns.db"))
    tracker.creates_may_repeat = True  # (a tracking server's, as below: an SQLite store makes each run once)
    exp_id = tracker.experiment_id("tiny")
    client = tracker.client
    create = client.create_run

    def lost_then_retried(*args, **kwargs):
        create(*args, **kwargs)  # made by the server; its answer lost on the way back
        return create(*args, **kwargs)  # the client's retry

    client.create_run = lost_then_retried
    parent = tracker.start_parent(exp_id, "tiny", {contract.SPEC_HASH: "abc123", contract.TUNE_PATH: "/runs/tiny-1"})
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    t = _trial("a1b2c_00000", 0.003)
    cb.on_trial_start(0, [], t)
    t.last_result = {"step": 40, "train/loss": 1.0, "dev/accuracy": 20.0, "final": True}
    cb.on_trial_result(0, [], t, t.last_result)
    cb.on_trial_complete(0, [], t)
    runs = client.search_runs([exp_id])
    assert [r.info.run_id for r in runs if contract.is_parent(r.data.tags)] == [parent]
    (child,) = [r for r in runs if not contract.is_parent(r.data.tags)]
    assert child.info.status == "FINISHED" and child.data.metrics["dev/accuracy"] == 20.0
    gone = client.search_runs([exp_id], run_view_type=ViewType.DELETED_ONLY)
    assert len(gone) == 2 and {r.info.status for r in gone} == {"KILLED"}  # neither stays RUNNING


def test_only_a_store_over_http_is_searched_for_a_runs_twin(tmp_path, new_store, monkeypatch):
    """The twin search above costs a query per trial run (and per parent). Only a store reached over HTTP can make
    one run twice; an SQLite, database or folder store creates each run once, and the driver makes its runs there
    without the search (a resumed sweep's runs are found before any is created: the first test)."""
    from rirlab.sweeps.record.tracker import creates_may_repeat

    assert creates_may_repeat("http://127.0.0.1:5000") and creates_may_repeat("https://user:pw@mlflow.lab.org")
    assert creates_may_repeat("databricks")
    for local in ("sqlite:////tmp/m.db", "postgresql+psycopg2://u@h/db", "mysql://u@h/db", "file:///tmp/mlruns"):
        assert not creates_may_repeat(local), local
    tracker = Tracker(new_store(tmp_path / "mlruns.db"))
    assert not tracker.creates_may_repeat
    exp_id = tracker.experiment_id("tiny")
    searched = []
    search = tracker.client.search_runs
    monkeypatch.setattr(tracker.client, "search_runs", lambda *a, **kw: searched.append(a) or search(*a, **kw))
    parent = tracker.start_parent(exp_id, "tiny", {contract.SPEC_HASH: "abc123", contract.TUNE_PATH: "/runs/t-1"})
    tracker.start_child(exp_id, parent, "t", {"lr": 0.1}, {contract.TRIAL_KEY: "a1b2c_00000"})
    assert searched == []
    tracker.creates_may_repeat = True
    tracker.start_child(exp_id, parent, "u", {"lr": 0.2}, {contract.TRIAL_KEY: "a1b2c_00001"})
    assert len(searched) == 1
