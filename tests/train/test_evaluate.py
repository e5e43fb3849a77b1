"""`rirlab evaluate`: a trial's checkpoint evaluated as the trial's end would evaluate it (the interim cells of a
trial that did not finish). The trial folder is laid out as a sweep leaves it (params.json = the Tune config,
checkpoint_*/state.pt); the trial itself runs in this process."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest
import torch

from rirlab.train import load_checkpoint, run_trial
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.schema import base_config
from rirlab.sweeps.spec.trials import TrialSpace, grid_points
from tests.helpers.cli import invoke
from tests.helpers.sweep_runs import TINY, write_spec

FIXED = {**TINY["fixed"], "steps": 30, "eval_every": 10, "recipe": "paper", "select_by": "accuracy"}


@pytest.fixture(scope="module")
def trial_dir(tmp_path_factory):
    """A finished two-variant spec's trial B (lr 0.003): its folder with checkpoints at steps 10, 20 and the
    final one, and the final metrics the trial reported."""
    root = tmp_path_factory.mktemp("evaluate")
    spec = write_spec(root / "spec.yaml", name="ev", search={}, seeds=1, fixed=FIXED,
                      variants=[{"name": "A", "set": {"lr": 0.001}}, {"name": "B", "set": {"lr": 0.003}}])
    loaded = load_spec(spec).spec
    tune_config = {**base_config(loaded), **grid_points(loaded)[1]}
    assert tune_config["variant"] == "B"
    folder = root / "trial_0001"
    folder.mkdir()
    (folder / "params.json").write_text(json.dumps(tune_config))
    saved, final = [], {}

    def report(metrics, checkpoint=None):
        if checkpoint is not None:
            (folder / f"checkpoint_{len(saved):06d}").mkdir()
            torch.save(checkpoint, folder / f"checkpoint_{len(saved):06d}" / "state.pt")
            saved.append(checkpoint["step"])
        final.update(metrics)

    run_trial(TrialSpace.of(loaded).trial(tune_config).config, report, checkpoint_every=10)
    assert saved == [10, 20, 30]
    return spec, folder, final


def evaluate(*args):
    result = invoke("evaluate", *args)
    assert result.exit_code == 0, result.output
    return result


def test_the_final_checkpoint_gives_the_trials_own_test_metrics(trial_dir):
    spec, folder, final = trial_dir
    out = json.loads(evaluate(spec, folder, "--json").output)  # the latest checkpoint: the final one
    assert out["step"] == 30 and out["weights"] == "best" and out["trial"] == "B,seed=0"
    assert set(out["splits"]) == {k.rsplit("/", 1)[0] for k in final if k.endswith("/accuracy")} - {"train"}
    assert len(out["splits"]) > 2  # dev and the test splits
    for split, m in out["splits"].items():
        for key in ("accuracy", "loss"):
            assert math.isclose(m[key], final[f"{split}/{key}"], rel_tol=1e-9, abs_tol=1e-12), (split, key)


def test_an_earlier_checkpoint_uses_its_best_dev_weights_and_says_it_is_interim(trial_dir):
    spec, folder, _ = trial_dir
    state = torch.load(folder / "checkpoint_000001" / "state.pt", weights_only=False)
    best = state["best"]
    result = evaluate(spec, folder / "checkpoint_000001", "--split", "dev")
    assert "NOT finished: interim figures" in result.output
    assert f"best dev evaluation, step {best['step']}" in result.output
    dev = json.loads(evaluate(spec, folder / "checkpoint_000001", "--split", "dev", "--json").output)["splits"]["dev"]
    assert math.isclose(dev["accuracy"], best["dev_accuracy"]) and math.isclose(dev["loss"], best["dev_loss"])
    last = json.loads(evaluate(spec, folder / "checkpoint_000001" / "state.pt", "--weights", "last", "--split",
                               "dev", "--json").output)
    assert last["weights"] == "last" and last["step"] == 20
    if best["step"] != 20:  # the step-20 weights are not the best ones: they score differently on dev
        assert last["splits"]["dev"]["loss"] != dev["loss"]


@pytest.mark.parametrize("case, expect", [
    ("no_checkpoint", "holds no checkpoint"),
    ("unknown_split", "split 'ood_width' is not one of this trial's splits"),
    ("other_spec", "has no variant 'B'"),
    ("broken_state", "is not a readable rirlab checkpoint"),
])
def test_bad_input_is_one_line_and_exit_2(trial_dir, tmp_path, case, expect):
    spec, folder, _ = trial_dir
    args = [spec, folder]
    if case == "no_checkpoint":
        (tmp_path / "trial_x").mkdir()
        args = [spec, tmp_path / "trial_x"]
    elif case == "unknown_split":
        args += ["--split", "ood_width"]
    elif case == "other_spec":
        args = [write_spec(tmp_path / "other.yaml", name="other", search={}, seeds=1, fixed=FIXED,
                           variants=[{"name": "A", "set": {"lr": 0.001}}]), folder]
    elif case == "broken_state":
        broken = tmp_path / "trial_y" / "checkpoint_000000"
        broken.mkdir(parents=True)
        (broken / "state.pt").write_bytes(b"not a checkpoint")
        (tmp_path / "trial_y" / "params.json").write_text((folder / "params.json").read_text())
        args = [spec, tmp_path / "trial_y"]
    result = invoke("evaluate", *args)
    assert result.exit_code == 2, result.output
    assert expect in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_set_evaluates_the_checkpoint_on_imported_files(trial_dir, tmp_path, cache):
    """`--set imported=[test]` tests the trial's weights on a file instead of the generated split: the trial's own dev
    rows, written out and imported as its test split (in this test's own cache), give the trial's dev cells (the
    same rows in the same order, so the same evaluation batches); the report names the change."""
    spec, folder, final = trial_dir
    cfg = TrialSpace.of(load_spec(spec).spec).trial(json.loads((folder / "params.json").read_text())).config
    data = [f"--set={k}={cfg[k]}" for k in ("n_train", "n_dev", "n_test", "n_eval", "iid_pool")]
    dev_file = tmp_path / "dev.tsv"
    assert invoke("data", "generate", "listops", "--split", "dev", "--out", dev_file, *data).exit_code == 0
    assert invoke("data", "import", "listops", dev_file, "--split", "test").exit_code == 0
    plain = json.loads(evaluate(spec, folder, "--split", "test", "--json").output)
    out = json.loads(evaluate(spec, folder, "--split", "test", "--set", "imported=[test]", "--json").output)
    assert out["overrides"] == {"imported": ["test"]} and plain["overrides"] == {}
    for key in ("accuracy", "loss"):
        assert math.isclose(out["splits"]["test"][key], final[f"dev/{key}"], rel_tol=1e-6), key
    assert plain["splits"]["test"]["loss"] != out["splits"]["test"]["loss"]  # the generated test split: other rows
    text = evaluate(spec, folder, "--split", "test", "--set", "imported=[test]").output
    assert "evaluated with settings the trial did not have: imported=['test']" in text


@pytest.mark.parametrize("sets, expect", [
    (["hidden_size=16"], "the checkpoint does not fit the model"),
    (["hiden_size=16"], "evaluate --set: unknown parameter 'hiden_size'"),
    (["chunk_size=0"], "chunk_size"),
])
def test_set_that_does_not_fit_the_checkpoint_is_one_line_and_exit_2(trial_dir, sets, expect):
    spec, folder, _ = trial_dir
    result = invoke("evaluate", spec, folder, "--split", "dev", *[a for s in sets for a in ("--set", s)])
    assert result.exit_code == 2, result.output
    assert expect in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_a_checkpoint_replaced_while_it_is_read_is_read_again(trial_dir, tmp_path, monkeypatch):
    """A running sweep deletes a trial's older checkpoints: when the latest one disappears between its choice and
    its reading, the command reads the trial folder's latest checkpoint again instead of failing."""
    import shutil

    spec, folder, _ = trial_dir
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    real = torch.load
    seen = []

    def load(path, *args, **kwargs):
        seen.append(str(path))
        if len(seen) == 1:  # the sweep removes the newest checkpoint (as if it had been replaced) just now
            shutil.rmtree(copy / "checkpoint_000002")
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", load)
    out = json.loads(evaluate(spec, copy, "--split", "dev", "--json").output)
    assert seen[0].endswith("checkpoint_000002/state.pt") and seen[1].endswith("checkpoint_000001/state.pt")
    assert out["step"] == 20


class _Payload:
    """What a crafted checkpoint carries: unpickling it calls ``Path.touch`` on a marker file (any code would do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def test_a_crafted_checkpoint_is_refused_without_running_its_code(trial_dir, tmp_path):
    """state.pt was read with torch.load(weights_only=False): a crafted checkpoint ran its code in `rirlab evaluate`
    (before any check) and in a resumed trial's worker. Every reader goes through load_checkpoint, weights only."""
    spec, folder, _ = trial_dir
    marker = tmp_path / "ran"
    state = load_checkpoint(folder / "checkpoint_000002" / "state.pt")  # a real one, written by run_trial
    state["py_rng"] = _Payload(marker)
    crafted = tmp_path / "trial_z" / "checkpoint_000000"
    crafted.mkdir(parents=True)
    torch.save(state, crafted / "state.pt")
    (tmp_path / "trial_z" / "params.json").write_text((folder / "params.json").read_text())
    result = invoke("evaluate", spec, tmp_path / "trial_z", "--split", "dev")
    assert not marker.exists()
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "holds more than weights and plain data (it names " in line and "was not loaded" in line, line
    with pytest.raises(pickle.UnpicklingError):  # the trainable, the MLflow model and `bench learn` read it so too
        load_checkpoint(crafted / "state.pt")
    assert not marker.exists()


@pytest.mark.parametrize("train", [{"optimizer": "adamw", "lr_decay": "one_cycle", "warmup_steps": 2},
                                   {"optimizer": "adamw", "scheduler": "schedule", "lr_decay": "cosine",
                                    "precision": "fp16"}])
def test_every_trainer_state_loads_weights_only(tmp_path, train):
    """The states of the other optimizer / scheduler / precision settings (the trial_dir fixture's recipe is the
    papers': Ranger, plateau) hold only what the weights-only loader reads."""
    from rirlab.train import Trainer
    from rirlab.trial import resolve

    trainer = Trainer(resolve({**base_config(load_spec(write_spec(tmp_path / "s.yaml")).spec), "lr": 0.001,
                               "steps": 4, **train}))
    trainer.train_step()
    torch.save(trainer.state_dict(), tmp_path / "state.pt")
    state = load_checkpoint(tmp_path / "state.pt")
    trainer.load_state_dict(state)
    assert state["step"] == 1 and set(state["model"]) == set(trainer.model.state_dict())


# --- checkpoints that say what they are (issue 48 item 6) ---

def test_the_checkpoint_alone_gives_the_same_metrics_as_with_the_spec(trial_dir):
    """A checkpoint carries its trial's resolved config: `rirlab evaluate CHECKPOINT` needs no spec, no params.json."""
    spec, folder, final = trial_dir
    with_spec = json.loads(evaluate(spec, folder, "--json").output)
    alone = json.loads(evaluate(folder, "--json").output)
    for key in ("step", "epoch", "weights", "best", "stopped", "total_steps", "splits", "checkpoint", "overrides"):
        assert alone[key] == with_spec[key], key
    assert alone["splits"]["test"]["accuracy"] == final["test/accuracy"]
    text, text_spec = evaluate(folder).output, evaluate(spec, folder).output
    assert text.splitlines()[1:] == text_spec.splitlines()[1:]  # every line but the trial's name (next test)
    early = evaluate(folder / "checkpoint_000000", "--split", "dev", "--set", "max_eval_examples=4", "--json").output
    assert json.loads(early)["overrides"] == {"max_eval_examples": 4} and json.loads(early)["step"] == 10


def test_the_checkpoints_config_is_plain_json_with_passwords_masked(trial_dir):
    from rirlab.train import checkpoint_config
    from rirlab.trial import resolve

    spec, folder, _ = trial_dir
    state = load_checkpoint(folder / "checkpoint_000002" / "state.pt")  # weights only: the config is plain data
    config = state["config"]
    assert json.loads(json.dumps(config)) == config and resolve(config) == resolve(
        TrialSpace.of(load_spec(spec).spec).trial(json.loads((folder / "params.json").read_text())).config)
    secret = checkpoint_config(resolve({**config, "cache_dir": "https://me:hunter2secret@cache.example/x"}))
    assert secret["cache_dir"] == "https://me:***@cache.example/x" and "hunter2secret" not in json.dumps(secret)


def test_a_checkpoint_written_before_it_held_its_config_says_to_name_the_spec(trial_dir, tmp_path):
    spec, folder, final = trial_dir
    state = load_checkpoint(folder / "checkpoint_000002" / "state.pt")
    del state["config"]
    old = tmp_path / "trial_old" / "checkpoint_000002"
    old.mkdir(parents=True)
    torch.save(state, old / "state.pt")
    (tmp_path / "trial_old" / "params.json").write_text((folder / "params.json").read_text())
    result = invoke("evaluate", tmp_path / "trial_old")
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "was written before checkpoints carried their trial's config" in line and "rirlab evaluate SPEC" in line
    out = json.loads(evaluate(spec, tmp_path / "trial_old", "--split", "test", "--json").output)  # the old way
    assert out["splits"]["test"]["accuracy"] == final["test/accuracy"]


@pytest.mark.parametrize("args, expect", [
    (["--set", "hiden_size=16"], "evaluate --set: unknown parameter 'hiden_size'"),
    (["--set", "hidden_size=16"], "the checkpoint does not fit the model"),
    (["--split", "ood_width"], "split 'ood_width' is not one of this trial's splits"),
    (["--since-step", "10"], "--since-step chooses among the checkpoints that --every-checkpoint evaluates"),
    (["--every-checkpoint", "--since-step", "31"], "no checkpoint of"),
    (["--every-checkpoint", "--split", "ood_width"], "split 'ood_width' is not one of this trial's splits"),
])
def test_bad_input_with_the_checkpoint_alone_is_one_line_and_exit_2(trial_dir, args, expect):
    _, folder, _ = trial_dir
    result = invoke("evaluate", folder, *args)
    assert result.exit_code == 2, result.output
    assert expect in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_a_folder_as_spec_is_one_line_and_exit_2(trial_dir):
    _, folder, _ = trial_dir
    result = invoke("evaluate", folder, folder)
    assert result.exit_code == 2 and "is not a spec file" in result.output, result.output


def test_a_sweep_trials_checkpoint_names_its_trial(tmp_path, monkeypatch):
    """The trainable saves the trial's run name beside its config; the checkpoint alone names it as the spec does."""
    import shutil
    import types

    from rirlab.sweeps.tune import trainable as tr

    spec = write_spec(tmp_path / "spec.yaml", name="ev", search={}, seeds=1, fixed={**FIXED, "steps": 4},
                      variants=[{"name": "B", "set": {"lr": 0.003}}])
    loaded = load_spec(spec).spec
    tune_config = {**base_config(loaded), **grid_points(loaded)[0]}
    folder = tmp_path / "trial_0000"
    folder.mkdir()
    (folder / "params.json").write_text(json.dumps(tune_config))
    saved = []

    def from_directory(d):
        saved.append(folder / f"checkpoint_{len(saved):06d}")
        shutil.copytree(d, saved[-1])

    fake = types.SimpleNamespace(get_checkpoint=lambda: None, report=lambda metrics, checkpoint=None: None,
                                 Checkpoint=types.SimpleNamespace(from_directory=from_directory))
    monkeypatch.setattr(tr, "tune", fake)
    tr.trainable(tune_config, space=TrialSpace.of(loaded), checkpoint_every=2)
    assert saved and load_checkpoint(saved[-1] / "state.pt")["trial"] == "B,seed=0"
    alone, with_spec = evaluate(folder).output, evaluate(spec, folder).output
    assert alone == with_spec and alone.startswith("trial B,seed=0: checkpoint at step 4")


def test_one_search_finds_a_trial_folders_latest_checkpoint(tmp_path):
    """`rirlab evaluate TRIAL_DIR` and an evaluation-only row's reader pick the same state file: the highest number."""
    from rirlab.cli.evaluate import _state_file
    from rirlab.train import latest_checkpoint
    from rirlab.sweeps.driver.evaluations import _latest_checkpoint

    for name in ("checkpoint_000009", "checkpoint_000010", "checkpoint_000011", "checkpoint_x"):
        (tmp_path / name).mkdir()
        if name != "checkpoint_000011":  # a folder without its state file is not a checkpoint
            (tmp_path / name / "state.pt").write_bytes(b"")
    want = tmp_path / "checkpoint_000010" / "state.pt"
    assert latest_checkpoint(tmp_path) == _latest_checkpoint(str(tmp_path)) == _state_file(tmp_path) == want
    assert latest_checkpoint(tmp_path / "checkpoint_x") is None


def test_every_checkpoint_gives_each_checkpoints_own_cells_and_their_spread(trial_dir):
    """--every-checkpoint builds the model and data once and loads each checkpoint into them: each row equals that
    checkpoint evaluated on its own, the summary is each split's median, min and max over the rows, and a line of
    progress per checkpoint goes to stderr (stdout stays one JSON object)."""
    spec, folder, _ = trial_dir
    result = evaluate(spec, folder, "--every-checkpoint", "--weights", "last", "--json")
    out = json.loads(result.stdout)
    assert [r["step"] for r in out["checkpoints"]] == [10, 20, 30] and out["trial"] == "B,seed=0"
    assert [line.split(":")[0] for line in result.stderr.strip().splitlines()] == \
        ["[1/3] step 10 (checkpoint_000000)", "[2/3] step 20 (checkpoint_000001)", "[3/3] step 30 (checkpoint_000002)"]
    for row, name in zip(out["checkpoints"], ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]):
        alone = json.loads(evaluate(spec, folder / name, "--weights", "last", "--json").stdout)
        assert row["splits"] == alone["splits"] and row["weights"] == "last", name
    losses = {r["step"]: r["splits"]["dev"]["loss"] for r in out["checkpoints"]}
    assert len(set(losses.values())) == 3  # three different weights, not one checkpoint's three times
    for split, spread in out["summary"].items():
        values = sorted(r["splits"][split]["accuracy"] for r in out["checkpoints"])
        assert (spread["min"], spread["median"], spread["max"], spread["n"]) == (values[0], values[1], values[2], 3)
    text = evaluate(folder, "--every-checkpoint", "--since-step", "20", "--split", "dev").stdout
    assert "2 checkpoints of" in text and "each checkpoint's own" not in text  # auto: the trial end's weights
    rows = [line.split() for line in text.splitlines() if line.strip()[:2] in ("20", "30")]
    assert [r[0] for r in rows] == ["20", "30"]
    assert [line.split()[0] for line in text.splitlines()[-3:]] == ["median", "min", "max"]


def test_every_checkpoint_of_one_checkpoint_names_its_trial_folder(trial_dir):
    _, folder, _ = trial_dir
    for one in (folder / "checkpoint_000001", folder / "checkpoint_000001" / "state.pt"):
        result = invoke("evaluate", one, "--every-checkpoint")
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert f"is one checkpoint; give its trial folder ({folder})" in result.output


def test_every_checkpoint_refuses_a_folder_mixing_two_trials(trial_dir, tmp_path):
    import shutil

    from rirlab import contract

    _, folder, _ = trial_dir
    mixed = tmp_path / "trial_mixed"
    shutil.copytree(folder, mixed)
    state = load_checkpoint(mixed / "checkpoint_000002" / "state.pt")
    state[contract.STATE_CONFIG] = {**state[contract.STATE_CONFIG], "lr": 0.001}
    torch.save(state, mixed / "checkpoint_000002" / "state.pt")
    result = invoke("evaluate", mixed, "--every-checkpoint", "--split", "dev")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "checkpoint_000002/state.pt is a checkpoint of another trial" in result.output
