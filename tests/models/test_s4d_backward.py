"""S4D's kernel and causal convolution with hand-written backwards (issue 57 item 3) against the autograd formulas
they replaced, kept here as references: values and gradients wrt every parameter and input, both inits, lengths that
cover one block, partial blocks and long kernels."""

from __future__ import annotations

import math

import pytest
import torch

from rirlab.models.s4d import CausalConv, S4DKernel


def complex_kernel(k: S4DKernel, length: int) -> torch.Tensor:
    """The kernel as rirlab computed it before issue 57 (complex autograd), kept here as the reference."""
    dt = k.log_dt.exp()[:, None]
    a = torch.complex(-k.log_a_real.exp(), k.a_imag)
    dta = a * dt
    da = (1 + dta / 2) / (1 - dta / 2)
    db = dt * torch.view_as_complex(k.b) / (1 - dta / 2)
    coef = torch.view_as_complex(k.c) * db
    blk = max(1, math.isqrt(length - 1) + 1) if length > 1 else 1
    nq = -(-length // blk)
    log_da = torch.log(da)[..., None]
    r = torch.arange(blk, dtype=dt.dtype)
    q = torch.arange(nq, dtype=dt.dtype) * blk
    cexp = lambda z: torch.polar(torch.exp(z.real), z.imag)  # noqa: E731
    inner = (coef[..., None] * cexp(log_da * r)).transpose(1, 2)
    outer = cexp(log_da * q)
    kk = 2 * (inner @ outer).real
    return kk.transpose(1, 2).reshape(kk.size(0), -1)[:, :length]


def trained_kernel(init: str, dtype: torch.dtype) -> S4DKernel:
    """A kernel moved away from its init (B, C, A, dt all perturbed), so no term is trivially 0 or 1."""
    torch.manual_seed(3)
    k = S4DKernel(6, 16, init).to(dtype)
    with torch.no_grad():
        for prm in k.parameters():
            prm.add_(0.2 * torch.randn_like(prm))
        k.log_dt[0] = math.log(0.5)  # a large step: long-range terms and |dt A / 2| near 1 matter
    return k


def values_and_grads(k: S4DKernel, fn, length: int) -> list[torch.Tensor]:
    out = fn(k, length)
    weights = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(length))
    weights = weights.to(out.dtype)  # the same draw in both precisions
    grads = torch.autograd.grad((out * weights).sum(), list(k.parameters()))
    return [out, *grads]


@pytest.mark.parametrize("init", ["inv", "lin"])
@pytest.mark.parametrize("length", [1, 2, 7, 100, 1800])
def test_kernel_equals_the_complex_formula_in_values_and_gradients_float64(init, length):
    k = trained_kernel(init, torch.float64)
    ref = values_and_grads(k, complex_kernel, length)
    new = values_and_grads(k, lambda m, n: m(n), length)
    assert new[0].shape == (6, length)
    for name, a, b in zip(["K", *(name for name, _ in k.named_parameters())], new, ref):
        scale = max(1.0, b.abs().max().item())
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-10 * scale), (name, (a - b).abs().max().item())


@pytest.mark.parametrize("init", ["inv", "lin"])
@pytest.mark.parametrize("length", [1, 2, 7, 100, 1800])
def test_kernel_in_float32_is_as_accurate_as_the_complex_formula(init, length):
    """Both against the complex formula in float64: within 1e-5 of each tensor's largest entry, or, where float32
    itself cannot do that (a long kernel with a large step, ~3e-4), within 2x the old formula's own error."""
    k = trained_kernel(init, torch.float32)
    ref = values_and_grads(trained_kernel(init, torch.float32).double(), complex_kernel, length)
    old = values_and_grads(k, complex_kernel, length)
    new = values_and_grads(k, lambda m, n: m(n), length)
    for name, a, o, b in zip(["K", *(name for name, _ in k.named_parameters())], new, old, ref):
        assert a.dtype == torch.float32
        scale = b.abs().max().item()
        err, old_err = ((a.double() - b).abs().max().item() / scale, (o.double() - b).abs().max().item() / scale)
        assert err <= max(1e-5, 2 * old_err), (name, err, old_err)


def autograd_conv(u: torch.Tensor, k: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """S4D.conv as rirlab computed it before issue 57 (autograd through the FFTs), kept here as the reference."""
    s = u.size(1)
    uf = torch.fft.rfft(u.transpose(1, 2), n=2 * s)
    y = torch.fft.irfft(uf * torch.fft.rfft(k, n=2 * s), n=2 * s)[..., :s]
    return torch.addcmul(y.transpose(1, 2).contiguous(), u, d)


@pytest.mark.parametrize("length", [1, 2, 7, 100, 1800])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_causal_conv_equals_autograd_through_the_ffts(length, dtype, tol):
    gen = torch.Generator().manual_seed(length)
    u, k, d, w = (torch.randn(shape, dtype=torch.float64, generator=gen).to(dtype)
                  for shape in [(3, length, 5), (5, length), (5,), (3, length, 5)])
    outs = []
    for fn in (autograd_conv, CausalConv.apply):
        args = [x.clone().requires_grad_() for x in (u, k, d)]
        y = fn(*args)
        outs.append([y, *torch.autograd.grad((y * w).sum(), args)])
    assert outs[1][0].is_contiguous()  # (N, S, H) contiguous: the GELU after it back-propagates ~9x faster
    for name, a, b in zip(["y", "u", "K", "D"], *outs):
        scale = max(1.0, b.abs().max().item())
        assert torch.allclose(a, b, rtol=tol, atol=tol * scale), (name, (a - b).abs().max().item())
