"""GT-GRC (original Gumbel-Tree, rirlab/models/gt_grc.py) and EGT-GRC (EBT fixes, rirlab/models/egt_grc.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.models import (batch_of, build, check_padding_and_determinism, check_shapes_and_gradients, learns_listops,
                        random_seqs)


@pytest.mark.parametrize("name", ["gt_grc", "egt_grc"])
def test_shapes_and_gradients(name):
    check_shapes_and_gradients(name, hidden_size=16)


@pytest.mark.parametrize("name", ["gt_grc", "egt_grc"])
def test_padding_invariant_and_deterministic_in_eval(name):
    check_padding_and_determinism(name, hidden_size=16)


def test_gt_grc_is_greedy_on_composed_parents():
    """Eval GT-GRC = merge, at every step, the pair whose composed parent scores highest (EBT eq. 3-4)."""
    torch.manual_seed(9)
    model = build("gt_grc", hidden_size=8).eval()
    seq = random_seqs([7], seed=1)[0]
    enc = model.encoder
    with torch.no_grad():
        x = model.embed(torch.tensor([seq]))
        nodes = list(enc.leaf(x[0]))
        while len(nodes) > 1:
            parents = [enc.tree.cell(nodes[i], nodes[i + 1]) for i in range(len(nodes) - 1)]
            j = int(torch.stack([enc.tree.scorer(p)[0] for p in parents]).argmax())
            nodes = nodes[:j] + [parents[j]] + nodes[j + 2 :]
        assert torch.allclose(enc(x, torch.ones(1, 7, dtype=torch.bool)).vec[0], nodes[0], atol=1e-5)


def test_gt_grc_is_bt_grc_with_beam_one_in_eval():
    torch.manual_seed(10)
    gt, bt = build("gt_grc", hidden_size=16).eval(), build("bt_grc", hidden_size=16, beam_size=1).eval()
    bt.load_state_dict(gt.state_dict())
    batch = batch_of(random_seqs([9, 3, 6]))
    with torch.no_grad():
        assert torch.allclose(gt(batch).logits, bt(batch).logits, atol=1e-6)


def test_gt_grc_straight_through_reaches_the_scorer():
    """The scorer only acts through the straight-through selection (forward: a hard one-hot) and still learns."""
    torch.manual_seed(11)
    model = build("gt_grc", hidden_size=16, dropout=0.0)
    batch = batch_of(random_seqs([8, 6]))
    model.train()
    F.cross_entropy(model(batch).logits, batch["labels"]).backward()
    assert model.encoder.tree.scorer.weight.grad.abs().sum() > 0


def test_gt_grc_training_gradients_are_the_authors_straight_through_over_every_pair(monkeypatch):
    """Training mode against the authors' GT_GRC.py written with plain ops: every adjacent pair composed, the
    straight-through Gumbel-softmax sel = hard - y.detach() + y over ALL pairs (y: their masked softmax of score +
    noise), the state updated by sel * P + (1 - cumsum sel) * h[:-1] + (cumsum sel - sel) * h[1:], so every pair's
    probability gets a gradient; no selection at the last step; done rows keep h[:-1]. Same Gumbel noise on both
    sides, dropout 0, a padded batch, float64: output and every parameter's gradient equal."""
    import rirlab.models.bt_grc as bt_grc

    torch.manual_seed(12)
    d, lengths = 6, [6, 4, 2]
    model = build("gt_grc", hidden_size=d, dropout=0.0).double().train()
    enc = model.encoder
    x = torch.randn(3, 6, d, dtype=torch.float64)
    mask = torch.arange(6)[None] < torch.tensor(lengths)[:, None]
    g = torch.Generator().manual_seed(3)
    noise = {w: -torch.log(-torch.log(torch.rand(3, w, generator=g, dtype=torch.float64))) for w in range(1, 6)}
    monkeypatch.setattr(bt_grc, "gumbel_like", lambda like: noise[like.size(-1)][:, None].clone())
    out = enc(x, mask).vec
    w = torch.randn(out.shape, generator=g, dtype=torch.float64)
    params = dict(enc.named_parameters())
    got = torch.autograd.grad((out * w).sum(), list(params.values()))

    p = params
    def cell(l, r):  # noqa: E306  the GRC cell (RIR eq. 10-11) as GT_GRC.py's CellLayer computes it
        c = F.linear(F.gelu(F.linear(torch.cat([l, r], -1), p["tree.cell.w1.weight"], p["tree.cell.w1.bias"])),
                     p["tree.cell.w2.weight"], p["tree.cell.w2.bias"]).view(*l.shape[:-1], 4, d)
        gate = torch.sigmoid(c[..., :3, :])
        return F.layer_norm(gate[..., 0, :] * l + gate[..., 1, :] * r + gate[..., 2, :] * c[..., 3, :], (d,),
                            p["tree.cell.ln.weight"], p["tree.cell.ln.bias"])

    h = F.layer_norm(F.linear(x, p["leaf.w.weight"], p["leaf.w.bias"]), (d,), p["leaf.ln.weight"], p["leaf.ln.bias"])
    m = mask.double()
    for i in range(5):
        new = cell(h[:, :-1], h[:, 1:])  # (N, 5 - i, D) every pair
        if i < 4:
            e = F.linear(new, p["tree.scorer.weight"], p["tree.scorer.bias"])[..., 0] + noise[5 - i]
            y = F.softmax(e, -1) * m[:, i + 1:] + 1e-20  # the authors' masked_softmax
            y = y / y.sum(-1, keepdim=True)
            sel = F.one_hot(y.argmax(-1), 5 - i).double() - y.detach() + y
            c = sel.cumsum(-1)[..., None]
            new = sel[..., None] * new + (1 - c) * h[:, :-1] + (c - sel[..., None]) * h[:, 1:]
        done = m[:, i + 1, None, None]
        h = done * new + (1 - done) * h[:, :-1]
    want = torch.autograd.grad((h[:, 0] * w).sum(), list(params.values()), allow_unused=True)
    assert (out - h[:, 0]).abs().max() < 1e-12
    for name, a, b in zip(params, got, want):
        b = torch.zeros_like(a) if b is None else b
        assert (a - b).abs().max() < 1e-12 * max(1.0, b.abs().max().item()), name
    assert got[list(params).index("tree.scorer.weight")].abs().max() > 1e-3


