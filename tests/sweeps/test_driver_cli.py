"""The sweep driver's refusals and bookkeeping that need no Ray: bad input and a malformed --address in one line
(exit 2, nothing written), --resume after the spec changed, one Tune folder per sweep, the progress line's best
value, the parent's spec params and best trial."""

from __future__ import annotations

import hashlib
import os
import types

import pytest

from rirlab.errors import UserError
from tests.helpers.cli import REPO, invoke

TINY = REPO / "tests" / "specs" / "tiny.yaml"


def test_malformed_address_is_one_line_exit_2_before_anything_starts(workdir):
    r = invoke("sweep", TINY, "--address", "foo")  # in-process: the command's own exit code and stderr
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --address 'foo' is not a Ray address"), r.stderr
    assert "HOST:PORT" in lines[0]
    assert not (workdir / "rirlab_runs").exists()


@pytest.mark.parametrize("sets, expect", [
    (["description=" + "x" * 100_000], "error: --set description: 100,000 characters, more than the 8,000 MLflow keeps"),
    (["description=" + "x" * 7990, "steps=30"], "error: --set: the values take 8,0"),  # the tag of all --set values
])
def test_texts_longer_than_mlflow_keeps_are_refused_before_anything_starts(workdir, sets, expect):
    """A 100,000-character --set description was refused by MLflow only after the parent run existed (47 lines,
    parent KILLED)."""
    from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

    from rirlab import contract

    assert contract.MAX_TAG_VALUE == MAX_TAG_VAL_LENGTH  # MLflow's own limit
    r = invoke("sweep", TINY, *[a for s in sets for a in ("--set", s)])
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(expect), line
    assert list(workdir.iterdir()) == []  # no store, no Tune folder


def test_resume_after_the_spec_changed_says_so_and_how_to_go_on(workdir, cli, new_store):
    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.record.tracker import Tracker

    spec = workdir / "s.yaml"
    spec.write_text(TINY.read_text())
    old = load_spec(spec)
    db = workdir / "mlruns.db"
    tracker = Tracker(new_store(db))  # (a migrated store copied: the cli fixture's cache holds no template)
    exp_id = tracker.experiment_id("tiny")
    tracker.start_parent(exp_id, "tiny earlier", {"rirlab.spec_hash": old.hash, "rirlab.quick": "False",
                                                  "rirlab.overrides": "{}"})
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    spec.write_text(TINY.read_text().replace("steps: 40", "steps: 50"))
    proc = cli("sweep", spec, "--resume")  # in-process; a refusal through a separate process: the test above
    assert proc.exit_code == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "the spec changed since the last sweep of tiny" in line and old.hash in line, line
    assert load_spec(spec).hash in line and "leave out --resume" in line and "spec/" in line, line
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not (workdir / "rirlab_runs").exists()


def test_a_resume_of_a_sweep_another_driver_runs_is_refused_in_one_line(workdir, cli, new_store, monkeypatch):
    """Two `--resume` of one killed sweep started together both ran it: a trial with two FINISHED runs, metric steps
    logged twice (issue 52 item 3). The driver that runs a sweep holds its lock; a second is refused before Ray."""
    from rirlab import contract
    from rirlab.sweeps.driver import sweep as runner
    from rirlab.sweeps.driver.lock import sweep_lock
    from rirlab.sweeps.record.tracker import Tracker
    from rirlab.sweeps.spec.load import load_spec

    spec = workdir / "s.yaml"
    spec.write_text(TINY.read_text())
    tracker = Tracker(new_store(workdir / "mlruns.db"))
    tune_path = workdir / "rirlab_runs" / "tiny-1"
    parent = tracker.start_parent(tracker.experiment_id("tiny"), "tiny earlier", {
        contract.SPEC_HASH: load_spec(spec).hash, contract.QUICK: "False", contract.TUNE_PATH: str(tune_path)})
    tracker.finish(parent, "KILLED")
    before = hashlib.sha256((workdir / "mlruns.db").read_bytes()).hexdigest()
    monkeypatch.setattr(runner, "ray_init", lambda *a, **k: pytest.fail("a second driver started Ray"))
    with sweep_lock(str(tune_path), parent):  # the first driver
        proc = cli("sweep", spec, "--resume")
    assert proc.exit_code == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"--resume: sweep run {parent} is being run by another `rirlab sweep` (process {os.getpid()} on " in line
    assert "wait for it to end" in line, line
    assert hashlib.sha256((workdir / "mlruns.db").read_bytes()).hexdigest() == before
    assert tracker.client.get_run(parent).info.status == "KILLED"


