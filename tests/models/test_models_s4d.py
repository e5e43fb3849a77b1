"""Our S4D kernel against the state space recurrence it discretises (trainable B included); pre-chunk layer
padding, its tied dropout and its GLU biases (the authors' choices, RIR Appendix J eq. 13-16)."""

from __future__ import annotations

import torch

import pytest

from rirlab.models.s4d import BiS4D, PreChunkConfig, PreChunkS4D, S4D, S4DKernel, flip_valid, leaf_layer


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
    layer = leaf_layer(PreChunkConfig(hidden_size=8, s4d=True, s4d_state=8, s4d_dropout=0.2, s4d_glu_bias=bias))
    assert layer.s4d.p == 0.2
    assert (layer.w_u.bias is not None) == bias and (layer.w_v.bias is not None) == bias
