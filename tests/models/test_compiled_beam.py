"""RIR-EBT-GRC's merge step compiled (``compile: true``, rirlab.models.compiled_beam, issue 57 item 2): the same
values and gradients as the eager fused search in float64, and one graph per kind of step whatever the lengths.

The default suite compiles with the "aot_eager" backend (Dynamo's capture and AOTAutograd's handling of the step's
writes and dynamic shapes; seconds). Inductor's C++ build takes minutes on a busy 2-core machine for its few graphs,
so its equality test is opt-in: ``pytest -m inductor tests/models/test_compiled_beam.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rirlab.models.compiled_beam import CompiledSearch, compiled_merge_step
from rirlab.models.fused_beam import FusedBeamTree, Search
from rirlab.models.grc import GRC
from rirlab.models.scorer import Scorer


class EagerBackendSearch(CompiledSearch):
    backend = "aot_eager"


def run_both(search_class, b_in: int, lengths: list[int], width: int, seed: int = 7):
    """(roots, scores, gradients) of one training-mode search (dropout, Gumbel survivors) in float64, eager and with
    ``search_class``, under the same draws."""
    torch.manual_seed(seed)
    d, b = 8, 3
    tree = FusedBeamTree(GRC(d, 2, 0.2), Scorer(d, 4), b).train().double()
    x = torch.randn(len(lengths), b_in, width, d, dtype=torch.float64, requires_grad=True)
    in_scores = torch.randn(len(lengths), b, dtype=torch.float64, requires_grad=True) if b_in > 1 else None
    inputs = [x] + ([in_scores] if b_in > 1 else []) + list(tree.parameters())
    out = []
    for cls in (Search, search_class):
        tree.search_class = cls
        torch.manual_seed(1)
        roots, scores = tree(x, torch.tensor(lengths), in_scores)
        g = torch.Generator().manual_seed(2)
        loss = (roots * torch.randn(roots.shape, generator=g, dtype=torch.float64)).sum()
        loss = loss + (scores.clamp(min=-1e3) * torch.randn(scores.shape, generator=g, dtype=torch.float64)).sum()
        loss = loss + (F.softmax(scores, -1)[..., None] * roots).sum()
        out.append((roots, scores, torch.autograd.grad(loss, inputs)))
    return out


def assert_equal_values(out):
    (r1, s1, g1), (r2, s2, g2) = out
    torch.testing.assert_close(r2, r1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(s2, s1, rtol=1e-12, atol=1e-12)
    for a, c in zip(g1, g2):
        torch.testing.assert_close(c, a, rtol=1e-10, atol=1e-12)


def assert_equal(out):
    assert_equal_values(out)
    g2 = out[1][2]
    assert g2[0].abs().sum() > 0 and g2[-4].abs().sum() > 0  # leaves and the scorer's first layer get gradients


def test_compiled_merge_step_equals_the_eager_search_and_compiles_once_per_kind_of_step():
    """Fresh searches (B = 1) and one from b scored input beams (RIR levels >= 2), rows of several lengths (rows leave
    the batch as they finish) and a one-token row, training mode: the compiled steps return what the eager steps
    compute, and the shared backward gives the same gradients. ListOps lengths vary: a new width, row count or noise
    offset reuses the graphs (dynamic shapes), so a trial compiles a handful of graphs once (a kind of step: one or b
    input beams, one row merging or more, k = 1 or more), not one per sequence length. (One test: the graphs are
    traced once, ~20 s of CPU.)"""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    compiled_merge_step.cache_clear()
    counters.clear()
    assert_equal(run_both(EagerBackendSearch, 1, [6, 3, 1], 6))  # every kind of step of a fresh search
    assert_equal(run_both(EagerBackendSearch, 1, [4, 4], 4))
    graphs = counters["stats"]["unique_graphs"]
    assert graphs <= 6
    for lengths, width in (([9, 7, 3, 9, 8], 9), ([12, 5, 2], 12), ([70, 66], 70)):  # 70: wider than a merge table
        assert_equal(run_both(EagerBackendSearch, 1, lengths, width, seed=3))
    assert counters["stats"]["unique_graphs"] == graphs, "a new length or batch recompiled the merge step"
    assert_equal(run_both(EagerBackendSearch, 3, [4, 2, 4], 4))


def test_merge_columns_equal_the_merge_table():
    """The compiled step computes its gather indices elementwise (any width: EBT-GRC's whole-sequence steps) where the
    eager one looks them up in :func:`merge_table`: the same entries at every pair, parent and kept beam, both ends of
    a row (where the neighbours clamp and the spare column fills) and W = 2 (both pair scores on the spare column)."""
    from rirlab.models.compiled_beam import merge_columns
    from rirlab.models.fused_beam import merge_table, merge_table_by_parent

    b, n, cpu = 3, 30, torch.device("cpu")
    torch.manual_seed(0)
    for big_b in (1, 3):
        for w in (2, 3, 6, 11, 67):
            jj = torch.randint(0, w - 1, (n, b))
            jj[:2] = torch.tensor([0, w - 2])[:, None]
            parent = torch.randint(0, big_b, (n, b)) if big_b > 1 else torch.randint(0, b, (n, b))  # B=1: ignored
            beams = torch.arange(b)
            table = (merge_table(w, 1, b, cpu)[jj, beams] if big_b == 1
                     else merge_table_by_parent(w, big_b, b, cpu)[parent, jj, beams])
            assert torch.equal(merge_columns(w, big_b, b, jj, parent), table), (big_b, w)


def test_compile_config_selects_the_compiled_search_for_ebt_grc_and_rir_ebt_grc():
    """``compile: true`` (default false) runs both models' training searches compiled; the default stays eager."""
    from rirlab.bench.base import BenchOptions, build_model

    for name in ("ebt_grc", "rir_ebt_grc"):
        trees = [[m for m in build_model(name, BenchOptions(batch=1, length=10, overrides=o)).modules()
                  if isinstance(m, FusedBeamTree)] for o in ({}, {"compile": True})]
        assert trees[0] and all(t.search_class is Search for t in trees[0]), name
        assert trees[1] and all(t.search_class is CompiledSearch for t in trees[1]), name


def test_a_search_with_no_merge_step_runs_and_equals_the_eager_one():
    """Every row one token: nothing to compile, and the backward still finds its (empty) buffers."""
    out = run_both(EagerBackendSearch, 1, [1, 1], 3)
    assert_equal_values(out)


def test_a_search_of_one_merge_step_runs_and_equals_the_eager_one():
    """One merge step: the backward reads one saved tensor per kind as is where it is whole (the compiled search's),
    and copies an eager step's (views of its state) as when there are several."""
    assert_equal_values(run_both(EagerBackendSearch, 1, [2, 2, 1], 2))  # (one pair a row: no scorer gradient)


@pytest.mark.inductor
def test_inductor_compiled_merge_step_equals_the_eager_search():
    """The same with inductor's generated kernels (opt-in: minutes of C++ builds on a busy machine)."""
    torch._dynamo.reset()
    compiled_merge_step.cache_clear()
    assert_equal(run_both(CompiledSearch, 1, [5, 3, 1, 5], 5))
    assert_equal(run_both(CompiledSearch, 3, [4, 2, 4], 4))
    assert_equal(run_both(CompiledSearch, 1, [70, 66], 70))  # EBT-GRC's wide steps: the same graphs


def test_op_counter_lets_compiled_code_run_and_counts_what_it_dispatches():
    """`rirlab bench`'s counter must count a compiled step as it runs: Dynamo runs no compiled code under a non-infra
    dispatch mode (it falls back to eager, or raises with fullgraph=True), so a plain counter would report the eager
    step's ops for a ``compile: true`` model."""
    from rirlab.bench.ops import OpCounter

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).topk(2, dim=-1).values * 2

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    cf(x, w)  # compiled before counting
    with OpCounter() as ops:
        out = cf(x, w)
    torch.testing.assert_close(out, f(x, w))
    assert ops.by_name["topk"] == 1 and ops.by_name["mm"] == 1


