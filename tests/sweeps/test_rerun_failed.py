"""``rirlab sweep SPEC --rerun-failed`` without Ray, against a real MLflow sqlite store: which trials it reruns, how a
new attempt replaces the failed run (created with the link, so no reader ever counts a trial twice), what readers
count, the rerun's Tune space and the refusals. Through the CLI with a real Ray: tests/e2e/test_sweep_rerun_failed.py."""

from __future__ import annotations

import hashlib
import types

import pytest

from rirlab import contract
from rirlab.sweeps.driver import rerun
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record.callback import MLflowTrialCallback
from rirlab.sweeps.record.tracker import Tracker
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.schema import base_config
from tests.helpers.cli import REPO

PLAN = SweepPlan.of(load_spec(REPO / "tests" / "specs" / "tiny.yaml"))  # lr grid [0.003, 0.001] x seeds [0, 1]
FINAL = {"step": 40, "train/loss": 1.0, "dev/accuracy": 20.0, "test/accuracy": 30.0, "final": True}


def _trial(key, lr, seed=0):
    return types.SimpleNamespace(trial_id=key, config={**base_config(PLAN.spec), "lr": lr, "seed": seed},
                                 last_result={}, checkpoint=None, num_failures=0, error_file=None,
                                 pickled_error_file=None)


def _finish(cb, trial):
    cb.on_trial_start(0, [], trial)
    cb.on_trial_result(0, [], trial, FINAL)
    trial.last_result = FINAL
    cb.on_trial_complete(0, [], trial)


def _fail(cb, trial):
    cb.on_trial_start(0, [], trial)
    cb.on_trial_result(0, [], trial, {"step": 5, "train/loss": 2.0})
    cb.on_trial_error(0, [], trial)


