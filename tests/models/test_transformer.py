"""Transformer pieces (dynamic-halt paper eq. 1-4), RoPE, masks, START/END, and the halting sweep specs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rirlab.models.attention import MultiHeadAttention, add_start_end, attention_mask, rotate

REPO = Path(__file__).resolve().parents[2]


def test_rope_scores_depend_only_on_the_offset():
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    s = 12
    qr, kr = rotate(q.expand(1, 1, s, 8)), rotate(k.expand(1, 1, s, 8))  # same vector at every position
    scores = (qr @ kr.transpose(-1, -2))[0, 0]  # (S, S)
    for off in (-3, 0, 5):
        diag = torch.diagonal(scores, offset=off)
        torch.testing.assert_close(diag, diag[:1].expand_as(diag), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(torch.diagonal(scores, 0)[0], torch.diagonal(scores, 3)[0])


def test_attention_ignores_padding_and_causal_future():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, 0.0).eval()
    x = torch.randn(1, 6, 8)
    mask = torch.tensor([[True, True, True, True, False, False]])
    y = mha(x, x, mask)
    x2 = x.clone()
    x2[:, 4:] = 100.0  # padding content must not matter
    torch.testing.assert_close(mha(x2, x2, mask)[:, :4], y[:, :4])
    yc = mha(x, x, mask, causal=True)
    x3 = x.clone()
    x3[:, 2] += 1.0
    torch.testing.assert_close(mha(x3, x3, mask, causal=True)[:, :2], yc[:, :2])
    m = attention_mask(torch.tensor([[False, False]]), 2, True, "cpu")
    assert m.any(-1).all()  # no query row without a key (SDPA would return NaN)


def test_start_end_wrap_each_sequence():
    x = torch.arange(1, 7, dtype=torch.float32).view(2, 3, 1)  # (N, S, D=1)
    mask = torch.tensor([[True, True, True], [True, False, False]])
    start, end = torch.full((1, 1, 1), -1.0), torch.full((1, 1, 1), -2.0)
    out, m, end_at = add_start_end(x, mask, start, end)
    assert out[..., 0].tolist() == [[-1, 1, 2, 3, -2], [-1, 4, -2, 0, 0]]
    assert m.tolist() == [[True] * 5, [True, True, True, False, False]]
    assert end_at.tolist() == [4, 2]


def test_halting_sweep_lists_24_trials_with_their_beta():
    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.spec.trials import expand

    trials = expand(load_spec(REPO / "search_spaces" / "halting.yaml").spec)
    assert len(trials) == 24
    combos = {(t["config"]["model"], t["config"]["halt_loss_weight"]) for t in trials}
    assert combos == {(m, b) for m in ("ut", "gut") for b in (1, 0.1, 0.01, 0.001)}
    assert sorted({t["config"]["seed"] for t in trials}) == [0, 1, 2]


@pytest.mark.parametrize("spec,n", [("gut_ablation.yaml", 24), ("flipflop.yaml", 18)])
def test_paper_table_specs_validate(spec, n):
    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.spec.trials import expand

    loaded = load_spec(REPO / "search_spaces" / spec)  # resolves every trial config
    assert len(expand(loaded.spec)) == n
    assert len(expand(load_spec(REPO / "search_spaces" / spec, quick=True).spec)) >= 3


def test_xpos_with_unit_scale_is_rope_and_its_scores_decay_with_offset():
    from rirlab.models.attention import xpos_zeta

    torch.manual_seed(0)
    x = torch.randn(2, 2, 7, 8)
    torch.testing.assert_close(rotate(x, torch.ones(4), 512.0), rotate(x))
    torch.testing.assert_close(rotate(x, torch.ones(4), 512.0, downscale=True), rotate(x))
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    zeta = xpos_zeta(8)
    assert not torch.allclose(rotate(x, zeta, 512.0), rotate(x))
    qx = rotate(q.expand(1, 1, 12, 8), zeta, 4.0)
    kx = rotate(k.expand(1, 1, 12, 8), zeta, 4.0, downscale=True)
    scores = (qx @ kx.transpose(-1, -2))[0, 0]  # depends on n - m only (the centre cancels)
    for off in (-3, 0, 5):
        diag = torch.diagonal(scores, offset=off)
        torch.testing.assert_close(diag, diag[:1].expand_as(diag), rtol=1e-4, atol=1e-4)


def test_positions_config_selects_xpos_by_default():
    from rirlab.models import registry
    from rirlab.tasks.base import TaskInfo

    for name in ("transformer", "ut", "gut", "tlb", "gutlb"):
        cfg = registry.get(name).config(hidden_size=16, num_heads=2)
        model = registry.get(name).build(cfg, TaskInfo(12, 5, "classify"))
        mhas = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
        assert {m.positions for m in mhas} - {"none"} == {"xpos"} and all(m.q.bias is None for m in mhas)
    cfg = registry.get("gut").config(hidden_size=16, num_heads=2, positions="rope", attn_bias=True)
    model = registry.get("gut").build(cfg, TaskInfo(12, 5, "classify"))
    assert model.encoder.block.attn.mha.positions == "rope" and model.encoder.block.attn.mha.q.bias is not None


@pytest.mark.parametrize("pair_act,factor", [("mean", 0.5), ("sum", 1.0)])
def test_pair_tasks_average_the_two_act_losses(pair_act, factor):
    from rirlab.models import registry
    from rirlab.tasks.base import TaskInfo

    torch.manual_seed(0)
    cfg = registry.get("gut").config(hidden_size=16, num_heads=2, dropout=0.0, pair_act=pair_act, max_layers=4)
    model = registry.get("gut").build(cfg, TaskInfo(12, 3, "pair")).eval()
    g = torch.Generator().manual_seed(0)
    t1, t2 = torch.randint(1, 12, (3, 6), generator=g), torch.randint(1, 12, (3, 9), generator=g)
    m1, m2 = torch.ones(3, 6, dtype=torch.bool), torch.ones(3, 9, dtype=torch.bool)
    with torch.no_grad():
        out = model({"tokens": t1, "mask": m1, "tokens2": t2, "mask2": m2})
        a, b = model.encode(t1, m1).aux_loss, model.encode(t2, m2).aux_loss
    assert not torch.allclose(a, b)
    torch.testing.assert_close(out.aux_loss, factor * (a + b))


def test_head_dim_sets_the_attention_width_apart_from_the_model_width():
    """The code's LRA Image configs: 8 heads of 8 at d = 128 (Q/K/V d -> 64, output 64 -> d); head_dim equal to
    d / heads builds exactly the default model."""
    from rirlab.models import registry
    from rirlab.tasks.base import TaskInfo

    info = TaskInfo(12, 5, "classify")
    tokens = torch.randint(1, 12, (3, 7), generator=torch.Generator().manual_seed(0))
    batch = {"tokens": tokens, "mask": torch.ones(3, 7, dtype=torch.bool)}
    outs = {}
    for head_dim in (None, 8, 4):
        torch.manual_seed(0)
        cfg = registry.get("transformer").config(hidden_size=16, num_heads=2, num_layers=1, head_dim=head_dim)
        model = registry.get("transformer").build(cfg, info).eval()
        mha = next(m for m in model.modules() if isinstance(m, MultiHeadAttention))
        assert mha.q.weight.shape == (2 * (head_dim or 8), 16) and mha.o.weight.shape == (16, 2 * (head_dim or 8))
        with torch.no_grad():
            outs[head_dim] = model(batch).logits
    torch.testing.assert_close(outs[None], outs[8], rtol=0, atol=0)
    assert outs[4].shape == outs[None].shape
    with pytest.raises(ValueError, match="head_dim 5 must be even"):
        registry.get("transformer").config(hidden_size=16, num_heads=2, head_dim=5)


def test_pooling_start_reads_the_start_state_and_defaults_stay_the_papers():
    """pooling: start is the code's "cls" (LRA Image Transformer and UT); unset, GUT/GUTLB read END and the
    others the mean (Appendix A)."""
    from rirlab.models import registry
    from rirlab.tasks.base import TaskInfo

    info = TaskInfo(12, 5, "classify")
    got = {name: registry.get(name).build(registry.get(name).config(hidden_size=16, num_heads=2), info)
           .encoder.readout.how for name in ("transformer", "ut", "gut")}
    assert got == {"transformer": "mean", "ut": "mean", "gut": "end"}
    tlb = registry.get("tlb").build(registry.get("tlb").config(hidden_size=16, num_heads=2, readout="tokens",
                                                               pooling="start"), info)
    assert tlb.encoder.readout.how == "start"
    gutlb = registry.get("gutlb").build(registry.get("gutlb").config(hidden_size=16, num_heads=2, pooling="start"),
                                        info)
    assert gutlb.encoder.last_slot  # readout memory: pooling start reads the last memory slot (test_tlb.py)

    torch.manual_seed(0)
    cfg = registry.get("transformer").config(hidden_size=16, num_heads=2, num_layers=2, dropout=0.0, pooling="start")
    enc = registry.get("transformer").build(cfg, info).encoder.eval()
    x, mask = torch.randn(3, 6, 16), torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4], dtype=torch.bool)
    with torch.no_grad():
        h, m, _ = enc.readout.wrap(x, mask)
        for block in enc.blocks:
            h = block(h, m, False)
        vec = enc(x, mask).vec
    torch.testing.assert_close(vec, h[:, 0])
    assert not torch.allclose(vec, (h * m[..., None]).sum(1) / m.sum(1, keepdim=True))  # not the mean
