"""One job per trial (issue 54 item 10): `rirlab sweep SPEC --trial I --group G` runs trial I of the grid alone, the
trial and the spec hash exactly those of the whole sweep, and the readers take a group's jobs as one sweep."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from rirlab import contract
from rirlab.config import parse_overrides
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.spec.load import load_spec
from tests.helpers.analysis_store import make_sweep
from tests.helpers.cli import REPO, TINY_SPEC, invoke


def _domains(plan) -> dict:
    return {k: getattr(v, "categories", v) for k, v in plan.param_space().items()}


def _plan(path, quick=False, sets=()):
    return SweepPlan.of(load_spec(path, quick=quick, overrides=parse_overrides(sets)))


@pytest.mark.parametrize("path, quick, sets", [(REPO / "search_spaces" / "chunk_beam.yaml", False, ()),
                                               (REPO / "search_spaces" / "rir_ablation.yaml", True, ("seeds=2",)),
                                               (TINY_SPEC, False, ())])
def test_trial_i_is_the_whole_grids_trial_i_with_every_axis_still_swept(path, quick, sets):
    whole = _plan(path, quick, sets)
    assert whole.n_trials > 1
    for i, (trial, resolved, point) in enumerate(zip(whole.trials, whole.resolved, whole.points)):
        one = whole.one_trial(i)
        assert one.hash == whole.hash and one.swept_keys == whole.swept_keys  # the same sweep, every axis swept
        assert one.trials == (trial,) and one.trials[0].name == trial.name  # its name, swept values, config
        assert one.resolved[0].flat() == resolved.flat() and one.points == (point,)
        assert one.num_samples == 1 and _domains(one) == _domains(whole)  # Tune runs exactly that point
        assert (one.trial_index, one.grid_trials) == (i, whole.n_trials)


def test_evaluation_only_cells_go_with_the_trial_whose_weights_they_evaluate():
    path = REPO / "search_spaces" / "rir_ablation.yaml"
    whole = _plan(path, True, ("seeds=2",))
    assert whole.evaluations
    got = []
    for i in range(whole.n_trials):
        one = whole.one_trial(i)
        for ev in one.evaluations:
            assert ev.source.swept == one.trials[0].swept  # in the job that trains its weights
        got += [ev.key for ev in one.evaluations]
    assert sorted(got) == sorted(ev.key for ev in whole.evaluations)  # every cell once over the jobs


def _search_spec(tmp_path, algorithm):
    spec = tmp_path / f"{algorithm}.yaml"
    spec.write_text(f"name: s\ntask: listops\nmodel: rir_grc\nalgorithm: {algorithm}\nnum_samples: 3\n"
                    "search: {lr: {loguniform: [0.0001, 0.01]}}\nmetric: dev/accuracy\nmode: max\n")
    return spec


@pytest.mark.parametrize("algorithm", ["random", "optuna"])
def test_a_search_is_refused_in_one_line_before_anything_starts(tmp_path, algorithm):
    spec = _search_spec(tmp_path, algorithm)
    for args in (["--trial", "0", "--group", "g"], ["--count"]):
        r = invoke("sweep", spec, *args, "--tracking-uri", f"sqlite:///{tmp_path}/m.db")
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) == 1 and "is a search" in r.output and "without --trial" in r.output
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "rirlab_runs").exists()


def test_count_an_index_out_of_range_and_the_group(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.setenv("RIRLAB_DRY_RUN_TIMING", "0")
    spec = REPO / "search_spaces" / "chunk_beam.yaml"
    r = invoke("sweep", spec, "--count")
    assert r.exit_code == 0 and r.stdout.strip() == "18"
    r = invoke("sweep", spec, "--dry-run")  # the index a job array's task takes, beside the table's #
    assert "--trial I --group G runs #I+1 alone, I from 0 to 17" in r.stdout, r.output
    for bad in ("18", "-1"):
        r = invoke("sweep", spec, "--trial", bad, "--group", "g", "--tracking-uri", f"sqlite:///{tmp_path}/m.db")
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert "has 18 trials, indices 0 to 17" in r.output and "--array=0-17" in r.output
    r = invoke("sweep", spec, "--trial", "3")  # a new job with no group would be read back alone
    assert r.exit_code == 2 and "--group NAME" in r.output and len(r.output.strip().splitlines()) == 1
    r = invoke("sweep", spec, "--group", "g")
    assert r.exit_code == 2 and "give --trial I too" in r.output
    r = invoke("sweep", spec, "--trial", "3", "--group", "a b")
    assert r.exit_code == 2 and "letters, digits" in r.output
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "8812")  # a Slurm array's task: its array's id is the group
    r = invoke("sweep", spec, "--trial", "4", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == "trial 4 of 18 (#5 in --dry-run) alone: chunk_size=10,beam_size=7,seed=1, " \
                                       "group 8812"
    assert "1 trials (spec hash 410634b92cf4)" in r.stdout  # the whole grid's hash


def _grid(tmp_path, trials, group, name="grid"):
    """A store holding one-trial jobs of a 2x1 grid (make_sweep writes a parent per call): (uri, spec path, ids)."""
    spec = {"name": name, "task": "listops", "model": "rir_grc", "seeds": 1,
            "search": {"chunk_size": {"grid": [10, 20]}}, "metric": "dev/accuracy", "mode": "max"}
    ids = []
    for i, acc in trials:
        uri, path = make_sweep(tmp_path, spec, [{"swept": {"chunk_size": [10, 20][i], "seed": 0},
                                                 "metrics": {"dev/accuracy": acc, "test/accuracy": acc}}])
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(name)
        pid = client.search_runs([exp.experiment_id], contract.parent_filter(), order_by=["attributes.start_time DESC"],
                                 max_results=1)[0].info.run_id
        if group is not None:
            for k, v in {contract.TRIAL_INDEX: str(i), contract.SWEEP_GROUP: group, contract.GRID_TRIALS: "2"}.items():
                client.set_tag(pid, k, v)
        ids.append(pid)
    return uri, path, ids


def test_a_groups_jobs_read_back_as_one_sweep_in_tables_runs_and_export(tmp_path):
    uri, spec, ids = _grid(tmp_path, [(0, 61.0), (1, 72.0)], "8812")
    run = lambda *a: invoke(*a, "--tracking-uri", uri)  # noqa: E731

    t = run("tables", spec)
    assert t.exit_code == 0, t.output
    assert "| 61.00" in t.stdout and "| 72.00" in t.stdout, t.stdout  # both trials, one table
    assert "sweep group 8812 (2 of 2 one-trial jobs" in t.stdout and "has 2 sweeps" not in t.stderr
    one = run("tables", spec, "--run", ids[1])  # --run of one job reads its group
    assert "| 61.00" in one.stdout and "| 72.00" in one.stdout

    r = run("runs", spec, "--format", "csv")
    assert r.exit_code == 0 and len(r.stdout.strip().splitlines()) == 2, r.stdout  # one sweep
    assert "group 8812 (2 of 2 one-trial jobs)" in r.stdout and ",2,0,0,0," in r.stdout

    out = tmp_path / "g.parquet"
    e = invoke("export", "--experiment", "grid", "--run", ids[0], "--out", out, "--tracking-uri", uri)
    assert e.exit_code == 0 and "(2 run rows)" in e.stdout, e.output
    rec = invoke("tables", spec, "--records", out, "--run", ids[0])
    assert rec.exit_code == 0 and "| 61.00" in rec.stdout and "| 72.00" in rec.stdout, rec.output
    assert "sweep group 8812" in rec.stdout


def test_a_trial_run_twice_counts_its_latest_job_and_other_groups_stay_apart(tmp_path):
    uri, spec, _ = _grid(tmp_path, [(0, 61.0), (1, 72.0), (1, 74.0)], "a")  # trial 1 started again, not resumed
    _grid(tmp_path, [(0, 11.0)], "b")  # a later array of the same grid: its own sweep
    from rirlab.analysis.runs import load_sweep, sweeps_of

    client = MlflowClient(uri)
    latest = load_sweep(client, "grid")
    assert latest.group == "b" and sorted(latest.runs["metric.dev/accuracy"]) == [11.0]
    first = sweeps_of(client, "grid").iloc[1]
    a = load_sweep(client, "grid", first["parent_run"])
    assert a.group == "a" and sorted(a.runs["metric.dev/accuracy"]) == [61.0, 74.0]
    assert latest.n_sweeps == 2


def test_resume_finds_the_jobs_own_parent_and_a_whole_sweep_never_resumes_a_job(tmp_path):
    from rirlab.sweeps.record.tracker import Tracker

    uri, _, ids = _grid(tmp_path, [(0, 61.0), (1, 72.0)], "g")
    tracker = Tracker(uri, create=False)
    exp_id = tracker.experiment_id("grid", create=False)
    h = "0" * 12  # make_sweep's spec hash
    assert tracker.find_parent(exp_id, h, 0, "g").info.run_id == ids[0]
    assert tracker.find_parent(exp_id, h, 1).info.run_id == ids[1]  # (no group: the trial's latest job)
    assert tracker.find_parent(exp_id, h, 1, "other") is None
    assert tracker.find_parent(exp_id, h) is None  # only jobs: no whole sweep to resume
    _, _, (whole,) = _grid(tmp_path, [(0, 50.0)], None)
    _grid(tmp_path, [(1, 73.0)], "g2")  # a job started after the whole sweep
    assert tracker.find_parent(exp_id, h).info.run_id == whole
    assert json.loads(tracker.client.get_run(whole).data.tags[contract.SWEPT_KEYS]) == ["chunk_size"]