def _sweep(tmp_path):
    """A finished sweep of tiny.yaml: two trials finished, one FAILED (an error), one KILLED."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("tiny")
    parent = tracker.start_parent(exp_id, "tiny", {contract.SPEC_HASH: PLAN.hash})
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    trials = {"ok0": _trial("ok0", 0.003, 0), "ok1": _trial("ok1", 0.003, 1), "err": _trial("err", 0.001, 0),
              "kill": _trial("kill", 0.001, 1)}
    _finish(cb, trials["ok0"])
    _finish(cb, trials["ok1"])
    _fail(cb, trials["err"])
    cb.on_trial_start(0, [], trials["kill"])
    cb.mark_interrupted()  # (the only one still running): KILLED
    tracker.finish(parent, "FINISHED")
    return tracker, exp_id, tracker.client.get_run(parent), cb.runs


def test_it_reruns_the_failed_and_killed_trials_only_and_each_maps_back_to_its_trial(tmp_path):
    tracker, exp_id, parent, runs = _sweep(tmp_path)
    found = rerun.failed_trials(tracker, exp_id, parent, PLAN)
    assert [(r.run_id, r.status, r.attempt) for r in found] == [(runs["err"], "FAILED", 2), (runs["kill"], "KILLED", 2)]
    assert found[0].swept == {"lr": 0.001, "seed": 0} and found[1].swept == {"lr": 0.001, "seed": 1}
    for r in found:  # the Tune config handed out is the same trial again
        assert PLAN.space.trial(r.point()).swept == r.swept
    assert "trial raised an error" in found[0].reason


def test_a_new_attempt_replaces_the_failed_run_and_every_reader_counts_the_trial_once(tmp_path):
    from rirlab.analysis.export import trial_runs
    from rirlab.analysis.runs import child_runs, sweeps_of

    tracker, exp_id, parent, runs = _sweep(tmp_path)
    found = rerun.failed_trials(tracker, exp_id, parent, PLAN)
    cb = MLflowTrialCallback(tracker, exp_id, parent.info.run_id, PLAN, checkpoint_artifacts=False, reruns=found)
    # before the rerun trains anything, the runs it replaces are no longer counted (nor shown as failed)
    assert (cb.counts().finished, cb.counts().failed) == (2, 0)
    assert set(cb.existing) == {"ok0", "ok1"}
    again = _trial("new_err", 0.001, 0)  # Tune's new trial of the same config (a new trial id)
    _finish(cb, again)
    new = tracker.client.get_run(cb.runs["new_err"])
    assert new.data.tags[contract.RERUN_OF] == runs["err"] and new.data.tags[contract.ATTEMPT] == "2"
    assert new.info.status == "FINISHED" and new.info.run_name == "lr=0.001,seed=0"
    old = tracker.client.get_run(runs["err"])
    assert old.info.status == "FAILED" and old.data.tags[contract.SUPERSEDED_BY] == new.info.run_id  # kept
    assert (cb.counts().finished, cb.counts().failed) == (3, 0)

    # every reader: the replaced run is left out; the killed trial (not rerun yet) is still the trial's run
    rows = child_runs(tracker.client, exp_id, parent.info.run_id)
    assert runs["err"] not in set(rows["run_id"]) and len(rows) == 4
    (row,) = sweeps_of(tracker.client, "tiny").to_dict("records")
    assert (row["finished"], row["failed"], row["other"]) == (3, 0, 1)
    assert len(trial_runs(tracker.client, "tiny", parent.info.run_id)) == 4
    # the next --rerun-failed: the killed trial only (the replaced run's trial finished now)
    assert [r.run_id for r in rerun.failed_trials(tracker, exp_id, parent, PLAN)] == [runs["kill"]]

    # a rerun resumed after Ctrl-C (--resume) gets the same list back: the run replaced already stays replaced,
    # the killed trial's new run (when it starts) is still linked
    resumed = MLflowTrialCallback(tracker, exp_id, parent.info.run_id, PLAN, checkpoint_artifacts=False,
                                  reruns=found)
    assert set(resumed.reruns) == {rerun.signature({"lr": 0.001, "seed": 1})}
    assert (resumed.counts().finished, resumed.counts().failed) == (3, 0)


def test_a_sweep_with_nothing_failed_says_so_and_an_unfinished_one_is_refused(tmp_path):
    from rirlab.errors import UserError

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("tiny")
    parent = tracker.start_parent(exp_id, "tiny", {contract.SPEC_HASH: PLAN.hash})
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    _finish(cb, _trial("a", 0.003))
    tracker.finish(parent, "FINISHED")
    run = tracker.client.get_run(parent)
    with pytest.raises(rerun.NothingToRerun, match=f"nothing to rerun: every trial of sweep run {parent} finished"):
        rerun.failed_trials(tracker, exp_id, run, PLAN)
    rerun.check_parent(run)  # a finished sweep: fine
    legacy = tracker.start_child(exp_id, parent, "old", {}, {contract.TRIAL_KEY: "legacy"})  # no swept values
    tracker.finish(legacy, "FAILED", "boom")
    with pytest.raises(rerun.NothingToRerun, match="nothing to rerun: 1 unfinished trial run.* have no swept values"):
        rerun.failed_trials(tracker, exp_id, run, PLAN)
    tracker.finish(parent, "KILLED")  # interrupted before all its trials ran: --resume first
    with pytest.raises(UserError, match="continue it first with --resume"):
        rerun.check_parent(tracker.client.get_run(parent))
    tracker.set_tags(parent, {contract.RERUNS: "1"})  # an interrupted rerun: rerun again
    rerun.check_parent(tracker.client.get_run(parent))


def test_the_rerun_experiment_hands_out_each_trial_once(tmp_path):
    """The random algorithm's seed is a grid_search (each drawn configuration once per seed): kept, each rerun
    config would run once per seed again."""
    from ray.tune.search.sample import Categorical

    from rirlab.sweeps.tune.tuner import rerun_space
    from tests.helpers.sweep_runs import write_spec

    plan = SweepPlan.of(load_spec(write_spec(tmp_path / "r.yaml", algorithm="random", num_samples=2,
                                             search={"lr": {"uniform": [0.001, 0.003]}})))
    assert plan.param_space()["seed"] == {"grid_search": [0, 1]}
    space = rerun_space(plan)
    assert isinstance(space["seed"], Categorical) and space["seed"].categories == [0, 1]
    assert not any(isinstance(v, dict) and "grid_search" in v for v in space.values())


def test_the_dry_run_lists_the_trials_it_would_rerun_and_writes_nothing(workdir, cli, new_store):
    new_store(workdir / "mlruns.db")  # (a migrated store copied: the cli fixture's cache holds no template)
    tracker, _, parent, runs = _sweep(workdir)  # (the default store, ./mlruns.db)
    spec = workdir / "s.yaml"
    spec.write_text((REPO / "tests" / "specs" / "tiny.yaml").read_text())
    before = hashlib.sha256((workdir / "mlruns.db").read_bytes()).hexdigest()
    proc = cli("sweep", spec, "--rerun-failed", "--dry-run")
    assert proc.exit_code == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"would rerun 2 trial(s) of sweep run {parent.info.run_id} from scratch (1 FAILED, 1 KILLED):",
        "  lr=0.001,seed=0  FAILED (attempt 1): trial raised an error (see the Ray logs in the sweep's output "
        "directory)",
        "  lr=0.001,seed=1  KILLED (attempt 1)"], proc.stdout
    assert hashlib.sha256((workdir / "mlruns.db").read_bytes()).hexdigest() == before
    assert not (workdir / "rirlab_runs").exists()


def test_rerun_failed_with_resume_or_a_changed_spec_is_one_line_exit_2(workdir, cli, new_store):
    spec = workdir / "s.yaml"
    spec.write_text((REPO / "tests" / "specs" / "tiny.yaml").read_text())
    proc = cli("sweep", spec, "--rerun-failed", "--resume")
    assert proc.exit_code == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "--rerun-failed and --resume cannot be combined" in line, line

    old = load_spec(spec)
    db = workdir / "mlruns.db"
    tracker = Tracker(new_store(db))  # (a migrated store copied: the cli fixture's cache holds no template)
    exp_id = tracker.experiment_id("tiny")
    tracker.start_parent(exp_id, "tiny earlier", {contract.SPEC_HASH: old.hash, contract.QUICK: "False",
                                                  contract.OVERRIDES: "{}"})
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    proc = cli("sweep", spec, "--rerun-failed", "--set", "steps=50")
    assert proc.exit_code == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --rerun-failed: the spec changed since the last sweep of tiny"), line
    assert "leave out --rerun-failed" in line, line
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not (workdir / "rirlab_runs").exists()
