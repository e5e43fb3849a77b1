"""Issue 33 item 8: step times are wall clock while trials share the CPU (one configuration read 541 and 328 ms a
step), so trials also report their process's CPU time; the Pareto plot's time axis, training curves and the tables
that name a time objective say which clock they show."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from rirlab import contract
from rirlab.cli import main
from tests.helpers.analysis_store import make_sweep

SPEC = {"name": "clocks", "task": "listops", "model": "rir_ebt_grc", "search": {"chunk_size": {"grid": [10, 20, 30]}},
        "seeds": 1, "metric": contract.CPU_TIME_PER_STEP_MS, "mode": "min"}
WALL = {10: 400.0, 20: 200.0, 30: 300.0}  # wall clock: chunk 20 shared its cores least
CPU = {10: 40.0, 20: 80.0, 30: 120.0}  # its own CPU time: chunk 10 is the cheapest


def _runs(cpu: bool = True, device: str = "cpu"):
    return [{"swept": {"chunk_size": c, "seed": 0}, "params": {"batch_size": 4},
             "tags": {contract.result_tag(contract.DEVICE): device},
             "metrics": {"test/accuracy": 50.0 + c, "dev/accuracy": 50.0 + c, "peak_mem_mb": 10.0,
                         contract.TIME_PER_STEP_MS: WALL[c], **({contract.CPU_TIME_PER_STEP_MS: CPU[c]} if cpu else {})},
             "history": {contract.TIME_PER_STEP_MS: [(10, WALL[c]), (20, WALL[c])],
                         **({contract.CPU_TIME_PER_STEP_MS: [(10, CPU[c]), (20, CPU[c])]} if cpu else {})}}
            for c in (10, 20, 30)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("clocks")
    uri, spec = make_sweep(root, SPEC, _runs(), splits=[("test", "near-IID")])
    client = MlflowClient(uri)
    (parent,) = client.search_runs([client.get_experiment_by_name("clocks").experiment_id],
                                   filter_string=contract.parent_filter())
    client.set_tag(parent.info.run_id, contract.METRIC, contract.CPU_TIME_PER_STEP_MS)  # the spec's objective
    return uri, spec


def pareto(spec, uri, tmp_path, figures, *extra):
    r = CliRunner().invoke(main, ["plot", "pareto", str(spec), "--tracking-uri", uri, "--x", "time",
                                  "--out", str(tmp_path / "p.png"), *extra])
    assert r.exit_code == 0, r.output
    (ax,) = figures[-1].axes
    xs = sorted(float(x) for x, _ in ax.collections[0].get_offsets())  # the configurations' points
    return ax.get_xlabel(), xs


def test_pareto_time_axis_is_cpu_time_by_default_and_says_so(store, tmp_path, figures):
    uri, spec = store
    assert pareto(spec, uri, tmp_path, figures) == ("CPU time per training sample (ms)", [10.0, 20.0, 30.0])
    assert pareto(spec, uri, tmp_path, figures, "--clock", "wall") == \
        ("wall-clock time per training sample (ms)", [50.0, 75.0, 100.0])


def test_pareto_of_gpu_trials_reads_the_wall_clock_and_says_so(tmp_path, figures):
    """A GPU each: the wall clock is the fair comparison, and the CPU time would leave out the GPU's work."""
    uri, spec = make_sweep(tmp_path, {**SPEC, "name": "gpus"}, _runs(device="NVIDIA H100"),
                           splits=[("test", "near-IID")])
    assert pareto(spec, uri, tmp_path, figures) == ("wall-clock time per training sample (ms)", [50.0, 75.0, 100.0])
    assert pareto(spec, uri, tmp_path, figures, "--clock", "cpu") == \
        ("CPU time per training sample (ms)", [10.0, 20.0, 30.0])


def test_pareto_of_runs_without_cpu_time_falls_back_to_the_wall_clock_and_says_so(tmp_path, figures):
    uri, spec = make_sweep(tmp_path, {**SPEC, "name": "older"}, _runs(cpu=False), splits=[("test", "near-IID")])
    assert pareto(spec, uri, tmp_path, figures) == ("wall-clock time per training sample (ms)", [50.0, 75.0, 100.0])


@pytest.mark.parametrize("metric, words", [(contract.CPU_TIME_PER_STEP_MS, "CPU time per step (ms)"),
                                           (contract.TIME_PER_STEP_MS, "wall-clock time per step (ms)")])
def test_curves_of_a_step_time_name_the_clock(store, tmp_path, figures, metric, words):
    uri, spec = store
    r = CliRunner().invoke(main, ["plot", "curves", str(spec), "--tracking-uri", uri, "--metric", metric,
                                  "--out", str(tmp_path / "c.png")])
    assert r.exit_code == 0, r.output
    ax = figures[-1].axes[0]
    assert ax.get_ylabel() == words and ax.get_title().startswith(f"clocks: {words}\n(")  # two lines (plots.curves_plot)


def test_tables_of_a_time_objective_name_the_clock(store):
    uri, spec = store
    r = CliRunner().invoke(main, ["importance", str(spec), "--tracking-uri", uri])
    assert r.exit_code == 0, r.output
    assert "of CPU time per step (ms) (min) over 3 finished trial runs" in r.output, r.output
    r = CliRunner().invoke(main, ["importance", str(spec), "--tracking-uri", uri, "--metric", contract.TIME_PER_STEP_MS])
    assert r.exit_code == 0, r.output
    assert "of wall-clock time per step (ms) (min)" in r.output, r.output
    r = CliRunner().invoke(main, ["runs", str(spec), "--tracking-uri", uri])
    assert r.exit_code == 0, r.output
    assert "| CPU time per step (ms) 40.00 (chunk_size=10,seed=0) |" in r.output, r.output