def test_two_sweeps_of_one_spec_in_the_same_second_get_their_own_tune_folders(tmp_path, monkeypatch):
    from rirlab.sweeps.driver import sweep as runner

    monkeypatch.setattr(runner.time, "strftime", lambda fmt, *a: "20260101-000000")
    paths = {runner.new_tune_path(str(tmp_path), "tiny", "abc") for _ in range(20)}
    assert len(paths) == 20
    assert all(p.startswith(str(tmp_path / "tiny-abc-20260101-000000-")) for p in paths)


def _trial(tid, lr):
    return types.SimpleNamespace(trial_id=tid, config={"lr": lr, "seed": 0}, last_result={})


def test_progress_shows_the_best_final_value_per_objective_never_a_mid_training_one(tmp_path):
    import io

    from rirlab.sweeps.driver.progress import ProgressCallback
    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.spec.trials import TrialSpace

    space = TrialSpace.of(load_spec(TINY).spec)
    out = io.StringIO()
    cb = ProgressCallback("x", 2, ["dev/accuracy", "time_per_step_ms"], ["max", "min"], space, stream=out, trials=True)
    a, b = _trial("a", 0.003), _trial("b", 0.001)
    for t in (a, b):
        cb.on_trial_start(0, [], t)
    cb.on_trial_result(0, [], a, {"dev/accuracy": 16.0, "time_per_step_ms": 1.0, "step": 10})  # mid-training
    a.last_result = {"dev/accuracy": 8.0, "time_per_step_ms": 3.0, "step": 40, "final": True}
    cb.on_trial_result(0, [], a, a.last_result)
    cb.on_trial_complete(0, [], a)
    b.last_result = {"dev/accuracy": 6.0, "time_per_step_ms": 2.5, "step": 40, "final": True}
    cb.on_trial_result(0, [], b, b.last_result)
    cb.on_trial_complete(0, [], b)
    cb.study = "study 'st' already holds 4 trials"  # a continued Optuna study (rirlab.sweeps.tune.search.study_before)
    cb.close()
    last = out.getvalue().strip().splitlines()[-1]
    assert "2 finished" in last and last.endswith(" | study 'st' already holds 4 trials"), last
    assert "best final dev/accuracy 8.00 (lr=0.003,seed=0); time_per_step_ms 2.50 (lr=0.001,seed=0)" in last, last
    assert "16.00" not in out.getvalue()
    assert "  trial lr=0.003,seed=0: finished: dev/accuracy 8.00, time_per_step_ms 3.00" in out.getvalue()


