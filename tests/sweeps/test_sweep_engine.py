"""The sweep engine: expansion, the Tune search space and search algorithms (one real local Ray), the driver's
callbacks, bad specs; its real sweeps (failures, a killed trial worker, a killed driver + --resume, ASHA):
tests/e2e/test_sweep_engine_runs.py."""

from __future__ import annotations

import hashlib
import math

import pytest
from mlflow.tracking import MlflowClient

from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import REPO, invoke, run_cli
from tests.helpers.sweep_runs import TINY, write_spec


# ---------------------------------------------------------------- expansion (no Ray)

def test_grid_expansion_is_variants_x_grid_x_seeds(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", seeds=3, search={"lr": {"grid": [0.1, 0.01]}, "chunk_size": {"grid": [2, 4, 8]}},
                      variants=[{"name": "base", "set": {}}, {"name": "wide", "set": {"hidden_size": 16}}])
    trials = expand(load_spec(spec).spec)
    assert len(trials) == 2 * 2 * 3 * 3
    combos = {(t["variant"], t["config"]["lr"], t["config"]["chunk_size"], t["config"]["seed"]) for t in trials}
    assert len(combos) == len(trials)
    assert all(t["config"]["hidden_size"] == (16 if t["variant"] == "wide" else 8) for t in trials)
    assert trials[0]["name"] == "base,lr=0.1,chunk_size=2,seed=0"


def test_conditional_axis_only_applies_when_its_condition_holds(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", seeds=1, model=None,
                      search={"model": {"grid": ["rir_grc", "bbt_grc"]},
                              "chunk_size": {"grid": [2, 4], "when": {"model": "rir_grc"}}})
    spec.write_text(spec.read_text().replace("  chunk_size: 5\n", ""))
    trials = expand(load_spec(spec).spec)
    assert sorted(t["name"] for t in trials) == sorted(
        ["model=rir_grc,chunk_size=2,seed=0", "model=rir_grc,chunk_size=4,seed=0", "model=bbt_grc,seed=0"])


def test_asha_cap_covers_an_epoch_budget():
    """ASHA stops trials at max_t steps: with ``epochs`` (which overrides ``steps``) the cap must cover
    epochs x batches per epoch, not the unused ``steps`` default (a paper-recipe trial would be cut short)."""
    from rirlab.sweeps.plan.plan import asha_max_t

    base = {"model": "rir_ebt_grc", "task": "listops", "batch_size": 128}
    assert asha_max_t({**base, "steps": 300}) == 300
    assert asha_max_t({**base, "epochs": 3, "n_train": 1000}) == 3 * 8
    from rirlab.tasks.listops import ListOpsConfig

    assert asha_max_t({**base, "epochs": 2}) == 2 * math.ceil(ListOpsConfig().n_train / 128)  # task default


def test_dry_run_lists_trials_and_hash_without_starting_anything(workdir):
    spec = write_spec(workdir / "s.yaml", seeds=3)
    r = invoke("sweep", spec, "--dry-run", "--set", "steps=7")  # in-process (the CLI as a process: tests/e2e)
    assert r.exit_code == 0, r.output
    loaded = load_spec(spec, overrides={"steps": 7})
    assert "4 trials x" not in r.stdout and f"6 trials (spec hash {loaded.hash})" in r.stdout
    assert sum(line.split()[-1] == "7" for line in r.stdout.splitlines() if line.split()) == 6  # the steps column
    assert not (workdir / "mlruns.db").exists() and not (workdir / "rirlab_runs").exists()


# ---------------------------------------------------------------- the Tune search space (no Ray started)

WHEN_SPEC = {"seeds": [0, 7], "model": None, "variants": [{"name": "small", "set": {}}, {"name": "wide", "set": {"hidden_size": 16}}],
             "search": {"model": {"grid": ["rir_grc", "bbt_grc"]}, "lr": {"grid": [0.003, 0.001]},
                        "chunk_size": {"grid": [2, 4], "when": {"model": "rir_grc"}}}}


def _when_plan(tmp_path):
    from rirlab.sweeps.plan.plan import SweepPlan

    spec = write_spec(tmp_path / "w.yaml", **WHEN_SPEC)
    spec.write_text(spec.read_text().replace("  chunk_size: 5\n", ""))
    return SweepPlan.of(load_spec(spec))


