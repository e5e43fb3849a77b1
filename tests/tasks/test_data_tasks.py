"""`rirlab data` runs every task through the Task interface alone: a task registered here needs no CLI change."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.tasks import cache
from rirlab.tasks import registry as tasks
from rirlab.tasks.base import Task, collate_classify


@dataclass(config=STRICT)
class ParityConfig:
    n_eval: int = Field(6, ge=1)
    data_seed: int = Field(0, ge=0)
    eval_splits: list[str] = Field(default_factory=lambda: ["test"])


class Parity(Task):
    """Parity of a bit string (test task)"""

    name, config, kind = "tmp_parity", ParityConfig, "classify"
    vocab, num_classes, collate = ["<pad>", "0", "1"], 2, staticmethod(collate_classify)
    splits = (("test", "test"),)

    def examples(self, cfg, table):
        return [([1 + int(b) for b in bits], y) for bits, y in zip(*table.to_pydict().values())]

    def split_table(self, cfg, split):
        rng = random.Random(cfg.data_seed)
        bits = ["".join(rng.choice("01") for _ in range(rng.randint(1, 9))) for _ in range(cfg.n_eval)]
        return self.to_table([(b, b.count("1") % 2) for b in bits])

    def parse_line(self, line):
        label, bits = line.rstrip("\n").split("\t")
        if set(bits) - {"0", "1"}:
            raise ValueError(f"{bits!r} is not a bit string")
        return bits, int(label)

    def is_header(self, line):
        return line.startswith("label")

    def to_lines(self, table):
        for bits, label in zip(table.column("bits").to_pylist(), table.column("label").to_pylist()):
            yield f"{label}\t{bits}"

    def to_table(self, rows):
        return pa.table({"bits": [b for b, _ in rows], "label": [y for _, y in rows]})

    def verify(self, row):
        want = row[0].count("1") % 2
        return [] if want == row[1] else [f"label {row[1]}, parity is {want}"]

    def stats(self, rows):
        return {"count": len(rows), "ones": sum(b.count("1") for b, _ in rows)}


@pytest.fixture
def parity():
    """This module's task, registered for the test (`cli`, the in-process CLI: tests/conftest.py)."""
    tasks.register(Parity)
    yield
    tasks.unregister("tmp_parity")


def test_a_new_task_gets_every_data_command(parity, cli, tmp_path):
    out = tmp_path / "p.tsv"
    r = cli("data", "generate", "tmp_parity", "--split", "test", "--seed", "3", "--set", "n_eval=5", "--out", out)
    assert r.exit_code == 0 and "tmp_parity test: 5 examples" in r.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 5
    assert cli("data", "verify", "tmp_parity", out).exit_code == 0
    out.write_text("label\tbits\n" + "\n".join([f"{1 - int(lines[0][0])}{lines[0][1:]}", *lines[1:]]) + "\n")
    r = cli("data", "verify", "tmp_parity", out)
    assert r.exit_code == 1 and f"{out}:2: label" in r.stdout and "1 wrong label(s)" in r.stdout
    r = cli("data", "stats", "tmp_parity", out, "--json")
    assert json.loads(r.stdout)["count"] == 5
    r = cli("data", "import", "tmp_parity", out, "--split", "dev")  # import checks labels: nothing written
    assert r.exit_code == 2 and f"{out}:2: label" in r.stderr and not cache.imported_path("tmp_parity", "dev").exists()
    out.write_text("\n".join(lines) + "\n")
    r = cli("data", "import", "tmp_parity", out, "--split", "dev")
    assert r.exit_code == 0 and cache.imported_path("tmp_parity", "dev").exists()
    r = cli("data", "import", "tmp_parity", out, "--split", "ops_7")
    assert r.exit_code == 2 and "unknown split 'ops_7'; choose from train, dev, test" in r.stderr


def test_load_builds_trial_data_from_the_interface(parity, cli):
    data = tasks.get("tmp_parity").load(ParityConfig(n_eval=4))
    assert list(data.eval_splits) == ["dev", "test"] and len(data.train) == 4 and data.info.num_classes == 2
    assert data.collate(data.train)["tokens"].shape[0] == 4


def test_an_empty_split_is_refused_not_recorded_as_accuracy_zero(parity, monkeypatch):
    """A header-only evaluation file used to evaluate as accuracy 0.0 and loss 0.0 (and an empty training split
    trained on nothing): the trial's data loading refuses it in one line naming the split."""
    from rirlab.errors import UserError

    task = tasks.get("tmp_parity")
    full = task.split_table
    monkeypatch.setattr(task, "split_table", lambda cfg, split: full(cfg, split).slice(0, 0 if split == "test" else None))
    with pytest.raises(UserError, match=r"tmp_parity: split 'test' has no examples") as err:
        task.load(ParityConfig(n_eval=4))
    assert "\n" not in str(err.value)
    monkeypatch.setattr(task, "split_table", lambda cfg, split: full(cfg, split).slice(0, 0 if split == "train" else None))
    with pytest.raises(UserError, match=r"split 'train' has no examples"):
        task.load(ParityConfig(n_eval=4))


def test_unknown_task_is_one_line_with_did_you_mean_and_the_known_tasks(parity, cli):
    r = cli("data", "stats", "tmp_parit", __file__)
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: unknown task 'tmp_parit' (did you mean tmp_parity?); known tasks: "
                                "flipflop, imdb, listops, logic, lra_image, lra_listops, lra_retrieval, lra_text, "
                                "mnli, qqp, snli, sst5, tmp_parity")


def test_register_takes_a_task_subclass():
    with pytest.raises(TypeError, match="subclass of rirlab.tasks.base.Task"):
        tasks.register(lambda cfg: None)
    with pytest.raises(TypeError, match="abstract"):
        tasks.register(type("Half", (Task,), {"name": "tmp_half", "config": ParityConfig, "kind": "lm"}))
    assert "tmp_half" not in tasks.names()
