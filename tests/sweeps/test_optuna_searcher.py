"""The Optuna searcher drives Optuna through its public ask/tell API (rirlab.sweeps.tune.optuna), and what remains of
Optuna's (and Ray's) internals is one compat module, checked against the installed version. A sweep recorded by the
code before (Ray's OptunaSearch under a Repeater, pickled by Tune) still resumes: tests/sweeps/fixtures/optuna_v1
holds its saved state, written by tests/sweeps/fixtures/make_optuna_v1.py with that code."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "optuna_v1"


def _restored(folder: Path, plan):
    """The search algorithm as Tune restores it on --resume: unpickled from tuner.pkl (pickled before the sweep
    started), given the search space, then its saved state; as the driver does, with the module names of sweeps
    recorded before the package moved (``sweeps.tune.optuna``) reachable."""
    import ray.cloudpickle as pickle

    from rirlab.sweeps.driver.legacy import legacy_module_names

    with legacy_module_names():  # (the fixture names the modules as sweeps.*: recorded before rirlab.sweeps)
        gen = pickle.loads((FIXTURE / "search_alg.pkl").read_bytes())
        gen.set_search_properties(None, None, plan.param_space())
        gen.restore_from_dir(str(folder))
    return gen


def test_an_optuna_sweep_recorded_before_the_ask_tell_searcher_resumes(tmp_path, monkeypatch):
    import optuna

    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.tune.optuna import OptunaSearcher, link_run, pruning_scheduler

    work = tmp_path / "old"
    shutil.copytree(FIXTURE, work)
    monkeypatch.chdir(work)  # (its study is sqlite:///optuna.db, relative)
    plan = SweepPlan.of(load_spec(work / "old.yaml"))
    gen = _restored(work, plan)
    searcher = gen.searcher.searcher  # (under the old Repeater, which passes through now)
    assert isinstance(searcher, OptunaSearcher) and searcher.repeat == 2 and gen.total_samples == 6
    assert isinstance(searcher.study.pruner, optuna.pruners.MedianPruner)
    study = optuna.load_study(study_name="old", storage="sqlite:///optuna.db")
    running = study.trials[1]  # configuration B: seed 0 (t2) was running, seed 1 not started
    assert gen.searcher.suggest("t3") == {"lr": running.params["lr"], "__trial_index__": 1}
    assert link_run("t3", "run-t3") == {"rirlab.optuna.trial_number": "1", "rirlab.optuna.study": "old"}
    gen.on_trial_result("t2", {"dev/accuracy": 75.0, "training_iteration": 2})  # the first seed's reports: Optuna's
    gen.on_trial_result("t3", {"dev/accuracy": 10.0, "training_iteration": 2})  # other seeds': not
    assert pruning_scheduler(gen).on_trial_result(None, types.SimpleNamespace(trial_id="t3"), {}) == "CONTINUE"
    gen.on_trial_complete("t2", {"dev/accuracy": 80.0})
    gen.on_trial_complete("t3", {"dev/accuracy": 60.0})
    told = optuna.load_study(study_name="old", storage="sqlite:///optuna.db").trials
    assert [t.values for t in told] == [[50.0], [70.0]]  # each configuration: the seed mean
    assert told[1].intermediate_values == {1: 70.0, 2: 75.0}
    assert told[1].user_attrs["mlflow_run_ids"] == ["run-t2", "run-t3"]
    fresh = gen.searcher.suggest("t4")  # a new configuration (Optuna trial 2), its seed 0
    assert fresh["__trial_index__"] == 0 and len(study.trials) == 3
    # what it saves now is the new searcher's state: a second --resume restores that
    again = tmp_path / "again"
    again.mkdir()
    gen.save_to_dir(str(again), session_str="v2")
    gen2 = _restored(again, plan)
    assert gen2.searcher.suggest("t5") == {"lr": fresh["lr"], "__trial_index__": 1}
    assert gen2.searcher.searcher.optuna_trial("t2").number == 1


def test_the_searcher_state_holds_no_study_and_restores_its_groups(tmp_path):
    """Tune pickles the searcher in tuner.pkl before the sweep starts and saves it as it runs: the study stays in
    its storage (opened again after a restore), the seed groups travel."""
    import ray.cloudpickle as pickle

    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.tune.search import search_alg
    from tests.helpers.sweep_runs import write_spec

    plan = SweepPlan.of(load_spec(write_spec(tmp_path / "o.yaml", algorithm="optuna", num_samples=2, seeds=2,
                                             max_concurrent=1, search={"lr": {"loguniform": [1e-4, 1e-2]}})))
    assert plan.num_samples == 4  # Tune runs each suggestion once per seed
    gen = search_alg(plan, tune_path=str(tmp_path / "out" / "o-h-t"))
    blob = pickle.dumps(gen)  # (as in tuner.pkl)
    gen.set_search_properties(None, None, plan.param_space())
    first = gen.searcher.suggest("a0")
    gen.searcher.on_trial_complete("a0", {"dev/accuracy": 1.0})
    gen.save_to_dir(str(tmp_path), session_str="s")
    restored = pickle.loads(blob)
    restored.set_search_properties(None, None, plan.param_space())
    restored.restore_from_dir(str(tmp_path))
    inner = restored.searcher.searcher  # (inside the ConcurrencyLimiter of max_concurrent)
    assert inner._study is None and inner.groups[0]["scores"] == {"a0": [1.0]}
    assert restored.searcher.suggest("a1") == {**first, "__trial_index__": 1}

