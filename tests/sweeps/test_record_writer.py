"""The driver's MLflow writes off Ray Tune's event loop (issue 50): the callbacks hand their writes to one writer
thread (``WriteQueue``) and return; the writes reach the store in the order given, every write is made before a
checkpoint is recorded, a final result taken, Ctrl-C or the sweep's end, and the queue is bounded. Counted, not
timed: which thread made each write. A real MLflow sqlite store, no Ray."""

from __future__ import annotations

import threading

import pytest

from rirlab import contract
from rirlab.sweeps.record import faults
from rirlab.sweeps.record.callback import MLflowTrialCallback
from rirlab.sweeps.record.tracker import Tracker, WriteQueue
from tests.sweeps.test_record_callback import PLAN, _steps, _trial

HOUR = 3600.0
WRITES = ("start_child", "log_results", "set_tags", "finish", "log_text", "log_datasets", "log_artifacts")


def _store(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("tiny")
    return tracker, exp_id, tracker.start_parent(exp_id, "tiny", {})


def _watch(tracker, monkeypatch):
    """Every write of ``tracker`` from here on, in order: (method, run id or None, the thread that made it)."""
    made = []
    for name in WRITES:
        method = getattr(tracker, name)

        def watched(*args, _name=name, _method=method, **kwargs):
            out = _method(*args, **kwargs)
            run_id = out if _name == "start_child" else (args[0] if args else None)
            made.append((_name, run_id, threading.current_thread() is threading.main_thread(), args, kwargs))
            return out

        monkeypatch.setattr(tracker, name, watched)
    return made


def _gate(writer: WriteQueue, fail: bool = False) -> threading.Event:
    """Hold the writer's thread until the event is set (``fail``: then its write fails, and every write queued
    after it is dropped, as a driver killed before it made them never made them)."""
    opened = threading.Event()

    def held():
        assert opened.wait(60), "the test never opened the gate"
        if fail:
            raise RuntimeError("the driver was killed here")

    writer.submit(held)
    return opened


def _result(step, checkpoint=False, final=False):
    return {"step": step, "train/loss": 1.0 / step, "train/accuracy": float(step), "should_checkpoint": checkpoint,
            **({"final": True, "test/accuracy": 50.0} if final else {})}


def _children(tracker, exp_id):
    return [r for r in tracker.client.search_runs([exp_id]) if r.data.tags.get("mlflow.parentRunId")]


def test_the_callbacks_return_before_their_writes_are_made(tmp_path, monkeypatch):
    """A trial's start, its reports between checkpoints and its end are written by the writer's thread, none in
    Tune's loop; the loop waits only where a step must be recorded first (the final result)."""
    tracker, exp_id, parent = _store(tmp_path)
    writer = WriteQueue()
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=0.0,
                             writer=writer)
    made = _watch(tracker, monkeypatch)
    t = _trial("t", 0.003)
    opened = _gate(writer)
    cb.on_trial_start(0, [], t)
    for step in (1, 2, 3):
        cb.on_trial_result(0, [], t, _result(step))
    cb.on_step_end(0, [])
    # every callback returned while the writer's thread was held: nothing of the trial is in the store yet
    assert made == [] and _children(tracker, exp_id) == []
    assert writer.submitted - writer.done == 5  # the gate, the run's creation, three reports
    opened.set()
    cb.on_trial_result(0, [], t, _result(4, checkpoint=True, final=True))  # waits: all of it written
    assert _steps(tracker, cb.runs["t"], "train/loss") == [1, 2, 3, 4]
    assert tracker.client.get_run(cb.runs["t"]).data.tags[contract.FINAL_LOGGED] == contract.TRUE

    opened = _gate(writer)
    t.last_result = _result(4, checkpoint=True, final=True)
    cb.on_trial_complete(0, [], t)  # returns with the run's end still queued
    assert tracker.client.get_run(cb.runs["t"]).info.status == "RUNNING" and cb.counts().finished == 1
    opened.set()
    cb.close()
    assert tracker.client.get_run(cb.runs["t"]).info.status == "FINISHED"
    assert made and not any(in_loop for _, _, in_loop, _, _ in made), made  # not one write in Tune's loop


def test_each_runs_writes_reach_the_store_in_the_order_given(tmp_path, monkeypatch):
    """Two trials' starts, reports, final results and ends interleaved, queued behind a held writer: each run's
    writes are made in the order the callbacks gave them, its final mark after its values, its end last."""
    tracker, exp_id, parent = _store(tmp_path)
    writer = WriteQueue()
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=0.0,
                             writer=writer)
    made = _watch(tracker, monkeypatch)
    a, b = _trial("a", 0.003), _trial("b", 0.001)
    opened = _gate(writer)
    cb.on_trial_start(0, [], a)
    cb.on_trial_start(0, [], b)
    for step in range(1, 6):
        cb.on_trial_result(0, [], a, _result(step))
        cb.on_trial_result(0, [], b, _result(step))
    threading.Timer(0.2, opened.set).start()  # (the final result below waits for the queue: opened meanwhile)
    for t in (a, b):
        t.last_result = _result(6, checkpoint=True, final=True)
        cb.on_trial_result(0, [], t, t.last_result)
        cb.on_trial_complete(0, [], t)
    cb.close()
    for key in ("a", "b"):
        run_id = cb.runs[key]
        mine = [(name, args, kwargs) for name, rid, _, args, kwargs in made if rid == run_id]
        names = [name for name, _, _ in mine]
        assert names[0] == "start_child" and names[-1] == "finish", names
        logged = [(args[1], kwargs, args[2:]) for name, args, kwargs in mine if name == "log_results"]
        steps = [step for results, _, _ in logged for _, step in results]
        assert steps == [1, 2, 3, 4, 5, 6], steps  # each result once, in order
        marks = [i for i, (_, _, rest) in enumerate(logged) if rest and rest[0]]
        assert marks == [len(logged) - 1]  # the final mark with the last values, none before
        assert _steps(tracker, run_id, "train/loss") == [1, 2, 3, 4, 5, 6]
        assert tracker.client.get_run(run_id).info.status == "FINISHED"


