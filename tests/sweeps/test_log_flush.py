"""What logging every step costs a trial, bounded (issue 50 item 3): the driver writes a trial's reports together,
at most ``flush_every_s`` after the oldest, and at once at each checkpoint, its final result, its end and Ctrl-C.
A driver killed with reports not yet written loses no step: what it had not written lies after the trial's last
checkpoint, which the resumed trial replays (a real MLflow sqlite store, no Ray)."""

from __future__ import annotations

from rirlab.sweeps.record.callback import MLflowTrialCallback, log_flush_s
from rirlab.sweeps.record.tracker import Tracker
from tests.sweeps.test_record_callback import PLAN, _steps, _trial

HOUR = 3600.0


def _store(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("tiny")
    return tracker, exp_id, tracker.start_parent(exp_id, "tiny", {})


def _result(step, checkpoint=False):
    return {"step": step, "train/loss": 1.0 / step, "train/accuracy": float(step), "training_iteration": step,
            "should_checkpoint": checkpoint}


def test_a_driver_killed_between_checkpoints_loses_no_step_and_logs_none_twice(tmp_path):
    tracker, exp_id, parent = _store(tmp_path)
    t = _trial("t", 0.003)
    first = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=HOUR)
    first.on_trial_start(0, [], t)
    for step in range(1, 26):  # checkpoints at 10 and 20 (Tune records them after this callback saw the result)
        first.on_trial_result(0, [], t, _result(step, checkpoint=step % 10 == 0))
    run_id = first.runs["t"]
    # everything up to the last checkpoint is in MLflow; 21-25 were still waiting when the driver is killed here
    assert _steps(tracker, run_id, "train/loss") == list(range(1, 21))

    again = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=HOUR)
    again.on_trial_start(0, [], t)
    for step in range(21, 31):  # the resumed trial replays from its checkpoint at step 20
        again.on_trial_result(0, [], t, {**_result(step), **({"final": True} if step == 30 else {})})
    t.last_result = {**_result(30), "final": True}
    again.on_trial_complete(0, [], t)
    for metric in ("train/loss", "train/accuracy"):
        assert _steps(tracker, run_id, metric) == list(range(1, 31)), metric
    assert tracker.client.get_run(run_id).info.status == "FINISHED"


def test_reports_every_step_are_written_in_few_round_trips(tmp_path, monkeypatch):
    """200 reports of one trial with no checkpoint between: none written until the trial ends, then all of them in
    one call (600 metric values, under MLflow's 1,000 a call), every step there once."""
    tracker, exp_id, parent = _store(tmp_path)
    t = _trial("t", 0.003)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=HOUR)
    cb.on_trial_start(0, [], t)
    calls = []
    real = tracker.client.log_batch
    monkeypatch.setattr(tracker.client, "log_batch",
                        lambda run_id, metrics=(), **kw: calls.append(len(metrics)) or real(run_id, metrics, **kw))
    for step in range(1, 201):
        cb.on_trial_result(0, [], t, _result(step))
    assert calls == []
    t.last_result = _result(200)
    cb.on_trial_complete(0, [], t)
    assert calls[0] == 400 and len(calls) <= 2  # the metrics in one call (then the end's tags)
    assert _steps(tracker, cb.runs["t"], "train/loss") == list(range(1, 201))


def test_reports_wait_at_most_the_flush_interval_and_ctrl_c_writes_what_waits(tmp_path, monkeypatch):
    tracker, exp_id, parent = _store(tmp_path)
    a, b = _trial("a", 0.003), _trial("b", 0.001)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=HOUR)
    for t in (a, b):
        cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], a, _result(1))
    cb.on_trial_result(0, [], b, _result(1))
    cb.flush_every_s = 0.0  # a's report is overdue: the controller's next step writes it, b's too
    cb.on_step_end(0, [])
    assert _steps(tracker, cb.runs["a"], "train/loss") == [1] == _steps(tracker, cb.runs["b"], "train/loss")
    cb.flush_every_s = HOUR
    cb.on_trial_result(0, [], a, _result(2))
    assert cb.mark_interrupted()  # Ctrl-C: what waits is written, then the run is KILLED (--resume continues it)
    assert _steps(tracker, cb.runs["a"], "train/loss") == [1, 2]
    assert tracker.client.get_run(cb.runs["a"]).info.status == "KILLED"


def test_without_a_flush_interval_every_result_is_written_as_it_arrives(tmp_path, monkeypatch):
    tracker, exp_id, parent = _store(tmp_path)
    t = _trial("t", 0.003)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], t, _result(1))
    assert _steps(tracker, cb.runs["t"], "train/loss") == [1]
    monkeypatch.setenv("RIRLAB_LOG_FLUSH_S", "0.5")
    assert log_flush_s() == 0.5
    monkeypatch.setenv("RIRLAB_LOG_FLUSH_S", "soon")
    assert log_flush_s() == 2.0
