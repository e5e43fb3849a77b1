"""`rirlab importance SPEC` (issue 33 item 1): optuna.importance over a sweep's finished trial runs, read from a real
MLflow store, for grid and random sweeps; the parameter the metric depends on ranks first."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from rirlab.cli import main
from tests.helpers.analysis_store import make_sweep

GRID = {"name": "imp_grid", "task": "listops", "model": "rir_ebt_grc",
        "search": {"chunk_size": {"grid": [10, 20, 30]}, "beam_size": {"grid": [5, 7]}}, "seeds": 2,
        "metric": "dev/accuracy", "mode": "max"}
RANDOM = {"name": "imp_random", "task": "listops", "model": "rir_ebt_grc", "algorithm": "random", "num_samples": 16,
          "search": {"lr": {"loguniform": [1e-4, 1e-2]}, "dropout": {"uniform": [0.0, 0.5]}}, "seeds": 1,
          "metric": "train/loss", "mode": "min"}


def _grid_runs():
    runs = []
    for c in (10, 20, 30):
        for b in (5, 7):
            for s in range(2):
                acc = 40 + c + (b == 7) * 0.2 + s * 0.1  # the chunk size decides; the beam width barely matters
                runs.append({"swept": {"chunk_size": c, "beam_size": b, "seed": s},
                             "metrics": {"dev/accuracy": acc, "test/accuracy": 90 - (b == 7) * 20 + c * 0.01}})
    runs.append({"swept": {"chunk_size": 10, "beam_size": 5, "seed": 9}, "status": "FAILED", "reason": "boom"})
    runs.append({"swept": {"chunk_size": 30, "beam_size": 7, "seed": 9}, "metrics": {"dev/accuracy": 0.0},
                 "early_stopped": True})  # stopped by ASHA: not a final value, left out
    return runs


def _random_runs():
    runs = []
    for i in range(16):
        lr = 10 ** (-4 + 2 * ((i * 7) % 16) / 15)
        dropout = 0.5 * ((i * 5) % 16) / 15
        runs.append({"swept": {"lr": lr, "dropout": dropout, "seed": 0},
                     "metrics": {"train/loss": abs(math.log10(lr) + 3) + 0.01 * dropout}})  # best lr 1e-3
    return runs


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    grid_root, random_root = tmp_path_factory.mktemp("grid"), tmp_path_factory.mktemp("random")
    return make_sweep(grid_root, GRID, _grid_runs()), make_sweep(random_root, RANDOM, _random_runs())


def importance(*args):
    r = CliRunner().invoke(main, ["importance", *map(str, args)])
    return r


def ranked(output: str) -> list[tuple[str, float]]:
    rows = [line.strip("|").split("|") for line in output.splitlines() if line.startswith("| ") and "parameter" not in line]
    return [(name.strip(), float(value)) for name, value in rows]


@pytest.mark.parametrize("evaluator, least", [("ped-anova", 0.5), ("fanova", 0.8), ("mdi", 0.8)])
def test_the_parameter_the_metric_depends_on_ranks_first_in_a_grid_sweep(stores, evaluator, least):
    """PED-ANOVA compares the top 10% of trials with all: with 12 trials it sees the beam's +0.2 more than fANOVA."""
    (uri, spec), _ = stores
    r = importance(spec, "--tracking-uri", uri, "--evaluator", evaluator)
    assert r.exit_code == 0, r.output
    rows = ranked(r.stdout)
    assert [name for name, _ in rows] == ["chunk_size", "beam_size"], r.stdout
    assert rows[0][1] > least and sum(v for _, v in rows) == pytest.approx(1.0, abs=2e-3)
    assert f"optuna.importance ({evaluator}) of dev/accuracy (max) over 12 finished trial runs" in r.stdout
    assert "(spec hash 000000000000, full," in r.stdout  # which sweep


def test_another_metric_ranks_another_parameter(stores):
    (uri, spec), _ = stores
    r = importance(spec, "--tracking-uri", uri, "--metric", "test/accuracy", "--format", "csv", "--evaluator", "fanova")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "parameter,importance" and lines[1].startswith("beam_size,"), r.stdout


def test_a_random_sweep_with_float_ranges_and_a_loss_to_minimise(stores):
    _, (uri, spec) = stores
    r = importance(spec, "--tracking-uri", uri, "--evaluator", "fanova")
    assert r.exit_code == 0, r.output
    rows = ranked(r.stdout)
    assert rows[0][0] == "lr" and rows[0][1] > 0.7, r.stdout
    assert "of train/loss (min) over 16 finished trial runs" in r.stdout


def test_the_in_memory_study_holds_a_trial_per_finished_run_under_the_specs_distributions(stores):
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from rirlab.analysis.importance import study_of
    from rirlab.analysis.runs import load_sweep, open_store, read_spec

    _, (uri, spec) = stores
    sw = load_sweep(open_store(uri), "imp_random", spec=read_spec(spec))
    study, constant = study_of(sw.runs, sw.spec, "train/loss", "min")
    assert len(study.trials) == 16 and constant == [] and study.direction.name == "MINIMIZE"
    dists = study.trials[0].distributions
    assert dists["lr"] == FloatDistribution(1e-4, 1e-2, log=True) and dists["dropout"] == FloatDistribution(0.0, 0.5)
    (grid_uri, grid_spec), _ = stores
    gw = load_sweep(open_store(grid_uri), "imp_grid", spec=read_spec(grid_spec))
    gstudy, _ = study_of(gw.runs, gw.spec, "dev/accuracy", "max")
    assert len(gstudy.trials) == 12  # the failed and the early-stopped runs are not trials
    assert gstudy.trials[0].distributions["chunk_size"] == CategoricalDistribution([10, 20, 30])
    assert "seed" not in gstudy.trials[0].params


def test_bad_input_is_one_line_and_exit_2(stores, tmp_path):
    (uri, spec), _ = stores
    r = importance(spec, "--tracking-uri", uri, "--metric", "nope/accuracy")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "no finished trial run reports nope/accuracy" in r.output
    one = dict(GRID, name="imp_one", search={"chunk_size": {"grid": [10]}})
    uri1, spec1 = make_sweep(tmp_path, one, [{"swept": {"chunk_size": 10, "seed": s}, "metrics": {"dev/accuracy": 50 + s}}
                                             for s in range(2)])
    r = importance(spec1, "--tracking-uri", uri1)
    assert r.exit_code == 2 and "share one configuration" in r.output and r.output.count("\n") == 1, r.output
    r = importance(spec, "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}")
    assert r.exit_code == 2 and "no MLflow store" in r.output and not (tmp_path / "none.db").exists()
