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
    numbered = [t for t in ax.texts if t.get_gid() == plots.LABEL_GID]
    assert spread and 0 < len(spread[0]) < 50 and len(numbered) == len(spread[0])
    assert any("numbered: the frontier's" in t.get_text() for t in ax.texts)


def test_pareto_labels_are_plain_text_joined_by_one_line_collection(stores, tmp_path, figures):
    """No arrow per label (FancyArrowPatch clipped against its text box: most of `plot pareto`'s time at 34 labels,
    at every layout, legend placement and draw): the labels are plain text, their lines one LineCollection an axes,
    each segment from its point to its label's box."""
    from matplotlib.collections import LineCollection
    from matplotlib.patches import FancyArrowPatch

    from rirlab.analysis import plots

    uri, name = stores[50]
    plots.pareto_plot(load_sweep(MlflowClient(uri), name), tmp_path / "p.png", x="both", split="test")
    for ax in figures[-1].axes:
        labels = [t for t in ax.texts if t.get_gid() == plots.LABEL_GID]
        assert labels and all(getattr(t, "arrow_patch", None) is None for t in labels)
        assert not [a for a in ax.get_children() if isinstance(a, FancyArrowPatch)]
        lines = [c for c in ax.collections if c.get_gid() == plots.CONNECTORS_GID]
        assert len(lines) <= 1 and all(isinstance(c, LineCollection) for c in lines)
        assert sum(len(c.get_segments()) for c in lines) <= len(labels)


def test_pareto_plot_draws_its_figure_once(stores, tmp_path, figures, monkeypatch):
    """Labels are measured from the renderer and placed in the final layout: the figure is drawn once, when it is
    saved (it was drawn once more per axes to place the labels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from rirlab.analysis import plots

    draws = []
    real = FigureCanvasAgg.draw
    monkeypatch.setattr(FigureCanvasAgg, "draw", lambda self: draws.append(self) or real(self))
    uri, name = stores[50]
    plots.pareto_plot(load_sweep(MlflowClient(uri), name), tmp_path / "p.png", x="both", split="test")
    assert len(draws) == 1, draws


def test_spread_separates_a_crowd_in_few_steps():
    """Every label and marker of a crowd kept apart, all pairs a step at once: 60 labels on a 6 x 10 grid of points
    closer than a label's size resolve within the step limit (the loop runs over steps, not over pairs)."""
    import numpy as np

    from rirlab.analysis.plots import MARKER_PT, spread

    pts = np.array([(8.0 * i, 6.0 * j) for i in range(6) for j in range(10)])
    sizes = np.array([(5.0 * len(str(k + 1)), 9.0) for k in range(len(pts))])
    centres, steps = spread(pts, sizes)
    assert 0 < steps < 200
    half = sizes / 2
    for i in range(len(pts)):
        for j in range(len(pts)):
            if i != j:
                assert (np.abs(centres[i] - centres[j]) >= half[i] + half[j]).any(), (i, j)
            assert (np.abs(centres[i] - pts[j]) >= half[i] + MARKER_PT).any(), (i, j)


def test_curves_of_many_configurations_draw_the_best_and_one_artist_for_the_rest(stores, tmp_path, figures):
    """50 configurations: the MAX_CURVES best by their last point each a line with its legend entry, the other 40 one
    grey LineCollection (not 40 lines, 40 bands and a legend past the figure's edge), and the legend says what it
    leaves out."""
    from matplotlib.collections import LineCollection

    from rirlab.analysis import plots

    uri, name = stores[50]
    client = MlflowClient(uri)
    assert plots.curves_plot(client, load_sweep(client, name), "dev/accuracy", tmp_path / "c.png") == 50
    ax = figures[-1].axes[0]
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert len(lines) == plots.MAX_CURVES
    assert [ln.get_ydata()[-1] for ln in lines] == [50.0 + i for i in range(50 - plots.MAX_CURVES, 50)]  # the best
    (others,) = [c for c in ax.collections if c.get_gid() == plots.OTHERS_GID]
    assert isinstance(others, LineCollection) and len(others.get_segments()) == 50 - plots.MAX_CURVES
    assert len(ax.collections) == 1  # one seed each: no band
    legend = ax.get_legend()
    assert len(legend.get_texts()) == plots.MAX_CURVES + 1
    assert "of 50 configurations" in legend.get_title().get_text()
    assert "the other 40" in legend.get_texts()[-1].get_text()


def test_tables_build_no_pandas_series_per_run_or_cell(stores, monkeypatch):
    """The ablation table reads runs as dicts and centres cells with numpy: the pandas Series it builds do not grow
    with the runs and cells (iterrows and a Series per cell were most of the table's own time at 1,000 runs)."""
    import pandas as pd

    from rirlab.analysis import tables as T

    made = []
    real = pd.Series.__init__

    def counted(self, *a, **k):
        made.append(1)
        real(self, *a, **k)

    counts = {}
    for n, (uri, name) in stores.items():
        sw = load_sweep(MlflowClient(uri), name)
        made.clear()
        monkeypatch.setattr(pd.Series, "__init__", counted)
        grid = T.ablation(sw.runs, spec=sw.spec, n_expected=sw.n_expected, splits=sw.splits)
        monkeypatch.setattr(pd.Series, "__init__", real)
        assert len(grid.body) == n
        counts[n] = len(made)
    assert counts[50] == counts[5], counts
