"""``rirlab sweep SPEC --warm-start EXPERIMENT`` without Ray, against a real MLflow sqlite store (and, for Optuna, a
real study storage): which earlier runs seed the search, in which order, what a random search then runs first, what
an Optuna study holds, and the refusals."""

from __future__ import annotations

import json

import pytest

from rirlab import contract
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record.tracker import Tracker
from rirlab.sweeps.record.warm import read_warm_start
from rirlab.sweeps.spec.load import load_spec
from tests.helpers.sweep_runs import write_spec

SEARCH = {"lr": {"loguniform": [0.0005, 0.005]}, "hidden_size": {"choice": [8, 12]}}


def _earlier(tmp_path):
    """An earlier sweep 'old': per configuration (lr, hidden_size) two seeds with their dev accuracies; a failed
    run, a run stopped early and a configuration outside the new space (lr 0.01) that must not seed anything."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("old")
    parent = tracker.start_parent(exp_id, "old", {})

    def child(lr, hidden, seed, acc, status="FINISHED", early=False):
        swept = {"lr": lr, "seed": seed}  # hidden_size was fixed in the earlier spec: read from the params
        tags = {contract.TRIAL_KEY: f"t{lr}-{hidden}-{seed}", contract.SWEPT: json.dumps(swept)}
        if early:
            tags[contract.EARLY_STOPPED] = contract.TRUE
        run = tracker.start_child(exp_id, parent, f"lr={lr},seed={seed}", {"lr": lr, "hidden_size": hidden,
                                                                            "seed": seed}, tags)
        tracker.log_result(run, {"dev/accuracy": acc}, 40)
        tracker.finish(run, status)
        return run

    runs = {"mid": [child(0.001, 8, 0, 50.0), child(0.001, 8, 1, 60.0)],
            "best": [child(0.003, 12, 0, 80.0), child(0.003, 12, 1, 70.0)],
            "worst": [child(0.002, 8, 0, 20.0)]}
    child(0.004, 8, 0, 99.0, status="FAILED")
    child(0.0045, 8, 0, 99.0, early=True)
    child(0.01, 8, 0, 99.0)  # outside the new loguniform bounds
    tracker.finish(parent, "FINISHED")
    return tracker, runs


def _plan(tmp_path, **changes):
    spec = write_spec(tmp_path / "new.yaml", name="new", search=SEARCH, **changes)
    return SweepPlan.of(load_spec(spec))


def test_warm_start_reads_the_finished_configurations_best_first_within_the_space(tmp_path):
    tracker, runs = _earlier(tmp_path)
    plan = _plan(tmp_path, algorithm="random", num_samples=4, seeds=1)
    warm = read_warm_start(tracker.client, ["old"], plan.spec)
    assert warm.points == ({"lr": 0.003, "hidden_size": 12}, {"lr": 0.001, "hidden_size": 8},
                           {"lr": 0.002, "hidden_size": 8})
    assert warm.values == ((75.0,), (55.0,), (20.0,))  # the seed mean, as Optuna is told it
    assert warm.runs[0] == tuple(runs["best"]) and warm.skipped == 1  # lr 0.01; failed, stopped early: not read
    assert "3 finished configuration(s), best first; 1 outside this spec's search space skipped" in warm.line()
    # a spec file names its experiment
    assert read_warm_start(tracker.client, [str(write_spec(tmp_path / "o.yaml", name="old"))], plan.spec).points \
        == warm.points


def test_a_value_the_earlier_sweep_fixed_is_read_back_from_its_param_as_what_it_was():
    from rirlab.sweeps.record.warm import _value

    params = {"lr": "1e-05", "hidden_size": "8", "flag": "True", "model": "rir_grc", "lr2": "0.001"}
    assert [_value(k, {}, params) for k in params] == [(True, 1e-05), (True, 8), (True, True), (True, "rir_grc"),
                                                      (True, 0.001)]  # (YAML alone reads 1e-05 as a string)
    assert _value("lr", {"lr": 0.003}, params) == (True, 0.003) and _value("x", {}, params) == (False, None)


def test_a_warm_started_random_search_runs_the_earlier_best_configurations_first(tmp_path):
    tracker, _ = _earlier(tmp_path)
    plan = _plan(tmp_path, algorithm="random", num_samples=4, seeds=2)
    warm = read_warm_start(tracker.client, ["old"], plan.spec)
    started = plan.warm_started(warm)
    assert list(started.points[:3]) == list(warm.points) and started.points[3] == plan.points[0]
    assert started.num_samples == 4 and started.n_trials == 8  # the spec's budget, not more
    first = [t.swept for t in started.trials[:4]]
    assert first == [{"lr": 0.003, "hidden_size": 12, "seed": 0}, {"lr": 0.003, "hidden_size": 12, "seed": 1},
                     {"lr": 0.001, "hidden_size": 8, "seed": 0}, {"lr": 0.001, "hidden_size": 8, "seed": 1}]
    assert started.resolved[0].flat()["lr"] == 0.003 and started.resolved[0].flat()["hidden_size"] == 12
    assert started.hash == plan.hash  # a source, not the spec: --resume still finds the sweep
    assert json.loads(warm.tag()) == {"experiments": ["old"], "configurations": 3, "skipped": 1}


def test_a_warm_started_optuna_study_holds_the_earlier_results_and_runs_them_first(tmp_path):
    import optuna

    from rirlab.sweeps.tune.optuna import WARM_START_ATTR, search_alg

    tracker, runs = _earlier(tmp_path)
    plan = _plan(tmp_path, algorithm="optuna", num_samples=4, seeds=1)
    warm = read_warm_start(tracker.client, ["old"], plan.spec)
    started = plan.warm_started(warm)
    assert started.points == plan.points  # (Optuna's study takes them)
    gen = search_alg(started, tracking_uri=f"sqlite:///{tmp_path / 'mlruns.db'}", tune_path=str(tmp_path / "t" / "s"))
    study = gen.searcher.study
    done = study.get_trials(deepcopy=False)
    assert [t.state for t in done] == [optuna.trial.TrialState.COMPLETE] * 3
    assert [(t.params, t.value) for t in done] == [({"lr": 0.003, "hidden_size": 12}, 75.0),
                                                  ({"lr": 0.001, "hidden_size": 8}, 55.0),
                                                  ({"lr": 0.002, "hidden_size": 8}, 20.0)]
    assert done[0].user_attrs[WARM_START_ATTR] == runs["best"]
    assert study.best_trial.params == {"lr": 0.003, "hidden_size": 12}  # the sampler starts from there
    # the same named study warm-started again: nothing added twice
    from rirlab.sweeps.tune.optuna import distributions, warm_start

    assert warm_start(study, warm, distributions(plan.param_space())) == (0, 0)


def test_a_configuration_without_results_is_queued_first_in_the_study(tmp_path):
    import dataclasses

    from rirlab.sweeps.tune.optuna import search_alg

    tracker, _ = _earlier(tmp_path)
    plan = _plan(tmp_path, algorithm="optuna", num_samples=4, seeds=1)
    warm = read_warm_start(tracker.client, ["old"], plan.spec)
    warm = dataclasses.replace(warm, values=(None,) + warm.values[1:])  # (e.g. a metric the earlier sweep lacked)
    gen = search_alg(plan.warm_started(warm), tracking_uri=f"sqlite:///{tmp_path / 'mlruns.db'}",
                     tune_path=str(tmp_path / "t" / "s"))
    searcher = gen.searcher
    searcher.set_search_properties(None, None, plan.param_space())
    first = searcher.suggest("trial_1")
    assert {k: first[k] for k in ("lr", "hidden_size")} == {"lr": 0.003, "hidden_size": 12}


def test_warm_start_refusals_are_one_line_exit_2(workdir, cli, new_store):
    new_store(workdir / "mlruns.db")  # (a migrated store copied: the cli fixture's cache holds no template)
    tracker, _ = _earlier(workdir)
    grid = write_spec(workdir / "g.yaml", name="g")
    proc = cli("sweep", grid, "--warm-start", "old", "--dry-run")
    assert proc.exit_code == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "--warm-start: algorithm: grid runs the points its spec lists" in line, line
    spec = write_spec(workdir / "r.yaml", name="r", algorithm="random", num_samples=2, search=SEARCH)
    for args, needle in ((["--warm-start", "nope"], "--warm-start nope: no experiment 'nope'"),
                         (["--warm-start", "old", "--resume"], "--warm-start seeds a new sweep; --resume")):
        proc = cli("sweep", spec, *args)
        assert proc.exit_code == 2
        (line,) = proc.stderr.strip().splitlines()
        assert needle in line, line
    proc = cli("sweep", spec, "--warm-start", "old", "--dry-run")  # the dry run shows the seeded trials first
    assert proc.exit_code == 0, proc.stderr
    assert "warm start from 'old': 3 finished configuration(s)" in proc.stdout
    assert not (workdir / "rirlab_runs").exists()


@pytest.fixture(autouse=True)
def _quiet_optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
