"""BT-GRC and BT-GRC OneSoft (rirlab/models/bt_grc.py): shapes, gradients, padding, determinism, exhaustive search."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.models import (batch_of, build, check_padding_and_determinism, check_shapes_and_gradients, learns_listops,
                        random_seqs)


def exhaustive(enc, tokens_x):
    """Softmax-of-total-log-probability marginal over ALL merge orders of one sequence (x: (L, D) embeddings)."""
    tree = enc.tree
    roots, scores = [], []

    def go(nodes, score):
        if len(nodes) == 1:
            roots.append(nodes[0])
            scores.append(score)
            return
        parents = [tree.cell(nodes[i], nodes[i + 1]) for i in range(len(nodes) - 1)]
        logp = F.log_softmax(torch.stack([tree.scorer(p)[0] for p in parents]), dim=0)
        for i, p in enumerate(parents):
            go(nodes[:i] + [p] + nodes[i + 2 :], score + logp[i])

    go(list(enc.leaf(tokens_x)), torch.tensor(0.0))
    w = F.softmax(torch.stack(scores), dim=0)
    return (w[:, None] * torch.stack(roots)).sum(0), len(roots)


@pytest.mark.parametrize("name", ["bt_grc", "bt_grc_os"])
def test_shapes_and_gradients(name):
    check_shapes_and_gradients(name, hidden_size=16, beam_size=3)


@pytest.mark.parametrize("name,kw", [("bt_grc", {}), ("bt_grc_os", {}), ("bt_grc", {"bt_topk": "stochastic"})])
def test_padding_invariant_and_deterministic_in_eval(name, kw):
    check_padding_and_determinism(name, hidden_size=16, beam_size=3, **kw)


@pytest.mark.parametrize("length", [4, 5])
def test_beam_at_least_the_merge_orders_is_exhaustive_search(length):
    torch.manual_seed(3)
    orders = math.factorial(length - 1)  # (L-1)! merge orders of L leaves
    model = build("bt_grc", hidden_size=8, beam_size=orders).eval()
    seq = random_seqs([length], seed=4)[0]
    with torch.no_grad():
        x = model.embed(torch.tensor([seq]))  # (1, L, D)
        got = model.encoder(x, torch.ones(1, length, dtype=torch.bool)).vec[0]
        want, n = exhaustive(model.encoder, x[0])
        assert n == orders
        assert torch.allclose(got, want, atol=1e-5)
        # a smaller beam is not exhaustive here: the test can tell the difference
        small = build("bt_grc", hidden_size=8, beam_size=2).eval()
        small.load_state_dict(model.state_dict())
        assert not torch.allclose(small.encoder(x, torch.ones(1, length, dtype=torch.bool)).vec[0], want, atol=1e-4)


def test_onesoft_is_bt_grc_in_eval_and_soft_in_training():
    torch.manual_seed(5)
    bt = build("bt_grc", hidden_size=16, beam_size=2, dropout=0.0)
    os_ = build("bt_grc_os", hidden_size=16, beam_size=2, dropout=0.0)
    os_.load_state_dict(bt.state_dict())
    batch = batch_of(random_seqs([7, 5]))
    with torch.no_grad():
        assert torch.equal(bt.eval()(batch).logits, os_.eval()(batch).logits)  # eval: plain top-b for both
        bt.train(), os_.train()
        bt.head.drop.p = os_.head.drop.p = 0.0
        # training: the 2nd beam is a softmax-weighted mixture of every non-top candidate, so it differs
        assert not torch.allclose(bt(batch).logits, os_(batch).logits, atol=1e-4)


def test_onesoft_with_a_beam_covering_every_order_is_exhaustive_in_training():
    """With b >= (L-1)! the soft beam only ever mixes one possible candidate (the rest weigh exp(NEG) = 0)."""
    torch.manual_seed(6)
    model = build("bt_grc_os", hidden_size=8, beam_size=6, dropout=0.0).train()
    seq = random_seqs([4], seed=7)[0]
    with torch.no_grad():
        x = model.embed(torch.tensor([seq]))
        got = model.encoder(x, torch.ones(1, 4, dtype=torch.bool)).vec[0]
        want, _ = exhaustive(model.encoder.eval(), x[0])
        assert torch.allclose(got, want, atol=1e-5)


def test_stochastic_topk_draws_noise_in_training_only():
    torch.manual_seed(8)
    model = build("bt_grc", hidden_size=16, beam_size=2, dropout=0.0, bt_topk="stochastic")
    batch = batch_of(random_seqs([10]))
    model.train()
    model.head.drop.p = 0.0
    with torch.no_grad():
        outs = {tuple(model(batch).logits[0].tolist()) for _ in range(8)}
    assert len(outs) > 1  # different survivors under different Gumbel draws
    top = build("bt_grc", hidden_size=16, beam_size=2, dropout=0.0).train()
    top.load_state_dict(model.state_dict())
    top.head.drop.p = 0.0
    with torch.no_grad():  # the authors' code (default): plain top-k in training too, so no randomness left
        assert torch.equal(top(batch).logits, top(batch).logits)


@pytest.mark.parametrize("name", ["bt_grc", "bt_grc_os"])
def test_tiny_model_learns_listops_above_majority(name):
    acc, majority = learns_listops(name, steps=100, hidden_size=32, beam_size=3, dropout=0.0)
    assert acc > majority + 0.08, (acc, majority)


def test_table2_specs_validate_and_every_row_matches_its_paper_row():
    """search_spaces/rir_table2.yaml and ebt_table2.yaml: every trial resolves, every variant has a paper row."""
    from pathlib import Path

    import pandas as pd

    from rirlab.analysis.layouts import ablation_rows
    from rirlab.analysis.references import load, pair
    from rirlab.analysis.tables import our_configs
    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.spec.trials import expand

    from rirlab.models import registry

    root = Path(__file__).resolve().parents[2] / "search_spaces"
    for spec, ref in (("rir_table2.yaml", "rir:table2"), ("ebt_table2.yaml", "ebt:table2")):
        loaded = load_spec(root / spec)  # resolves every trial config (refuses unregistered models)
        variants = loaded.spec.variants
        assert len(expand(loaded.spec)) == 3 * len(variants) and len(expand(load_spec(root / spec, quick=True).spec))
        tables = load(ref)
        for v in variants:
            assert v.set["model"] in registry.names()
        rows = ablation_rows(loaded.spec, [])  # every row is paired with a published row by its configuration
        paired = pair(tables, our_configs(pd.DataFrame(), rows, tables, loaded.spec.model)).paper
        assert [r.label for i, r in enumerate(rows) if i not in paired] == [], spec


def test_next_pre_activations_are_those_of_the_merged_nodes():
    """ParentBeamSearch keeps the cell's first-layer pre-activations W1 [h_j; h_j+1] + b1 across steps: after a merge
    at j (every position, first and last included, for every beam), the shifted old ones plus the two new pairs
    equal the pre-activations of the new nodes computed afresh (float64)."""
    from rirlab.models.bt_grc import ParentBeamSearch, update_nodes
    from rirlab.models.grc import GRC

    torch.manual_seed(0)
    n, b, w, d = 2, 3, 6, 4
    tree = ParentBeamSearch(GRC(d, 2, 0.0), d, b).double()
    h = torch.randn(n, b, w, d, dtype=torch.float64)
    parents = torch.randn(n, b, w - 1, d, dtype=torch.float64)
    for j0 in range(w - 1):
        j = (torch.arange(n * b).view(n, b) + j0) % (w - 1)  # (n, b) a different pair in every beam
        new = update_nodes(h, parents, F.one_hot(j, w - 1).double())  # (n, b, W-1, D)
        nxt = tree.next_pre_activations(tree.pre_activations(h), new, j)
        torch.testing.assert_close(nxt, tree.pre_activations(new), rtol=0, atol=1e-12)
