"""Random and Optuna searches keep seeds honest: every configuration runs once per seed with identical
non-seed values, the dry run shows what runs, and Optuna's study is persistent."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import run_cli
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

    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.spec.trials import TrialSpace
    from rirlab.sweeps.tune.search import search_alg

    plan = SweepPlan.of(load_spec(write_spec(tmp_path / "r.yaml", algorithm="random", num_samples=3, seeds=2, search=SEARCH)))
    spec = plan.spec
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        tuner = tune.Tuner(lambda config: tune.report({"ok": 1}), param_space=plan.param_space(),
                           tune_config=tune.TuneConfig(search_alg=search_alg(plan), num_samples=plan.num_samples,
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
    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.tune.optuna import OptunaSearcher
    from rirlab.sweeps.tune.search import search_alg

    plan = SweepPlan.of(load_spec(write_spec(tmp_path / "o.yaml", algorithm="optuna", num_samples=2, seeds=1,
                                             search={"lr": {"loguniform": [1e-4, 1e-2]}})))
    gen = search_alg(plan, tune_path=str(tmp_path / "out" / "o-hash-time"))
    optuna_search = gen.searcher
    assert isinstance(optuna_search, OptunaSearcher)
    optuna_search.set_search_properties(None, None, plan.param_space())
    assert "lr" in gen.searcher.suggest("t1")
    optuna_search.on_trial_result("t1", {"train/loss": 1.0, "training_iteration": 1})  # no KeyError
    optuna_search.on_trial_result("t1", {"train/loss": 1.0, "dev/accuracy": 50.0, "training_iteration": 2})
    number = optuna_search.optuna_trial("t1").number
    assert optuna_search.study.trials[number].intermediate_values == {2: 50.0}
    assert (tmp_path / "out" / "optuna.db").exists()  # persistent: in the output directory by default


def test_optuna_study_storage_defaults_beside_a_sqlite_mlflow_store(tmp_path):
    from rirlab.sweeps.tune.optuna import optuna_study

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

    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.tune.search import search_alg

    plan = SweepPlan.of(load_spec(write_spec(tmp_path / "m.yaml", algorithm="optuna", num_samples=1, seeds=2,
                                             metric=["dev/accuracy", "time_per_step_ms"], mode=["max", "min"],
                                             search={"lr": {"loguniform": [1e-4, 1e-2]}})))
    gen = search_alg(plan, tune_path=str(tmp_path / "out" / "m-hash-time"))
    repeater = gen.searcher
    repeater.set_search_properties(None, None, plan.param_space())
    first, second = repeater.suggest("t1"), repeater.suggest("t2")
    assert first["lr"] == second["lr"] and {first["__trial_index__"], second["__trial_index__"]} == {0, 1}
    repeater.on_trial_complete("t1", {"dev/accuracy": 40.0, "time_per_step_ms": 10.0})
    repeater.on_trial_complete("t2", {"dev/accuracy": 60.0, "time_per_step_ms": 30.0})
    study = repeater.study
    assert [t.values for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE] == [[50.0, 20.0]]


def test_optuna_pruner_is_the_studys_and_stops_every_seed_of_a_pruned_configuration(tmp_path):
    import types

    import optuna
    from ray.tune.schedulers import TrialScheduler

    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.tune.optuna import pruning_scheduler
    from rirlab.sweeps.tune.search import search_alg

    plan = SweepPlan.of(load_spec(write_spec(tmp_path / "p.yaml", algorithm="optuna", num_samples=2, seeds=2,
                                             optuna={"pruner": "median"}, search={"lr": {"loguniform": [1e-4, 1e-2]}})))
    gen = search_alg(plan, tune_path=str(tmp_path / "out" / "p-hash-time"))
    gen.searcher.set_search_properties(None, None, plan.param_space())
    sched = pruning_scheduler(gen)
    assert sched is not None
    ids = ["a0", "a1", "b0", "b1"]
    for i in ids:
        gen.searcher.suggest(i)
    optuna_search = gen.searcher
    assert isinstance(optuna_search.study.pruner, optuna.pruners.MedianPruner)
    gen.searcher.on_trial_result("a0", {"dev/accuracy": 10.0, "training_iteration": 1})  # first seed: to Optuna
    gen.searcher.on_trial_result("a1", {"dev/accuracy": 90.0, "training_iteration": 1})  # other seeds: not
    trial_a = optuna_search.optuna_trial("a0")
    assert optuna_search.study.trials[trial_a.number].intermediate_values == {1: 10.0}
    trial_a.should_prune = lambda: True  # Optuna's pruner decided against configuration a
    result = {"dev/accuracy": 1.0}
    assert [sched.on_trial_result(None, types.SimpleNamespace(trial_id=i), result) for i in ids] == \
        [TrialScheduler.STOP] * 2 + [TrialScheduler.CONTINUE] * 2
    plain = SweepPlan.of(load_spec(write_spec(tmp_path / "n.yaml", algorithm="optuna", search={"lr": {"uniform": [0.1, 0.2]}})))
    assert pruning_scheduler(search_alg(plain, tune_path=str(tmp_path / "out" / "n-h-t"))) is None


def test_optuna_pruner_needs_optuna_and_one_metric(tmp_path):
    from rirlab.errors import UserError

    with pytest.raises(UserError, match="optuna.pruner needs algorithm: optuna"):
        load_spec(write_spec(tmp_path / "g.yaml", optuna={"pruner": "median"}))


SECRET = "Pw-3f9c1e"  # a password that must appear nowhere


@pytest.mark.e2e
@pytest.mark.parametrize("storage, says", [("MLFLOW", "is the MLflow store"),
                                           (f"postgresql://alice:{SECRET}@127.0.0.1:9/db", "cannot be opened")])
def test_an_optuna_storage_that_cannot_serve_is_refused_before_anything_is_recorded(workdir, new_store, storage,
                                                                                    says):
    """The MLflow store itself as Optuna's storage used to get Optuna's tables added to it, and an unreachable
    database left a KILLED parent run; a password in the URL was printed in clear. The refusal comes before a local
    Ray is started (it was checked after ``ray.init``: seconds of a user's wait and of Ray's processes for a sweep
    that cannot run)."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    db = workdir / "mlruns.db"
    storage = f"sqlite:///{db}" if storage == "MLFLOW" else storage
    new_store(db)  # the store exists (made by an earlier sweep)
    tables = {r[0] for r in sqlite3.connect(db).execute("select name from sqlite_master where type='table'")}
    spec = write_spec(workdir / "o.yaml", name="o_storage", algorithm="optuna", num_samples=1, seeds=1,
                      search={"lr": {"loguniform": [1e-4, 1e-2]}}, optuna={"storage": storage})
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp")) / "t"  # where a local Ray would put its session,
    # had it started (a short path: Ray's sockets live under it)
    proc = run_cli(["sweep", spec], cwd=workdir, env={"RAY_TMPDIR": str(ray_tmp)})
    ray_started = ray_tmp.exists()
    shutil.rmtree(ray_tmp.parent, ignore_errors=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert says in line and SECRET not in proc.stdout + proc.stderr, line
    assert not ray_started, "Ray was started before the storage was checked"  # refused before Ray starts
    assert MlflowClient(f"sqlite:///{db}").get_experiment_by_name("o_storage") is None  # no parent run, no experiment
    assert {r[0] for r in sqlite3.connect(db).execute("select name from sqlite_master where type='table'")} == tables
    assert not (workdir / "rirlab_runs").exists()


def test_a_password_in_the_optuna_storage_is_recorded_masked(tmp_path):
    """The parent run carries the spec as written, the effective spec and the spec as params: none of them may
    hold the password of an optuna.storage URL, given in the file or by --set."""
    from mlflow.tracking import MlflowClient

    from rirlab.sweeps.driver.sweep import _start_parent
    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.record.tracker import Tracker

    url = f"postgresql://alice:{SECRET}@db.internal:5432/optuna"
    spec = write_spec(tmp_path / "o.yaml", name="o_masked", algorithm="optuna", num_samples=1, seeds=1,
                      search={"lr": {"loguniform": [1e-4, 1e-2]}}, optuna={"storage": url})
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    for overrides in ({}, {"optuna.storage": url.replace("optuna", "other")}):
        plan = SweepPlan.of(load_spec(spec, overrides=overrides))
        exp = tracker.experiment_id("o_masked")
        run_id = _start_parent(tracker, exp, plan, str(tmp_path / "t"), "now")
        client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
        run = client.get_run(run_id)
        texts = [client.download_artifacts(run_id, p, str(tmp_path / run_id)) for p in ("spec/o.yaml",
                                                                                         "spec/effective_spec.json")]
        recorded = " ".join([*map(str, run.data.params.values()), *map(str, run.data.tags.values()),
                             *(open(t).read() for t in texts)])
        assert SECRET not in recorded
        assert "postgresql://alice:***@db.internal:5432/" in recorded  # masked, not dropped


def test_a_sweep_that_continues_a_persistent_study_draws_new_configurations(tmp_path):
    """The sampler was seeded alike on every sweep, so a second sweep of one named study re-proposed the first
    sweep's configurations; the study also names its objectives after the metrics (optuna-dashboard)."""
    import optuna

    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.tune.search import search_alg

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    plan = SweepPlan.of(load_spec(write_spec(tmp_path / "o.yaml", algorithm="optuna", num_samples=3, seeds=1,
                                             search={"lr": {"loguniform": [1e-4, 1e-2]}},
                                             optuna={"sampler": "random", "study_name": "kept", "storage": storage})))

    def one_sweep(tag: str) -> list[float]:
        gen = search_alg(plan, tune_path=str(tmp_path / "out" / tag))
        gen.searcher.set_search_properties(None, None, plan.param_space())
        lrs = []
        for i in range(3):
            lrs.append(gen.searcher.suggest(f"{tag}{i}")["lr"])
            gen.searcher.on_trial_complete(f"{tag}{i}", {"dev/accuracy": 50.0 + i})
        return lrs

    from rirlab.sweeps.tune.search import study_before

    assert study_before(plan.spec) == ""  # not in its storage yet
    first, second = one_sweep("a"), one_sweep("b")
    assert not set(first) & set(second), (first, second)
    assert study_before(plan.spec) == "study 'kept' already holds 6 trials"  # the dry run and progress line say so
    from tests.helpers.cli import invoke

    dry = invoke("sweep", tmp_path / "o.yaml", "--dry-run")
    assert "continues the Optuna study: its study 'kept' already holds 6 trials" in dry.output, dry.output
    assert one_sweep("c") != second  # and a third continues further
    study = optuna.load_study(study_name="kept", storage=storage)
    assert len(study.trials) == 9 and study.metric_names == ["dev/accuracy"]
    fresh = SweepPlan.of(load_spec(write_spec(tmp_path / "f.yaml", algorithm="optuna", num_samples=3, seeds=1,
                                              search={"lr": {"loguniform": [1e-4, 1e-2]}},
                                              optuna={"sampler": "random", "study_name": "new",
                                                      "storage": storage})))
    gen = search_alg(fresh, tune_path=str(tmp_path / "out" / "d"))
    gen.searcher.set_search_properties(None, None, fresh.param_space())
    assert gen.searcher.suggest("d0")["lr"] == first[0]  # a new study is reproducible: the same first draw