def _when_spec(tmp_path):
    return _when_plan(tmp_path).spec


def test_param_space_is_flat_real_config_keys_for_every_algorithm(tmp_path):
    from rirlab.sweeps.plan.plan import SweepPlan

    grid = _when_plan(tmp_path)
    sampled = write_spec(tmp_path / "r.yaml", algorithm="random", num_samples=2,
                         search={"lr": {"loguniform": [1e-4, 1e-2]}, "hidden_size": {"randint": [4, 12]}})
    optuna = write_spec(tmp_path / "o.yaml", algorithm="optuna", num_samples=2,
                        search={"lr": {"loguniform": [1e-4, 1e-2]}, "hidden_size": {"randint": [4, 12]}})
    for plan in (grid, SweepPlan.of(load_spec(sampled)), SweepPlan.of(load_spec(optuna))):
        space = plan.param_space()
        assert all(not isinstance(v, dict) or set(v) == {"grid_search"} for v in space.values())  # flat
        assert "trial" not in space and not any(k.startswith("__") for k in space)  # no meta keys
        assert set(space) - {"variant"} <= set(plan.resolved[0].flat())
    assert "variant" in grid.param_space()


def test_grid_trials_in_tune_are_exactly_the_expanded_trials(tmp_path):
    """Tune's config of each grid trial = the spec's constants + one grid point (real keys + the variant's
    name); TrialSpace.trial maps it to the expanded trial: variants x grid x seeds, `when:` applied once."""
    plan = _when_plan(tmp_path)
    spec = plan.spec
    trials = expand(spec)
    assert len(trials) == 2 * 2 * (2 + 1) * 2  # variants x lr x (rir_grc: 2 chunk sizes, bbt_grc: none) x seeds
    assert list(plan.trials) == trials and plan.num_samples == len(trials)
    constants = {k: v for k, v in plan.param_space().items() if not hasattr(v, "sample")}
    from_tune = [plan.space.trial({**constants, **point}) for point in plan.points]
    assert from_tune == trials
    assert trials[0].name == "small,model=rir_grc,lr=0.003,chunk_size=2,seed=0"
    bbt = next(t for t in trials if t.config["model"] == "bbt_grc")
    assert "chunk_size" not in bbt.swept and "chunk_size" not in bbt.config
    assert all(t.config["hidden_size"] == (16 if t.variant == "wide" else 8) for t in trials)
    assert {t.config["seed"] for t in trials} == {0, 7}


@pytest.mark.e2e
def test_ray_tune_runs_exactly_the_expanded_grid_trials(tmp_path):
    """The real thing: Ray Tune's own trials from param_space + the grid's search algorithm."""
    import ray
    from ray import tune

    from rirlab.sweeps.spec.trials import TrialSpace
    from rirlab.sweeps.tune.search import search_alg

    plan = _when_plan(tmp_path)
    spec = plan.spec
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        tuner = tune.Tuner(lambda config: tune.report({"ok": 1}), param_space=plan.param_space(),
                           tune_config=tune.TuneConfig(search_alg=search_alg(plan), num_samples=plan.num_samples,
                                                       reuse_actors=True),  # 24 trivial trials: ~5x faster
                           run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), verbose=0))
        configs = [r.config for r in tuner.fit()]
    finally:
        ray.shutdown()
    space = TrialSpace.of(spec)
    assert sorted(space.trial(c).name for c in configs) == sorted(t.name for t in expand(spec))
    assert all(space.trial(c) in expand(spec) for c in configs)


