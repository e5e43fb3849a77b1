"""Our S4D kernel against the state space recurrence it discretises; pre-chunk layer padding."""

from __future__ import annotations

import torch

from rirlab.models.s4d import PreChunkS4D, S4D, flip_valid


def test_s4d_convolution_equals_the_bilinear_recurrence():
    torch.manual_seed(0)
    layer = S4D(3, n_state=8)
    with torch.no_grad():
        layer.kernel.log_dt.fill_(-1.0)  # large steps, so long-range terms matter
    u = torch.randn(2, 37, 3)
    y = layer(u)
    k = layer.kernel
    dt = k.log_dt.exp()[:, None]
    a = torch.complex(-k.log_a_real.exp(), k.a_imag)
    da, db = (1 + dt * a / 2) / (1 - dt * a / 2), dt / (1 - dt * a / 2)
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
