"""The EBT-GRC beam search: the reference and the fused fast path against a literal Algorithm 1 (EBT paper,
Appendix E) and against each other in values and gradients; the fused path refuses what it does not implement."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models.beam_tree import NEG, BeamTree, initial_scores, keep_survivors
from rirlab.models.fused_beam import FusedBeamTree, fused_search
from rirlab.models.grc import GRC
from rirlab.models.scorer import Scorer

SEARCHES = [FusedBeamTree, BeamTree]  # the fast path (what ebt_grc and rir_ebt_grc run) and the reference


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



@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("b", [1, 3])
def test_ebt_equals_literal_algorithm_1_values_and_gradients(b, search):
    torch.manual_seed(0)
    d = 16
    tree = search(GRC(d, 4, 0.0), Scorer(d, 8), b).eval()
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


@pytest.mark.parametrize("search", SEARCHES)
def test_beam_1_at_eval_is_greedy_argmax_composition(search):
    torch.manual_seed(1)
    d = 8
    tree = search(GRC(d, 4, 0.0), Scorer(d, 8), 1).eval()
    x = torch.randn(1, 1, 11, d)
    roots, _ = tree(x, torch.tensor([11]))
    seq = list(x[0, 0])
    while len(seq) > 1:
        j = int(torch.stack([tree.scorer(seq[i], seq[i + 1]) for i in range(len(seq) - 1)]).argmax())
        seq[j : j + 2] = [tree.cell(seq[j], seq[j + 1])]
    assert torch.allclose(roots[0, 0], seq[0], atol=1e-5)


@pytest.mark.parametrize("select", ["stochastic", "top"])
@pytest.mark.parametrize("b,b_in,train,p", [(3, 1, True, 0.0), (7, 1, True, 0.3), (1, 1, True, 0.0), (4, 4, True, 0.3),
                                             (5, 5, False, 0.3)])
def test_fused_search_equals_op_by_op_autograd(b, b_in, train, p, select):
    """The one-node search with its hand-written backward vs the same search recorded op by op by autograd:
    training mode (same Gumbel and dropout draws, same survivors under either beam_select), input beams with
    scores (RIR levels >= 2), rows of every length."""
    torch.manual_seed(7)
    d = 16
    tree = FusedBeamTree(GRC(d, 4, p), Scorer(d, 8), b, beam_select=select).train(train)
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


def test_stochastic_survivors_are_gumbel_top_b_keeping_unperturbed_scores():
    """keep_survivors with noise: P(first survivor = i) = softmax(scores)_i (Gumbel-top-k, temperature 1), the kept
    scores are the candidates' own, impossible candidates never beat possible ones; without noise: plain top-b."""
    n = 20000
    logp = torch.tensor([0.1, 0.2, 0.3, 0.4, 1e-30]).log()
    cand = torch.cat([logp[:4], torch.tensor([NEG])]).expand(n, 5)  # (n, 5), the last candidate impossible
    g = torch.Generator().manual_seed(0)
    gumbel = -torch.log(-torch.log(torch.rand(n, 5, generator=g)))
    scores, sel = keep_survivors(cand, 3, gumbel)
    assert torch.equal(scores, cand.gather(1, sel))  # unperturbed
    assert (sel != 4).all()
    freq = torch.bincount(sel[:, 0], minlength=5).float() / n
    assert torch.allclose(freq[:4], torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.01)
    assert (sel[:, 1:] != sel[:, :1]).all()  # without replacement
    top_scores, top_sel = keep_survivors(cand, 3, None)
    assert (top_sel == torch.tensor([3, 2, 1])).all() and torch.equal(top_scores, cand[:, [3, 2, 1]])


@pytest.mark.parametrize("search", SEARCHES)
def test_beam_select_changes_training_survivors_only(search):
    """Training under ``stochastic`` keeps unperturbed scores (<= 0, log-probability sums) in perturbed order, so
    some rows come out unsorted; ``top`` always sorted; eval is bit-identical under both (always plain top-b)."""
    torch.manual_seed(3)
    d = 16
    trees = {sel: search(GRC(d, 4, 0.1), Scorer(d, 8), 4, beam_select=sel) for sel in ("stochastic", "top")}
    trees["top"].load_state_dict(trees["stochastic"].state_dict())
    lengths = torch.tensor([12, 9, 12, 7, 11, 12, 10, 8] * 4)
    x = torch.randn(len(lengths), 1, 12, d)
    with torch.no_grad():
        evals = [trees[sel].eval()(x, lengths) for sel in ("stochastic", "top")]
        assert torch.equal(evals[0][0], evals[1][0]) and torch.equal(evals[0][1], evals[1][1])
        unsorted = {}
        for sel, tree in trees.items():
            torch.manual_seed(1)
            _, scores = tree.train()(x, lengths)
            assert (scores <= 1e-5).all() and (scores > NEG / 2).all()  # four live beams, log-probability sums
            unsorted[sel] = int((scores[:, 1:] > scores[:, :-1]).any(1).sum())
    assert unsorted["top"] == 0 and unsorted["stochastic"] > 0


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("train", [False, True])
def test_a_one_item_row_of_a_fresh_search_gives_b_equal_live_beams(search, train):
    """One item, one input beam: every beam is that item with the input beam's score (RIR's one-token last chunk
    must not kill beams at the next level); with b input beams a one-item row keeps its own beams and scores."""
    torch.manual_seed(4)
    d, b = 8, 3
    tree = search(GRC(d, 4, 0.0), Scorer(d, 8), b).train(train)
    x = torch.randn(3, 1, 5, d, requires_grad=True)
    roots, scores = tree(x, torch.tensor([1, 5, 1]))
    for i in (0, 2):
        assert torch.equal(scores[i], torch.zeros(b)) and torch.equal(roots[i], x[i, 0, 0].expand(b, d))
    in_scores = torch.tensor([[-1.0, -2.0, -3.0], [0.0, -4.0, NEG], [-0.5, -0.5, -0.5]], requires_grad=True)
    xb = torch.randn(3, b, 5, d)
    roots, scores = tree(xb, torch.tensor([1, 5, 1]), in_scores)
    assert torch.equal(scores[[0, 2]], in_scores[[0, 2]]) and torch.equal(roots[0], xb[0, :, 0])
    _, scores = tree(x, torch.tensor([1, 5, 1]), in_scores)  # one input beam with given scores: its score, b times
    assert torch.equal(scores[0], torch.full((b,), -1.0))
    (g,) = torch.autograd.grad(scores[0].sum(), in_scores)
    assert torch.equal(g[0], torch.tensor([3.0, 0.0, 0.0]))


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


