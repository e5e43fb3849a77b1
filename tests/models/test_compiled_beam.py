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


def assert_equal(out):
    (r1, s1, g1), (r2, s2, g2) = out
    torch.testing.assert_close(r2, r1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(s2, s1, rtol=1e-12, atol=1e-12)
    for a, c in zip(g1, g2):
        torch.testing.assert_close(c, a, rtol=1e-10, atol=1e-12)
    assert g2[0].abs().sum() > 0 and g2[-4].abs().sum() > 0  # leaves and the scorer's first layer get gradients


def test_compiled_merge_step_equals_the_eager_search_values_and_gradients():
    """A fresh search (B = 1) and one from b scored input beams (RIR levels >= 2), rows of several lengths (rows
    leave the batch as they finish) and a one-token row, training mode: the compiled steps return what the eager
    steps compute, and the shared backward gives the same gradients."""
    torch._dynamo.reset()
    compiled_merge_step.cache_clear()
    assert_equal(run_both(EagerBackendSearch, 1, [5, 3, 1, 5], 5))
    assert_equal(run_both(EagerBackendSearch, 3, [4, 2, 4], 4))


def test_compiled_merge_step_does_not_recompile_for_other_lengths_or_batches():
    """ListOps lengths vary: a new width, row count or noise offset must reuse the graphs (dynamic shapes), so a
    trial compiles a handful of graphs once, not one per sequence length."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    compiled_merge_step.cache_clear()
    counters.clear()
    assert_equal(run_both(EagerBackendSearch, 1, [6, 4, 6], 6))
    graphs = counters["stats"]["unique_graphs"]
    for lengths, width in (([9, 7, 3, 9, 8], 9), ([12, 5], 12)):
        run_both(EagerBackendSearch, 1, lengths, width, seed=3)
    assert counters["stats"]["unique_graphs"] == graphs, "a new length or batch recompiled the merge step"


@pytest.mark.inductor
def test_inductor_compiled_merge_step_equals_the_eager_search():
    """The same with inductor's generated kernels (opt-in: minutes of C++ builds on a busy machine)."""
    torch._dynamo.reset()
    compiled_merge_step.cache_clear()
    assert_equal(run_both(CompiledSearch, 1, [5, 3, 1, 5], 5))
    assert_equal(run_both(CompiledSearch, 3, [4, 2, 4], 4))