def test_a_full_queue_holds_the_callback_until_the_writer_takes_one():
    """Backpressure: no more than ``depth`` writes wait; the next ``submit`` waits for the writer."""
    writer = WriteQueue(depth=2)
    taken, opened, done = threading.Event(), threading.Event(), []
    writer.submit(lambda: (taken.set(), opened.wait(60)))
    assert taken.wait(60)  # the writer's thread holds the first write: two more fill the queue
    writer.submit(lambda: done.append(1))
    writer.submit(lambda: done.append(2))
    third = threading.Thread(target=writer.submit, args=(lambda: done.append(3),))
    third.start()
    third.join(0.5)
    assert third.is_alive() and writer._jobs.qsize() == 2  # held: the queue never grew past its depth
    opened.set()
    third.join(30)
    assert not third.is_alive()
    writer.close()
    assert done[-1] == 3 and writer.done == writer.submitted


def test_a_driver_killed_with_writes_queued_loses_no_step_on_resume(tmp_path):
    """The driver dies with reports after the last checkpoint and a finished trial's end still queued: every step
    up to the checkpoint is in MLflow (written before Tune recorded it), the final values of the finished trial
    too; the resumed driver replays the rest once and closes the finished trial's run without training it again."""
    tracker, exp_id, parent = _store(tmp_path)
    writer = WriteQueue()
    first = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=0.0,
                                writer=writer)
    a, b = _trial("a", 0.003), _trial("b", 0.001)
    opened = _gate(writer)  # the writer is slow: the reports queue behind it
    threading.Timer(0.3, opened.set).start()
    for t in (a, b):
        first.on_trial_start(0, [], t)
    for step in range(1, 11):  # checkpoints at 5 and 10: each waits until the steps before it are written
        first.on_trial_result(0, [], a, _result(step, checkpoint=step % 5 == 0))
    assert _steps(tracker, first.runs["a"], "train/loss") == list(range(1, 11))  # before Tune records step 10
    b.last_result = _result(10, checkpoint=True, final=True)
    first.on_trial_result(0, [], b, b.last_result)
    opened = _gate(writer, fail=True)  # the driver is killed before anything queued from here is written
    for step in (11, 12):
        first.on_trial_result(0, [], a, _result(step))
    first.on_trial_complete(0, [], b)
    opened.set()
    writer.drain()
    runs = first.runs
    assert _steps(tracker, runs["a"], "train/loss") == list(range(1, 11))
    assert tracker.client.get_run(runs["b"]).info.status == "RUNNING"  # its end was queued, not written

    again = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=0.0,
                                writer=WriteQueue())
    for step in range(11, 16):  # the resumed trial replays from its checkpoint at 10
        again.on_trial_result(0, [], a, _result(step, final=step == 15))
    a.last_result = _result(15, final=True)
    again.on_trial_complete(0, [], a)
    again.on_trial_complete(0, [], b)  # Tune knew b ended: its run is closed, nothing logged again
    again.close()
    assert _steps(tracker, runs["a"], "train/loss") == list(range(1, 16))
    assert _steps(tracker, runs["b"], "train/loss") == [10]
    assert {tracker.client.get_run(runs[k]).info.status for k in "ab"} == {"FINISHED"}
    assert len(_children(tracker, exp_id)) == 2
    assert (again.counts().finished, again.counts().failed) == (2, 0)


def test_a_store_fault_in_the_writer_stops_the_sweep_once_and_drops_what_follows(tmp_path, monkeypatch):
    """A write the store refuses (its disk full) in the writer's thread stops the sweep at the next callback, as
    when the driver wrote it: one SweepFault naming the store, Tune asked to stop once, nothing written after it."""
    tracker, exp_id, parent = _store(tmp_path)
    stops = []
    monkeypatch.setattr(faults, "stop_tune", lambda: stops.append(1))
    writer = WriteQueue()
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=0.0,
                             writer=writer)
    t = _trial("t", 0.003)
    cb.on_trial_start(0, [], t)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tracker, "log_results", full)
    opened = _gate(writer)  # (both reports queued before the first fails)
    cb.on_trial_result(0, [], t, _result(1))
    cb.on_trial_result(0, [], t, _result(2))
    opened.set()
    writer.drain()
    assert writer.error is not None and writer.dropped == 1  # the second report: not written after the fault
    cb.on_step_end(0, [])
    cb.on_step_end(0, [])
    assert stops == [1] and cb.fault is not None and "is full" in cb.fault.why
    assert "\n" not in cb.fault.why
    cb.close()  # the error is handed over once: the end does not raise it again


def test_an_error_that_is_no_fault_is_raised_in_the_drivers_thread(tmp_path, monkeypatch):
    tracker, exp_id, parent = _store(tmp_path)
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False, flush_every_s=0.0,
                             writer=WriteQueue())
    t = _trial("t", 0.003)

    def broken(*args, **kwargs):
        raise ValueError("a bug in a write")

    monkeypatch.setattr(tracker, "start_child", broken)
    cb.on_trial_start(0, [], t)
    with pytest.raises(ValueError, match="a bug in a write"):
        cb.close()