class OtherCell(GRC):
    """A GRC subclass: it could change compose, so the fused path must not assume eq. 10-11."""


class TanhCell(nn.Module):
    """Not a GRC at all: what the reference search asks of a cell is compose(pair, keep), p and d_cell."""

    def __init__(self, d: int):
        super().__init__()
        self.lin = nn.Linear(2 * d, d)
        self.p, self.d_cell = 0.0, d

    def compose(self, pair, keep=None):
        return torch.tanh(self.lin(pair))


class OtherScorer(Scorer):
    pass


@pytest.mark.parametrize("cell,scorer,name", [(OtherCell(8, 4, 0.0), Scorer(8, 8), "OtherCell"),
                                              (TanhCell(8), Scorer(8, 8), "TanhCell"),
                                              (GRC(8, 4, 0.0), OtherScorer(8, 8), "OtherScorer")])
def test_fused_path_refuses_a_cell_or_scorer_it_does_not_implement(cell, scorer, name):
    with pytest.raises(TypeError, match=f"implements only .* not {name}; run it on the reference") as err:
        FusedBeamTree(cell, scorer, 2)
    assert len(str(err.value).splitlines()) == 1
    tree = BeamTree(cell, scorer, 2).train()  # the reference runs it
    x, lengths = torch.randn(3, 1, 6, 8), torch.tensor([6, 2, 5])
    with pytest.raises(TypeError, match=name):
        fused_search(tree, x, lengths, initial_scores(3, 2, x))
    roots, scores = tree(x, lengths)
    assert roots.shape == (3, 2, 8) and torch.isfinite(roots).all()


@pytest.mark.parametrize("big_b", [1, 3])
def test_merge_index_table_equals_the_indices_computed_for_wide_steps(big_b, monkeypatch):
    """A merge step up to TABLE_MAX wide reads its gather indices from a table, a wider one (a non-RIR pass over a
    long sequence) computes them from the merged pair and parent beam: the two agree at every width, pair and beam."""
    import rirlab.models.fused_beam as fb

    b, n = 3, 40
    torch.manual_seed(0)
    for w in (2, 3, 6, 11, 67, 130):  # 67, 130: above TABLE_MAX, where a run computes them (the table built here)
        jj = torch.randint(0, w - 1, (n, b))
        jj[:2] = torch.tensor([0, w - 2])[:, None]  # both ends, where the neighbours clamp and the spare column fills
        parent = torch.randint(0, big_b, (n, b)) if big_b > 1 else torch.randint(0, b, (n, b))  # B=1: ignored
        monkeypatch.setattr(fb, "TABLE_MAX", 1 << 10)
        table = fb.merge_index(w, big_b, b, jj, parent)
        monkeypatch.setattr(fb, "TABLE_MAX", 1)
        computed = fb.merge_index(w, big_b, b, jj, parent)
        monkeypatch.undo()
        if w == 2:  # the spare column takes both new pair scores there; the table keeps the right one, as the scatter
            table, computed = table[..., :-1], computed[..., :-1]
        assert torch.equal(table, computed)


def test_log_softmax_backward_in_runs_of_steps_equals_one_run(monkeypatch):
    """The fused backward runs every step's log-softmax backward at once, in runs of at most BLOCK log-probabilities
    (a long non-RIR search would otherwise hold several buffers of all its steps' log-probabilities): runs of a few
    steps each, and steps wider than a run alone, give the gradients of one run over all steps."""
    import rirlab.models.fused_beam as fb

    def grads():
        torch.manual_seed(0)
        tree = FusedBeamTree(GRC(8, 2, 0.1), Scorer(8, 4), 3).train()
        x = torch.randn(3, 1, 9, 8, requires_grad=True)
        roots, scores = tree(x, torch.tensor([9, 6, 4]))
        (roots.square().sum() + scores.clamp(min=-1e3).sum()).backward()
        return [x.grad] + [p.grad for p in tree.parameters()]

    one = grads()
    assert fb.step_blocks([5, 5, 5]) == [(0, 3)]
    monkeypatch.setattr(fb, "BLOCK", 20)  # this search's steps hold 24, 63, 54, 30, 24, 9, 6, 3 log-probabilities:
    # five runs of one step wider than a run, then one run of the last three
    assert fb.step_blocks([24, 63, 9, 6, 3]) == [(0, 1), (1, 2), (2, 5)]
    runs = grads()
    for a, b in zip(one, runs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
