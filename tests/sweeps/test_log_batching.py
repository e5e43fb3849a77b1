"""Logging at scale (issue 50 item 3): one reported result reaches MLflow in as few ``log_batch`` calls as MLflow's
limits allow (one for an ordinary result), and a result over those limits is split instead of refused whole."""

from __future__ import annotations

from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH

from rirlab import contract
from rirlab.sweeps.record.tracker import Tracker, batches


def _tracker_with_calls(tmp_path, monkeypatch):
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}")
    exp = tracker.experiment_id("batching")
    run = tracker.start_child(exp, tracker.start_parent(exp, "p", {}), "t", {"lr": 0.1}, {})
    calls = []
    real = tracker.client.log_batch

    def counted(run_id, metrics=(), params=(), tags=(), **kw):
        calls.append((len(metrics or ()), len(params or ()), len(tags or ())))
        return real(run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(tracker.client, "log_batch", counted)
    return tracker, run, calls


def test_an_ordinary_result_is_one_log_batch_call(tmp_path, monkeypatch):
    tracker, run, calls = _tracker_with_calls(tmp_path, monkeypatch)
    result = {f"train/m{i}": float(i) for i in range(40)} | {contract.STEP: 7, "note": "text",
                                                              contract.PARAM_PREFIX + "oov/dev": 0.1}
    tracker.log_result(run, result, step=7)
    assert calls == [(40, 1, 1)]
    assert tracker.client.get_metric_history(run, "train/m3")[0].step == 7


def test_a_result_over_mlflows_limits_is_split_and_nothing_is_lost(tmp_path, monkeypatch):
    """2,500 metrics, 150 params and 150 string values: one call would be refused whole by the store (over 1,000
    metrics, over 100 params and tags), losing the report; split, every value lands at its step."""
    tracker, run, calls = _tracker_with_calls(tmp_path, monkeypatch)
    result = {f"m/{i}": float(i) for i in range(2500)}
    result |= {f"{contract.PARAM_PREFIX}p{i}": i for i in range(150)} | {f"s{i}": f"v{i}" for i in range(150)}
    tracker.log_result(run, result, step=3)
    assert len(calls) == 4  # 2,500 metrics in 3 calls (1,000 each), the params and tags fill the rest
    for m, p, t in calls:
        assert m <= MAX_METRICS_PER_BATCH and p <= MAX_PARAMS_TAGS_PER_BATCH and t <= MAX_PARAMS_TAGS_PER_BATCH
        assert m + p + t <= 1000
    data = tracker.client.get_run(run).data
    assert len([k for k in data.metrics if k.startswith("m/")]) == 2500
    assert len([k for k in data.params if k.startswith("p")]) == 150
    assert len([k for k in data.tags if k.startswith(contract.result_tag("s"))]) == 150


def test_batches_bound_the_request_size():
    """Long tag values (5,000 characters each, as a failure reason may be) split before MLflow's 1 MB request
    limit, not only at 100 tags."""
    from mlflow.entities import RunTag

    tags = [RunTag(f"t{i}", "x" * 5000) for i in range(100)]
    out = list(batches(tags=tags))
    assert len(out) > 1 and sum(len(t) for _, _, t in out) == 100
    assert all(sum(len(x.value) for x in t) < 1_000_000 for _, _, t in out)
