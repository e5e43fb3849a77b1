"""CRvNN (``crvnn``, Ray Chowdhury & Caragea ICML 2021) and RIR-CRvNN (``rir_crvnn``, RIR Table 5): shapes,
gradients, padding, eval determinism, composition probabilities as defined, the halting modes, RIR with one chunk =
CRvNN, a tiny ListOps learning run."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rirlab.models import registry
from rirlab.models.crvnn import neighbours
from tests.helpers.models import (TINY_LISTOPS, batch_of, build, check_padding_and_determinism, learns_listops,
                                  missing_gradients, random_seqs)

SMALL = {"crvnn": dict(hidden_size=16), "rir_crvnn": dict(hidden_size=16, chunk_size=4)}


def test_defaults_are_the_papers_listops_settings():
    cfg = registry.get("crvnn").config()
    assert (cfg.hidden_size, cfg.crvnn_halt, cfg.crvnn_stop_threshold, cfg.crvnn_window) == (128, "dynamic", 0.1, 5)
    rir = registry.get("rir_crvnn").config()
    assert (rir.inner, rir.chunk_size, rir.s4d) == ("crvnn", 30, True)
    assert cfg.crvnn_max_steps == rir.crvnn_max_steps == "padded"  # the authors' step limit


@pytest.mark.parametrize("name", ["crvnn", "rir_crvnn"])
def test_shapes_and_gradients_reach_every_parameter(name):
    torch.manual_seed(0)
    model = build(name, **SMALL[name]).train()
    logits = model(batch_of(random_seqs([9, 3, 1]))).logits
    assert logits.shape == (3, 10)
    logits.sum().backward()
    assert not missing_gradients(model)  # the S4D backward direction: a zero gradient (the authors' code)


@pytest.mark.parametrize("name", ["crvnn", "rir_crvnn"])
@pytest.mark.parametrize("halt", ["dynamic", "off"])
def test_padded_batch_equals_each_sequence_alone_and_eval_is_deterministic(name, halt):
    """Under the ``length`` step limit (not the authors' default, which lets a padded row run one more step), and for
    RIR-CRvNN chunk_by sequence (under batch, the authors' code, a sequence's chunks follow its batch)."""
    check_padding_and_determinism(name, crvnn_halt=halt, crvnn_max_steps="length", **SMALL[name],
                                  **({"chunk_by": "sequence"} if name == "rir_crvnn" else {}))


def test_the_authors_step_limit_is_l_plus_1_up_to_the_padded_width():
    """The authors' halting test `L - 2.0 < t` (L + 2 items with START and END) over a loop of the padded width W:
    a row of L items runs min(L + 1, W) iterations; under ``length`` it runs L. Worked by hand for W = 6, no
    threshold halting: L = 6, 3, 5 -> 6, 4, 6 (authors) and 6, 3, 5 (``length``)."""
    torch.manual_seed(5)
    model = build("crvnn", hidden_size=16, crvnn_halt="off").double().eval()
    tree = model.encoder.tree
    x, lengths = torch.randn(3, 1, 6, 16, dtype=torch.float64), torch.tensor([6, 3, 5])
    with torch.no_grad():
        padded, _ = tree(x, lengths)
        assert tree.last_steps.tolist() == [6, 4, 6]
        # the row of 3 depends on the width only through min(L + 1, W): padded to width 4 alone, it runs 4 steps
        alone4, _ = tree(x[1:2, :, :4], lengths[1:2])
        assert tree.last_steps.tolist() == [4]
        alone3, _ = tree(x[1:2, :, :3], lengths[1:2])  # alone at its own width: L steps
        assert tree.last_steps.tolist() == [3]
        tree.max_steps = "length"
        own, _ = tree(x, lengths)
        assert tree.last_steps.tolist() == [6, 3, 5]
    assert torch.allclose(padded[1], alone4[0], atol=1e-12)
    assert torch.allclose(own[1], alone3[0], atol=1e-12)
    assert (padded[1] - own[1]).abs().max() > 1e-3  # the extra step changes the root
    assert torch.allclose(padded[0], own[0], atol=1e-12)  # the widest row is the same under both


def test_neighbours_of_crisp_existence_are_the_nearest_existing_items():
    e = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]])
    valid = torch.tensor([[True] * 6 + [False]])
    left, right = neighbours(e, valid)
    assert right[0, 0].tolist() == [0, 0, 1, 0, 0, 0, 0] and right[0, 2].tolist() == [0, 0, 0, 0, 0, 1, 0]
    assert left[0, 5].tolist() == [0, 0, 1, 0, 0, 0, 0] and left[0, 2].tolist() == [1, 0, 0, 0, 0, 0, 0]
    soft = torch.tensor([[1.0, 0.5, 0.75, 1.0]])  # right of 0: 0.5, then min(0.75, 1 - 0.5), then the rest (0)
    _, r = neighbours(soft, torch.ones(1, 4, dtype=torch.bool))
    assert torch.allclose(r[0, 0], torch.tensor([0.0, 0.5, 0.5, 0.0]))


def test_composition_probabilities_sum_as_defined():
    """CRvNN §3.3: [compose, no-op, left compose, right compose] normalise to 1; c = 0 at START, END, last token."""
    torch.manual_seed(2)
    model = build("crvnn", hidden_size=16, crvnn_halt="off").eval()
    tree = model.encoder.tree
    with torch.no_grad():
        model(batch_of(random_seqs([8, 5])))
    probs = tree.last_probs  # (2, 10, 4)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 10), atol=1e-6)
    c = probs[..., 0]
    assert c[:, 0].abs().max() == 0  # START
    assert c[0, 8] == 0 and c[0, 9] == 0 and c[1, 5] == 0 and c[1, 6:].abs().max() == 0  # last token, END, pads
    assert (c[0, 1:8] > 0).all()
    assert tree.last_steps.tolist() == [8, 6]  # no halting: min(L + 1, width 8) iterations each (authors' code)


def test_the_normaliser_adds_the_authors_epsilon_to_every_term():
    """The authors' sum_normalize: x / sum(x + 1e-8) over [compose, no-op, left, right]. With every compose score
    far below 0 the compose terms vanish and the no-op term is exp(0) = 1, so p(no-op) = 1 / (1 + 4e-8), not 1."""
    torch.manual_seed(3)
    model = build("crvnn", hidden_size=16, crvnn_halt="off").double().eval()
    tree = model.encoder.tree
    with torch.no_grad():
        tree.score.bias.fill_(-200.0)
        model(batch_of(random_seqs([6])))
    noop = tree.last_probs[0, 1:6, 1]  # the tokens' no-op probabilities
    assert torch.allclose(noop, torch.full_like(noop, 1 / (1 + 4e-8)), rtol=0, atol=1e-15), noop


def test_no_composition_leaves_the_last_leaf_as_root_and_halting_modes():
    torch.manual_seed(3)
    model = build("crvnn", hidden_size=16, dropout=0.0).eval()
    tree = model.encoder.tree
    x = torch.randn(1, 1, 6, 16)
    with torch.no_grad():
        tree.score.bias.fill_(-1e4)  # c ~ 0 everywhere: nothing is absorbed
        roots, _ = tree(x, torch.tensor([6]))
        assert torch.allclose(roots[0, 0], x[0, 0, 5], atol=1e-5)
        tree.score.bias.fill_(30.0)  # composition wins: existence drops, dynamic halting stops early
        dyn, _ = tree(x, torch.tensor([6]))
        dyn_steps = int(tree.last_steps)
        tree.halt = "full_loop"  # the authors' no-halt file: same halting per sequence, the loop runs on
        full, _ = tree(x, torch.tensor([6]))
        tree.halt = "off"
        tree(x, torch.tensor([6]))
    assert dyn_steps < 6 and int(tree.last_steps) == 6
    assert torch.equal(dyn, full)


def test_start_and_end_go_through_the_leaf_transform_values_and_gradients():
    """The authors' CRvNN.py adds START and END, then runs its initial transform LN(W x + b) over every item: written
    here with plain ops around the tree, START and END given as LN(W START + b), LN(W END + b). Output and every
    gradient (training mode, dropout 0, a padded batch) equal; W, b and the LayerNorm get START's and END's terms."""
    torch.manual_seed(6)
    enc = build("crvnn", hidden_size=8, dropout=0.0).double().train().encoder
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    mask = torch.arange(5)[None] < torch.tensor([5, 3, 2])[:, None]
    w = torch.randn(3, 8, dtype=torch.float64)
    params = dict(enc.named_parameters())

    def grads(loss):
        return dict(zip(params, torch.autograd.grad(loss, list(params.values()), allow_unused=True)))

    mine = enc(x, mask).vec
    got = grads((mine * w).sum())
    lw, ln = enc.leaf.w, enc.leaf.ln
    init = lambda v: F.layer_norm(F.linear(v, lw.weight, lw.bias), (8,), ln.weight, ln.bias)  # noqa: E731
    tree = dict(enc.tree.named_parameters()) | {"start": init(enc.tree.start), "end": init(enc.tree.end)}
    ref = torch.func.functional_call(enc.tree, tree, (init(x).unsqueeze(1), mask.sum(1)))[0][:, 0]
    want = grads((ref * w).sum())
    assert (mine - ref).abs().max() < 1e-12
    for name in params:
        assert (got[name] - want[name]).abs().max() < 1e-12, name
    raw = torch.func.functional_call(enc.tree, dict(enc.tree.named_parameters()), (init(x).unsqueeze(1), mask.sum(1)))
    without = grads((raw[0][:, 0] * w).sum())  # START, END as they are (RIR-CRvNN): the leaf misses their terms
    assert (got["leaf.w.weight"] - without["leaf.w.weight"]).abs().max() > 1e-3


def test_rir_crvnn_with_chunk_at_least_length_is_crvnn_with_raw_start_and_end():
    """RIR-CRvNN with one chunk is CRvNN's tree with START and END as they are (the authors' CRvNNX.py in HCRvNN.py,
    whose initial transform runs before chunking); standalone CRvNN runs them through its leaf transform."""
    torch.manual_seed(4)
    crvnn = build("crvnn", hidden_size=16).eval()
    rir = build("rir_crvnn", hidden_size=16, chunk_size=40, s4d=False)
    rir.load_state_dict(crvnn.state_dict())
    batch = batch_of(random_seqs([25, 13, 1]))
    enc = crvnn.encoder
    with torch.no_grad():
        roots, _ = enc.tree(enc.leaf(crvnn.embed(batch["tokens"])).unsqueeze(1), batch["mask"].sum(1))
        assert torch.allclose(rir.eval().encoder(rir.embed(batch["tokens"]), batch["mask"]).vec, roots[:, 0],
                              atol=1e-5)
        assert not torch.allclose(rir(batch).logits, crvnn(batch).logits, atol=1e-3)


def test_tiny_crvnn_learns_listops_above_majority():
    acc, majority = learns_listops("crvnn", 150, **TINY_LISTOPS, hidden_size=32, dropout=0.0)
    assert acc > majority + 0.08, (acc, majority)
