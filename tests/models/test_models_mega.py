"""MEGA (`mega`): shapes and gradients, padding invariance, eval determinism, EMA conv == recurrence, learning."""

from __future__ import annotations

import pytest
import torch

from rirlab.models import registry
from rirlab.models.mega import MegaConfig, MultiDimEMA, _EMAConv, _EMATaps
from rirlab.tasks import listops
from rirlab.tasks.base import TaskInfo, collate_classify
from tests.helpers.cli import REPO
from tests.helpers.models import learns_listops

INFO = TaskInfo(len(listops.VOCAB), 10, "classify")


def build(**kw):
    torch.manual_seed(0)
    entry = registry.get("mega")
    cfg = entry.config(**{"hidden_size": 16, "num_layers": 2, "mega_z_dim": 8, "mega_ema_dim": 4, **kw})
    return entry.build(cfg, INFO)


def batch(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    items = [(torch.randint(1, len(listops.VOCAB), (n,), generator=g).tolist(), 0) for n in lengths]
    return collate_classify(items)


def test_defaults_are_megas_listops_lra_setting():
    cfg = MegaConfig()
    assert (cfg.hidden_size, cfg.num_layers, cfg.mega_z_dim, cfg.mega_ema_dim) == (80, 6, 64, 16)
    assert cfg.mega_bidirectional and cfg.mega_attention == "softmax" and cfg.mega_chunk_size == -1
    assert (cfg.dropout, cfg.mega_attn_dropout, cfg.mega_act_dropout) == (0.1, 0.0, 0.0)
    layer = registry.get("mega").build(cfg, INFO).encoder.layers[0]
    assert (layer.v, layer.fc1.out_features) == (160, 160)


@pytest.mark.parametrize("kw", [{}, {"mega_chunk_size": 3}, {"mega_attention": "laplace"}])
def test_shapes_and_every_parameter_gets_a_gradient(kw):
    model = build(**kw)
    b = batch([7, 5, 2])
    out = model(b).logits
    assert out.shape == (3, 10)
    out.logsumexp(-1).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing


@pytest.mark.parametrize("kw", [{}, {"mega_chunk_size": 3}, {"mega_attention": "laplace"}])
def test_padded_batch_equals_each_sequence_alone(kw):
    model = build(**kw).eval()
    lengths = [9, 4, 1, 6]
    b = batch(lengths, seed=1)
    with torch.no_grad():
        together = model(b).logits
        for i, n in enumerate(lengths):
            alone = model({"tokens": b["tokens"][i:i + 1, :n], "mask": b["mask"][i:i + 1, :n]}).logits
            torch.testing.assert_close(together[i:i + 1], alone, rtol=1e-4, atol=1e-5)


def test_backward_ema_ignores_padding_values():
    """Garbage in padded positions of the EMA input must not reach valid positions (right-to-left direction)."""
    torch.manual_seed(0)
    ema = MultiDimEMA(4, 3, bidirectional=True)
    x = torch.randn(1, 8, 4)
    mask = torch.tensor([[True] * 5 + [False] * 3])
    y1 = ema(x, mask)
    x2 = x.clone()
    x2[:, 5:] = 100.0
    torch.testing.assert_close(ema(x2, mask)[:, :5], y1[:, :5])
    torch.testing.assert_close(y1[:, :5], ema(x[:, :5], mask[:, :5]), rtol=1e-4, atol=1e-5)


def test_eval_is_deterministic_and_train_mode_uses_dropout():
    model = build()
    b = batch([6, 3])
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(b).logits, model(b).logits, rtol=0, atol=0)
    model.train()
    assert not torch.equal(model(b).logits, model(b).logits)


def recurrence(ema: MultiDimEMA, x: torch.Tensor) -> torch.Tensor:
    """h_t = alpha * beta x_t + (1 - alpha * delta) * h_{t-1}, y_t = eta^T h_t, per channel, both directions + omega x."""
    alpha, delta, beta, eta = (t.detach() for t in ema.coeffs())
    alpha, delta, beta = alpha[..., 0], delta[..., 0], beta[..., 0]  # (K, h)
    d = x.size(-1)

    def run(seq, rows):
        h = torch.zeros(d, alpha.size(1), dtype=torch.float64)
        ys = []
        for xt in seq:  # (D,)
            h = alpha[rows] * beta[rows] * xt[:, None] + (1 - alpha[rows] * delta[rows]) * h
            ys.append((eta[rows] * h).sum(-1))
        return torch.stack(ys)

    y = run(x[0].double(), slice(0, d))
    if ema.bidirectional:
        y = y + run(x[0].double().flip(0), slice(d, 2 * d)).flip(0)
    return (y + x[0].double() * ema.omega.detach().double())[None]


