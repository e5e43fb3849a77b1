"""The driver returns a typed ``SweepResult`` (not a dict read by string keys): its done line is what `rirlab sweep`
prints, and the CLI's exit code follows from it. The driver's state lives on objects, not in module-level
registries (signals.py's process-wide signal state excepted: a signal handler has no other place)."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from rirlab.sweeps.driver.sweep import SweepResult
from tests.helpers.cli import REPO


def test_the_done_line_names_every_count_the_sweep_has():
    plain = SweepResult(parent_run_id="p1", finished=3, failed=1)
    assert plain.done_line() == "done: 3 finished, 1 failed; parent run p1"
    early = SweepResult(parent_run_id="p2", finished=2, stopped_early=4, failed=0)
    assert early.done_line() == "done: 2 finished, 4 stopped early (not counted), 0 failed; parent run p2"
    evals = SweepResult(parent_run_id="p3", finished=1, failed=0, evaluated=2, eval_failed=1, eval_waiting=3)
    assert evals.done_line() == ("done: 1 finished, 0 failed; evaluation-only cells: 2 evaluated, 1 failed, "
                                 "3 without a finished trial; parent run p3")
    none_evaluated = SweepResult(parent_run_id="p4", evaluated=0)
    assert none_evaluated.done_line() == ("done: 0 finished, 0 failed; evaluation-only cells: 0 evaluated; parent "
                                          "run p4")
    assert none_evaluated.trained_nothing and SweepResult(parent_run_id="p5").trained_nothing
    assert not early.trained_nothing and not SweepResult(parent_run_id="p6", evaluated=1).trained_nothing
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.finished = 4  # type: ignore[misc]


@pytest.mark.parametrize("result, code, stream, line", [
    (SweepResult(parent_run_id="run42", finished=2, stopped_early=1, failed=1), 0, "stdout",
     "done: 2 finished, 1 stopped early (not counted), 1 failed; parent run run42"),
    (SweepResult(parent_run_id="run43", finished=0, failed=2), 1, "stdout", "done: 0 finished, 2 failed; parent run run43"),
    (SweepResult(parent_run_id="run44", finished=1, interrupted=True, stopped=2), 130, "stderr",
     "interrupted: 2 running trial(s) stopped, their last checkpoints kept; continue with:"),
])
def test_the_cli_prints_the_drivers_result_and_exits_by_it(workdir, cli, monkeypatch, result, code, stream, line):
    import rirlab.sweeps.driver.sweep as driver
    from rirlab.sweeps.driver import signals
    from tests.helpers.cli import TINY_SPEC

    monkeypatch.setattr(driver, "run_sweep", lambda *args, **kwargs: result)
    monkeypatch.setattr(signals, "_INTERRUPTED", [])
    monkeypatch.setattr(signals, "_TERMINATED", [])
    out = cli("sweep", TINY_SPEC, "--tracking-uri", f"sqlite:///{workdir / 'm.db'}")
    assert out.exit_code == code, out.output
    assert line in getattr(out, stream).splitlines(), getattr(out, stream)
    if not result.interrupted:
        assert "next: " in out.stdout and result.parent_run_id in out.stdout


# module-level names that hold mutable state: a list, dict or set built at import (constants are tuples or strings)
OWNED_BY_OBJECTS = ("sweeps/driver/sweep.py", "sweeps/driver/cluster.py", "sweeps/driver/evaluations.py",
                    "sweeps/record/callback.py", "sweeps/tune/optuna.py")


@pytest.mark.parametrize("path", OWNED_BY_OBJECTS)
def test_the_driver_keeps_no_module_level_registry(path):
    """The live callbacks, the Optuna searcher and Ray's log handlers belonged to module lists and dicts (``_BOUND``,
    ``_LIVE``, ``_HANDLERS``) that outlived a sweep and were shared by every driver of a process."""
    tree = ast.parse((REPO / path).read_text())
    mutable = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = node.value
            if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)) or (
                    isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("list", "dict", "set")):
                mutable.append(ast.unparse(node).splitlines()[0])
    assert not mutable, (path, mutable)


def test_callbacks_bound_by_one_driver_are_unbound_when_it_ends_and_nest():
    import pickle

    from ray import tune

    from rirlab.sweeps.record.callback import bound
    from rirlab.sweeps.driver.progress import ProgressCallback
    from rirlab.sweeps.spec.trials import TrialSpace

    outer = ProgressCallback("x", 1, "dev/accuracy", "max", TrialSpace())
    inner = ProgressCallback("y", 1, "dev/accuracy", "max", TrialSpace())
    saved = pickle.dumps(outer)
    with bound(outer):
        with bound(inner):
            assert pickle.loads(saved) is inner
        assert pickle.loads(saved) is outer  # the inner driver's binding ended with it
    assert type(pickle.loads(saved)) is tune.Callback
