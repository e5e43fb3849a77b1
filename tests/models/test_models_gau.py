"""GAU block and sentence interaction (EBT paper App. F.2 eq. 8-29): rirlab/models/gau.py (``gau``),
rirlab/models/parent_attention.py, egt_gau.py, ebt_gau.py; and the siamese pair head on NLI/QQP-shaped tasks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rirlab.models import registry
from rirlab.models.beam_tree import BeamTree, marginalize
from rirlab.models.gau import GAUBlock, GAUConfig
from rirlab.tasks.base import TaskInfo
from tests.helpers.models import batch_of, check_padding_and_determinism, random_seqs

NAMES = ["gau", "egt_gau", "ebt_gau"]
TINY = dict(hidden_size=16, gau_head_size=8)


def build_pair(name, classes=3, **kw):
    entry = registry.get(name)
    return entry.build(entry.config(**kw), TaskInfo(16, classes, "pair"))


def pair_batch(seqs1, seqs2, labels=None):
    a, b = batch_of(seqs1), batch_of(seqs2)
    labels = torch.arange(len(seqs1)) % 3 if labels is None else torch.tensor(labels)
    return {"tokens": a["tokens"], "mask": a["mask"], "tokens2": b["tokens"], "mask2": b["mask"], "labels": labels}


def test_defaults_are_the_papers():
    """EBT App. G: head size 128, dropout 0.1, receptive fields 5 / 10, 2 + 3 weight-shared blocks, GAU: 5 unshared."""
    gau, egt, ebt = (registry.get(n).config() for n in NAMES)
    for cfg in (gau, egt, ebt):
        assert (cfg.gau_head_size, cfg.dropout, cfg.gau_rel_k, cfg.hidden_size) == (128, 0.1, 5, 300)
        assert (cfg.gau_pos, cfg.gau_scale) == ("query", "2dh")  # the authors' code
    assert gau.num_layers == 5
    for cfg in (egt, ebt):
        assert (cfg.parent_layers, cfg.interaction_layers, cfg.gau_parent_rel_k, cfg.d_s) == (2, 3, 10, 64)
    assert ebt.beam_size == 5
    m_gau, m_ebt = build_pair("gau", **TINY), build_pair("ebt_gau", **TINY)
    assert len(m_gau.encoder.interaction.blocks) == 5 and m_gau.encoder.interaction.order == [0, 1, 2, 3, 4]
    assert len(m_ebt.encoder.interaction.blocks) == 1 and m_ebt.encoder.interaction.order == [0, 0, 0]
    assert m_ebt.encoder.parent.layers == 2


@pytest.mark.parametrize("pos,scale", [("query", "2dh"), ("bias", "2d")])
def test_gau_block_is_equations_8_to_15(pos, scale):
    """One query at a time, written as the equations read; relative term and scale per config."""
    torch.manual_seed(3)
    cfg = GAUConfig(hidden_size=12, gau_head_size=4, gau_pos=pos, gau_scale=scale, dropout=0.0)
    blk = GAUBlock(cfg, 5).eval()
    with torch.no_grad():
        blk.pos.normal_()
        blk.zb.normal_()
    x, p = torch.randn(3, 12), torch.randn(4, 12)
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    rel = torch.randint(0, 5, (3, 4))
    ln = blk.init
    with torch.no_grad():
        got = blk(x, p, mask, rel)
        for i in range(3):
            xi = ln(x[i])  # eq. 8
            u = F.silu(blk.wu(xi))  # eq. 9
            q = blk.z[0] * F.silu(blk.wz(xi)) + blk.zb[0]  # eq. 10
            logits = []
            for j in range(4):
                pj = ln(p[j])
                k = blk.z[2] * F.silu(blk.wz(pj)) + blk.zb[2]
                if pos == "query":
                    r = (blk.z[1] * F.silu(blk.wz(xi)) + blk.zb[1]) @ blk.pos[rel[i, j]]
                else:
                    r = blk.pos[rel[i, j]]
                logits.append((q @ k + r) / math.sqrt(2 * (4 if scale == "2dh" else 12)))  # eq. 11
            a = F.softmax(torch.stack(logits).masked_fill(~mask[i], float("-inf")), 0)
            v = sum(a[j] * F.silu(blk.wv(ln(p[j]))) for j in range(4))  # eq. 12
            o = blk.wo(u * v)  # eq. 13
            g = torch.sigmoid(blk.gate(torch.cat([o, x[i]])))  # eq. 14
            assert torch.allclose(got[i], g * o + (1 - g) * x[i], atol=1e-5), i  # eq. 15


@pytest.mark.parametrize("name", NAMES)
def test_pair_shapes_and_every_parameter_learns(name):
    torch.manual_seed(1)
    model = build_pair(name, **TINY).train()
    batch = pair_batch(random_seqs([9, 4, 1, 6]), random_seqs([2, 7, 5, 1], seed=1))
    out = model(batch)
    assert out.logits.shape == (4, 3)
    F.cross_entropy(out.logits, batch["labels"]).backward()
    missing = [n for n, p in model.named_parameters()
               if n not in ("encoder.tree.scorer.w2.bias", "embed.weight") and (p.grad is None or not p.grad.any())]
    assert not missing, missing


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("parent_self", [False, True])
def test_padding_invariant_and_deterministic_in_eval(name, parent_self):
    if name == "gau" and parent_self:
        pytest.skip("no parent attention in the GAU baseline")
    # a one-token sentence reads the padding of a wider batch unless gau_parent_empty is zero
    kw = dict(TINY, gau_parent_self=parent_self, gau_parent_last="attend", gau_parent_empty="zero") \
        if name != "gau" else TINY
    check_padding_and_determinism(name, **kw)  # one sequence (a classification task)
    torch.manual_seed(2)
    model = build_pair(name, **kw).eval()
    s1, s2 = random_seqs([12, 5, 1, 8]), random_seqs([3, 9, 6, 1], seed=4)
    with torch.no_grad():
        full = model(pair_batch(s1, s2)).logits
        for i in range(4):
            assert torch.allclose(model(pair_batch([s1[i]], [s2[i]])).logits[0], full[i], atol=1e-5), (name, i)


@pytest.mark.parametrize("name", NAMES)
def test_the_two_sentences_interact_token_by_token(name):
    """Not siamese (EBT §4 "Use Case"): the first sentence's token states in the interaction stack change when only
    the second sentence changes, and the head reads the pooled pair (eq. 20), not [u; v; |u-v|; u*v]."""
    torch.manual_seed(5)
    model = build_pair(name, **TINY).eval()
    assert model.joint_pair and model.head.l1.in_features == 16
    states = []
    model.encoder.interaction.blocks[0].register_forward_hook(lambda mod, args, out: states.append(out))
    s1 = random_seqs([6], seed=7)
    with torch.no_grad():
        model(pair_batch(s1, [[1, 2, 3]]))
        model(pair_batch(s1, [[4, 5, 6, 7]]))
    first = slice(0, 7)  # CLS1 and the six tokens of sentence 1
    assert not torch.allclose(states[0][:, first], states[-1][:, first], atol=1e-6)


def literal_greedy(model, seq):
    """EGT-GRC in eval written out: merge the best-scoring child pair, recording nodes, their spans and heights."""
    enc = model.encoder
    x = enc.leaf(model.embed(torch.tensor([seq]))[0])  # (L, D)
    front = [(x[i], {i}, 0) for i in range(len(seq))]
    made = []
    while len(front) > 1:
        s = torch.stack([enc.tree.scorer(front[i][0], front[i + 1][0]) for i in range(len(front) - 1)])
        j = int(s.argmax())
        (a, sa, ha), (b, sb, hb) = front[j], front[j + 1]
        node = (enc.tree.cell(a, b), sa | sb, max(ha, hb) + 1)
        made.append(node)
        front = front[:j] + [node] + front[j + 2:]
    return made


def test_egt_search_records_the_greedy_tree():
    torch.manual_seed(6)
    model = build_pair("egt_gau", **TINY).eval()
    seqs = random_seqs([7, 4], seed=2)
    batch = batch_of(seqs)
    with torch.no_grad():
        h = model.encoder.leaf(model.embed(batch["tokens"]))
        tree = model.encoder.tree(h, batch["mask"].sum(1))
        for r, seq in enumerate(seqs):
            made = literal_greedy(model, seq)
            for t, (node, span, height) in enumerate(made):
                assert torch.allclose(tree.nodes[r, 0, t], node, atol=1e-5)
                assert set(tree.cover[r, 0, t].nonzero().flatten().tolist()) == span
                assert int(tree.height[r, 0, t]) == height
            assert torch.allclose(tree.roots[r, 0], made[-1][0], atol=1e-5)
            assert not tree.cover[r, 0, len(seq) - 1:].any()  # slots past a row's L - 1 nodes span nothing


def literal_st_greedy(tree, x, tau, st):
    """EGT's greedy straight-through search written out for one sequence x (L, D) (no draws): the list of nodes,
    every pair of it scored at every step, y = softmax(log_softmax(scores) / tau), j = argmax. "node": the parent
    cell(n_j, n_j+1) * (1 + y_j - y_j.detach()) replaces the pair. "mask" (the authors' EGT_GAU_IN
    select_composition): sel = onehot(j) + y - y.detach(), parent = cell(sum_k sel_k n_k, sum_k sel_k n_k+1), the
    new list sel_k parent + (1 - cumsum(sel)_k) n_k + (cumsum(sel)_k - sel_k) n_k+1. Returns (the parents in
    creation order, the root)."""
    nodes, made = list(x), []
    while len(nodes) > 1:
        logp = F.log_softmax(torch.stack([tree.scorer(nodes[i], nodes[i + 1]) for i in range(len(nodes) - 1)]), 0)
        j = int(logp.argmax())
        y = F.softmax(logp / tau, 0)
        if st == "node":
            made.append(tree.cell(nodes[j], nodes[j + 1]) * (1.0 + y[j] - y[j].detach()))
            nodes[j : j + 2] = [made[-1]]
            continue
        sel = F.one_hot(torch.tensor(j), len(y)).to(x.dtype) + y - y.detach()
        children = [sum(s * n for s, n in zip(sel, side)) for side in (nodes[:-1], nodes[1:])]
        made.append(tree.cell(*children))
        upto = sel.cumsum(0)
        nodes = [sel[k] * made[-1] + (1 - upto[k]) * nodes[k] + (upto[k] - sel[k]) * nodes[k + 1]
                 for k in range(len(y))]
    return made, nodes[0]


@pytest.mark.parametrize("st", ["mask", "node"])
def test_egt_straight_through_gradient_is_the_literal_loops(st):
    """EGT-GAU's search (NodeBeamTree, beam 1, straight-through) against :func:`literal_st_greedy` one row at a time
    (float64, eval: no draws, gradients recorded): the recorded parents, the roots and the gradients of the leaves
    and of every cell and scorer parameter for a loss on both. A finite-difference check does not apply: the
    straight-through gradient is not the derivative of the forward value."""
    from rirlab.models.grc import GRC
    from rirlab.models.parent_attention import NodeBeamTree
    from rirlab.models.scorer import Scorer

    torch.manual_seed(4)
    d, tau = 8, 0.7
    tree = NodeBeamTree(GRC(d, 2, 0.2), Scorer(d, 4), 1, straight_through=True, tau=tau, st_gradient=st)
    tree = tree.double().eval()
    lengths = [6, 3, 1, 9, 2]
    x = torch.randn(len(lengths), 9, d, dtype=torch.float64, requires_grad=True)
    w_node = torch.randn(len(lengths), 8, d, dtype=torch.float64)  # loss weights of the parents and the roots
    w_root = torch.randn(len(lengths), d, dtype=torch.float64)
    inputs = [x] + list(tree.parameters())

    got = tree(x, torch.tensor(lengths))
    valid = (torch.arange(8) < torch.tensor(lengths)[:, None] - 1)[..., None]  # (N, W-1, 1) the rows' parents
    loss = (got.nodes[:, 0] * w_node * valid).sum() + (got.roots[:, 0] * w_root).sum()
    g_got = torch.autograd.grad(loss, inputs, allow_unused=True)

    want = [literal_st_greedy(tree, x[r, :L], tau, st) for r, L in enumerate(lengths)]
    loss = sum((torch.stack(made) * w_node[r, : len(made)]).sum() for r, (made, _) in enumerate(want) if made)
    loss = loss + sum((root * w_root[r]).sum() for r, (_, root) in enumerate(want))
    g_want = torch.autograd.grad(loss, inputs, allow_unused=True)
    for r, (made, root) in enumerate(want):
        torch.testing.assert_close(got.roots[r, 0], root, rtol=0, atol=1e-13)
        if made:
            torch.testing.assert_close(got.nodes[r, 0, : len(made)], torch.stack(made), rtol=0, atol=1e-13)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    scorer_w1 = [n for n, _ in tree.named_parameters()].index("scorer.w1.weight") + 1
    assert g_got[0].abs().sum() > 0 and g_got[scorer_w1].abs().sum() > 0  # the leaves and the scorer learn


def test_egt_straight_through_forms_have_the_same_values():
    """The two straight-through gradients and the no-gradient path (eval under no_grad: cached scores) give the same
    search in training mode with the same Gumbel and dropout draws: roots, parents, spans, heights (float64), while
    the gradients differ (the "mask" form also reaches the pairs that were not merged)."""
    torch.manual_seed(9)
    model = build_pair("egt_gau", **TINY).double().train()
    enc = model.encoder
    batch = batch_of(random_seqs([7, 4, 1, 9], seed=8))
    h = enc.leaf(model.embed(batch["tokens"]).double())
    lengths = batch["mask"].sum(1)
    w = torch.randn(h.shape[-1], dtype=torch.float64)
    outs, grads = [], []
    for st, grad in (("mask", True), ("node", True), ("mask", False)):
        enc.tree.st_gradient = st
        torch.manual_seed(3)
        with torch.set_grad_enabled(grad):
            tree = enc.tree(h, lengths)
        outs.append(tree)
        if grad:
            loss = (tree.nodes * w).sum() + (tree.roots * w).sum()
            grads.append(torch.autograd.grad(loss, enc.tree.scorer.w1.weight)[0])
    for other in outs[1:]:
        torch.testing.assert_close(other.roots, outs[0].roots, rtol=0, atol=1e-12)
        torch.testing.assert_close(other.nodes, outs[0].nodes, rtol=0, atol=1e-12)
        assert torch.equal(other.cover, outs[0].cover) and torch.equal(other.height, outs[0].height)
    assert not torch.allclose(grads[0], grads[1])


def test_ebt_search_is_the_reference_beam_search_in_eval():
    """Roots and beam scores of the recording search = rirlab's reference EBT search (beam_tree.BeamTree)."""
    torch.manual_seed(7)
    model = build_pair("ebt_gau", hidden_size=16, gau_head_size=8, beam_size=3).eval()
    tree = model.encoder.tree
    ref = BeamTree(tree.cell, tree.scorer, 3).eval()
    batch = batch_of(random_seqs([9, 5, 1, 2, 7], seed=3))
    with torch.no_grad():
        h = model.encoder.leaf(model.embed(batch["tokens"]))
        lengths = batch["mask"].sum(1)
        got = tree(h, lengths)
        roots, scores = ref(h.unsqueeze(1), lengths)
        assert torch.allclose(marginalize(got.roots, got.scores), marginalize(roots, scores), atol=1e-5)
        assert torch.allclose(got.scores.sort(-1).values, scores.sort(-1).values, atol=1e-4)
        for r, L in enumerate(lengths.tolist()):  # each live beam: its last node is its root, spanning everything
            for k in range(3):
                if L > 1 and got.scores[r, k] > -1e8:
                    assert torch.allclose(got.nodes[r, k, L - 2], got.roots[r, k], atol=1e-6)
                    assert got.cover[r, k, L - 2, :L].all() and int(got.height[r, k, L - 2]) <= L - 1


