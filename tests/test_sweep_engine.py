"""The sweep engine with a real local Ray and a real MLflow sqlite store: expansion, search algorithms,
failures, a killed trial worker, a killed driver + --resume, ASHA, and bad specs."""

from __future__ import annotations

import hashlib
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml
from mlflow.tracking import MlflowClient

from rirlab.train import run_trial
from sweeps.spec.load import load_spec
from sweeps.spec.trials import expand
from tests.conftest import REPO, RIRLAB, run_cli

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


def write_spec(path: Path, **changes) -> Path:
    spec = {**TINY, **changes}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def runs_of(db: Path, name: str):
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("rirlab.sweep") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children


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
    from sweeps.tune.tuner import asha_max_t

    base = {"model": "rir_ebt_grc", "task": "listops", "batch_size": 128}
    assert asha_max_t({**base, "steps": 300}) == 300
    assert asha_max_t({**base, "epochs": 3, "n_train": 1000}) == 3 * 8
    from rirlab.tasks.listops import ListOpsConfig

    assert asha_max_t({**base, "epochs": 2}) == 2 * math.ceil(ListOpsConfig().n_train / 128)  # task default


def test_dry_run_lists_trials_and_hash_without_starting_anything(workdir):
    spec = write_spec(workdir / "s.yaml", seeds=3)
    proc = run_cli(["sweep", spec, "--dry-run", "--set", "steps=7"], cwd=workdir, check=True)
    loaded = load_spec(spec, overrides={"steps": 7})
    assert "4 trials x" not in proc.stdout and f"6 trials (spec hash {loaded.hash})" in proc.stdout
    assert sum(line.split()[-1] == "7" for line in proc.stdout.splitlines()) == 6  # the steps column
    assert not (workdir / "mlruns.db").exists() and not (workdir / "rirlab_runs").exists()


# ---------------------------------------------------------------- the Tune search space (no Ray started)

WHEN_SPEC = {"seeds": [0, 7], "model": None, "variants": [{"name": "small", "set": {}}, {"name": "wide", "set": {"hidden_size": 16}}],
             "search": {"model": {"grid": ["rir_grc", "bbt_grc"]}, "lr": {"grid": [0.003, 0.001]},
                        "chunk_size": {"grid": [2, 4], "when": {"model": "rir_grc"}}}}


def _when_plan(tmp_path):
    from sweeps.plan.plan import SweepPlan

    spec = write_spec(tmp_path / "w.yaml", **WHEN_SPEC)
    spec.write_text(spec.read_text().replace("  chunk_size: 5\n", ""))
    return SweepPlan.of(load_spec(spec))


def _when_spec(tmp_path):
    return _when_plan(tmp_path).spec


def test_param_space_is_flat_real_config_keys_for_every_algorithm(tmp_path):
    from sweeps.plan.plan import SweepPlan

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

    from sweeps.spec.trials import TrialSpace
    from sweeps.tune.search import search_alg

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

    from sweeps.spec.trials import REPEATER_INDEX, TrialSpace

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

    from sweeps.driver.progress import ProgressCallback
    from sweeps.record.callback import bound
    from sweeps.spec.trials import TrialSpace

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
def test_bad_spec_exits_2_with_one_line_and_leaves_the_store_untouched(workdir, change, needle, hint, line_text):
    db = workdir / "store.db"
    client = MlflowClient(f"sqlite:///{db}")
    run = client.create_run(client.create_experiment("earlier"))
    client.log_metric(run.info.run_id, "x", 1.0)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    spec = write_spec(workdir / "bad.yaml", **change)
    proc = run_cli(["sweep", spec, "--tracking-uri", f"sqlite:///{db}"], cwd=workdir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1, proc.stderr
    assert needle in err[0] and hint in err[0], err[0]
    if line_text:
        line = next(i for i, text in enumerate(spec.read_text().splitlines(), 1) if line_text in text)
        assert f"{spec}:{line}:" in err[0], err[0]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not (workdir / "rirlab_runs").exists()


# ---------------------------------------------------------------- real sweeps

@pytest.mark.e2e
def test_random_search_runs_num_samples_trials_inside_the_bounds(workdir):
    """Through the CLI into MLflow. Optuna through the CLI: tests/test_spec_search.py (a real sweep into a
    persistent study); its multi-objective seed-mean there too (unit)."""
    search = {"lr": {"loguniform": [1e-4, 1e-2]}, "hidden_size": {"randint": [4, 12]}}
    for algo, metric, mode in (("random", "dev/accuracy", "max"),):
        spec = write_spec(workdir / f"{algo}.yaml", name=f"s_{algo}", algorithm=algo, num_samples=3, seeds=1,
                          search=search, metric=metric, mode=mode)
        run_cli(["sweep", spec, "--set", "steps=10", "--no-checkpoint-artifacts"], cwd=workdir, check=True)
        _, parents, children = runs_of(workdir / "mlruns.db", f"s_{algo}")
        assert len(parents) == 1 and len(children) == 3
        for run in children:
            assert run.info.status == "FINISHED"
            assert 1e-4 <= float(run.data.params["lr"]) <= 1e-2
            assert 4 <= int(run.data.params["hidden_size"]) <= 12
            assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert len({r.data.params["lr"] for r in children}) == 3  # three different samples


@pytest.mark.e2e
def test_failing_trials_end_failed_with_reason_and_the_sweep_goes_on(workdir):
    spec = write_spec(workdir / "f.yaml", name="faults", seeds=1, max_failures=1,
                      search={"model": {"grid": ["rir_grc", "nan_grc", "raise_grc"]}})
    env = {"RIRLAB_PLUGINS": "tests.plugin_models", "PYTHONPATH": str(REPO)}
    proc = run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, env=env, check=True)
    assert "1 finished, 2 failed" in proc.stdout
    _, parents, children = runs_of(workdir / "mlruns.db", "faults")
    by_model = {r.data.params["model"]: r for r in children}
    assert by_model["rir_grc"].info.status == "FINISHED"
    assert by_model["nan_grc"].info.status == "FAILED"
    assert "nan" in by_model["nan_grc"].data.tags["rirlab.failure_reason"].lower()
    assert "rirlab.retried" not in by_model["nan_grc"].data.tags  # deterministic: never retried
    assert not any("failed" in k or "failure" in k for r in children for k in r.data.metrics)  # a status, not a metric
    assert by_model["raise_grc"].data.tags["rirlab.retried"] == "1"  # an exception is retried (max_failures)
    assert by_model["raise_grc"].info.status == "FAILED"
    assert "deliberate failure" in by_model["raise_grc"].data.tags["rirlab.failure_reason"]
    assert parents[0].info.status == "FINISHED"


