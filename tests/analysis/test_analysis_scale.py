"""Read-only commands on a large sweep (issue 50 item 1: within 5 s at 1,000 runs): the store round trips of
`export` and `plot curves` must not grow with the number of runs. Counted, not timed (benchmarks/readonly_at_scale.py
has the times): one history call per run was thousands of round trips at 1,000 runs."""

from __future__ import annotations

import pytest
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.tracking import MlflowClient

from rirlab.analysis.export import export_runs, history_table, trial_runs
from rirlab.analysis.plots import curves_plot
from rirlab.analysis.runs import load_sweep
from tests.helpers.analysis_store import make_sweep

HISTORY_READS = ("get_metric_history", "get_metric_history_bulk")


def _sweep(root, n: int):
    spec = {"name": f"scale{n}", "task": "listops", "model": "rir_grc", "seeds": 1,
            "search": {"lr": {"grid": [round(1e-4 * (i + 1), 6) for i in range(n)]}}}
    runs = [{"swept": {"lr": round(1e-4 * (i + 1), 6), "seed": 0},
             "metrics": {"dev/accuracy": 50.0 + i, "test/accuracy": 40.0 + i, "time_per_step_ms": 10.0},
             "history": {"dev/accuracy": [(10, 20.0 + i), (20, 30.0 + i), (30, 40.0 + i)],
                         "train/loss": [(10, 2.0), (20, 1.0 + i / 100)]}} for i in range(n)]
    uri, _ = make_sweep(root, spec, runs)
    return uri, spec["name"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A 5-run and a 50-run sweep, each in its own store."""
    return {n: _sweep(tmp_path_factory.mktemp(f"scale{n}"), n) for n in (5, 50)}


@pytest.fixture
def reads(monkeypatch):
    """Every metric-history read the sqlite store serves, by method name."""
    calls = []
    for name in HISTORY_READS:
        real = getattr(SqlAlchemyStore, name)

        def counted(self, *a, _real=real, _name=name, **k):
            calls.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(SqlAlchemyStore, name, counted)
    return calls


def test_export_reads_histories_in_calls_that_do_not_grow_with_the_runs(stores, reads, tmp_path):
    counts = {}
    for n, (uri, name) in stores.items():
        reads.clear()
        written = export_runs(MlflowClient(uri), name, tmp_path / f"{n}.parquet")
        assert written["run"][1] == n and written["history"][1] == n * 8  # dev 3 + 1 final, train/loss 2, test and time 1 each
        counts[n] = len(reads)
    assert counts[50] == counts[5], counts  # one per metric key, not one per run and key (was 250 vs 25)


def test_curves_plot_reads_histories_in_calls_that_do_not_grow_with_the_runs(stores, reads, tmp_path, figures):
    counts = {}
    for n, (uri, name) in stores.items():
        client = MlflowClient(uri)
        sw = load_sweep(client, name)
        reads.clear()
        assert curves_plot(client, sw, "dev/accuracy", tmp_path / f"{n}.png") == n
        counts[n] = len(reads)
    assert counts[50] == counts[5] == 1, counts  # was one call per run


def test_bulk_histories_are_the_points_and_order_of_the_per_run_reads(stores, monkeypatch):
    """The bulk read gives what `export` wrote before, row for row (a store without it is read run by run)."""
    uri, name = stores[5]
    client = MlflowClient(uri)
    runs = trial_runs(client, name)
    bulk = history_table(client, runs).to_pylist()
    monkeypatch.setattr(SqlAlchemyStore, "get_metric_history_bulk", None)
    assert history_table(client, runs).to_pylist() == bulk
    assert len(bulk) == 5 * 8 and {r["key"] for r in bulk} == {"dev/accuracy", "train/loss", "test/accuracy",
                                                                "time_per_step_ms"}


def test_pareto_plot_of_many_configurations_numbers_only_the_frontier(stores, tmp_path, figures, monkeypatch):
    """Spreading a label per configuration apart is quadratic in them (minutes at the 333 configurations of a
    1,000-run search): past MAX_LABELS only the frontier's points are numbered, and the plot says so."""
    from rirlab.analysis import plots

    uri, name = stores[50]
    monkeypatch.setattr(plots, "MAX_LABELS", 10)
    spread = []
    real = plots.spread_labels
    monkeypatch.setattr(plots, "spread_labels", lambda ax, xy, texts, **k: spread.append(texts) or real(ax, xy, texts, **k))
    assert plots.pareto_plot(load_sweep(MlflowClient(uri), name), tmp_path / "p.png", x="time", split="test") == 50
    ax = figures[-1].axes[0]
    numbered = [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]  # the annotations
    assert spread and 0 < len(spread[0]) < 50 and len(numbered) == len(spread[0])
    assert any("numbered: the frontier's" in t.get_text() for t in ax.texts)
