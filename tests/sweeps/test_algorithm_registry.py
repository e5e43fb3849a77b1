"""Search algorithms are a registry (issue 48 deliverable 3): an algorithm is one module with an ``@register``
class supplying its spec section, validation, points, Tune space and searcher, and nothing else names it. Shown
with a throwaway algorithm registered here (as tests/train/test_config.py does for a model family): a spec that
uses it loads, validates its section, plans and dry-runs, while the hash of every spec that does not use it stays
what it was."""

from __future__ import annotations

import itertools

import pytest
from pydantic import BaseModel, ConfigDict, Field

from rirlab.errors import UserError
from rirlab.sweeps import algorithms
from rirlab.sweeps.algorithms.base import Algorithm
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.schema import Spec
from tests.helpers.cli import REPO, invoke
from tests.helpers.sweep_runs import write_spec

TINY = REPO / "tests" / "specs" / "tiny.yaml"
TINY_HASH = "f91018729cf4"  # tiny.yaml's spec hash before the registry (and with a throwaway algorithm registered)


class Stride(BaseModel):
    """The throwaway's spec section ``strided:``."""

    model_config = ConfigDict(extra="forbid")
    start: int = Field(0, ge=0)


class Strided(Algorithm):
    """``num_samples`` consecutive grid combinations from ``strided.start``, each run once per seed."""

    name = "strided"
    section = Stride
    kinds = ("grid", "choice")

    def problems(self, spec, given):
        problems = super().problems(spec, given)
        if spec.algorithm == self.name and spec.strided.start >= self._combos(spec):
            problems.append(f"strided.start {spec.strided.start} is past the last of the {self._combos(spec)} grid "
                            f"combinations; lower it")
        return problems

    @staticmethod
    def _combos(spec) -> int:
        return len(list(itertools.product(*(a.values for a in spec.search.values()))))

    def points(self, spec):
        keys = list(spec.search)
        combos = list(itertools.product(*(spec.search[k].values for k in keys)))
        return [dict(zip(keys, c)) for c in combos[spec.strided.start:spec.strided.start + spec.num_samples]]

    def trials(self, spec, preview=False, seed=0):
        from rirlab.sweeps.spec.schema import base_config
        from rirlab.sweeps.spec.trials import TrialSpace

        space, base = TrialSpace.of(spec), base_config(spec)
        return [space.trial({**base, **p, "seed": s}) for p in self.points(spec) for s in spec.seed_list]

    def describe(self, spec):
        return f"strided grid ({spec.num_samples} combinations from #{spec.strided.start}, each run per seed)"


@pytest.fixture
def strided():
    algorithms.add(Strided())
    try:
        yield
    finally:
        algorithms.remove("strided")


SEARCH = {"lr": {"grid": [0.003, 0.002, 0.001]}, "hidden_size": {"choice": [8, 16]}}


def test_a_throwaway_algorithm_plans_and_dry_runs_and_leaves_old_hashes_alone(strided, tmp_path):
    assert load_spec(TINY).hash == TINY_HASH  # a new section is no part of a spec that does not give it
    path = write_spec(tmp_path / "s.yaml", algorithm="strided", num_samples=2, seeds=2, search=SEARCH,
                      strided={"start": 3})
    plan = SweepPlan.of(load_spec(path))
    assert plan.points == ({"lr": 0.002, "hidden_size": 16}, {"lr": 0.001, "hidden_size": 8})
    assert [(t.swept["lr"], t.swept["hidden_size"], t.swept["seed"]) for t in plan.trials] == \
        [(0.002, 16, 0), (0.002, 16, 1), (0.001, 8, 0), (0.001, 8, 1)]
    assert plan.num_samples == 2 and plan.param_space()["seed"] == {"grid_search": [0, 1]}
    dry = invoke("sweep", path, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "4 trials" in dry.output and "by strided grid (2 combinations from #3, each run per seed)" in dry.output
    assert load_spec(path).hash != load_spec(write_spec(tmp_path / "t.yaml", algorithm="strided", num_samples=2,
                                                        seeds=2, search=SEARCH)).hash  # its own section counts


def test_a_throwaway_algorithms_section_is_validated_like_the_built_in_ones(strided, tmp_path):
    with pytest.raises(UserError, match="strided: settings have no effect under algorithm: grid; drop them or use "
                                        "algorithm: strided"):
        load_spec(write_spec(tmp_path / "g.yaml", strided={"start": 1}))
    with pytest.raises(UserError, match=r"unknown key 'stat' in the spec \(did you mean start\?\)"):
        load_spec(write_spec(tmp_path / "k.yaml", algorithm="strided", search=SEARCH, strided={"stat": 1}))
    with pytest.raises(UserError, match="strided.start 6 is past the last of the 6 grid combinations"):
        load_spec(write_spec(tmp_path / "p.yaml", algorithm="strided", search=SEARCH, strided={"start": 6}))
    with pytest.raises(UserError, match="algorithm strided cannot search lr by uniform; use algorithm: random or optuna"):
        load_spec(write_spec(tmp_path / "u.yaml", algorithm="strided", search={"lr": {"uniform": [0.1, 0.2]}}))
    assert load_spec(TINY, overrides={"algorithm": "strided", "strided.start": 1}).spec.strided.start == 1  # --set


def test_a_removed_algorithm_leaves_no_trace_in_the_schema(tmp_path):
    algorithms.add(Strided())
    algorithms.remove("strided")
    assert "strided" not in Spec.model_fields and "strided" not in algorithms.names()
    with pytest.raises(UserError, match="algorithm: Input should be 'grid', 'random' or 'optuna'"):
        load_spec(write_spec(tmp_path / "s.yaml", algorithm="strided"))
    assert load_spec(TINY).hash == TINY_HASH


def test_every_spec_section_of_an_algorithm_is_left_out_of_the_hash_when_unset():
    """The hash-exclusion list is the registry's, not a tuple to keep in step by hand."""
    assert set(algorithms.sections()) == {"optuna"}
    dump = load_spec(TINY).spec.model_dump(mode="json")
    assert "optuna" in dump  # (the recorded effective spec keeps it) ...
    assert load_spec(TINY).hash == TINY_HASH  # ... the hash does not