def test_spec_params_are_flat_and_the_best_trial_is_the_best_finished_one():
    from rirlab.sweeps.record.artifacts import best_trials, spec_params

    params = spec_params({"name": "t", "description": "d", "fixed": {"hidden_size": 8, "steps": 40},
                          "search": {"lr": {"grid": [0.1, 0.01]}}, "metric": "dev/accuracy", "seeds": 2,
                          "resources": {"cpu": 1.0, "gpu": 0.0}, "quick": {"fixed": {}}})
    assert params == {"spec.name": "t", "spec.fixed.hidden_size": "8", "spec.fixed.steps": "40",
                      "spec.search.lr": '{"grid": [0.1, 0.01]}', "spec.metric": "dev/accuracy", "spec.seeds": "2",
                      "spec.resources.cpu": "1.0", "spec.resources.gpu": "0.0"}

    def run(name, status, acc, t, early=False):
        return types.SimpleNamespace(info=types.SimpleNamespace(status=status, run_name=name, run_id=name),
                                     data=types.SimpleNamespace(metrics={"dev/accuracy": acc, "time_per_step_ms": t},
                                                                tags={"rirlab.early_stopped": "true"} if early else {}))

    runs = [run("a", "FINISHED", 50, 3), run("b", "FINISHED", 60, 4), run("c", "FAILED", 90, 1),
            run("d", "FINISHED", 99, 0.5, early=True)]
    best = best_trials(runs, ["dev/accuracy", "time_per_step_ms"], ["max", "min"])
    assert best["dev/accuracy"].info.run_name == "b" and best["time_per_step_ms"].info.run_name == "a"


