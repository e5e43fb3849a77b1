"""--resume after the driver died right after a trial finished: that trial never runs again and no metric
step of any run is logged twice (a real driver process, real Ray, a real MLflow sqlite store)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml
from mlflow.tracking import MlflowClient

from rirlab.compat.mlflow import close_connections
from rirlab.sweeps.record.store import journal_plan
from tests.helpers.analysis_store import copy_empty_store
from tests.helpers.cli import REPO, RIRLAB, run_cli
from tests.sweeps.test_store_journal import journal_mode

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


def histories(client, run_id):
    run = client.get_run(run_id)
    return {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)] for k in run.data.metrics}


FAULTS = {"RIRLAB_PLUGINS": "tests.helpers.driver_faults", "PYTHONPATH": str(REPO)}


ONE_SWEEP = pytest.mark.one_worker("killed_after_first_trial")  # under xdist: on one worker, one killed sweep


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory):
    """A two-trial sweep (one at a time) whose driver was SIGKILLed right after the first trial finished, run once
    for the three tests that resume it (one sweep, not three: the three took 124.6 s of CPU, now 93.2): the folder
    it ran in (its spec, the store, Ray Tune's folder) and an untouched copy of it. Tune's state and the store name
    absolute paths, so each test gets the copy back at the folder the sweep ran in (killed_after_first_trial)."""
    home = tmp_path_factory.mktemp("killed_after_first_trial")
    workdir, kept = home / "work", home / "kept"
    workdir.mkdir()
    spec = workdir / "kill_after.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "name": "kill_after", "seeds": 1, "max_concurrent": 1,
                                    "checkpoint_every": 0, "fixed": {**TINY["fixed"], "steps": 20}}, sort_keys=False))
    copy_empty_store(workdir / "mlruns.db")
    env = {**os.environ, **FAULTS, "RIRLAB_TEST_KILL_AFTER_COMPLETE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600, start_new_session=True)
    assert proc.returncode == -9, proc.stdout + proc.stderr
    shutil.copytree(workdir, kept, symlinks=True)  # as the kill left it (the store's write-ahead log included)
    return workdir, kept, spec


def killed_after_first_trial(killed_sweep, monkeypatch):
    """The killed sweep's folder as the kill left it (whatever an earlier test did to it), as the current directory:
    its spec, an MLflow client of its store, the experiment, the finished run and its metric histories."""
    workdir, kept, spec = killed_sweep
    uri = f"sqlite:///{workdir / 'mlruns.db'}"
    close_connections(MlflowClient(uri))  # this process's pooled connections would read the replaced file
    shutil.rmtree(workdir)
    shutil.copytree(kept, workdir, symlinks=True)
    monkeypatch.chdir(workdir)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("kill_after")
    (done,) = [r for r in client.search_runs([exp.experiment_id]) if r.info.status == "FINISHED"]
    before = histories(client, done.info.run_id)
    assert "test/accuracy" in before
    return workdir, spec, client, exp, done, before


@ONE_SWEEP
def test_resume_after_a_kill_right_after_a_trial_finished_does_not_run_it_again(killed_sweep, monkeypatch):
    workdir, spec, client, exp, done, before = killed_after_first_trial(killed_sweep, monkeypatch)

    resumed = run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, env=FAULTS, check=True)
    assert "2 finished, 0 failed" in resumed.stdout
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2 and all(r.info.status == "FINISHED" for r in children)
    assert histories(client, done.info.run_id) == before  # not run again: nothing new logged
    assert "rirlab.resumed" not in client.get_run(done.info.run_id).data.tags
    for run in children:  # no metric step logged twice in any run
        for key, points in histories(client, run.info.run_id).items():
            steps = [s for s, _ in points]
            assert len(steps) == len(set(steps)), (run.info.run_name, key, steps)


def test_ctrl_c_while_the_parent_run_is_written_ends_it_killed_and_resume_continues_it(workdir, new_store):
    """The parent run existed (params, spec artifacts half written) when Ctrl-C came: it must not stay RUNNING
    beside a second parent, and the message must name --resume, not "nothing was recorded". A --resume of the sweep
    once finished logs nothing on its parent again (it logged its 14 sweep/best* metrics twice: issue 52 item 5)."""
    spec = workdir / "p.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "name": "ctrl_c_parent", "seeds": 1, "search": {}, "checkpoint_every": 0,
                                    "fixed": {**TINY["fixed"], "steps": 10}}, sort_keys=False))
    new_store(workdir / "mlruns.db")
    proc = run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir,
                   env={**FAULTS, "RIRLAB_TEST_INTERRUPT_IN_PARENT": "1"})
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "--resume" in proc.stderr and "nothing was recorded" not in proc.stderr, proc.stderr
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    exp = client.get_experiment_by_name("ctrl_c_parent")
    (parent,) = client.search_runs([exp.experiment_id])
    assert parent.info.status == "KILLED" and parent.data.tags.get("rirlab.interrupted") == "true"

    run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, env=FAULTS, check=True)
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [p.info.run_id for p in parents] == [parent.info.run_id]  # the same parent, continued
    finished = client.get_run(parent.info.run_id)
    assert finished.info.status == "FINISHED" and "rirlab.interrupted" not in finished.data.tags  # not any more
    assert [r.info.status for r in runs if "mlflow.parentRunId" in r.data.tags] == ["FINISHED"]
    footer = open(client.download_artifacts(parent.info.run_id, "report/table.md", str(workdir))).read()
    assert "FINISHED" in footer and "RUNNING" not in footer, footer[-300:]  # the report says how the sweep ended

    best = histories(client, parent.info.run_id)
    assert any(k.startswith("sweep/best/") for k in best) and all(len(v) == 1 for v in best.values()), best
    again = run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, env=FAULTS, check=True)
    assert "1 finished, 0 failed" in again.stdout, again.stdout
    assert histories(client, parent.info.run_id) == best
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


@ONE_SWEEP
def test_resume_when_tune_had_not_saved_its_state_runs_the_trials_left(killed_sweep, monkeypatch):
    """The driver died before Ray Tune first saved its experiment and searcher state (a disk that filled at
    startup, a kill): Tune restores no trial and starts the searcher afresh, on a space it does not keep; the
    resumed sweep must still run the trial that never started, and not the one that finished."""
    workdir, spec, client, exp, done, before = killed_after_first_trial(killed_sweep, monkeypatch)
    state = [p for p in workdir.rglob("*") if p.name.startswith(("experiment_state", "basic-variant-state"))]
    assert state, sorted(str(p) for p in workdir.rglob("*"))[:50]
    for path in state:
        path.unlink()

    resumed = run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, env=FAULTS, check=True)
    assert "2 finished, 0 failed" in resumed.stdout, resumed.stdout
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2 and all(r.info.status == "FINISHED" for r in children), runs
    assert histories(client, done.info.run_id) == before  # the finished trial did not run again


@ONE_SWEEP
def test_resume_with_a_truncated_tuner_pkl_writes_it_again_and_runs_the_trials_left(killed_sweep, monkeypatch):
    """Ray Tune's tuner.pkl cut short (a full disk, a kill mid-write): --resume failed with 43 lines ending in
    UnpicklingError, every time, so the sweep could never be continued. It is Tune's settings only (the trials'
    states are elsewhere): written again from the spec, named in one warning, and the sweep goes on."""
    workdir, spec, client, exp, done, before = killed_after_first_trial(killed_sweep, monkeypatch)
    (pkl,) = workdir.glob("rirlab_runs/*/tuner.pkl")
    pkl.write_bytes(pkl.read_bytes()[:40])

    resumed = run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, env=FAULTS, check=True)
    assert "2 finished, 0 failed" in resumed.stdout, resumed.stdout + resumed.stderr
    assert f"warning: Ray Tune's {pkl} is damaged (" in resumed.stderr, resumed.stderr
    assert "Traceback" not in resumed.stderr, resumed.stderr
    children = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2 and all(r.info.status == "FINISHED" for r in children), children
    assert histories(client, done.info.run_id) == before  # the finished trial did not run again


def test_a_driver_killed_with_results_unwritten_loses_no_step_on_resume(workdir, new_store):
    """Issue 50 item 3: the driver writes a trial's results together (at each checkpoint, and at the latest
    $RIRLAB_LOG_FLUSH_S after the oldest); killed with the results since the last checkpoint unwritten, the resumed
    trial replays them from that checkpoint: every step of the run is in MLflow once."""
    spec = workdir / "unwritten.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "name": "unwritten", "seeds": 1, "search": {}, "checkpoint_every": 10,
                                    "fixed": {**TINY["fixed"], "steps": 40, "log_every": 5, "eval_every": 20}},
                                   sort_keys=False))
    db = workdir / "mlruns.db"
    new_store(db)
    env = {**os.environ, **FAULTS, "RIRLAB_TEST_KILL_AT_STEP": "25", "RIRLAB_LOG_FLUSH_S": "3600"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600, start_new_session=True)
    assert proc.returncode == -9, proc.stdout + proc.stderr
    # the driver wrote with SQLite's write-ahead log (where the test's folder is on a local filesystem), killed
    # before it set the rollback journal back: what it committed is in the log, which any SQLite reads
    wal, line = journal_plan(db)
    assert line in proc.stdout.splitlines(), proc.stdout
    assert journal_mode(db) == ("wal" if wal else "delete")
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("unwritten")
    (run,) = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    written = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert written == [5, 10, 15, 20], written  # up to the checkpoint at 20; 25 was still waiting
    close_connections(client)  # (this process's pooled connections would keep the store in WAL mode)

    resumed = run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, env=FAULTS, check=True)
    assert "1 finished, 0 failed" in resumed.stdout, resumed.stdout
    assert journal_mode(db) == "delete" and not db.with_name("mlruns.db-wal").exists()  # one file again
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(steps) == list(range(5, 45, 5)), steps  # each once, 40 the final report's

