"""Our S4D kernel against the state space recurrence it discretises (trainable B included); pre-chunk layer
padding, its tied dropout, its GLU biases, its norm and its untrained backward direction (the authors' choices,
RIR Appendix J eq. 13-16)."""

from __future__ import annotations

import torch

import pytest

from rirlab.models import registry
from rirlab.models.s4d import (BiS4D, ChannelBatchNorm, PreChunkConfig, PreChunkS4D, S4D, S4DKernel, flip_valid,
                                 leaf_layer)


def test_s4d_convolution_equals_the_bilinear_recurrence():
    torch.manual_seed(0)
    layer = S4D(3, n_state=8)
    with torch.no_grad():
        layer.kernel.log_dt.fill_(-1.0)  # large steps, so long-range terms matter
        layer.kernel.b.add_(0.3 * torch.randn_like(layer.kernel.b))  # B trained away from its init 1
    u = torch.randn(2, 37, 3)
    y = layer(u)
    k = layer.kernel
    dt = k.log_dt.exp()[:, None]
    a = torch.complex(-k.log_a_real.exp(), k.a_imag)
    b = torch.view_as_complex(k.b)
    da, db = (1 + dt * a / 2) / (1 - dt * a / 2), dt * b / (1 - dt * a / 2)
    c = torch.view_as_complex(k.c)
    state = torch.zeros(2, 3, 4, dtype=torch.complex64)
    ref = []
    for t in range(37):  # x_t = dA x_{t-1} + dB u_t, y_t = 2 Re(C x_t) + D u_t
        state = da * state + db * u[:, t, :, None]
        ref.append(2 * (c * state).sum(-1).real + layer.d * u[:, t])
    assert torch.allclose(y, torch.stack(ref, 1), atol=1e-4)


def test_flip_valid_reverses_within_length():
    x = torch.arange(10.0).view(2, 5, 1)
    out = flip_valid(x, torch.tensor([5, 3]))
    assert out[0, :, 0].tolist() == [4, 3, 2, 1, 0]
    assert out[1, :, 0].tolist() == [7, 6, 5, 8, 9]


def test_prechunk_layer_ignores_padding():
    torch.manual_seed(1)
    layer = PreChunkS4D(8, n_state=8)
    x = torch.randn(2, 12, 8)
    mask = torch.arange(12)[None] < torch.tensor([12, 7])[:, None]
    full = layer(x, mask)
    alone = layer(x[1:, :7], mask[1:, :7])
    assert torch.allclose(full[1, :7], alone[0], atol=1e-5)
    assert torch.allclose(full[0], layer(x[:1], mask[:1])[0], atol=1e-5)


def test_b_is_a_trainable_kernel_parameter_initialised_to_one():
    k = S4DKernel(4, 8)
    assert k.b.requires_grad and torch.equal(torch.view_as_complex(k.b), torch.ones(4, 4, dtype=torch.complex64))
    k(10).sum().backward()
    assert k.b.grad is not None and k.b.grad.abs().sum() > 0


def test_s4d_dropout_is_tied_over_positions_around_the_gelu():
    """Training: each (sequence, channel) is dropped at every position or at none; two masks (before and after the
    GELU) drop 1 - (1 - p)^2 of them. Eval: no dropout."""
    torch.manual_seed(2)
    p = 0.5
    layer = BiS4D(64, n_state=8, dropout=p)
    x, mask = 0.1 * torch.randn(16, 9, 64), torch.ones(16, 9, dtype=torch.bool)  # small: GELU never underflows to 0
    zero = layer.train()(x, mask) == 0  # (N, S, 2H)
    per_channel = zero.all(1)  # (N, 2H)
    assert torch.equal(zero.any(1), per_channel)  # tied: never a partly dropped channel
    assert abs(per_channel.float().mean().item() - (1 - (1 - p) ** 2)) < 0.03
    with torch.no_grad():
        assert not (layer.eval()(x, mask) == 0).any()


@pytest.mark.parametrize("bias", [True, False])
def test_prechunk_config_sets_dropout_and_glu_bias(bias):
    default = PreChunkConfig(s4d=True)
    assert default.s4d_dropout == 0.1 and default.s4d_glu_bias  # the authors' code
    assert default.s4d_norm == "none" and not default.s4d_reverse_trainable  # the authors' code
    layer = leaf_layer(PreChunkConfig(hidden_size=8, s4d=True, s4d_state=8, s4d_dropout=0.2, s4d_glu_bias=bias))
    assert layer.s4d.p == 0.2
    assert (layer.w_u.bias is not None) == bias and (layer.w_v.bias is not None) == bias


def small_prechunk(**kw):
    torch.manual_seed(4)
    return leaf_layer(PreChunkConfig(hidden_size=8, s4d=True, s4d_state=8, s4d_dropout=0.0, **kw))