@pytest.mark.parametrize("parent_self", [False, True])
def test_terminals_attend_exactly_to_their_parents(parent_self):
    """Parent attention (eq. 22, G_ij = 1 iff node j is above terminal i): moving a non-terminal changes exactly
    the terminals it spans; with ``gau_parent_self`` a terminal also reads itself."""
    torch.manual_seed(8)
    model = build_pair("egt_gau", gau_parent_self=parent_self, gau_parent_last="attend", dropout=0.0, **TINY).eval()
    enc = model.encoder
    batch = batch_of(random_seqs([6], seed=5))
    with torch.no_grad():
        h = enc.leaf(model.embed(batch["tokens"]))
        tree = enc.tree(h, batch["mask"].sum(1))
        base = enc.parent(h, tree, batch["mask"])
        for t in range(5):
            tree.nodes[0, 0, t] += 1.0
            moved = (enc.parent(h, tree, batch["mask"]) - base).abs().amax(-1)[0] > 1e-6  # (W,)
            tree.nodes[0, 0, t] -= 1.0
            assert moved.tolist() == tree.cover[0, 0, t].tolist(), t


@pytest.mark.parametrize("parent_self", [False, True])
def test_parent_attention_is_eq_27_to_29_per_beam(parent_self):
    """The shared key projections and the broadcast first layer = eq. 27-29 written out: repeat x per beam, apply
    the block ``parent_layers`` times with the beam's nodes as keys, average the beams with softmax(scores)."""
    torch.manual_seed(10)
    model = build_pair("ebt_gau", gau_parent_self=parent_self, gau_parent_last="attend", beam_size=3, dropout=0.0,
                       **TINY).eval()
    enc = model.encoder
    batch = batch_of(random_seqs([7, 3, 5], seed=6))
    with torch.no_grad():
        h = enc.leaf(model.embed(batch["tokens"]))
        tree = enc.tree(h, batch["mask"].sum(1))
        got = enc.parent(h, tree, batch["mask"])
        blk, w = enc.parent.block, h.size(1)
        for r, L in enumerate(batch["mask"].sum(1).tolist()):
            want = 0
            for k, s in enumerate(F.softmax(tree.scores[r], -1)):
                x = h[r]  # (W, D)
                for _ in range(2):
                    g = tree.cover[r, k].t() & (torch.arange(w - 1) < L - 1)  # (W, W-1)
                    rel = tree.height[r, k].clamp(1, 10).expand(w, w - 1) - 1
                    keys = tree.nodes[r, k]
                    if parent_self:
                        g = torch.cat([torch.eye(w, dtype=torch.bool) & batch["mask"][r], g], 1)
                        rel = torch.cat([torch.zeros(w, w, dtype=torch.long), rel + 1], 1)
                        keys = torch.cat([x, keys])
                    x = blk(x, keys, g, rel)
                want = want + s * x
            assert torch.allclose(got[r, :L], want[:L], atol=1e-5), r


