"""Semantics of the beam-tree family: EBT-GRC against a literal Algorithm 1, RIR reductions, alignment, padding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rirlab.models import registry
from rirlab.models.beam_tree import BeamTree
from rirlab.models.grc import GRC
from rirlab.models.rir import align, n_chunks
from rirlab.models.scorer import Scorer
from rirlab.tasks.base import TaskInfo

INFO = TaskInfo(16, 10, "classify")


def build(name, **kw):
    entry = registry.get(name)
    return entry.build(entry.config(**kw), INFO)


def batch_of(seqs):
    s = max(len(x) for x in seqs)
    tokens = torch.zeros(len(seqs), s, dtype=torch.long)
    for i, x in enumerate(seqs):
        tokens[i, : len(x)] = torch.tensor(x)
    return {"tokens": tokens, "mask": tokens != 0, "labels": torch.zeros(len(seqs), dtype=torch.long)}


def random_seqs(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 16, (L,), generator=g).tolist() for L in lengths]


def reference_ebt(cell, scorer, x, b):
    """Algorithm 1 of the EBT paper, literally: lists of beams, deep copies, per-beam top-k, then top-b."""
    beams, beam_scores = [list(x)], [torch.zeros(())]
    while len(beams[0]) > 1:
        new_beams, new_scores = [], []
        for beam, bs in zip(beams, beam_scores):
            logp = F.log_softmax(torch.stack([scorer(beam[i], beam[i + 1]) for i in range(len(beam) - 1)]), 0)
            top = logp.topk(min(b, len(logp))).indices
            for i in top.tolist():
                nb = list(beam)
                nb[i] = cell(beam[i], beam[i + 1])
                del nb[i + 1]
                new_beams.append(nb)
                new_scores.append(bs + logp[i])
        keep = torch.stack(new_scores).topk(min(b, len(new_scores))).indices.tolist()
        beams, beam_scores = [new_beams[i] for i in keep], [new_scores[i] for i in keep]
    w = F.softmax(torch.stack(beam_scores), 0)
    return sum(wi * bm[0] for wi, bm in zip(w, beams))


@pytest.mark.parametrize("b", [1, 3])
def test_ebt_equals_literal_algorithm_1_values_and_gradients(b):
    torch.manual_seed(0)
    d = 16
    tree = BeamTree(GRC(d, 4, 0.0), Scorer(d, 8), b).eval()
    lengths = [7, 4, 1, 9, 2]
    x = torch.randn(len(lengths), 9, d)
    mask = torch.arange(9)[None] < torch.tensor(lengths)[:, None]
    roots, scores = tree(x.unsqueeze(1), mask.sum(1))
    ours = (F.softmax(scores, -1)[..., None] * roots).sum(1)  # (N, D)
    ref = torch.stack([reference_ebt(tree.cell, tree.scorer, x[i, :L], b) for i, L in enumerate(lengths)])
    assert torch.allclose(ours, ref, atol=1e-5)
    w = torch.randn_like(ours)
    g_ours = torch.autograd.grad((ours * w).sum(), list(tree.parameters()))
    g_ref = torch.autograd.grad((ref * w).sum(), list(tree.parameters()), allow_unused=True)
    for go, gr in zip(g_ours, g_ref):
        assert torch.allclose(go, torch.zeros_like(go) if gr is None else gr, atol=1e-5)


def test_beam_1_at_eval_is_greedy_argmax_composition():
    torch.manual_seed(1)
    d = 8
    tree = BeamTree(GRC(d, 4, 0.0), Scorer(d, 8), 1).eval()
    x = torch.randn(1, 1, 11, d)
    roots, _ = tree(x, torch.tensor([11]))
    seq = list(x[0, 0])
    while len(seq) > 1:
        j = int(torch.stack([tree.scorer(seq[i], seq[i + 1]) for i in range(len(seq) - 1)]).argmax())
        seq[j : j + 2] = [tree.cell(seq[j], seq[j + 1])]
    assert torch.allclose(roots[0, 0], seq[0], atol=1e-5)


def same_weights(src, dst):
    dst.load_state_dict(src.state_dict())
    return dst


def test_rir_with_chunk_at_least_length_is_ebt_grc():
    torch.manual_seed(2)
    ebt = build("ebt_grc", hidden_size=32, beam_size=4, dropout=0.0).eval()
    rir = same_weights(ebt, build("rir_ebt_grc", hidden_size=32, beam_size=4, dropout=0.0, chunk_size=40, s4d=False,
                                  inference="rir")).eval()
    batch = batch_of(random_seqs([25, 13, 40, 1]))
    with torch.no_grad():
        assert torch.allclose(rir(batch).logits, ebt(batch).logits, atol=1e-5)
    ebt.train(), rir.train()  # training mode too: same Gumbel draws in the same order
    torch.manual_seed(5)
    a = ebt(batch).logits
    torch.manual_seed(5)
    assert torch.allclose(rir(batch).logits, a, atol=1e-5)


def test_non_rir_inference_is_ebt_grc_on_the_same_weights():
    torch.manual_seed(3)
    ebt = build("ebt_grc", hidden_size=32, beam_size=7, s4d=True).eval()
    rir = same_weights(ebt, build("rir_ebt_grc", hidden_size=32, chunk_size=5, inference="non_rir")).eval()
    batch = batch_of(random_seqs([60, 33, 7]))
    with torch.no_grad():
        assert torch.allclose(rir(batch).logits, ebt(batch).logits, atol=1e-5)
        rir.encoder.inference = "rir"
        assert not torch.allclose(rir(batch).logits, ebt(batch).logits, atol=1e-3)  # RIR inference differs


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_chunk_2_is_the_balanced_binary_tree(mode):
    torch.manual_seed(4)
    bbt = build("bbt_grc", hidden_size=16, dropout=0.0)
    rir = build("rir_ebt_grc", hidden_size=16, dropout=0.0, chunk_size=2, s4d=False, inference="rir")
    missing = rir.load_state_dict(bbt.state_dict(), strict=False)
    assert set(missing.unexpected_keys) == set() and all("scorer" in k for k in missing.missing_keys)
    bbt.train(mode == "train"), rir.train(mode == "train")
    batch = batch_of(random_seqs([13, 8, 5, 1, 2]))
    assert torch.allclose(rir(batch).logits, bbt(batch).logits, atol=1e-5)


def test_chunking_rule():
    assert [n_chunks(L, 30) for L in (1, 30, 44, 45, 61, 100, 1000)] == [1, 1, 1, 2, 3, 4, 34]
    assert all(n_chunks(L, 2) == (L + 1) // 2 for L in range(1, 50))  # k = 2: ceil, as the binary tree


@pytest.mark.parametrize("name,kw", [("ebt_grc", {}), ("rir_ebt_grc", {"inference": "rir"}), ("rir_ebt_grc", {}),
                                     ("gt_grc", {}), ("s4d", {"n_layers": 2}), ("rir_grc", {})])
def test_eval_deterministic_and_padding_invariant(name, kw):
    torch.manual_seed(5)
    model = build(name, hidden_size=32, **({"chunk_size": 6} if "rir" in name else {}), **kw).eval()
    seqs = random_seqs([40, 9, 23, 1])
    with torch.no_grad():
        full = model(batch_of(seqs)).logits
        assert torch.equal(full, model(batch_of(seqs)).logits)
        for i, s in enumerate(seqs):
            assert torch.allclose(model(batch_of([s])).logits[0], full[i], atol=1e-5), (name, i)


@pytest.mark.parametrize("name", ["ebt_grc", "rir_ebt_grc", "gt_grc"])
def test_scorer_gets_gradients(name):
    torch.manual_seed(6)
    model = build(name, hidden_size=32, **({"chunk_size": 5} if "rir" in name else {})).train()
    batch = batch_of(random_seqs([30, 17]))
    F.cross_entropy(model(batch).logits, batch["labels"]).backward()
    scorer = model.encoder.tree.scorer
    # the output bias shifts every pair score alike and log-softmax ignores that: its gradient is 0 by design
    for p in (scorer.w1.weight, scorer.w1.bias, scorer.w2.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_alignment_position_0_is_the_top_beams_and_samples_follow_the_scores():
    scores = torch.tensor([[-0.1, -1.0, -2.0, -4.0]]).log_softmax(-1).repeat(20000, 1)
    perm = torch.tensor([2, 0, 3, 1])
    scores = scores[:, perm]  # top beam not at index 0
    g = torch.Generator().manual_seed(0)
    idx = align(scores, "beam", training=True, generator=g)
    assert (idx[:, 0] == 0 + 1).all()  # argmax sits at index 1 after the permutation
    freq = torch.bincount(idx[:, 1:].reshape(-1), minlength=4).float() / idx[:, 1:].numel()
    assert torch.allclose(freq, scores[0].softmax(-1), atol=0.01)
    assert torch.equal(align(scores[:3], "string_it", training=True), torch.arange(4).expand(3, 4))
    assert torch.equal(align(scores[:3], "beam", training=False), torch.arange(4).expand(3, 4))  # eval: deterministic


def test_random_alignment_ignores_scores():
    scores = torch.tensor([[0.0, -30.0, -60.0, -1e9]]).repeat(20000, 1)  # last beam impossible
    idx = align(scores, "random", training=True, generator=torch.Generator().manual_seed(0))
    assert (idx[:, 0] == 0).all()
    freq = torch.bincount(idx[:, 1:].reshape(-1), minlength=4).float() / idx[:, 1:].numel()
    assert torch.allclose(freq, torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0]), atol=0.01)


@pytest.mark.parametrize("b,b_in,train,p", [(3, 1, True, 0.0), (7, 1, True, 0.3), (1, 1, True, 0.0), (4, 4, True, 0.3),
                                             (5, 5, False, 0.3)])
def test_fused_search_equals_op_by_op_autograd(b, b_in, train, p):
    """The one-node search with its hand-written backward vs the same search recorded op by op by autograd:
    training mode (same Gumbel and dropout draws), input beams with scores (RIR levels >= 2), rows of every length."""
    torch.manual_seed(7)
    d = 16
    tree = BeamTree(GRC(d, 4, p), Scorer(d, 8), b).train(train)
    lengths = torch.tensor([7, 4, 1, 9, 2, 9])
    x = torch.randn(len(lengths), b_in, 9, d, requires_grad=True)
    in_scores = torch.randn(len(lengths), b, requires_grad=True) if b_in > 1 else None
    inputs = [x] + ([in_scores] if b_in > 1 else []) + list(tree.parameters())
    results = []
    for fused in (True, False):
        tree.fused = fused
        torch.manual_seed(1)
        roots, scores = tree(x, lengths, in_scores)
        g = torch.Generator().manual_seed(2)
        w_roots, w_scores = torch.randn(roots.shape, generator=g), torch.randn(scores.shape, generator=g)
        loss = (roots * w_roots).sum() + (scores.clamp(min=-1e3) * w_scores).sum()
        loss = loss + (F.softmax(scores, -1)[..., None] * roots).sum()
        results.append((roots, scores, torch.autograd.grad(loss, inputs)))
    (r1, s1, g1), (r2, s2, g2) = results
    assert torch.allclose(r1, r2, atol=1e-5) and torch.allclose(s1, s2, atol=1e-4)
    for a, c in zip(g1, g2):
        assert torch.allclose(a, c, atol=1e-4, rtol=1e-4)
    assert g1[0].abs().sum() > 0 and g1[-4].abs().sum() > 0  # leaves and the scorer's first layer get gradients


def test_dropout_mask_drops_p_and_keeps_the_expectation():
    from rirlab.models.grc import dropout_keep_mask, dropout_scale

    torch.manual_seed(0)
    mask = dropout_keep_mask((400, 1000), 0.1, "cpu") * dropout_scale(0.1)
    dropped = (mask == 0).float().mean().item()
    assert abs(dropped - 0.1) < 0.003 and abs(mask.mean().item() - 1.0) < 0.005
    assert torch.allclose(mask.unique(), torch.tensor([0.0, 65536 / (65536 - 6554)]))
    torch.manual_seed(0)
    assert torch.equal(dropout_keep_mask((400, 1000), 0.1, "cpu") * dropout_scale(0.1), mask)  # seeded by torch
    rows = (mask == 0).float().mean(1)  # no structure across the 16-bit lanes of a 64-bit draw
    assert rows.std() < 0.03 and all(abs((mask[:, i::4] == 0).float().mean().item() - 0.1) < 0.005 for i in range(4))
