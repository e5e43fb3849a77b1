"""A trial whose checkpoint cannot be read (issue 53 item 4): ``state.pt`` truncated or deleted, or the folder Tune's
state names gone. The trial stops at once with one line naming the file and ``--restart-damaged`` (never retried:
the same file fails every retry), its run FAILED with that reason; ``--resume`` tries it again, and with
``--restart-damaged previous|scratch`` it trains from an earlier checkpoint or from step 0. The e2e case:
tests/e2e/test_damaged_checkpoint.py."""

from __future__ import annotations

import types

import pytest
import torch

from rirlab import contract
from rirlab.sweeps.driver.checkpoints import CheckpointRestorer, recreate_missing_checkpoint
from rirlab.sweeps.driver.sweep import SweepResult, _recorded_ends
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record.callback import MLflowTrialCallback
from rirlab.sweeps.record.tracker import Tracker
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.schema import base_config
from rirlab.sweeps.tune import trainable as trainable_module
from rirlab.sweeps.tune.trainable import DamagedCheckpoint, restored_state
from tests.helpers.cli import REPO, run_cli

PLAN = SweepPlan.of(load_spec(REPO / "tests" / "specs" / "tiny.yaml"))


def _checkpoint(folder, k, step):
    d = folder / f"checkpoint_{k:06d}"
    d.mkdir(parents=True)
    torch.save({"step": step}, d / contract.CHECKPOINT_STATE_FILE)
    return d


@pytest.mark.parametrize("damage", ["truncate", "empty", "delete"])
def test_a_damaged_state_file_stops_the_trial_with_its_path_and_the_flag(tmp_path, damage):
    d = _checkpoint(tmp_path, 2, 200)
    state = d / contract.CHECKPOINT_STATE_FILE
    if damage == "delete":
        state.unlink()
    else:
        state.write_bytes(state.read_bytes()[: 0 if damage == "empty" else 40])
    with pytest.raises(DamagedCheckpoint) as err:
        restored_state(d)
    why = str(err.value)
    assert str(state) in why and "--restart-damaged previous" in why and "--restart-damaged scratch" in why
    assert ("missing" if damage == "delete" else "damaged") in why
    how = {"truncate": "(RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
                       "directory)", "empty": "(empty: 0 bytes)", "delete": "is missing;"}
    assert how[damage] in why  # how, in a few words (not torch's advice after them)
    assert "\n" not in why and err.value.path == state


def test_restart_damaged_scratch_starts_at_step_0_and_previous_from_the_newest_earlier_readable_one(tmp_path):
    _checkpoint(tmp_path, 1, 100)
    bad_earlier = _checkpoint(tmp_path, 3, 300)
    (bad_earlier / contract.CHECKPOINT_STATE_FILE).write_bytes(b"")  # damaged too: skipped
    d = _checkpoint(tmp_path, 4, 400)
    (d / contract.CHECKPOINT_STATE_FILE).write_bytes(b"PK\x03")
    assert restored_state(d, "scratch") is None
    assert restored_state(d, "previous") == {"step": 100}
    only = _checkpoint(tmp_path / "other", 2, 200)
    (only / contract.CHECKPOINT_STATE_FILE).unlink()
    assert restored_state(only, "previous") is None  # none kept: step 0
    assert restored_state(_checkpoint(tmp_path / "fine", 5, 500), "scratch") == {"step": 500}  # a readable one: used


def test_the_trial_reports_the_damage_then_stops_without_training(tmp_path, monkeypatch):
    d = _checkpoint(tmp_path, 2, 200)
    (d / contract.CHECKPOINT_STATE_FILE).write_bytes(b"x")
    reported = []
    monkeypatch.setattr(trainable_module.tune, "get_checkpoint", lambda: types.SimpleNamespace(
        as_directory=lambda: _as_dir(d)))
    monkeypatch.setattr(trainable_module.tune, "report", lambda metrics, checkpoint=None: reported.append(metrics))
    monkeypatch.setattr(trainable_module, "run_trial", lambda *a, **k: pytest.fail("trained on a damaged checkpoint"))
    config = {**base_config(PLAN.spec), "lr": 0.003, "seed": 0}
    with pytest.raises(DamagedCheckpoint):
        trainable_module.trainable(config, space=PLAN.space)
    assert reported == [{contract.FAILURE_RESULT: reported[0][contract.FAILURE_RESULT],
                         contract.DAMAGED_RESULT: str(d / contract.CHECKPOINT_STATE_FILE)}]
    trained = []
    monkeypatch.setattr(trainable_module, "run_trial", lambda cfg, report, state, **k: trained.append(state))
    trainable_module.trainable(config, space=PLAN.space, restart_damaged="scratch")
    assert trained == [None]


class _as_dir:
    def __init__(self, d):
        self.d = d

    def __enter__(self):
        return str(self.d)

    def __exit__(self, *exc):
        return False