@pytest.mark.parametrize("name", ["egt_gau", "ebt_gau"])
def test_the_last_column_keeps_its_value_as_the_authors_split_leaves_it(name):
    """The authors' PGAU (EGT_GAU_IN / EBT_GAU_IN): 2W - 1 nodes of a width-W batch split at S0 = (2W - 2) // 2 =
    W - 1: queries are the terminals 0..W-2, so terminal W-1 keeps its value (``gau_parent_last: keep``, default);
    the others read the same keys either way. A batch of one one-token sentence (W = 1) has no query at all."""
    assert registry.get(name).config().gau_parent_last == "keep"
    torch.manual_seed(12)
    keep = build_pair(name, dropout=0.0, **TINY).eval()
    attend = build_pair(name, gau_parent_last="attend", dropout=0.0, **TINY).eval()
    attend.load_state_dict(keep.state_dict())
    enc_k, enc_a = keep.encoder, attend.encoder
    for lengths in ([6, 4, 2], [1]):
        batch = batch_of(random_seqs(lengths, seed=3))
        with torch.no_grad():
            h = enc_k.leaf(keep.embed(batch["tokens"]))  # (N, W, D)
            tree = enc_k.tree(h, batch["mask"].sum(1))
            got, other = enc_k.parent(h, tree, batch["mask"]), enc_a.parent(h, tree, batch["mask"])
        assert torch.allclose(got[:, -1], h[:, -1], atol=1e-6)  # the last column: untouched (EBT: beams averaged)
        tokens = batch["mask"][:, :-1]  # (padding: no key; gau_parent_empty uniform reads the last column there)
        assert torch.allclose(got[:, :-1][tokens], other[:, :-1][tokens], atol=1e-12)  # the rest: as if every
        # terminal attended
        if lengths[0] > 1:
            assert not torch.allclose(other[0, -1], h[0, -1], atol=1e-3)  # "attend" does change the last token
    with torch.no_grad():  # so a sentence's encoding depends on its batch's width (the authors' code does too)
        s1, s2 = random_seqs([5, 9]), random_seqs([4, 3], seed=4)
        alone = keep(pair_batch([s1[0]], [s2[0]])).logits[0]
        assert not torch.allclose(keep(pair_batch(s1, s2)).logits[0], alone, atol=1e-4)