def test_egt_grc_scores_the_sliced_child_pair():
    """EGT-GRC's scorer reads d_s features of each child (EBT Fix 2); GT-GRC's reads a whole composed parent."""
    egt, gt = build("egt_grc", hidden_size=16, d_s=4), build("gt_grc", hidden_size=16)
    assert egt.encoder.tree.scorer.w1.in_features == 8 and gt.encoder.tree.scorer.in_features == 16


@pytest.mark.parametrize("name", ["gt_grc", "egt_grc"])
def test_tiny_model_learns_listops_above_majority(name):
    acc, majority = learns_listops(name, steps=100, hidden_size=32, dropout=0.0)
    assert acc > majority + 0.08, (acc, majority)


def test_straight_through_update_equals_update_nodes():
    """GT-GRC's fused update on the packed parents (bt_grc.straight_through_update) against update_nodes on the dense
    parents: same values, and the same gradients for the nodes, every parent and the soft selection (float64), on a
    batch mixing the dense path, the packed path and a done row."""
    from rirlab.models.bt_grc import straight_through_update, update_nodes

    torch.manual_seed(0)
    n, w, d = 4, 6, 3
    for cur_len in (torch.tensor([6, 6, 6, 6]), torch.tensor([6, 4, 2, 1])):
        h = torch.randn(n, 1, w, d, dtype=torch.float64, requires_grad=True)
        valid = (torch.arange(w - 1) < (cur_len - 1)[:, None])  # (n, W-1)
        at = None if bool(valid.all()) else valid.reshape(-1).nonzero()[:, 0]
        packed = torch.randn(int(valid.sum()), d, dtype=torch.float64, requires_grad=True)
        logits = torch.randn(n, 1, w - 1, dtype=torch.float64, requires_grad=True)
        key = logits.masked_fill(~valid[:, None], -1e9)
        soft = F.softmax(key, -1)
        pick = key.argmax(-1)
        active = (cur_len >= 2).to(h.dtype)[:, None, None]
        sel = (F.one_hot(pick, w - 1).to(soft.dtype) + soft - soft.detach()) * active
        dense = packed.new_zeros(n * (w - 1), d).index_copy(0, valid.reshape(-1).nonzero()[:, 0], packed)
        ref = update_nodes(h, dense.view(n, 1, w - 1, d), sel)
        out = straight_through_update(h, packed, at, sel, pick[:, 0], cur_len)
        assert torch.equal(out, ref)
        g = torch.randn_like(ref)
        for a, b in zip(torch.autograd.grad(ref, (h, packed, logits), g, retain_graph=True),
                        torch.autograd.grad(out, (h, packed, logits), g)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


@pytest.mark.parametrize("st", ["mask", "node"])
@pytest.mark.parametrize("train,p,tau,lengths", [(True, 0.3, 1.0, [7, 4, 1, 12, 2, 12]), (True, 0.0, 0.5, [7, 4, 1, 12, 2, 12]),
                                                 (False, 0.3, 1.0, [7, 4, 1, 12, 2, 12]), (True, 0.3, 1.0, [1, 1, 1])],
                         ids=["train", "train-no-dropout", "eval", "train-one-leaf-rows"])
def test_fused_greedy_search_equals_op_by_op_autograd(train, p, tau, lengths, st):
    """EGT-GRC's one-node greedy straight-through search (fused_greedy.FusedGreedyTree) against the reference
    BeamTree(beam 1, straight-through) recorded op by op: same Gumbel and dropout draws, same roots and scores, the
    same gradients for the leaves and every parameter (float64), rows of every length (one of one leaf), under
    both straight-through gradients; and a batch of one-leaf rows only, where nothing merges (its backward raised
    before: no scorer row to sum)."""
    from rirlab.models.fused_greedy import FusedGreedyTree
    from rirlab.models.grc import GRC
    from rirlab.models.scorer import Scorer

    torch.manual_seed(7)
    d = 16
    tree = FusedGreedyTree(GRC(d, 4, p), Scorer(d, 8), tau, st).double().train(train)
    lengths = torch.tensor(lengths)
    x = torch.randn(len(lengths), 1, int(lengths.max()), d, dtype=torch.float64, requires_grad=True)
    inputs = [x] + list(tree.parameters())
    results = []
    for fused in (True, False):
        tree.fused = fused
        torch.manual_seed(1)
        roots, scores = tree(x, lengths)
        g = torch.Generator().manual_seed(2)
        loss = (roots * torch.randn(roots.shape, generator=g, dtype=x.dtype)).sum()
        loss = loss + (scores * torch.randn(scores.shape, generator=g, dtype=x.dtype)).sum()
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)  # the reference uses no weight if none merges
        results.append((roots, scores, [torch.zeros_like(t) if g is None else g for g, t in zip(grads, inputs)]))
    (r1, s1, g1), (r2, s2, g2) = results
    torch.testing.assert_close(r1, r2, rtol=0, atol=1e-12)
    torch.testing.assert_close(s1, s2, rtol=0, atol=1e-12)
    for a, c in zip(g1, g2):
        torch.testing.assert_close(a, c, rtol=0, atol=1e-12)
    merges = bool(lengths.max() > 1)
    assert g1[0].abs().sum() > 0 and bool(g1[-4].abs().sum() > 0) == merges  # the leaves; the scorer (w1) if merged


