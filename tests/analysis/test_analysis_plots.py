"""`rirlab plot pareto|curves` (issue 17 item 11): Pareto labels never overlap and the key names each point's
full configuration; axes say what they show, in words with units; identical curves stay visible."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rirlab.analysis import plots
from rirlab.analysis import stats as S
from rirlab.analysis import tables as T
from rirlab.cli import main
from tests.helpers.analysis_store import make_sweep

SPEC = {"name": "crowd", "task": "listops", "model": "rir_ebt_grc",
        "search": {"chunk_size": {"grid": [10, 20, 30, 40]}, "beam_size": {"grid": [5, 7]}}, "seeds": 2}


def _runs():
    out = []
    for c in (10, 20, 30, 40):
        for b in (5, 7):
            for s in range(2):  # a crowd: every configuration within a hair of the others; two pairs identical
                acc = 70 + (c >= 30) * 0.3 + (b == 7) * 0.1 * (c != 20)
                m = {"test/accuracy": acc + 5, "len_200_300/accuracy": acc, "dev/accuracy": acc,
                     "time_per_step_ms": 3200 + c + (b == 7) * (c != 20), "peak_mem_mb": 500 + c / 10}
                hist = {"dev/accuracy": [(st, min(acc, st / 4)) for st in range(0, 401, 40)]}
                out.append({"swept": {"chunk_size": c, "beam_size": b, "seed": s}, "metrics": m, "history": hist})
    return out


@pytest.fixture(scope="module")
def crowd(tmp_path_factory):
    root = tmp_path_factory.mktemp("crowd")
    uri, spec = make_sweep(root, SPEC, _runs(), splits=[("test", "near-IID"), ("len_200_300", "200–300")])
    return uri, spec, root


def _overlaps(boxes):
    return [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]


def test_pareto_labels_do_not_overlap_and_the_key_names_configurations(crowd, figures, tmp_path):
    uri, spec, _ = crowd
    r = CliRunner().invoke(main, ["plot", "pareto", str(spec), "--tracking-uri", uri, "--out", str(tmp_path / "p.png")])
    assert r.exit_code == 0, r.output
    fig = figures[-1]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [t for t in ax.texts]
        assert labels, "points are labelled"
        assert not _overlaps([t.get_window_extent(renderer) for t in labels])
        assert "200–300 accuracy (%)" == ax.get_ylabel()  # one OOD split: its paper label, in words, with the unit
    # runs recorded with the wall clock alone: the time axis says so
    assert [ax.get_xlabel() for ax in fig.axes] == ["wall-clock time per training sample (ms)", "peak memory (MB)"]
    key = "\n".join(t.get_text() for t in fig.texts)
    for c in (10, 20, 30, 40):
        for b in (5, 7):
            assert f"chunk {c}, beam {b}  (n=2)" in key
    shared = [t.get_text() for t in fig.axes[1].texts if "," in t.get_text()]
    assert shared, "points at the same place share one label"


def test_curves_are_distinguishable_with_integer_steps_and_words(crowd, figures, tmp_path):
    uri, spec, _ = crowd
    r = CliRunner().invoke(main, ["plot", "curves", str(spec), "--tracking-uri", uri, "--metric", "dev/accuracy",
                                  "--out", str(tmp_path / "c.png")])
    assert r.exit_code == 0, r.output
    ax = figures[-1].axes[0]
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert len(lines) == 8
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in lines}) == 8  # no two curves drawn alike
    assert len({str(ln.get_markevery()) for ln in lines}) > 1  # markers of coinciding curves do not coincide
    assert ax.get_ylabel() == "dev accuracy (%)" and ax.get_xlabel() == "training step"
    assert all(float(t).is_integer() for t in ax.get_xticks())


@pytest.mark.parametrize("metric, words", [("dev/accuracy", "dev accuracy (%)"), ("train/loss", "training loss"),
                                           ("len_200_300/accuracy", "200–300 accuracy (%)"),
                                           ("time_per_step_ms", "wall-clock time per step (ms)"),
                                           ("cpu_time_per_step_ms", "CPU time per step (ms)"),
                                           ("peak_mem_mb", "peak memory (MB)")])
def test_metric_words(metric, words):
    assert plots.metric_words(metric, {"len_200_300": "200–300"}) == words


SKEWED = {"name": "skewed", "task": "listops", "model": "rir_ebt_grc", "search": {"chunk_size": {"grid": [10]}},
          "seeds": 3}


@pytest.mark.parametrize("stat, centre", [(None, 20.0), ("median", 20.0), ("mean", 40.0)])
def test_curves_and_tables_use_one_statistic_over_seeds(tmp_path, figures, stat, centre):
    """Issue 33 item 10: a curve's last point and the table cell of the same runs are one statistic (the median by
    default, --stat mean for both), never the curve's mean beside the table's median."""
    runs = [{"swept": {"chunk_size": 10, "seed": s}, "metrics": {"test/accuracy": final},
             "history": {"test/accuracy": [(0, 0.0), (500, final / 2)]}} for s, final in enumerate((10.0, 20.0, 90.0))]
    uri, spec = make_sweep(tmp_path, SKEWED, runs, splits=[("test", "near-IID")])
    extra = ["--stat", stat] if stat else []
    r = CliRunner().invoke(main, ["plot", "curves", str(spec), "--tracking-uri", uri, "--metric", "test/accuracy",
                                  "--out", str(tmp_path / "c.png"), *extra])
    assert r.exit_code == 0, r.output
    ax = figures[-1].axes[0]
    (line,) = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert list(line.get_xdata()) == [0, 500, 1000] and line.get_ydata()[-1] == pytest.approx(centre)
    assert f"({stat or 'median'} over seeds, band = 95% t-interval of the mean over seeds)" in ax.get_title()
    band = S.summarise([10.0, 20.0, 90.0], stat or "median")  # the last step's seeds: the tables' interval
    (poly,) = ax.collections
    assert poly.get_paths()[0].vertices[:, 1].max() == pytest.approx(band.high)
    assert "band: 95% t-interval of the mean over seeds" in [t.get_text() for t in ax.get_legend().get_texts()]
    t = CliRunner().invoke(main, ["tables", str(spec), "--tracking-uri", uri, *extra])
    assert t.exit_code == 0, t.output
    assert f"| chunk 10 | {centre:.2f} ± 43.59 [{T.fmt_signed(band.low)}, {band.high:.2f}] |" in t.output
    assert f"{stat or 'median'} ± sample std (ddof 1) over seeds" in t.output


def test_two_seeds_curves_keep_their_axis_and_the_title_fits(tmp_path, figures):
    """With n = 2 a 95% t-interval is +- 12.7 standard errors: the y axis spans the seeds' own values, the band is
    cut at the axes and a note says so; the title (two lines) stays inside the figure beside the legend."""
    spec2 = {**SKEWED, "name": "a-sweep-with-a-rather-long-experiment-name", "seeds": 2}
    runs = [{"swept": {"chunk_size": 10, "seed": s}, "metrics": {"test/accuracy": final},
             "history": {"len_200_300/accuracy": [(0, 40.0 + s), (500, final)]}}
            for s, final in enumerate((80.0, 95.0))]
    uri, spec = make_sweep(tmp_path, spec2, runs, splits=[("test", "near-IID"), ("len_200_300", "200–300")])
    r = CliRunner().invoke(main, ["plot", "curves", str(spec), "--tracking-uri", uri, "--metric",
                                  "len_200_300/accuracy", "--out", str(tmp_path / "c.png")])
    assert r.exit_code == 0, r.output
    fig = figures[-1]
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert 35 < low < 40 and 95 < high < 100  # the seeds' 40..95, not the band's ~ -100..300
    (poly,) = ax.collections
    assert poly.get_paths()[0].vertices[:, 1].max() > high  # the band itself is left as computed
    assert any("bands cut at the axes" in t.get_text() for t in ax.texts)
    fig.canvas.draw()
    title = ax.title.get_window_extent(fig.canvas.get_renderer())
    assert title.x0 >= 0 and title.x1 <= fig.bbox.width, (title, fig.bbox.width)


def test_a_dev_curve_ends_on_the_last_dev_evaluation_of_training_not_on_the_final_one(tmp_path, figures):
    """A trial's final dev/accuracy (the tested, best-dev weights, under the test inference) takes its last step's
    place in the history (rirlab.train); a run that recorded that step's own dev evaluation (``last/dev_accuracy``)
    ends its curve there, so a trial selected by RIR-inference dev (88% near-IID) does not end on a non-RIR 99.7.
    A run recorded before the metric existed keeps its history as logged."""
    hist = [(200 * e, v) for e, v in enumerate((55.6, 80.7, 88.4, 87.2), start=1)]  # the final: step 1000 (make_sweep)
    runs = [{"swept": {"chunk_size": 10, "seed": 0}, "metrics": {"dev/accuracy": 99.7, "last/dev_accuracy": 87.9},
             "history": {"dev/accuracy": hist}},
            {"swept": {"chunk_size": 20, "seed": 0}, "metrics": {"dev/accuracy": 99.7},
             "history": {"dev/accuracy": hist}}]
    spec_doc = {**SKEWED, "search": {"chunk_size": {"grid": [10, 20]}}, "seeds": 1}
    uri, spec = make_sweep(tmp_path, spec_doc, runs, splits=[("test", "near-IID")])
    r = CliRunner().invoke(main, ["plot", "curves", str(spec), "--tracking-uri", uri, "--metric", "dev/accuracy",
                                  "--out", str(tmp_path / "c.png")])
    assert r.exit_code == 0, r.output
    lines = {ln.get_label().split(" (n=")[0]: ln for ln in figures[-1].axes[0].get_lines()
             if not ln.get_label().startswith("_")}
    ends = {label: (ln.get_xdata()[-1], ln.get_ydata()[-1]) for label, ln in lines.items()}
    assert sorted(ends.values()) == [(1000, 87.9), (1000, 99.7)], ends
    assert all(list(ln.get_ydata()[:4]) == [55.6, 80.7, 88.4, 87.2] for ln in lines.values()), [ln.get_ydata() for ln in lines.values()]