def test_a_terminal_without_a_parent_attends_uniformly_to_every_key_slot_of_the_authors_split():
    """A one-token sentence in a batch of width W = 4 has no non-terminal above its token. The authors' PGAU fills
    masked scores with -9999, so its eq. 11 softmax is uniform over the W key slots of their split: the W - 1
    non-terminal slots (all unused in its row) and the batch's last terminal (``gau_parent_empty: uniform``,
    default); ``zero``: v' = 0 in eq. 12. Both written out for the two weight-shared layers."""
    assert registry.get("egt_gau").config().gau_parent_empty == "uniform"
    torch.manual_seed(13)
    uniform = build_pair("egt_gau", dropout=0.0, **TINY).eval()
    zero = build_pair("egt_gau", gau_parent_empty="zero", dropout=0.0, **TINY).eval()
    zero.load_state_dict(uniform.state_dict())
    batch = batch_of(random_seqs([1, 4], seed=7))
    enc = uniform.encoder
    with torch.no_grad():
        h = enc.leaf(uniform.embed(batch["tokens"]))  # (2, 4, D)
        tree = enc.tree(h, batch["mask"].sum(1))
        blk = enc.parent.block
        # its unused node slots: its first pair, as the authors' argmax over all-masked (equal) scores picks it
        assert torch.allclose(tree.nodes[0, 0], enc.tree.cell(h[0, 0], h[0, 1]).expand(3, -1), atol=1e-6)
        slots = torch.cat([tree.nodes[0, 0], h[0, 3:]])  # (4, D) the three node slots, the last terminal
        for model, v in ((uniform, F.silu(blk.wv(blk.init(slots))).mean(0)), (zero, torch.zeros(32))):
            x = h[0, 0]
            for _ in range(2):
                o = blk.wo(F.silu(blk.wu(blk.init(x))) * v)  # eq. 12-13
                g = torch.sigmoid(blk.gate(torch.cat([o, x])))  # eq. 14
                x = g * o + (1 - g) * x  # eq. 15
            assert torch.allclose(model.encoder.parent(h, tree, batch["mask"])[0, 0], x, atol=1e-5)
        assert not torch.allclose(enc.parent(h, tree, batch["mask"])[0, 0],
                                  zero.encoder.parent(h, tree, batch["mask"])[0, 0], atol=1e-3)