def test_random_and_repeated_optuna_configs_map_to_trials_with_when_and_seeds(tmp_path):
    from ray.tune.search.repeater import TRIAL_INDEX

    from rirlab.sweeps.spec.trials import REPEATER_INDEX, TrialSpace

    assert REPEATER_INDEX == TRIAL_INDEX  # Ray's key for the repeat index of an Optuna sample
    spec = _when_spec(tmp_path).model_copy(update={"variants": [], "algorithm": "optuna"})
    space = TrialSpace.of(spec)
    trial = space.trial({"task": "listops", "model": "bbt_grc", "lr": 0.01, "chunk_size": 4, "seed": 0, TRIAL_INDEX: 1})
    assert trial.name == "model=bbt_grc,lr=0.01,seed=7" and "chunk_size" not in trial.config
    trial = space.trial({"task": "listops", "model": "rir_grc", "lr": 0.01, "chunk_size": 4, "seed": 0})
    assert trial.swept == {"model": "rir_grc", "lr": 0.01, "chunk_size": 4, "seed": 0}


def test_driver_callbacks_load_back_as_the_bound_ones(tmp_path):
    """Tune pickles its callbacks into the experiment state and a restored Tuner runs the unpickled ones:
    they must come back as this driver's live callbacks (never as stale copies of another driver's)."""
    import pickle

    from ray import tune

    from rirlab.sweeps.driver.progress import ProgressCallback
    from rirlab.sweeps.record.callback import bound
    from rirlab.sweeps.spec.trials import TrialSpace

    live = ProgressCallback("x", 1, "dev/accuracy", "max", TrialSpace())
    saved = pickle.dumps(live)
    assert b"dev/accuracy" not in saved  # only the slot's name is saved
    other = ProgressCallback("x", 1, "dev/accuracy", "max", TrialSpace())
    with bound(other):
        assert pickle.loads(saved) is other
    restored = pickle.loads(saved)  # outside a sweep: an inert callback
    assert type(restored) is tune.Callback


# ---------------------------------------------------------------- bad specs

# (change to the tiny spec, text the error names, hint it gives, text of the spec line it must point at)
BAD = [
    ({"fixed": {**TINY["fixed"], "chunk_sise": 4}}, "unknown parameter 'chunk_sise'", "did you mean chunk_size?",
     "chunk_sise:"),
    ({"seed": 3}, "unknown key 'seed'", "did you mean seeds?", "seed: 3"),
    ({"fixed": {**TINY["fixed"], "chunk_size": 1}}, "chunk_size=1", "greater than or equal to 2", "chunk_size: 1"),
    ({"fixed": {**TINY["fixed"], "hidden_size": "big"}}, "hidden_size='big'", "integer", "hidden_size: big"),
    ({"search": {"lr": {"grid": []}}}, "empty grid", "search.lr", "lr:"),
    ({"search": {"lr": {"loguniform": [0.1, 0.01]}}, "algorithm": "random"}, "low < high", "search.lr", "lr:"),
    ({"scheduler": {"type": "hyperband"}}, "scheduler.type", "fifo", "type: hyperband"),
    ({"model": "rir_ebt_gcr"}, "unknown model 'rir_ebt_gcr'", "did you mean", None),
]


@pytest.mark.parametrize("change, needle, hint, line_text", BAD)
def test_bad_spec_exits_2_with_one_line_and_leaves_the_store_untouched(workdir, cli, new_store, change, needle, hint,
                                                                     line_text):
    """In-process (the CLI's own command; a refusal through a separate process: test_unreachable_address_...)."""
    db = workdir / "store.db"
    client = MlflowClient(new_store(db))  # (a copy of a migrated store, not MLflow's migrations in every case)
    run = client.create_run(client.create_experiment("earlier"))
    client.log_metric(run.info.run_id, "x", 1.0)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    spec = write_spec(workdir / "bad.yaml", **change)
    proc = cli("sweep", spec, "--tracking-uri", f"sqlite:///{db}")
    assert proc.exit_code == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1, proc.stderr
    assert needle in err[0] and hint in err[0], err[0]
    if line_text:
        line = next(i for i, text in enumerate(spec.read_text().splitlines(), 1) if line_text in text)
        assert f"{spec}:{line}:" in err[0], err[0]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not (workdir / "rirlab_runs").exists()


def test_unreachable_address_is_one_line_exit_2_and_records_nothing(workdir):
    proc = run_cli(["sweep", REPO / "tests" / "specs" / "tiny.yaml", "--address", "127.0.0.1:1"], cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "nothing answers there" in proc.stderr
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    assert client.get_experiment_by_name("tiny") is None
    assert not (workdir / "rirlab_runs").exists()