def _wait_for(predicate, timeout: float, what: str, proc=None):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"sweep exited ({proc.returncode}) before {what}:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _trial_workers():
    return [p for p in psutil.process_iter(["cmdline"]) if "ImplicitFunc" in " ".join(p.info["cmdline"] or [])]


@pytest.mark.e2e
def test_trial_worker_killed_resumes_from_checkpoint_with_the_same_final_metrics(workdir):
    spec = write_spec(workdir / "k.yaml", name="killed_worker", seeds=1, search={}, max_failures=3, checkpoint_every=50,
                      fixed={**TINY["fixed"], "steps": 600, "eval_every": 300})
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        ckpts = lambda: list((workdir / "rirlab_runs").glob("*/trial_*/checkpoint_*"))  # noqa: E731
        _wait_for(ckpts, 300, "a first checkpoint", proc)
        victims = _wait_for(_trial_workers, 60, "the trial's worker process", proc)
        for p in victims:
            p.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    client, _, children = runs_of(workdir / "mlruns.db", "killed_worker")
    assert len(children) == 1
    run = children[0]
    assert run.info.status == "FINISHED"
    assert int(run.data.tags["rirlab.retried"]) >= 1
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert len(steps) == len(set(steps)) and max(steps) == 600  # no step logged twice after the restore

    (trial,) = expand(load_spec(spec).spec)
    reference = run_trial(trial["config"])  # the same trial, uninterrupted, in this process
    for key in ("dev/accuracy", "test/accuracy", "test/loss", "dev/loss"):
        assert math.isclose(run.data.metrics[key], reference[key], rel_tol=1e-6, abs_tol=1e-9), key


@pytest.mark.e2e
def test_driver_killed_mid_sweep_then_resume_gives_one_finished_run_per_trial(workdir):
    spec = write_spec(workdir / "d.yaml", name="killed_driver", seeds=2, checkpoint_every=50, max_concurrent=2,
                      fixed={**TINY["fixed"], "steps": 300, "eval_every": 150})
    db = workdir / "mlruns.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()  # create the store first: polling must not race its creation
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    proc = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def one_done_one_running():
        client = MlflowClient(f"sqlite:///{db}")
        if client.get_experiment_by_name("killed_driver") is None:
            return False
        _, _, children = runs_of(db, "killed_driver")
        states = [r.info.status for r in children]
        return "FINISHED" in states and "RUNNING" in states

    try:
        _wait_for(one_done_one_running, 600, "one finished and one running trial", proc)
        time.sleep(1.5)  # let Tune snapshot its state once more
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray die at once, like a lost machine
        proc.wait()
    _, parents, children = runs_of(db, "killed_driver")
    assert parents[0].info.status == "RUNNING"  # nobody could close it

    run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, env={"TUNE_GLOBAL_CHECKPOINT_S": "1"},
            check=True)
    client, parents, children = runs_of(db, "killed_driver")
    trials = expand(load_spec(spec).spec)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.info.run_name for r in children) == sorted(t["name"] for t in trials)  # exactly one run each
    assert all(r.info.status == "FINISHED" for r in children)
    assert all("test/accuracy" in r.data.metrics for r in children)


@pytest.mark.e2e
def test_asha_stops_the_configurations_that_cannot_learn(workdir):
    spec = write_spec(workdir / "a.yaml", name="asha", seeds=1, max_concurrent=1, metric="train/loss", mode="min",
                      search={"lr": {"grid": [0.01, 0.005, 1e-9, 2e-9]}},
                      scheduler={"type": "asha", "grace_period": 10, "reduction_factor": 2},
                      fixed={**TINY["fixed"], "steps": 80, "eval_every": 80})
    run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, check=True)
    client, _, children = runs_of(workdir / "mlruns.db", "asha")
    last = {float(r.data.params["lr"]): max(m.step for m in client.get_metric_history(r.info.run_id, "train/loss"))
            for r in children}
    assert last[1e-9] < 80 and last[2e-9] < 80, last  # stopped early
    assert last[0.01] == 80, last  # the best configuration runs to the end
    stopped = [r for r in children if float(r.data.params["lr"]) < 1e-6]
    assert all(r.data.tags.get("rirlab.early_stopped") == "true" for r in stopped)


def test_unreachable_address_is_one_line_exit_2_and_records_nothing(workdir):
    proc = run_cli(["sweep", REPO / "tests" / "specs" / "tiny.yaml", "--address", "127.0.0.1:1"], cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "nothing answers there" in proc.stderr
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    assert client.get_experiment_by_name("tiny") is None
    assert not (workdir / "rirlab_runs").exists()
