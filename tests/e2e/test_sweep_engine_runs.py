"""The sweep engine's real sweeps through the CLI, a real local Ray and a real MLflow sqlite store: a random
search, failing trials, a killed trial worker, a killed driver + --resume, ASHA."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
from mlflow.tracking import MlflowClient
from ray.tune import ExperimentAnalysis

from rirlab.contract import FAILURE_REASON
from rirlab.train import load_checkpoint, run_trial
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import REPO, RIRLAB, run_cli
from tests.helpers.sweep_runs import TINY, runs_of, write_spec


def test_random_search_runs_num_samples_trials_inside_the_bounds(workdir, new_store):
    """Through the CLI into MLflow. Optuna through the CLI: tests/e2e/test_search_sweeps.py (a real sweep into a
    persistent study); its multi-objective seed-mean: tests/sweeps/test_spec_search.py (unit)."""
    new_store(workdir / "mlruns.db")  # the default store, migrated (a new one: tests/e2e/test_e2e_sweep.py)
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


def test_failing_trials_end_failed_with_reason_and_the_sweep_goes_on(workdir, new_store):
    new_store(workdir / "mlruns.db")
    spec = write_spec(workdir / "f.yaml", name="faults", seeds=1, max_failures=1,
                      search={"model": {"grid": ["rir_grc", "nan_grc", "raise_grc"]}})
    env = {"RIRLAB_PLUGINS": "tests.helpers.plugin_models", "PYTHONPATH": str(REPO)}
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
    """Poll PREDICATE every half second (a poll of the store or Tune's state costs the test process 20-110 ms of
    CPU, taken from the sweep it waits for: polled every 0.2 s, a third of a core)."""
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"sweep exited ({proc.returncode}) before {what}:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _trial_workers(mark: str):
    """This test's trial workers: Ray trial processes whose environment carries ``mark`` (a local Ray's workers
    inherit the driver's environment). Never another sweep's on the same machine, which a name match would kill."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if "ImplicitFunc" in " ".join(p.info["cmdline"] or []):
            try:
                if p.environ().get("RIRLAB_TEST_MARK") == mark:
                    found.append(p)
            except psutil.Error:
                pass
    return found


def test_trial_worker_killed_resumes_from_checkpoint_with_the_same_final_metrics(workdir, new_store):
    new_store(workdir / "mlruns.db")
    # killed after its first checkpoint (step 25), 275 steps before its end; the reference below trains it again
    # every checkpoint kept (keep_checkpoints: 0), so the retry restores from one of several beside it
    spec = write_spec(workdir / "k.yaml", name="killed_worker", seeds=1, search={}, max_failures=3, checkpoint_every=25,
                      keep_checkpoints=0, fixed={**TINY["fixed"], "steps": 300, "eval_every": 150})
    mark = str(workdir)
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "RIRLAB_TEST_MARK": mark}
    proc = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        ckpts = lambda: list((workdir / "rirlab_runs").glob("*/trial_*/checkpoint_*"))  # noqa: E731
        _wait_for(ckpts, 300, "a first checkpoint", proc)
        victims = _wait_for(lambda: _trial_workers(mark), 60, "the trial's worker process", proc)
        for p in victims:
            p.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    steps = sorted(load_checkpoint(p / "state.pt")["step"] for p in ckpts())
    assert set(steps) == set(range(25, 301, 25))  # every checkpoint kept (of both attempts), not the latest alone
    client, _, children = runs_of(workdir / "mlruns.db", "killed_worker")
    assert len(children) == 1
    run = children[0]
    assert run.info.status == "FINISHED"
    assert int(run.data.tags["rirlab.retried"]) >= 1
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert len(steps) == len(set(steps)) and max(steps) == 300  # no step logged twice after the restore

    (trial,) = expand(load_spec(spec).spec)
    reference = run_trial(trial["config"])  # the same trial, uninterrupted, in this process
    for key in ("dev/accuracy", "test/accuracy", "test/loss", "dev/loss"):
        assert math.isclose(run.data.metrics[key], reference[key], rel_tol=1e-6, abs_tol=1e-9), key


