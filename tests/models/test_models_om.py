"""Ordered Memory (``om``, Shen et al. NeurIPS 2019) and RIR-OM (``rir_om``, RIR Table 5): shapes, gradients,
padding, eval determinism, the stick-breaking semantics, RIR with one chunk = OM, a tiny ListOps learning run."""

from __future__ import annotations

import pytest
import torch

from rirlab.models import registry
from rirlab.models.rir import INNERS, RIRConfig
from tests.helpers.models import (TINY_LISTOPS, batch_of, build, check_padding_and_determinism, learns_listops,
                                  missing_gradients, random_seqs)

SMALL = {"om": dict(hidden_size=16, om_slots=5), "rir_om": dict(hidden_size=16, om_slots=5, chunk_size=4)}


def test_defaults_are_the_papers_listops_settings():
    cfg = registry.get("om").config()
    assert (cfg.hidden_size, cfg.om_slots, cfg.om_memory_dropout, cfg.dropout) == (128, 21, 0.1, 0.1)
    rir = registry.get("rir_om").config()
    assert (rir.inner, rir.chunk_size, rir.om_slots, rir.s4d) == ("om", 30, 21, True)
    with pytest.raises(ValueError, match="rir_om"):  # an inner RvNN needs its settings: OM's live in rir_om
        RIRConfig(inner="om")
    assert INNERS["om"].model == "rir_om"


@pytest.mark.parametrize("name", ["om", "rir_om"])
def test_shapes_and_gradients_reach_every_parameter(name):
    torch.manual_seed(0)
    model = build(name, **SMALL[name]).train()
    batch = batch_of(random_seqs([9, 3, 1]))
    logits = model(batch).logits
    assert logits.shape == (3, 10)
    logits.sum().backward()
    assert not missing_gradients(model)  # the S4D backward direction: a zero gradient (the authors' code)


@pytest.mark.parametrize("name", ["om", "rir_om"])
def test_padded_batch_equals_each_sequence_alone_and_eval_is_deterministic(name):
    check_padding_and_determinism(name, **SMALL[name])


def test_attention_is_a_stick_breaking_distribution_over_opened_slots():
    """OM eq. 1-3: p_t sums to 1 and only reaches slots i with cumsum(p_{t-1})^{i+1} > 0, or the last one."""
    torch.manual_seed(2)
    model = build("om", hidden_size=16, om_slots=6).eval()
    with torch.no_grad():
        model(batch_of(random_seqs([12])))
    p = model.encoder.tree.last_p[0]  # (L, n)
    assert torch.equal(p[0], torch.zeros(6))  # nothing in memory at the first step
    assert torch.allclose(p[1:].sum(-1), torch.ones(11))
    for t in range(2, 12):
        opened = torch.cat([p[t - 1].cumsum(0)[1:] >= 1e-5, torch.tensor([True])])
        assert p[t][~opened].abs().sum() == 0
    assert (p[2:] > 0).sum(-1).min() >= 1


def test_attention_weights_the_scores_by_the_open_share_as_the_authors_process_softmax(monkeypatch):
    """A case worked out from the OM code's process_softmax (x = exp(beta - max) * mask, L1-normalised): equal
    scores, p_{t-1} = (0.2, 0.3, 0.5) -> mask (cumsum^{i+1}; last 1) = (0.5, 1, 1) -> p = (0.2, 0.4, 0.4). The
    hard mask (``om_mask: hard``) gives the plain softmax over the open slots, (1/3, 1/3, 1/3)."""
    from rirlab.models.om import StickBreaking

    attn = StickBreaking(4, 0.0).eval()
    monkeypatch.setattr(attn, "scores", lambda x, m: torch.zeros(1, 3, dtype=torch.float64))
    prev = torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64)
    cp, rcp, p = attn(None, None, prev)
    assert torch.allclose(p, torch.tensor([[0.2, 0.4, 0.4]], dtype=torch.float64), atol=1e-15)
    assert torch.allclose(cp, torch.tensor([[0.2, 0.6, 1.0]], dtype=torch.float64), atol=1e-15)
    assert torch.allclose(rcp, torch.tensor([[1.0, 0.8, 0.4]], dtype=torch.float64), atol=1e-15)
    closed = attn(None, None, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64))[2]
    assert torch.equal(closed, torch.tensor([[0.0, 0.5, 0.5]], dtype=torch.float64))  # closed slots get nothing
    attn.mask = "hard"
    assert torch.allclose(attn(None, None, prev)[2], torch.full((1, 3), 1 / 3, dtype=torch.float64))
    assert registry.get("om").config().om_mask == registry.get("rir_om").config().om_mask == "soft"


def test_all_attention_on_the_last_slot_is_the_cell_as_an_rnn():
    """With p_t on the last slot at every step, eq. 4-6 leave o_t = cell(x_t, o_{t-1}), o_1 = x_1: a GRC RNN."""
    torch.manual_seed(3)
    model = build("om", hidden_size=16, om_slots=4, dropout=0.0, om_memory_dropout=0.0).eval()
    tree = model.encoder.tree
    tree.attn.scores = lambda x, m: torch.tensor([-1e9, -1e9, -1e9, 0.0]).expand(x.size(0), 4)
    x = torch.randn(2, 1, 6, 16)
    roots, _ = tree(x, torch.tensor([6, 4]))
    for row, length in ((0, 6), (1, 4)):
        h = x[row, 0, 0]
        for t in range(1, length):
            h = tree.cell(x[row, 0, t], h)
        assert torch.allclose(roots[row, 0], h, atol=1e-5)


def test_rir_om_with_chunk_at_least_length_is_om():
    torch.manual_seed(4)
    om = build("om", hidden_size=16, om_slots=5).eval()
    rir = build("rir_om", hidden_size=16, om_slots=5, chunk_size=40, s4d=False)

    def share(model):  # OM's weights; the chunk projection (the authors' input_projection) as LN(x I + 0)
        assert set(model.load_state_dict(om.state_dict(), strict=False).missing_keys) == {
            "encoder.tree.proj.w.weight", "encoder.tree.proj.w.bias", "encoder.tree.proj.ln.weight",
            "encoder.tree.proj.ln.bias"}
        with torch.no_grad():
            model.encoder.tree.proj.w.weight.copy_(torch.eye(16))
            model.encoder.tree.proj.w.bias.zero_()
        return model.eval()

    share(rir)
    batch = batch_of(random_seqs([25, 13, 1]))
    with torch.no_grad():  # the leaves are already LayerNorm outputs (unit LN weights): projecting them again ~ x
        assert torch.allclose(rir(batch).logits, om(batch).logits, atol=1e-4)
        short = share(build("rir_om", hidden_size=16, om_slots=5, chunk_size=4, s4d=False))
        assert not torch.allclose(short(batch).logits, om(batch).logits, atol=1e-3)  # chunks do change it
        rir.encoder.tree.proj.w.weight.add_(0.3 * torch.randn(16, 16))  # the projection is on the inner RvNN's path
        assert not torch.allclose(rir(batch).logits, om(batch).logits, atol=1e-3)


def test_tiny_om_learns_listops_above_majority():
    acc, majority = learns_listops("om", 150, **TINY_LISTOPS, hidden_size=32, om_slots=6, dropout=0.0, om_memory_dropout=0.0)
    assert acc > majority + 0.08, (acc, majority)
