"""``rirlab sweep SPEC --rerun-failed`` through the CLI, a real local Ray and a real MLflow sqlite store: a sweep
whose trial failed (a model that raises while a file exists), the file removed, the failed trial trained again as a
new run under the same parent; finished trials untouched; tables count the trial once; nothing left to rerun is one
line and exit 0; a rerun stopped by Ctrl-C continues with --resume. Without Ray: tests/sweeps/test_rerun_failed.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from rirlab import contract
from tests.helpers.cli import REPO, RIRLAB, run_cli
from tests.helpers.plugin_models import FAIL_FILE_ENV
from tests.helpers.sweep_runs import TINY, runs_of, write_spec

TINY_FIXED = TINY["fixed"]


def test_rerun_failed_trains_only_the_failed_trial_again_and_tables_read_the_new_run(workdir, new_store):
    from rirlab.analysis.runs import sweeps_of

    db = workdir / "mlruns.db"
    new_store(db)
    fail = workdir / "fail-now"
    fail.touch()
    spec = write_spec(workdir / "r.yaml", name="rerun", seeds=1, max_failures=0,
                      search={"model": {"grid": ["rir_grc", "flaky_grc"]}})
    env = {"RIRLAB_PLUGINS": "tests.helpers.plugin_models", "PYTHONPATH": str(REPO), FAIL_FILE_ENV: str(fail)}
    first = run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, env=env, check=True)
    assert "1 finished, 1 failed" in first.stdout
    client, (parent,), children = runs_of(db, "rerun")
    before = {r.data.params["model"]: r for r in children}
    assert before["flaky_grc"].info.status == "FAILED"

    fail.unlink()  # the cause is gone (a full GPU, a lost node): the same trial now trains
    again = run_cli(["sweep", spec, "--rerun-failed", "--no-checkpoint-artifacts"], cwd=workdir, env=env, check=True)
    assert "rerunning 1 trial(s)" in again.stdout and "(1 FAILED): model=flaky_grc,seed=0" in again.stdout
    assert "done: 2 finished, 0 failed" in again.stdout, again.stdout
    client, parents, children = runs_of(db, "rerun")
    assert [p.info.run_id for p in parents] == [parent.info.run_id]  # the same sweep, no second parent
    (new,) = [r for r in children if r.data.tags.get(contract.RERUN_OF)]
    old = client.get_run(before["flaky_grc"].info.run_id)
    assert new.data.tags[contract.RERUN_OF] == old.info.run_id and new.data.tags[contract.ATTEMPT] == "2"
    assert new.info.status == "FINISHED" and new.data.params["model"] == "flaky_grc"
    assert new.data.metrics["dev/accuracy"] >= 0
    assert old.info.status == "FAILED" and old.data.tags[contract.SUPERSEDED_BY] == new.info.run_id  # kept
    kept = client.get_run(before["rir_grc"].info.run_id)  # the finished trial: untouched
    assert (kept.info.status, kept.info.end_time, kept.data.metrics) == (
        "FINISHED", before["rir_grc"].info.end_time, before["rir_grc"].data.metrics)
    tags = client.get_run(parent.info.run_id).data.tags
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    assert (tags[contract.TRIALS_FINISHED], tags[contract.TRIALS_FAILED], tags[contract.RERUNS]) == ("2", "0", "1")
    (row,) = sweeps_of(client, "rerun").to_dict("records")  # what `rirlab runs` prints: the trial counted once
    assert (row["finished"], row["failed"], row["other"]) == (2, 0, 0)
    table = run_cli(["tables", spec], cwd=workdir, env=env, check=True)
    assert "2 finished runs; 0 failed" in table.stdout, table.stdout

    nothing = run_cli(["sweep", spec, "--rerun-failed"], cwd=workdir, env=env)
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout.strip().splitlines()[-1] == (f"nothing to rerun: every trial of sweep run "
                                                       f"{parent.info.run_id} finished (2 trial run(s))")
    assert len(runs_of(db, "rerun")[2]) == 3


def test_a_rerun_stopped_by_ctrl_c_continues_with_resume_in_the_same_new_run(workdir, new_store):
    """The interruption hint of a rerun is the usual --resume: the rerun's Tune folder is the parent's now, and
    the resumed trial continues its new run from its checkpoint (never a third run, never a step twice)."""
    db = workdir / "mlruns.db"
    new_store(db)
    fail = workdir / "fail-now"
    fail.touch()
    spec = write_spec(workdir / "c.yaml", name="rerun_c", seeds=1, max_failures=0, checkpoint_every=25, search={},
                      model="flaky_grc", fixed={**TINY_FIXED, "steps": 300, "eval_every": 150})
    env = {"RIRLAB_PLUGINS": "tests.helpers.plugin_models", "PYTHONPATH": str(REPO), FAIL_FILE_ENV: str(fail)}
    run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, env=env)
    client, (parent,), (failed,) = runs_of(db, "rerun_c")
    assert failed.info.status == "FAILED"
    fail.unlink()
    full_env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, **env}
    proc = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--rerun-failed", "--no-checkpoint-artifacts"], cwd=workdir,
                            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)

    def rerun_checkpoint():
        folder = client.get_run(parent.info.run_id).data.tags.get(contract.TUNE_PATH, "")
        return folder != parent.data.tags[contract.TUNE_PATH] and list(Path(folder).glob("trial_*/checkpoint_*"))

    try:
        end = time.time() + 300
        while not rerun_checkpoint():
            assert proc.poll() is None and time.time() < end, "the rerun ended before its first checkpoint"
            time.sleep(0.5)  # (a store query per poll: CPU the rerun needs)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130 and "--resume" in err.splitlines()[-1], out + err
    _, _, children = runs_of(db, "rerun_c")
    (new,) = [r for r in children if r.data.tags.get(contract.RERUN_OF) == failed.info.run_id]
    assert new.info.status == "KILLED"

    done = run_cli(["sweep", spec, "--resume", "--no-checkpoint-artifacts"], cwd=workdir, env=env, check=True)
    assert "done: 1 finished, 0 failed" in done.stdout, done.stdout
    client, _, children = runs_of(db, "rerun_c")
    assert len(children) == 2  # the failed run and its one rerun
    again = client.get_run(new.info.run_id)
    assert again.info.status == "FINISHED" and again.data.tags.get(contract.RESUMED) == contract.TRUE
    steps = [m.step for m in client.get_metric_history(new.info.run_id, "train/loss")]
    assert len(steps) == len(set(steps)) and max(steps) == 300
    assert client.get_run(failed.info.run_id).data.tags[contract.SUPERSEDED_BY] == new.info.run_id


def test_rerun_failed_of_an_optuna_sweep_tells_the_study_what_the_rerun_measured(workdir, new_store):
    """Issue 50 item 4: the rerun trains outside the study, which closed the failed trial (FAIL) and cannot be told
    a second result for it; the rerun's result becomes a new finished trial of the same configuration."""
    import optuna

    db = workdir / "mlruns.db"
    new_store(db)
    fail = workdir / "fail-now"
    fail.touch()
    spec = write_spec(workdir / "o.yaml", name="rerun_optuna", algorithm="optuna", num_samples=1, seeds=1,
                      max_failures=0, search={"model": {"choice": ["flaky_grc"]}, "lr": {"loguniform": [1e-4, 1e-2]}},
                      fixed={**TINY_FIXED, "steps": 10, "eval_every": 10}, optuna={"sampler": "random"})
    env = {"RIRLAB_PLUGINS": "tests.helpers.plugin_models", "PYTHONPATH": str(REPO), FAIL_FILE_ENV: str(fail)}
    first = run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, env=env)  # (exit 1: none finished)
    assert "0 finished, 1 failed" in first.stdout, first.stdout
    (storage,) = [f"sqlite:///{p}" for p in workdir.glob("**/optuna.db")]
    (summary,) = optuna.get_all_study_summaries(storage)
    assert [t.state for t in optuna.load_study(study_name=summary.study_name, storage=storage).trials] == [
        optuna.trial.TrialState.FAIL]

    fail.unlink()
    again = run_cli(["sweep", spec, "--rerun-failed", "--no-checkpoint-artifacts"], cwd=workdir, env=env, check=True)
    assert "done: 1 finished, 0 failed" in again.stdout, again.stdout
    assert f"told Optuna study {summary.study_name!r} the rerun results of trial(s) 0 (fail)" in again.stdout
    closed, told = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    assert closed.state == optuna.trial.TrialState.FAIL and told.state == optuna.trial.TrialState.COMPLETE
    client, _, children = runs_of(db, "rerun_optuna")
    (new,) = [r for r in children if r.data.tags.get(contract.RERUN_OF)]
    assert told.params == closed.params and told.value == new.data.metrics["dev/accuracy"]
    assert told.user_attrs["mlflow_run_ids"] == [new.info.run_id] and told.user_attrs["rirlab_rerun_of"] == 0
