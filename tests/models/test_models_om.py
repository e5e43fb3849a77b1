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
    # the S4D backward direction: a zero gradient (the authors' code); the score bias: the stick-breaking softmax is
    # shift-invariant, so its gradient is zero up to rounding (in the authors' code too)
    assert not missing_gradients(model, skip=("encoder.tree.attn.w.bias",))


@pytest.mark.parametrize("name", ["om", "rir_om"])
def test_padded_batch_equals_each_sequence_alone_and_eval_is_deterministic(name):
    """RIR-OM under chunk_by sequence: under batch (the authors' code) a sequence's chunks follow its batch."""
    check_padding_and_determinism(name, **SMALL[name], **({"chunk_by": "sequence"} if name == "rir_om" else {}))


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


def om_and_input(seed, train, p=0.0, slots=5, lengths=(9, 4, 1, 7)):
    from rirlab.models.om import OMConfig, OrderedMemory

    torch.manual_seed(seed)
    om = OrderedMemory(OMConfig(hidden_size=16, om_slots=slots, dropout=p, om_memory_dropout=p)).double().train(train)
    x = torch.randn(len(lengths), 1, max(lengths), 16, dtype=torch.float64, requires_grad=True)
    return om, x, torch.tensor(lengths)


@pytest.mark.parametrize("train", [False, True])
def test_fused_slot_composition_equals_the_op_by_op_reference_with_its_gradients(train):
    """compose_slots (one autograd node, hand-written backward) against compose_slots_reference (autograd op by op):
    the same roots, input gradients and parameter gradients (float64)."""
    om, x, lengths = om_and_input(5, train)
    weights = torch.randn(4, 1, 16, dtype=torch.float64)
    got = []
    for fused in (True, False):
        om.fused, x.grad = fused, None
        om.zero_grad()
        roots, _ = om(x, lengths)
        (roots * weights).sum().backward()
        got.append((roots.detach(), x.grad.clone(), {k: v.grad.clone() for k, v in om.named_parameters()}))
    (r1, gx1, gp1), (r2, gx2, gp2) = got
    assert torch.allclose(r1, r2, atol=1e-13, rtol=0)
    assert torch.allclose(gx1, gx2, atol=1e-13, rtol=0) and gx1.abs().max() > 1e-3
    for k in gp1:
        assert torch.allclose(gp1[k], gp2[k], atol=1e-12, rtol=0), k
    assert gp1["cell.w1.weight"].abs().max() > 1e-3  # the cell's weights do get a gradient


def test_fused_slot_backward_matches_finite_differences_with_dropout_masks():
    """_ComposeSlots.backward (with input and hidden dropout masks) against torch.autograd.gradcheck."""
    from rirlab.models.om import _ComposeSlots
    from rirlab.models.grc import GRC

    torch.manual_seed(6)
    cell = GRC(4, 2, 0.3).double()
    m, n, d = 3, 3, 4
    x, mem = torch.randn(m, d, dtype=torch.float64), torch.randn(m, n, d, dtype=torch.float64)
    cp = torch.rand(m, n, dtype=torch.float64).cumsum(1) / 3
    keeps = [(torch.rand(*shape) > 0.3).double() / 0.7 for shape in ((m, n, d), (m, n, d), (m, n, 8))]
    params = [t.detach().clone() for t in (cell.w1.weight, cell.w1.bias, cell.w2.weight, cell.w2.bias, cell.ln.weight,
                                            cell.ln.bias)]
    args = [t.requires_grad_() for t in (x, mem, cp)] + keeps + [t.requires_grad_() for t in params] + [1e-5]
    assert torch.autograd.gradcheck(lambda *a: _ComposeSlots.apply(*a), args, atol=1e-7)


class Zero(torch.nn.Module):
    def forward(self, t):
        return torch.zeros_like(t)


