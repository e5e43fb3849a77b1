"""A multi-objective Optuna study continued by a second sweep is analysed as the study (issue 54 item 5): `tables`,
`importance` and `plot pareto` read every sweep of it, the table shows its objectives and the Pareto plot is drawn
on them (Optuna's front), and `importance` says how small its sample is."""

from __future__ import annotations

from click.testing import CliRunner

from rirlab.analysis.plots import objective_points, pareto_front
from rirlab.analysis.runs import load_sweep
from rirlab import contract
from rirlab.cli import main
from tests.helpers.analysis_store import make_sweep

SPEC = {"name": "study", "task": "listops", "model": "rir_grc", "algorithm": "optuna", "num_samples": 2, "seeds": 1,
        "search": {"lr": {"loguniform": [1e-4, 1e-2]}}, "metric": ["dev/accuracy", "cpu_time_per_step_ms"],
        "mode": ["max", "min"], "optuna": {"study_name": "st"}}


def _runs(points, study="st"):
    return [{"swept": {"lr": lr, "seed": 0}, "tags": {contract.OPTUNA_STUDY: study},
             "metrics": {"dev/accuracy": acc, "cpu_time_per_step_ms": ms, "test/accuracy": acc - 1}}
            for lr, acc, ms in points]


def test_a_continued_study_is_read_as_the_study_on_its_objectives(tmp_path):
    make_sweep(tmp_path, SPEC, _runs([(0.001, 80, 5), (0.002, 70, 2)]))
    make_sweep(tmp_path, SPEC, _runs([(0.003, 90, 9), (0.004, 60, 8)]))  # the same study, continued
    uri, spec = make_sweep(tmp_path, {**SPEC, "name": "other"}, _runs([(0.005, 10, 1)], study="else"))
    run = lambda *a: CliRunner().invoke(main, [*map(str, a), "--tracking-uri", uri])  # noqa: E731

    tables = run("tables", tmp_path / "study.yaml")
    assert tables.exit_code == 0, tables.output
    assert "the Optuna study 'st' spans 2 sweeps of 'study', read as one" in tables.stderr
    assert "4 finished runs" in tables.stdout and "| dev/accuracy | cpu_time_per_step_ms |" in tables.stdout
    assert "| 90.00 (n=1) | 9.00 (n=1) |" in tables.stdout, tables.stdout

    imp = run("importance", tmp_path / "study.yaml")
    assert "over 4 finished trial runs" in imp.stdout and "a small sample: 4 distinct configurations" in imp.stdout

    plot = run("plot", "pareto", tmp_path / "study.yaml", "--out", tmp_path / "p.png")
    assert plot.exit_code == 0 and "(4 configurations)" in plot.stdout, plot.output
    from mlflow.tracking import MlflowClient

    pts = objective_points(load_sweep(MlflowClient(uri), "study"))
    assert pts.attrs["metrics"] == ("dev/accuracy", "cpu_time_per_step_ms")
    front = pareto_front([(x, y) for x, y in zip(pts["objectives"], pts["acc"])])  # min time, max accuracy
    assert sorted(pts["acc"].iloc[front]) == [70, 80, 90]  # (60, 8 ms) is dominated by (80, 5 ms)