@pytest.mark.parametrize("bidirectional", [True, False])
def test_ema_convolution_equals_the_recurrence(bidirectional):
    torch.manual_seed(3)
    ema = MultiDimEMA(5, 4, bidirectional)
    x = torch.randn(1, 11, 5)
    with torch.no_grad():
        conv = ema(x, torch.ones(1, 11, dtype=torch.bool))
    torch.testing.assert_close(conv.double(), recurrence(ema, x), rtol=1e-4, atol=1e-5)


def test_ema_convolution_backward_is_the_adjoint():
    """_EMAConv's hand-written backward: gradcheck in float64, and equal to autograd through the same FFTs."""
    torch.manual_seed(4)
    x = torch.randn(3, 7, 5, dtype=torch.float64, requires_grad=True)
    k = torch.randn(5, 14, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_EMAConv.apply, (x, k))
    g = torch.randn(3, 7, 5, dtype=torch.float64)
    gx, gk = torch.autograd.grad(_EMAConv.apply(x, k), (x, k), g)
    ref = torch.fft.irfft(torch.fft.rfft(x, n=14, dim=1) * torch.fft.rfft(k, dim=1).t(), n=14, dim=1)[:, :7]
    rx, rk = torch.autograd.grad(ref, (x, k), g)
    torch.testing.assert_close(gx, rx, rtol=0, atol=1e-12)
    torch.testing.assert_close(gk, rk, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kernels", [3, 6])
def test_ema_taps_backward(kernels):
    """_EMATaps's hand-written backward: gradcheck in float64, and equal to autograd through exp(t log q) and the
    taps' assembly op by op (one direction: 3 kernels for 3 channels; both: 6)."""
    torch.manual_seed(5)
    c = torch.randn(kernels, 4, dtype=torch.float64, requires_grad=True)
    log_q = (-torch.rand(kernels, 4, dtype=torch.float64)).requires_grad_()
    omega = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_EMATaps.apply, (c, log_q, omega, 9))
    g = torch.randn(3, 18, dtype=torch.float64)
    got = torch.autograd.grad(_EMATaps.apply(c, log_q, omega, 9), (c, log_q, omega), g)
    k = (c[..., None] * torch.exp(log_q[..., None] * torch.arange(9.0, dtype=torch.float64))).sum(1)  # (K, 9)
    first = k[:3, :1] + omega[:, None]
    if kernels == 3:
        ref = torch.cat([first, k[:, 1:], k.new_zeros(3, 9)], 1)
    else:
        ref = torch.cat([first + k[3:, :1], k[:3, 1:], k.new_zeros(3, 1), k[3:, 1:].flip(-1)], 1)
    for a, b in zip(got, torch.autograd.grad(ref, (c, log_q, omega), g)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_full_attention_is_bidirectional_and_chunks_are_local():
    """Changing the last token moves the first position's state under full attention; with chunks of 2 and no
    EMA path (omega/eta zeroed, so the EMA is the identity of zero) it cannot."""
    model = build(num_layers=1, mega_chunk_size=2).eval()
    layer = model.encoder.layers[0]
    with torch.no_grad():
        layer.ema.eta.zero_()
        layer.ema.omega.zero_()
    x = torch.randn(1, 6, 16)
    mask = torch.ones(1, 6, dtype=torch.bool)
    x2 = x.clone()
    x2[:, -1] += 1.0
    with torch.no_grad():
        torch.testing.assert_close(layer(x, mask)[:, :4], layer(x2, mask)[:, :4])
        layer.chunk = -1
        assert not torch.allclose(layer(x, mask)[:, 0], layer(x2, mask)[:, 0])


def test_tiny_mega_learns_listops_above_majority():
    acc, majority = learns_listops("mega", 200, n=2000, n_train=1600, max_args=4, max_depth=3, max_len=30,
                                   opt={"betas": (0.9, 0.98), "weight_decay": 0.01}, clip=1.0, hidden_size=32,
                                   num_layers=2, mega_z_dim=16, mega_ema_dim=4, dropout=0.0)
    assert acc > majority + 0.08, (acc, majority)


@pytest.mark.parametrize("spec", ["rir_table2.yaml", "rir_table3.yaml"])
def test_rir_specs_train_mega_with_the_rir_authors_adam_betas(spec):
    """The RIR authors' MEGA configs (ListOps and logical inference) set Adam betas (0.99, 0.98); every MEGA trial of
    the RIR Table 2 and 3 specs resolves to them."""

    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.spec.trials import expand

    loaded = load_spec(REPO / "search_spaces" / spec)
    megas = [t for t in expand(loaded.spec) if t.config["model"] == "mega"]
    assert megas and all((t.config["adam_beta1"], t.config["adam_beta2"]) == (0.99, 0.98) for t in megas)