def test_the_cell_gates_the_children_themselves_and_reads_them_through_dropout():
    """The authors' OM Cell: Dropout sits in front of the cell's first layer only; the gated sum
    sigma(l) h + sigma(r) M^i + sigma(g) c takes the children undropped. With the input dropout zeroing everything,
    the cell is LN(sigma(l) h + sigma(r) M + sigma(g) c) with the gates read off W2 GELU(b1) + b2."""
    om, _, _ = om_and_input(7, False)
    cell = om.cell
    om.cell_drop = Zero()
    h, mem, cp = (torch.randn(2, 16, dtype=torch.float64), torch.randn(2, 1, 16, dtype=torch.float64),
                  torch.ones(2, 1, dtype=torch.float64))
    with torch.no_grad():
        got = om.compose_slots_reference(h, mem, cp)[:, 0]
        out = cell.w2(torch.nn.functional.gelu(cell.w1.bias)).expand(2, -1)
        s = torch.sigmoid(out[:, :48])
        want = cell.ln(s[:, :16] * h + s[:, 16:32] * mem[:, 0] + s[:, 32:] * out[:, 48:])
    assert torch.allclose(got, want, atol=1e-14)


def test_slots_closed_in_every_live_row_are_not_composed(monkeypatch):
    """Eq. 6 gives \\hat M^i = x where \\vec\\pi^i = 0, so those slots are skipped (the authors skip the slots closed for
    the whole batch; padded rows do not count): the first step composes nothing, and all attention on the last
    slot composes one slot per step, with the same result as composing all of them."""
    from rirlab.models import om as om_module

    om, x, lengths = om_and_input(8, False, slots=4, lengths=(6, 3))
    om.attn.scores = lambda q, m: torch.tensor([-1e9, -1e9, -1e9, 0.0], dtype=torch.float64).expand(q.size(0), 4)
    widths, real = [], om_module.compose_slots
    monkeypatch.setattr(om_module, "compose_slots", lambda cell, x, mem, *a: widths.append(mem.size(1)) or
                        real(cell, x, mem, *a))
    with torch.no_grad():
        roots, _ = om(x, lengths)
        monkeypatch.setattr(om_module, "first_open", lambda cp: 0)  # compose every slot
        every, _ = om(x, lengths)
    assert widths[:5] == [1] * 5 and widths[5:] == [4] * 5  # steps 2..6 (step 1: nothing open)
    assert torch.allclose(roots, every, atol=1e-15, rtol=0)


@pytest.mark.parametrize("name, projection, theirs", [("om", "leaf", 7201), ("rir_om", "tree.proj", 14801)])
def test_input_projection_shares_the_cells_layernorm_as_the_authors(name, projection, theirs):
    """The authors' OrderedMemoryRecurrent uses one LayerNorm module (its ``activation``) in its input projection and
    in its cell: under om_ln shared (default) OM (the projection is its leaf transform) and RIR-OM (each chunk's
    projection) have the parameters of the authors' OrderedMemory / HOM at d = 16 (21 slots; RIR-OM: S4D state 64;
    counted on their modules: 7,201 / 14,801), and training moves the one LayerNorm by the gradients of both uses
    (scratch comparison against their code, float64: every gradient within 5e-14); om_ln own (rirlab before) has a
    LayerNorm each, 32 parameters more."""
    from operator import attrgetter

    from rirlab.tasks.base import TaskInfo

    def encoder(**kw):
        entry = registry.get(name)
        return entry.build(entry.config(hidden_size=16, **kw), TaskInfo(9, 3, "classify")).encoder

    shared, own = encoder(), encoder(om_ln="own")
    ln = attrgetter(projection + ".ln")
    assert ln(shared) is shared.tree.cell.ln and ln(own) is not own.tree.cell.ln
    assert sum(p.numel() for p in shared.parameters()) == theirs
    assert sum(p.numel() for p in own.parameters()) == theirs + 32
    own.load_state_dict(shared.state_dict())  # the same keys: a checkpoint of either loads into the other
