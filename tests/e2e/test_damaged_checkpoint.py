"""A sweep whose driver died (SIGKILL of its process group, like a lost machine) and whose trials' checkpoints were
damaged meanwhile (issue 53 item 4): one trial's ``state.pt`` truncated, another trial's checkpoint folder deleted
with nothing newer beside it. ``--resume`` runs the other trials to their end, stops those two at once (no retries)
FAILED with the file named, and ends in one line naming both files and ``--restart-damaged`` (exit 2); ``--resume
--restart-damaged scratch`` then trains them from step 0: every run FINISHED, one per trial.

The unit side: tests/sweeps/test_damaged_checkpoint.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from mlflow.tracking import MlflowClient
from ray.tune import ExperimentAnalysis

from rirlab.contract import DAMAGED_CHECKPOINT, FAILURE_REASON, RETRIED, TRIAL_KEY
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.e2e.test_sweep_engine_runs import _wait_for
from tests.helpers.cli import RIRLAB, run_cli
from tests.helpers.sweep_runs import TINY, runs_of, write_spec


def test_damaged_checkpoints_stop_their_trials_in_one_line_and_restart_damaged_trains_them(workdir, new_store):
    # three trials, two at a time: the two running ones get damaged, the third (pending at the kill) is the trial
    # --resume runs to its end beside them
    spec = write_spec(workdir / "d.yaml", name="damaged", seeds=1, checkpoint_every=50, max_concurrent=2,
                      search={"lr": {"grid": [0.003, 0.001, 0.002]}},
                      fixed={**TINY["fixed"], "steps": 300, "eval_every": 150})
    db = workdir / "mlruns.db"
    new_store(db)
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "TUNE_GLOBAL_CHECKPOINT_S": "1"}

    def checkpointed_unfinished():
        """Tune's saved state as --resume reads it: trial id -> the checkpoint it names, of trials not ended."""
        try:
            trials = ExperimentAnalysis(str(next((workdir / "rirlab_runs").glob("damaged-*")))).trials
        except Exception:  # noqa: BLE001 (not saved yet)
            return {}
        return {t.trial_id: Path(t.checkpoint.path) for t in trials
                if t.checkpoint is not None and t.status != "TERMINATED"}

    proc = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait_for(lambda: len(checkpointed_unfinished()) >= 2, 600, "two running trials with a checkpoint", proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray die at once
        proc.wait()
    (truncated_key, named_a), (deleted_key, named_b) = sorted(checkpointed_unfinished().items())[:2]
    for state in named_a.parent.glob("checkpoint_*/state.pt"):  # whichever one --resume reads: damaged
        state.write_bytes(state.read_bytes()[:len(state.read_bytes()) // 2])
    for folder in named_b.parent.glob("checkpoint_*"):  # the named one gone, nothing newer beside it
        shutil.rmtree(folder)

    resume = ["sweep", spec, "--resume", "--no-checkpoint-artifacts"]
    first = run_cli(resume, cwd=workdir, env={"TUNE_GLOBAL_CHECKPOINT_S": "1"})
    out = first.stdout + first.stderr
    assert first.returncode == 2, out
    assert "Traceback" not in out, out
    errors = [line for line in first.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    state_a, state_b = named_a / "state.pt", named_b / "state.pt"
    assert str(state_a) in errors[0] and str(state_b) in errors[0], errors
    assert f"sweep {spec} --no-checkpoint-artifacts --resume --restart-damaged previous" in errors[0], errors
    assert "--restart-damaged scratch" in errors[0], errors
    _, _, children = runs_of(db, "damaged")
    by_key = {r.data.tags[TRIAL_KEY]: r for r in children}
    for key, state in ((truncated_key, state_a), (deleted_key, state_b)):
        run = by_key[key]
        assert run.info.status == "FAILED", (key, run.info.status)
        assert str(state) in run.data.tags[FAILURE_REASON] and "--restart-damaged" in run.data.tags[FAILURE_REASON]
        assert run.data.tags[DAMAGED_CHECKPOINT] == str(state)
        assert RETRIED not in run.data.tags  # a damaged checkpoint is not retried
    assert "missing" in by_key[deleted_key].data.tags[FAILURE_REASON]
    others = [r for k, r in by_key.items() if k not in (truncated_key, deleted_key)]
    assert others and all(r.info.status == "FINISHED" for r in others), [r.info.status for r in others]

    again = run_cli([*resume, "--restart-damaged", "scratch"], cwd=workdir, env={"TUNE_GLOBAL_CHECKPOINT_S": "1"})
    assert again.returncode == 0, again.stdout + again.stderr
    client, parents, children = runs_of(db, "damaged")
    trials = expand(load_spec(spec).spec)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.info.run_name for r in children) == sorted(t["name"] for t in trials)  # one run each
    assert all(r.info.status == "FINISHED" for r in children), [(r.info.run_name, r.info.status) for r in children]
    assert all("test/accuracy" in r.data.metrics for r in children)
    for key in (truncated_key, deleted_key):
        run = client.get_run(by_key[key].info.run_id)
        assert FAILURE_REASON not in run.data.tags and DAMAGED_CHECKPOINT not in run.data.tags
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert len(steps) == len(set(steps)) and max(steps) == 300  # from step 0 to its end, no step twice
