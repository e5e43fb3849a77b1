"""Random and Optuna searches keep seeds honest: every configuration runs once per seed with identical
non-seed values, the dry run shows what runs, and Optuna's study is persistent."""

from __future__ import annotations

import pytest

from sweeps.spec import load_spec
from sweeps.specfile import expand
from tests.helpers.sweep_runs import write_spec

SEARCH = {"lr": {"loguniform": [1e-4, 1e-2]}, "hidden_size": {"randint": [4, 12]}}


def by_config(trials):
    groups: dict = {}
    for t in trials:
        groups.setdefault(tuple(sorted((k, v) for k, v in t.swept.items() if k != "seed")), []).append(t.swept["seed"])
    return groups


def test_random_search_draws_each_configuration_once_and_runs_it_per_seed(tmp_path):
    spec = load_spec(write_spec(tmp_path / "r.yaml", algorithm="random", num_samples=3, seeds=2, search=SEARCH)).spec
    trials = expand(spec)
    assert trials == expand(spec, sample_random=True)  # the dry run shows what the sweep runs
    groups = by_config(trials)
    assert len(groups) == 3 and all(sorted(seeds) == [0, 1] for seeds in groups.values())


@pytest.mark.e2e
def test_ray_tune_runs_each_random_configuration_once_per_seed(tmp_path):
    """Ray Tune's own trials from param_space + the random search algorithm = the expanded trials."""
    import ray
    from ray import tune

    from sweeps.space import _search_alg, param_space
    from sweeps.specfile import TrialSpace

    spec = load_spec(write_spec(tmp_path / "r.yaml", algorithm="random", num_samples=3, seeds=2, search=SEARCH)).spec
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        tuner = tune.Tuner(lambda config: tune.report({"ok": 1}), param_space=param_space(spec),
                           tune_config=tune.TuneConfig(search_alg=_search_alg(spec), num_samples=spec.num_samples,
                                                       reuse_actors=True),  # trivial trials: no new actor each
                           run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), verbose=0))
        configs = [r.config for r in tuner.fit()]
    finally:
        ray.shutdown()
    space = TrialSpace.of(spec)
    ran = [space.trial(c) for c in configs]
    assert sorted(t.name for t in ran) == sorted(t.name for t in expand(spec))
    assert all(sorted(seeds) == [0, 1] for seeds in by_config(ran).values()) and len(by_config(ran)) == 3


def test_optuna_searcher_ignores_reports_without_the_metric(tmp_path):
    """A trial reports train/loss every log_every steps and dev/accuracy only when it evaluates; Ray's
    OptunaSearch raised KeyError on the first report without the metric (seeds: 1, no Repeater in between)."""
    from sweeps.space import _classes, _search_alg, param_space

    spec = load_spec(write_spec(tmp_path / "o.yaml", algorithm="optuna", num_samples=2, seeds=1,
                                search={"lr": {"loguniform": [1e-4, 1e-2]}})).spec
    gen = _search_alg(spec, tune_path=str(tmp_path / "out" / "o-hash-time"))
    optuna_search = gen.searcher.searcher
    assert isinstance(optuna_search, _classes()["OptunaSearchEvalOnly"])
    optuna_search.set_search_properties(None, None, param_space(spec))
    assert "lr" in gen.searcher.suggest("t1")
    optuna_search.on_trial_result("t1", {"train/loss": 1.0, "training_iteration": 1})  # no KeyError
    optuna_search.on_trial_result("t1", {"train/loss": 1.0, "dev/accuracy": 50.0, "training_iteration": 2})
    assert optuna_search._ot_trials["t1"].storage.get_trial(optuna_search._ot_trials["t1"]._trial_id).intermediate_values == {2: 50.0}
    assert (tmp_path / "out" / "optuna.db").exists()  # persistent: in the output directory by default