def test_a_trial_reporting_a_damaged_checkpoint_is_not_retried_and_keeps_its_retries_saved(tmp_path):
    restorer = CheckpointRestorer()
    trial = types.SimpleNamespace(trial_id="t", max_failures=2)
    restorer.on_trial_result(0, [], trial, {"step": 3})
    assert trial.max_failures == 2  # an ordinary result: retried as the spec says
    restorer.on_trial_result(0, [], trial, {contract.FAILURE_RESULT: "why", contract.DAMAGED_RESULT: "p"})
    assert trial.max_failures == 0  # the error that follows ends it (Trial.should_recover)
    restorer.on_trial_error(0, [], trial)
    assert trial.max_failures == 2  # saved with Tune's state so: a --resume retries it as the spec says


def test_a_named_checkpoint_gone_with_nothing_newer_becomes_an_empty_folder_the_trial_reports(tmp_path):
    trial_dir = tmp_path / "trial"
    _checkpoint(trial_dir, 1, 100)
    named = trial_dir / "checkpoint_000002"
    assert recreate_missing_checkpoint(named) and named.is_dir() and not any(named.iterdir())
    assert not recreate_missing_checkpoint(named)  # there now: left alone
    assert not recreate_missing_checkpoint(tmp_path / "gone" / "checkpoint_000001")  # no trial folder
    with pytest.raises(DamagedCheckpoint, match="checkpoint_000002/state.pt is missing"):
        restored_state(named)
    assert restored_state(named, "previous") == {"step": 100}


def _trial(key, lr):
    return types.SimpleNamespace(trial_id=key, config={**base_config(PLAN.spec), "lr": lr, "seed": 0}, last_result={},
                                 checkpoint=None, num_failures=0)


def test_the_run_ends_failed_naming_the_file_and_a_resume_tries_it_again(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp_id = tracker.experiment_id("tiny")
    parent = tracker.start_parent(exp_id, "tiny", {})
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    t = _trial("t", 0.003)
    cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], t, {"step": 20, "train/loss": 2.0})
    why = "checkpoint /x/checkpoint_000001/state.pt is damaged (EOFError: ); resume the sweep with --restart-damaged"
    cb.on_trial_result(0, [], t, {contract.FAILURE_RESULT: why,
                                  contract.DAMAGED_RESULT: "/x/checkpoint_000001/state.pt"})
    cb.on_trial_error(0, [], t)
    run = tracker.client.get_run(cb.runs["t"])
    assert run.info.status == "FAILED" and run.data.tags[contract.FAILURE_REASON] == why
    assert run.data.tags[contract.DAMAGED_CHECKPOINT] == "/x/checkpoint_000001/state.pt"
    assert cb.counts().failed == 1 and list(cb.damaged) == ["t"]

    assert "t" not in _recorded_ends(tracker, exp_id, parent)  # no end: Tune resumes it, the trial decides
    again = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=False)
    assert "t" not in again.ended
    again.on_trial_start(0, [], t)
    run = tracker.client.get_run(cb.runs["t"])
    assert run.info.status == "RUNNING" and contract.FAILURE_REASON not in run.data.tags
    assert contract.DAMAGED_CHECKPOINT not in run.data.tags
    final = {"step": 40, "train/loss": 1.0, "test/accuracy": 30.0, "final": True}
    again.on_trial_result(0, [], t, final)
    t.last_result = final
    again.on_trial_complete(0, [], t)
    assert tracker.client.get_run(cb.runs["t"]).info.status == "FINISHED" and not again.damaged


def test_restart_damaged_needs_resume_and_help_explains_it(tmp_path):
    proc = run_cli(["sweep", REPO / "tests" / "specs" / "tiny.yaml", "--restart-damaged", "scratch"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == ("error: --restart-damaged restarts trials of an earlier sweep: add --resume (or "
                                   "leave out --restart-damaged)")
    helped = " ".join(run_cli(["sweep", "--help"], cwd=tmp_path, check=True).stdout.split())
    # the CLI's choices are the trainable's (spelled twice: the CLI's --help does not import torch)
    assert f"--restart-damaged [{'|'.join(trainable_module.RESTART_DAMAGED)}]" in helped
    assert "from step 0 (scratch)" in helped and "earlier checkpoint" in helped and "exits 2" in helped


def test_the_cli_line_names_the_files_and_both_ways_on():
    from rirlab.cli.sweep import _damaged_line

    line = _damaged_line(["/r/t1/checkpoint_000002/state.pt"], "rirlab sweep s.yaml --resume")
    assert "\n" not in line and line.startswith("error: checkpoint /r/t1/checkpoint_000002/state.pt is damaged")
    assert "rirlab sweep s.yaml --resume --restart-damaged previous" in line and "--restart-damaged scratch" in line
    assert "checkpoints /a, /b are damaged" in _damaged_line(["/a", "/b"], "x")
    assert SweepResult("p").damaged == ()
