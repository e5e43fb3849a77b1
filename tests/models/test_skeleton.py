"""Walking-skeleton unit tests: ListOps labels against an independent solver; models' shapes and gradients."""

from __future__ import annotations

import random

import pytest
import torch

from rirlab.trial import resolve
from rirlab.models import registry as models
from rirlab.tasks import listops
from rirlab.tasks.base import TaskInfo, collate_classify
from tests.helpers.models import missing_gradients


def independent_value(text: str) -> int:
    """Evaluate the binarised bracket text directly (recursive descent over '(' ... ')' pairs)."""
    toks = text.split()

    def parse(i):
        # returns (kind, payload, next_index); kind 'open' = partial operator application, 'val' = number
        if toks[i] == "(":
            left, i = parse(i + 1)
            right, i = parse(i)
            assert toks[i] == ")"
            if right == "]":
                op, args = left
                funcs = {"[MIN": min, "[MAX": max, "[SM": lambda a: sum(a) % 10,
                         "[MED": lambda a: int(sorted(a)[len(a) // 2] if len(a) % 2 else
                                               (sorted(a)[len(a) // 2 - 1] + sorted(a)[len(a) // 2]) / 2)}
                return funcs[op](args), i + 1
            op, args = left if isinstance(left, tuple) else (left, [])
            return (op, args + [right]), i + 1
        tok = toks[i]
        return (int(tok) if tok.isdigit() else tok), i + 1

    value, end = parse(0)
    assert end == len(toks)
    return value


def test_generated_labels_match_an_independent_evaluator():
    data = listops.generate(400, seed=7, max_args=5, max_depth=20, max_len=100)
    assert len({t for t, _ in data}) == 400  # de-duplicated
    ops = set()
    for text, label in data:
        assert independent_value(text) == label
        toks = listops.tokenize(text)
        assert len(toks) <= 100
        ops |= {t for t in toks if t in listops.OPS}
    assert ops == set(listops.OPS)  # all four operators occur


def test_solver_rejects_malformed_sequences():
    for bad in (["[MAX", "1"], ["]"], ["[MAX", "1", "2", "]", "3"], ["[FOO", "1", "]"]):
        with pytest.raises(ValueError):
            listops.solve(bad)
    assert listops.solve("[MED 1 9 2 ]".split()) == 2
    assert listops.solve("[MED 1 8 ]".split()) == 4  # integer part of 4.5
    assert listops.solve("[SM 9 9 3 ]".split()) == 1


@pytest.mark.parametrize("name", ["bbt_grc", "rir_grc", "rnn_grc"])
def test_models_shapes_and_gradients_reach_every_parameter(name):
    torch.manual_seed(0)
    # rir_grc chunked per sequence: the default (chunk_by: batch, the authors') chunks by the batch's padded length
    cfg = resolve({"model": name, "task": "listops", "hidden_size": 16,
                   **({"chunk_size": 3, "chunk_by": "sequence"} if name == "rir_grc" else {})})
    model = models.get(name).build(cfg.model_cfg, TaskInfo(len(listops.VOCAB), 10, "classify"))
    rng = random.Random(0)
    batch = collate_classify([([rng.randrange(1, len(listops.VOCAB)) for _ in range(n)], n % 10) for n in (1, 5, 11, 17)])
    out = model(batch)
    assert out.logits.shape == (4, 10)
    torch.nn.functional.cross_entropy(out.logits, batch["labels"]).backward()
    missing = missing_gradients(model)  # (the S4D backward direction's frozen parameters: exactly zero, asserted)
    assert not missing, f"no gradient reaches {missing}"


@pytest.mark.parametrize("name", ["bbt_grc", "rir_grc"])
def test_padded_batch_equals_single_sequences(name):
    torch.manual_seed(0)
    # rir_grc chunked per sequence: the default (chunk_by: batch, the authors') chunks by the batch's padded length
    cfg = resolve({"model": name, "task": "listops", "hidden_size": 16,
                   **({"chunk_size": 3, "chunk_by": "sequence"} if name == "rir_grc" else {})})
    model = models.get(name).build(cfg.model_cfg, TaskInfo(len(listops.VOCAB), 10, "classify")).eval()
    seqs = [[1, 6, 7, 5], [2, 8, 9, 10, 11, 12, 5, 6, 5], [7]]
    batched = model(collate_classify([(s, 0) for s in seqs])).logits
    for i, s in enumerate(seqs):
        alone = model(collate_classify([(s, 0)])).logits
        torch.testing.assert_close(batched[i : i + 1], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("start", ["zero", "first_token"])
def test_fused_grc_recurrence_equals_the_op_by_op_reference(start):
    """The GRC RNN's one-node recurrence (rnn_grc.fused_rnn_compose: rows sorted by length, the inputs' half of the
    first layer at once, hand-written backward) against grc.rnn_compose: values and every gradient in float64,
    padded rows of lengths 0..T; and gradcheck of its backward with dropout (the same keep rows on every call)."""
    from torch.func import functional_call

    from rirlab.models.grc import GRC, rnn_compose
    from rirlab.models.rnn_grc import fused_rnn_compose

    torch.manual_seed(0)
    d = 8
    cell = GRC(d, 4, 0.0).double().train()
    x = torch.randn(6, 7, d, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([7, 3, 0, 1, 5, 7])
    mask = torch.arange(7) < lengths[:, None]
    params = list(cell.parameters())
    ref = rnn_compose(cell, x, mask, start)
    out = fused_rnn_compose(cell, x, lengths, start)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, [x] + params, g), torch.autograd.grad(ref, [x] + params, g)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)

    class Recurrence(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = GRC(d, 4, 0.3).double().train()

        def forward(self, x):
            return fused_rnn_compose(self.cell, x, torch.tensor([5, 2, 4, 1]), start)

    rec = Recurrence()
    names = [n for n, _ in rec.named_parameters()]

    def f(x, *ps):
        torch.manual_seed(1)  # the same dropout keep rows on every call
        return functional_call(rec, dict(zip(names, ps)), (x,))

    xs = torch.randn(4, 5, d, dtype=torch.float64, requires_grad=True)
    ps = tuple(p.detach().clone().requires_grad_() for p in rec.parameters())
    assert torch.autograd.gradcheck(f, (xs,) + ps)


def test_grc_cell_node_equals_the_cell_and_draws_the_same_dropout():
    """grc.grc_cell (one autograd node, hand-written backward; CRvNN's and BT-GRC's pairs) against GRC.compose:
    values and every gradient in float64, the same dropout draws under the same seed, gradcheck with dropout."""
    from torch.func import functional_call

    from rirlab.models.grc import GRC, grc_cell

    torch.manual_seed(0)
    d = 8
    cell = GRC(d, 4, 0.0).double().train()
    pair = torch.randn(13, 2 * d, dtype=torch.float64, requires_grad=True)
    ref, out = cell.compose(pair), grc_cell(cell, pair)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    g, ps = torch.randn_like(ref), [pair] + list(cell.parameters())
    for a, b in zip(torch.autograd.grad(out, ps, g), torch.autograd.grad(ref, ps, g)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    cell.p = 0.3
    torch.manual_seed(3)
    ref = cell.compose(pair)
    torch.manual_seed(3)
    torch.testing.assert_close(grc_cell(cell, pair), ref, rtol=0, atol=1e-12)

    class Node(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = cell

        def forward(self, x):
            return grc_cell(self.cell, x)

    node = Node()
    names = [n for n, _ in node.named_parameters()]

    def f(x, *params):
        torch.manual_seed(1)  # the same keep rows on every call
        return functional_call(node, dict(zip(names, params)), (x,))

    assert torch.autograd.gradcheck(f, (pair,) + tuple(p.detach().clone().requires_grad_() for p in node.parameters()))