@pytest.mark.parametrize("st", ["mask", "node"])
def test_fused_greedy_search_equals_a_literal_greedy_loop(st):
    """The one-node greedy search against a literal loop over one sequence at a time, in eval (no draws): roots and
    the gradients of the leaves and every parameter (float64). The loop keeps a list of nodes and scores every pair
    of it at every step, y = softmax(log_softmax(scores) / tau), j = argmax. "node": the parent cell(children) *
    (1 + y_j - y_j.detach()) replaces the pair. "mask" (the authors' EGT_GRC.py, Choi et al.'s straight-through):
    sel = onehot(j) + y - y.detach(); parent = cell(sum_k sel_k n_k, sum_k sel_k n_k+1); the new list is
    sel_k parent + (1 - cumsum(sel)_k) n_k + (cumsum(sel)_k - sel_k) n_k+1 over the pairs k. A finite-difference
    check does not apply: the straight-through gradient is not the derivative of the forward value."""
    from rirlab.models.fused_greedy import FusedGreedyTree
    from rirlab.models.grc import GRC
    from rirlab.models.scorer import Scorer

    torch.manual_seed(3)
    d, tau = 8, 0.7
    tree = FusedGreedyTree(GRC(d, 2, 0.2), Scorer(d, 4), tau, st).double().eval()
    lengths = [6, 3, 1, 9]
    x = torch.randn(4, 1, 9, d, dtype=torch.float64, requires_grad=True)

    def literal(seq):
        nodes = list(seq)
        while len(nodes) > 1:
            logp = F.log_softmax(torch.stack([tree.scorer(nodes[i], nodes[i + 1]) for i in range(len(nodes) - 1)]), 0)
            j = int(logp.argmax())
            y = F.softmax(logp / tau, 0)
            if st == "node":
                nodes[j : j + 2] = [tree.cell(nodes[j], nodes[j + 1]) * (1.0 + y[j] - y[j].detach())]
                continue
            sel = F.one_hot(torch.tensor(j), len(y)).double() + y - y.detach()
            parent = tree.cell(sum(s * n for s, n in zip(sel, nodes[:-1])), sum(s * n for s, n in zip(sel, nodes[1:])))
            before = sel.cumsum(0)
            nodes = [sel[k] * parent + (1 - before[k]) * nodes[k] + (before[k] - sel[k]) * nodes[k + 1]
                     for k in range(len(y))]
        return nodes[0]

    inputs = [x] + list(tree.parameters())
    w = torch.randn(4, d, dtype=torch.float64)
    roots, _ = tree(x, torch.tensor(lengths))
    ref = torch.stack([literal(x[i, 0, :n]) for i, n in enumerate(lengths)])
    torch.testing.assert_close(roots[:, 0], ref, rtol=0, atol=1e-12)
    for a, c in zip(torch.autograd.grad((roots[:, 0] * w).sum(), inputs), torch.autograd.grad((ref * w).sum(), inputs)):
        torch.testing.assert_close(a, c, rtol=0, atol=1e-12)


def test_grc_cell_with_given_pre_activations_is_the_same_node():
    """grc_cell(cell, pair, pre) with pre = W1 pair + b1 computed by the caller (GT-GRC keeps it for the pairs that
    did not change) = grc_cell(cell, pair): values, the same dropout draws, and the gradients of the pair and every
    weight, W1 included (the backward treats pre as that function of pair) (float64)."""
    from rirlab.models.grc import GRC, grc_cell

    torch.manual_seed(0)
    d = 8
    cell = GRC(d, 4, 0.3).double().train()
    pair = torch.randn(13, 2 * d, dtype=torch.float64, requires_grad=True)
    pre = F.linear(pair, cell.w1.weight, cell.w1.bias).detach()
    ps = [pair] + list(cell.parameters())
    outs = []
    for given in (None, pre):
        torch.manual_seed(3)
        out = grc_cell(cell, pair, given)
        outs.append((out, torch.autograd.grad(out, ps, torch.linspace(-1, 1, out.numel()).view_as(out).double())))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=0, atol=1e-12)
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
