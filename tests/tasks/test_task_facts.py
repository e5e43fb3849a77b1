"""Facts of a task's data live on its Task class (issue 48 item 4): the training lengths the dry run times a step
on, the rule by which the authors' loader cuts long pair runs, and what a config says about its splits and cache.
The sweep side asks the task; it never probes the config."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.tasks import registry as tasks
from rirlab.tasks.base import LENGTH_Q
from rirlab.tasks.batching import PAIR_CUTS, eval_batches
from tests.tasks.test_data_tasks import Parity

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", tasks.names())
def test_every_task_states_its_training_lengths_one_tuple_per_sequence(name):
    task = tasks.get(name)
    lengths = task.train_lengths(task.config())
    assert len(lengths) == (2 if task.kind == "pair" else 1)
    for q in lengths:
        assert len(q) == len(LENGTH_Q) and list(q) == sorted(q) and q[0] >= 1


def test_the_tasks_length_limits_shape_their_training_lengths():
    listops, logic, snli = tasks.get("listops"), tasks.get("logic"), tasks.get("snli")
    assert listops.train_lengths(listops.config(max_train_len=200))[0][-1] == 200.0  # stretched to the limit
    assert logic.train_lengths(logic.config(keep_parens=False))[0][-1] < logic.train_lengths(logic.config())[0][-1]
    assert max(max(q) for q in snli.train_lengths(snli.config(max_train_len=30))) == 30  # clipped
    assert tasks.get("flipflop").train_lengths(tasks.get("flipflop").config(train_len=64)) == ((64.0,) * 9,)
    lra = tasks.get("lra_image")
    assert lra.train_lengths(lra.config()) == ((1024.0,) * 9,)  # every image 32 x 32 pixels


@dataclass(config=STRICT)
class LimitedConfig:
    max_train_len: int = Field(40, ge=1)
    eval_splits: list[str] = Field(default_factory=lambda: ["test"])
    scratch: str = "elsewhere"


class Limited(Parity):
    """A task that states none of its own facts, and keeps its cache under another field's name (test task)"""

    name, config, kind = "tmp_limited", LimitedConfig, "pair"

    def cache_dir(self, cfg):
        return cfg.scratch


def test_a_task_without_its_own_lengths_gets_half_its_limit_per_sequence():
    task = Limited()
    assert task.train_lengths(task.config()) == ((20.0,) * len(LENGTH_Q),) * 2
    assert Parity().train_lengths(Parity.config()) == ((50.0,) * len(LENGTH_Q),)  # no limit at all: 50 tokens


def test_the_dry_run_reads_the_lengths_from_the_task(monkeypatch):
    from rirlab.sweeps.plan.dryrun import padded_batch
    from rirlab.sweeps.spec.load import load_spec
    from tests.helpers.cli import TINY_SPEC

    resolved = load_spec(TINY_SPEC).resolved[0]
    monkeypatch.setattr(type(tasks.get(resolved.task)), "train_lengths", lambda self, cfg: ((7.0,) * 9,))
    assert [int(s.max()) for s in padded_batch(resolved)] == [7]


def test_the_pair_cut_rule_is_the_tasks_mnli_its_own():
    assert tasks.get("snli").bucket_cuts == tasks.get("qqp").bucket_cuts == PAIR_CUTS
    assert tasks.get("mnli").bucket_cuts == ((100, 4), (70, 2))
    long_pairs = [([1] * 120, [1] * 3, 0)] * 8
    assert [len(b) for b in eval_batches(long_pairs, 8, "buckets", 1, tasks.get("snli").bucket_cuts)] == [4, 4]
    assert [len(b) for b in eval_batches(long_pairs, 8, "buckets", 1, tasks.get("mnli").bucket_cuts)] == [2] * 4


def test_the_trainer_evaluates_in_the_batches_of_its_tasks_rule(monkeypatch):
    """The trainer passes the task's own rule (it decided MNLI's by the task's name before)."""
    import rirlab.train as train

    seen = []
    real = train.eval_batches
    monkeypatch.setattr(type(tasks.get("logic")), "bucket_cuts", ((5, 3),))
    monkeypatch.setattr(train, "eval_batches", lambda *a, **k: seen.append(a[4:]) or real(*a, **k))
    train.run_trial({"task": "logic", "model": "rir_grc", "chunk_size": 5, "hidden_size": 8, "steps": 1,
                     "batch_size": 4, "n_train": 12, "n_dev": 4, "n_eval": 4, "eval_splits": ["ops_7"],
                     "num_threads": 1, "epochs": None, "recipe": "adamw"})
    assert seen and all(args == (((5, 3),),) for args in seen)


def test_the_sweep_side_asks_the_task_for_its_cache(monkeypatch):
    """``_preflight`` checks the cache root the task names, whatever its config calls the field."""
    from rirlab.sweeps.driver import sweep

    checked = []
    monkeypatch.setattr("rirlab.tasks.cache.check_writable", checked.append)
    tasks.register(Limited)
    try:
        resolved = type("R", (), {"task": "tmp_limited", "task_cfg": LimitedConfig()})()
        plan = type("P", (), {"resolved": [resolved]})()
        sweep._preflight(plan, local=True)
    finally:
        tasks.unregister("tmp_limited")
    assert checked == ["elsewhere"]


def test_splits_and_imports_are_answered_by_the_task():
    logic = tasks.get("logic")
    cfg = logic.config(eval_splits=["ops_10"], imported=["ops_10"], cache_dir="/c")
    assert logic.eval_split_names(cfg) == ("ops_10",) and logic.imported_splits(cfg) == ("ops_10",)
    assert logic.cache_dir(cfg) == "/c"
    assert Limited().imported_splits(LimitedConfig()) == () and Parity().cache_dir(Parity.config()) is None


def test_the_dry_run_and_the_preflight_probe_no_task_config():
    """No ``getattr(<task config>, ...)`` where this issue moved the facts to the task."""
    for path, func in (("sweeps/plan/dryrun.py", "train_lengths"), ("sweeps/driver/sweep.py", "_preflight")):
        tree = ast.parse((REPO / path).read_text())
        body = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func)
        probes = [ast.unparse(n) for n in ast.walk(body)
                  if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "getattr"]
        assert not probes, (path, probes)
    assert "TRAIN_LENGTHS" not in (REPO / "sweeps/plan/dryrun.py").read_text()