@pytest.mark.parametrize("args, needle", [
    (["sweep", "no_such_spec.yaml"], "spec file not found"),
    (["sweep", "bad.yaml"], "invalid YAML"),
    (["sweep", "unknown_model.yaml"], "unknown model 'rir_ebt_gcr'"),
    (["sweep", "unknown_task.yaml"], "unknown task 'listopz'"),
    (["train", "--model", "nope", "--task", "listops"], "unknown model 'nope'"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(workdir, cli, args, needle):
    (workdir / "bad.yaml").write_text("name: x\nsearch:\n  chunk_size: {grid: [1, 2]\n")
    (workdir / "unknown_model.yaml").write_text("name: x\ntask: listops\nmodel: rir_ebt_gcr\n")
    (workdir / "unknown_task.yaml").write_text("name: x\ntask: listopz\nmodel: bbt_grc\n")
    proc = cli(*args)  # in-process; through a separate process: test_malformed_address_...
    assert proc.exit_code == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (workdir / "mlruns.db").exists()
    assert not (workdir / "rirlab_runs").exists()


def test_suggested_commands_are_spelled_as_the_user_called_rirlab(tmp_path, monkeypatch):
    """The README runs `.venv/bin/rirlab ...`; the hints after a sweep must work when pasted back."""
    from rirlab.cli.options import command_name

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    monkeypatch.setattr("sys.argv", [str(tmp_path / ".venv" / "bin" / "rirlab"), "sweep"])
    assert command_name() == ".venv/bin/rirlab"
    monkeypatch.setattr("sys.argv", ["rirlab", "sweep"])  # found on PATH
    assert command_name() == "rirlab"
    monkeypatch.setattr("sys.argv", ["/opt/env/bin/rirlab", "sweep"])  # outside this folder: the full path
    assert command_name() == "/opt/env/bin/rirlab"


def test_the_resume_and_next_hints_name_the_store_tune_folder_and_cluster_given(monkeypatch):
    """A hint pasted back must continue the same sweep: without the --tracking-uri/--output-dir the user gave, it
    looked in ./mlruns.db and ./rirlab_runs and found nothing to resume."""
    from rirlab.cli.sweep import _resume_command, _where_flags

    monkeypatch.setattr("sys.argv", ["rirlab", "sweep"])
    where = _where_flags("postgresql://me:s3cret@db:5432/ml", "/data/my runs", "10.0.0.5:6379")
    cmd = _resume_command("s.yaml", True, ["seed=0"], where)
    assert cmd == ("rirlab sweep s.yaml --quick --set seed=0 --tracking-uri 'postgresql://me:***@db:5432/ml' "
                   "--output-dir '/data/my runs' --address 10.0.0.5:6379 --resume"), cmd
    assert "s3cret" not in cmd
    assert _where_flags(None, "rirlab_runs", None) == ""  # the defaults: nothing to repeat


@pytest.mark.parametrize("how", [
    ["--no-checkpoint-artifacts", "--system-metrics", "--progress", "trials"],
    ["--progress", "line"],  # the defaults: nothing to repeat
])
def test_the_printed_resume_command_continues_the_sweep_as_it_was_run(workdir, cli, monkeypatch, how):
    """A sweep started with --no-checkpoint-artifacts, --system-metrics or --progress trials printed, on Ctrl-C, a
    resume command without them: pasted, it copied checkpoints into MLflow that the first part had not, and stopped
    recording system metrics. The printed command, parsed by `rirlab sweep` itself, must give every option of the
    call it continues, with --resume added."""
    import shlex

    import rirlab.sweeps.driver.sweep as driver
    from rirlab.cli import main
    from rirlab.sweeps.driver import signals
    from rirlab.sweeps.driver.sweep import SweepResult

    stopped = SweepResult(parent_run_id="p", interrupted=True, stopped=1)
    monkeypatch.setattr(driver, "run_sweep", lambda *a, **k: stopped)
    monkeypatch.setattr(signals, "_INTERRUPTED", [])
    monkeypatch.setattr(signals, "_TERMINATED", [])
    monkeypatch.setattr("sys.argv", ["rirlab", "sweep"])
    given = [str(TINY), "--set", "seed=1", "--tracking-uri", f"sqlite:///{workdir / 'm.db'}", "--output-dir",
             str(workdir / "runs"), *how]
    out = cli("sweep", *given)
    assert out.exit_code == 130, out.output
    printed = shlex.split(out.stderr.splitlines()[-1])
    assert printed[:2] == ["rirlab", "sweep"], out.stderr

    sweep = main.commands["sweep"]
    params = lambda words: sweep.make_context("sweep", list(words), resilient_parsing=True).params  # noqa: E731
    assert params(printed[2:]) == {**params(given), "resume": True}, (printed, given)


def test_every_printed_command_pastes_back_as_the_same_words(monkeypatch, tmp_path):
    """The resume hint printed a spec path with a space in two words, and pasting it for --set
    'description=$(touch x)' ran the touch: every word of every printed command is shell-quoted."""
    import shlex
    import subprocess

    from rirlab.cli.sweep import _done_hints, _resume_command, _where_flags
    from rirlab.tasks.cache import existing_import

    monkeypatch.setattr("sys.argv", ["rirlab", "sweep"])
    spec, hostile = "my specs/s.yaml", "description=$(touch pwned) `touch pwned2`; touch pwned3"
    where = _where_flags("sqlite:///my runs/$(x).db", "out dir", None)
    cmd = _resume_command(spec, False, [hostile, "optuna.storage=postgresql://me:pa/ss w@db/o"], where)
    assert shlex.split(cmd) == ["rirlab", "sweep", spec, "--set", hostile, "--set",
                                "optuna.storage=postgresql://me:***@db/o", "--tracking-uri", "sqlite:///my runs/$(x).db",
                                "--output-dir", "out dir", "--resume"]
    next_line, export_line = _done_hints(spec, "n$(x)", "0123456789abcdef", where)
    assert shlex.split(next_line.split("   |   ")[0]) == ["next:", "rirlab", "tables", spec, "--tracking-uri",
                                                           "sqlite:///my runs/$(x).db", "--output-dir", "out dir"]
    words = shlex.split(export_line.split(": ", 1)[1].split(" (then ")[0])
    assert words[:6] == ["rirlab", "export", "--experiment", "n$(x)", "--run", "0123456789abcdef"]
    assert words[-2:] == ["--out", "n$(x)-01234567.parquet"]
    subprocess.run(["bash", "-c", f"echo {cmd}; echo {next_line.split('   |   ')[0]}"], cwd=tmp_path, check=True,
                   capture_output=True)
    assert not list(tmp_path.glob("pwned*"))  # pasted, nothing ran
    with pytest.raises(UserError) as err:  # a hint below the CLI: the same quoting
        existing_import("listops", "my split", str(tmp_path))
    assert "`rirlab data import listops FILE... --split 'my split'`" in str(err.value)