@pytest.mark.inductor
def test_op_counter_counts_inductor_cpu_kernels():
    """Inductor's C++ kernels bypass the dispatcher: the counter counts their calls apart (``kernels``), and in
    ``total``."""
    from rirlab.bench.ops import OpCounter

    def f(x, w):
        return (torch.nn.functional.gelu(x @ w) * 2 + 1).sum(-1)

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, dynamic=True)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    cf(x, w)
    with OpCounter() as ops:
        cf(x, w)
    assert sum(ops.kernels.values()) >= 1 and ops.total == sum(ops.by_name.values()) + sum(ops.kernels.values())
    assert "gelu" not in ops.by_name  # fused into a kernel, not dispatched


@pytest.mark.inductor
@pytest.mark.parametrize("name, batch, length, bound", [("rir_ebt_grc", 2, 100, 1_500), ("ebt_grc", 1, 200, 2_900)])
def test_compiled_training_step_op_count(name, batch, length, bound):
    """``compile: true`` cuts RIR-EBT-GRC's step at 2 x 100 (the merge steps of 128 x 100) from ~2,580 ATen ops to
    ~1,460 counted as dispatched ops plus inductor's kernels (the goal: 1,500 at 128 x 100, counted 1,472), EBT-GRC's
    at 1 x 200 (199 merge steps, 136 wider than a merge table) from ~10,880 to ~2,650 (benchmarks/README.md, issue 57
    items 2 and 3)."""
    from rirlab.bench.base import BenchOptions, bench_optimizer, build_model, one_step, random_batch
    from rirlab.bench.ops import OpCounter

    torch.manual_seed(0)
    model = build_model(name, BenchOptions(batch=batch, length=length, overrides={"compile": True})).train()
    opt = bench_optimizer(model)
    rows = random_batch(batch, length, "cpu")
    one_step(model, opt, rows, True)  # compiles
    with OpCounter() as ops:
        one_step(model, opt, rows, True)
    assert 0 < sum(ops.kernels.values()) and ops.total <= bound, (ops.total, ops.by_name.most_common(12))