def test_the_backward_direction_gets_a_zero_gradient_by_default():
    """The authors' reverse() runs under no_grad on the way in and out of the backward S4D, so its parameters get no
    gradient and no gradient reaches the input through it. Default: every backward parameter's gradient is exactly 0
    (a tensor, so weight decay still shrinks it, as theirs); the forward direction's is not. Option: both train."""
    x, mask = torch.randn(3, 10, 8), torch.arange(10)[None] < torch.tensor([10, 6, 1])[:, None]
    grads = {}
    for trainable in (False, True):
        layer = small_prechunk(s4d_reverse_trainable=trainable).train()
        xi = x.clone().requires_grad_()
        layer(xi, mask).pow(2).sum().backward()
        grads[trainable] = xi.grad
        bwd, fwd = list(layer.s4d.bwd.parameters()), list(layer.s4d.fwd.parameters())
        assert all(p.grad is not None for p in bwd + fwd)
        assert all(p.grad.any() for p in fwd)
        assert all(bool(p.grad.any()) == trainable for p in bwd), [p.grad.abs().max() for p in bwd]
    assert not torch.allclose(grads[False], grads[True])  # the input's gradient lost the backward branch
    frozen, trained = small_prechunk(), small_prechunk(s4d_reverse_trainable=True)  # same weights (same seed)
    with torch.no_grad():
        assert torch.equal(frozen(x, mask), trained(x, mask))  # values are the same; only gradients differ
    # one AdamW step: the backward direction only shrinks by weight decay, p <- p (1 - lr wd)
    before = [p.detach().clone() for p in frozen.s4d.bwd.parameters()]
    opt = torch.optim.AdamW(frozen.parameters(), lr=0.1, weight_decay=0.5)
    frozen(x, mask).pow(2).sum().backward()
    opt.step()
    for b, p in zip(before, frozen.s4d.bwd.parameters()):
        assert torch.allclose(p.detach(), b * (1 - 0.1 * 0.5), atol=1e-7)


def test_no_gradient_flows_through_the_backward_branch_by_default():
    """With the forward direction's output zeroed (C = 0, D = 0), the layer's output depends on the input through
    the backward branch and the residual only: by default the input's gradient is the residual's alone."""
    x, mask, w = torch.randn(2, 7, 8), torch.ones(2, 7, dtype=torch.bool), torch.randn(2, 7, 8)
    out = {}
    for trainable in (False, True):
        layer = small_prechunk(s4d_reverse_trainable=trainable, s4d_glu_bias=False)
        with torch.no_grad():
            layer.s4d.fwd.kernel.c.zero_()
            layer.s4d.fwd.d.zero_()
        xi = x.clone().requires_grad_()
        (layer(xi, mask) * w).sum().backward()
        out[trainable] = xi.grad
        # the residual path alone: the GLU term as a constant
        xr = x.clone().requires_grad_()
        with torch.no_grad():
            cat = layer.s4d(x, mask)
            glu = torch.sigmoid(layer.w_u(cat)) * layer.w_v(cat)
        (layer.leaf(layer.norm(glu + xr)) * w).sum().backward()
        if not trainable:
            assert torch.allclose(xi.grad, xr.grad, atol=1e-6)
        else:
            assert not torch.allclose(xi.grad, xr.grad, atol=1e-4)
    assert not torch.allclose(out[False], out[True], atol=1e-4)


@pytest.mark.parametrize("model, norm, dropout", [("rir_om", "batch", 0.0), ("rir_crvnn", "batch", 0.0),
                                                  ("rir_ebt_grc", "none", 0.1), ("rir_grc", "none", 0.1)])
def test_each_rir_model_defaults_to_its_authors_config_s4d_norm_and_dropout(model, norm, dropout):
    """The authors' ListOps configs: HOM and HCRvNN norm="batch", s4_dropout 0; HEBT_GRC and HGRC norm="skip",
    s4_dropout = dropout = 0.1."""
    cfg = registry.get(model).config()
    assert (cfg.s4d_norm, cfg.s4d_dropout, cfg.s4d_reverse_trainable) == (norm, dropout, False)
    layer = leaf_layer(registry.get(model).config(hidden_size=8, s4d_state=8))
    assert isinstance(layer.norm, ChannelBatchNorm if norm == "batch" else torch.nn.Identity)


def test_batch_norm_after_the_residual_takes_its_statistics_over_every_position():
    """norm="batch": BatchNorm1d over the channels of the residual's output before eq. 17, statistics over every
    (sequence, position) of the batch, padding included (the authors' code); the backward branch leaves 0 at the pads,
    as their reverse() does. ``layer``: LayerNorm."""
    layer = small_prechunk(s4d_norm="batch").train()
    x, mask = torch.randn(3, 9, 8), torch.arange(9)[None] < torch.tensor([9, 4, 2])[:, None]
    seen = {}
    layer.norm.register_forward_hook(lambda m, i, o: seen.update(inp=i[0], out=o))
    layer.s4d.register_forward_hook(lambda m, i, o: seen.update(cat=o))
    layer(x, mask)
    assert not seen["cat"][..., 8:][~mask].any() and seen["cat"][..., :8][~mask].any()  # backward half: 0 at pads
    flat = seen["inp"].reshape(-1, 8)  # every position, pads too
    expect = (flat - flat.mean(0)) / torch.sqrt(flat.var(0, unbiased=False) + 1e-5)
    assert torch.allclose(seen["out"].reshape(-1, 8), expect, atol=1e-5)
    assert torch.allclose(layer.norm.running_mean, 0.1 * flat.mean(0), atol=1e-6)
    assert isinstance(small_prechunk(s4d_norm="layer").norm, torch.nn.LayerNorm)
    with pytest.raises(ValueError):
        PreChunkConfig(s4d_norm="group")