def test_optuna_study_storage_defaults_beside_a_sqlite_mlflow_store(tmp_path):
    from sweeps.space import optuna_study

    spec = load_spec(write_spec(tmp_path / "o.yaml", algorithm="optuna", search={"lr": {"uniform": [0.1, 0.2]}})).spec
    name, url = optuna_study(spec, f"sqlite:///{tmp_path}/store/mlruns.db", str(tmp_path / "runs" / "o-abc-1"))
    assert name == "o-abc-1" and url == f"sqlite:///{tmp_path.resolve()}/store/optuna.db"
    name, url = optuna_study(spec, "http://mlflow:5000", str(tmp_path / "runs" / "o-abc-1"))
    assert url == f"sqlite:///{(tmp_path / 'runs').resolve()}/optuna.db"
    named = spec.model_copy(update={"optuna": spec.optuna.model_copy(update={"study_name": "mine", "storage": "sqlite:///x.db"})})
    assert optuna_study(named, None, None) == ("mine", "sqlite:///x.db")


def test_multi_objective_optuna_tells_the_seed_mean_of_each_objective(tmp_path):
    """Ray's Repeater looked a list of metrics up as one key (TypeError); each objective is averaged over seeds."""
    import optuna

    from sweeps.space import _search_alg, param_space

    spec = load_spec(write_spec(tmp_path / "m.yaml", algorithm="optuna", num_samples=1, seeds=2,
                                metric=["dev/accuracy", "time_per_step_ms"], mode=["max", "min"],
                                search={"lr": {"loguniform": [1e-4, 1e-2]}})).spec
    gen = _search_alg(spec, tune_path=str(tmp_path / "out" / "m-hash-time"))
    repeater = gen.searcher
    repeater.set_search_properties(None, None, param_space(spec))
    first, second = repeater.suggest("t1"), repeater.suggest("t2")
    assert first["lr"] == second["lr"] and {first["__trial_index__"], second["__trial_index__"]} == {0, 1}
    repeater.on_trial_complete("t1", {"dev/accuracy": 40.0, "time_per_step_ms": 10.0})
    repeater.on_trial_complete("t2", {"dev/accuracy": 60.0, "time_per_step_ms": 30.0})
    study = repeater.searcher._ot_study
    assert [t.values for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE] == [[50.0, 20.0]]


def test_optuna_pruner_is_the_studys_and_stops_every_seed_of_a_pruned_configuration(tmp_path):
    import types

    import optuna
    from ray.tune.schedulers import TrialScheduler

    from sweeps.space import _search_alg, param_space, pruning_scheduler

    spec = load_spec(write_spec(tmp_path / "p.yaml", algorithm="optuna", num_samples=2, seeds=2,
                                optuna={"pruner": "median"}, search={"lr": {"loguniform": [1e-4, 1e-2]}})).spec
    gen = _search_alg(spec, tune_path=str(tmp_path / "out" / "p-hash-time"))
    gen.searcher.set_search_properties(None, None, param_space(spec))
    sched = pruning_scheduler(gen)
    assert sched is not None
    ids = ["a0", "a1", "b0", "b1"]
    for i in ids:
        gen.searcher.suggest(i)
    optuna_search = gen.searcher.searcher
    assert isinstance(optuna_search._ot_study.pruner, optuna.pruners.MedianPruner)
    gen.searcher.on_trial_result("a0", {"dev/accuracy": 10.0, "training_iteration": 1})  # first seed: to Optuna
    gen.searcher.on_trial_result("a1", {"dev/accuracy": 90.0, "training_iteration": 1})  # other seeds: not
    trial_a = optuna_search._ot_trials["a0"]
    assert trial_a.storage.get_trial(trial_a._trial_id).intermediate_values == {1: 10.0}
    trial_a.should_prune = lambda: True  # Optuna's pruner decided against configuration a
    result = {"dev/accuracy": 1.0}
    assert [sched.on_trial_result(None, types.SimpleNamespace(trial_id=i), result) for i in ids] == \
        [TrialScheduler.STOP] * 2 + [TrialScheduler.CONTINUE] * 2
    plain = load_spec(write_spec(tmp_path / "n.yaml", algorithm="optuna", search={"lr": {"uniform": [0.1, 0.2]}})).spec
    assert pruning_scheduler(_search_alg(plain, tune_path=str(tmp_path / "out" / "n-h-t"))) is None


def test_optuna_pruner_needs_optuna_and_one_metric(tmp_path):
    from rirlab.errors import UserError

    with pytest.raises(UserError, match="optuna.pruner needs algorithm: optuna"):
        load_spec(write_spec(tmp_path / "g.yaml", optuna={"pruner": "median"}))