def test_driver_killed_mid_sweep_then_resume_gives_one_finished_run_per_trial(workdir, new_store):
    # three trials, two at a time: one finishes while another runs, whichever of the other two that is
    spec = write_spec(workdir / "d.yaml", name="killed_driver", seeds=1, checkpoint_every=50, max_concurrent=2,
                      search={"lr": {"grid": [0.003, 0.001, 0.002]}},
                      fixed={**TINY["fixed"], "steps": 300, "eval_every": 150})
    db = workdir / "mlruns.db"
    new_store(db)  # the store first: polling must not race its creation
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "TUNE_GLOBAL_CHECKPOINT_S": "1"}

    def start():
        return subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def one_done_one_running():
        client = MlflowClient(f"sqlite:///{db}")
        if client.get_experiment_by_name("killed_driver") is None:
            return False
        _, _, children = runs_of(db, "killed_driver")
        states = [r.info.status for r in children]
        return "FINISHED" in states and "RUNNING" in states and bool(checkpointed_unfinished())

    def checkpointed_unfinished():
        """Tune's saved state as --resume reads it (its public reader): the checkpoints it names of trials it has
        not seen end."""
        try:
            trials = ExperimentAnalysis(str(next((workdir / "rirlab_runs").glob("killed_driver-*")))).trials
        except Exception:  # noqa: BLE001 (not saved yet)
            return []
        return [Path(t.checkpoint.path) for t in trials if t.checkpoint is not None and t.status != "TERMINATED"]

    proc = start()
    try:
        _wait_for(one_done_one_running, 600, "one finished and one running trial with a checkpoint", proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray die at once, like a lost machine
        proc.wait()
    _, parents, children = runs_of(db, "killed_driver")
    assert parents[0].info.status == "RUNNING"  # nobody could close it
    # the kill as CI once caught it: Tune had deleted a trial's checkpoint that its saved state names, for a newer
    # one beside it, and died before saving its state again (sweeps/driver/checkpoints.py)
    named = checkpointed_unfinished()[0]
    k, newest = max((int(p.name.split("_")[1]), p) for p in named.parent.glob("checkpoint_*"))
    newest.rename(named.parent / f"checkpoint_{k + 1:06d}")  # (the newest on disk: the named one or a later one)

    resumed = run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir,
                      env={"TUNE_GLOBAL_CHECKPOINT_S": "1"}, check=True)
    assert f"named {named.name}, deleted after checkpoint_{k + 1:06d} was written" in resumed.stdout
    client, parents, children = runs_of(db, "killed_driver")
    trials = expand(load_spec(spec).spec)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.info.run_name for r in children) == sorted(t["name"] for t in trials)  # exactly one run each
    ended = {r.info.run_name: (r.info.status, r.data.tags.get(FAILURE_REASON, "")) for r in children}
    assert all(status == "FINISHED" for status, _ in ended.values()), ended
    assert all("test/accuracy" in r.data.metrics for r in children)


def test_asha_stops_the_configurations_that_cannot_learn(workdir, new_store):
    new_store(workdir / "mlruns.db")
    spec = write_spec(workdir / "a.yaml", name="asha", seeds=1, max_concurrent=1, metric="train/loss", mode="min",
                      search={"lr": {"grid": [0.01, 0.005, 1e-9, 2e-9]}},
                      scheduler={"type": "asha", "grace_period": 10, "reduction_factor": 2},
                      fixed={**TINY["fixed"], "steps": 80, "eval_every": 80})
    proc = run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, check=True)
    client, _, children = runs_of(workdir / "mlruns.db", "asha")
    last = {float(r.data.params["lr"]): max(m.step for m in client.get_metric_history(r.info.run_id, "train/loss"))
            for r in children}
    assert last[1e-9] < 80 and last[2e-9] < 80, last  # stopped early
    assert last[0.01] == 80, last  # the best configuration runs to the end
    stopped = [r for r in children if float(r.data.params["lr"]) < 1e-6]
    assert all(r.data.tags.get("rirlab.early_stopped") == "true" for r in stopped)
    # one word for them everywhere (issue 54 item 6): the progress line, the summary, `rirlab runs`, the UI's note
    early = [r for r in children if r.data.tags.get("rirlab.early_stopped") == "true"]  # (ASHA may stop lr 0.005 too)
    n, k = len(children) - len(early), len(early)
    assert f"| {n} finished | {k} stopped early | 0 failed" in proc.stdout, proc.stdout
    assert f"done: {n} finished, {k} stopped early (not counted), 0 failed" in proc.stdout, proc.stdout
    assert all(r.data.tags["rirlab.outcome"] == "stopped early" and r.data.tags["mlflow.note.content"].startswith(
        "**Stopped early**") for r in early)
    assert {r.data.tags["rirlab.outcome"] for r in children if r not in early} == {"finished"}
    listed = run_cli(["runs", spec], cwd=workdir, check=True).stdout
    assert "| finished | stopped early | failed |" in listed and f"| {n} | {k} | 0 | 0 |" in listed, listed