@pytest.mark.parametrize("classes", [3, 2])
@pytest.mark.parametrize("name", ["ebt_grc", "gau"])
def test_pair_heads_serve_nli_and_paraphrase_labels(name, classes):
    """3-way (SNLI/MNLI) and 2-way (QQP) labels: the siamese head (ebt_grc) and the interaction head (gau)."""
    torch.manual_seed(9)
    model = build_pair(name, classes=classes, hidden_size=16, **({"gau_head_size": 8} if name == "gau" else {}))
    batch = pair_batch(random_seqs([5, 3]), random_seqs([4, 6], seed=2), labels=[classes - 1, 0])
    out = model(batch)
    assert out.logits.shape == (2, classes)
    F.cross_entropy(out.logits, batch["labels"]).backward()
    assert model.head.l2.weight.grad.any()


def first_token_sum_pairs(n, seed):
    """Pairs of 2-5 tokens; label 1 iff their first tokens (1..15) sum to at least 16 (53% of pairs). One sequence
    alone predicts it at best about 75% of the time (its first token's side of 8)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        a, b = (torch.randint(1, 16, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
                for _ in range(2))
        out.append((a, b, int(a[0] + b[0] >= 16)))
    return out


STEPS = {"gau": 150, "egt_gau": 100, "ebt_gau": 100}


@pytest.mark.parametrize("name", NAMES)
def test_tiny_model_learns_a_pair_task(name):
    """A few seconds of training lift dev accuracy well above what either sentence alone allows (about 0.75)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = build_pair(name, classes=2, hidden_size=32, gau_head_size=16, dropout=0.0,
                           **({"beam_size": 2} if name == "ebt_gau" else {}))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        train, dev = first_token_sum_pairs(2000, 0), first_token_sum_pairs(200, 1)
        g = torch.Generator().manual_seed(0)
        model.train()
        for _ in range(STEPS[name]):
            ex = [train[i] for i in torch.randint(0, len(train), (32,), generator=g).tolist()]
            batch = pair_batch([a for a, _, _ in ex], [b for _, b, _ in ex], [y for *_, y in ex])
            loss = F.cross_entropy(model(batch).logits, batch["labels"])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            batch = pair_batch([a for a, _, _ in dev], [b for _, b, _ in dev], [y for *_, y in dev])
            acc = (model(batch).logits.argmax(-1) == batch["labels"]).float().mean().item()
    finally:
        torch.set_num_threads(saved)
    assert acc > 0.85, (name, acc)
