"""S4D: diagonal state space layer (Gu et al. 2022) and the RIR pre-chunk layer (RIR §3.2, Appendix J eq. 13-17).

Kernel: A_n = -1/2 + i * imag_n (S4D-Inv: imag_n = N/pi (N/(2n+1) - 1); S4D-Lin: imag_n = pi n),
bilinear discretisation (RIR Appendix K): dA = (1 + dt A/2) / (1 - dt A/2), dB = dt B / (1 - dt A/2),
Vandermonde kernel K_l = 2 Re(sum_n C_n dB_n dA_n^l), causal FFT convolution y = K * u + D u.
Padding: sequences are right-padded; pads are zeroed before the causal convolution, and the
backward direction reverses each sequence within its own length, so pads never leak in.

Choices the RIR paper's eq. 13-16 leave open, taken from the authors' code (their S4D pre-chunk layer,
BeamRecursionFamily S4DWrapper.py, is the S4 reference block of Gu et al. in diagonal mode, ``freeze_B=False``,
``dropout=s4_dropout``, ``GLU`` on a biased ``Linear(2d, 2d)``, then a norm after the residual; their ListOps configs
set ``s4_dropout = dropout = 0.1`` and no norm for RIR-EBT-GRC and RIR-GRC, ``s4_dropout = 0`` and BatchNorm for
RIR-OM and RIR-CRvNN, and each model's config here defaults to its row):

- B is a trainable complex (H, N/2) parameter initialised to 1 (S4D's "constant" B init), as in S4D itself;
  eq. 13-14 do not fix it. It lives in :class:`S4DKernel` with A, dt and C.
- dropout ``s4d_dropout`` (default 0.1; RIR-OM, RIR-CRvNN: 0) twice per direction, before and after the GELU of
  eq. 13-14, each mask drawn per (sequence, channel) and shared by all positions (the reference block's tied
  ``DropoutNd``); the equations show no dropout, the published numbers were trained with it.
- ``s4d_norm`` after the residual of eq. 16, before eq. 17 (the wrapper's post-norm): ``none`` (default; their
  ``skip``), ``batch`` (RIR-OM, RIR-CRvNN: ``BatchNorm1d`` over the channels, its statistics taken over every
  position of the batch, padding included, as in their code) or ``layer`` (``LayerNorm``, their other choice).
- ``s4d_reverse_trainable``: the equations train both directions; in the authors' code the backward direction's
  input reversal and output reversal run under ``no_grad`` (utils.py ``reverse()``), so nothing in that branch
  gets a gradient: the reverse-direction A, B, dt, C and D (slices of the block's tensors shared with the forward
  direction) get a zero gradient and only shrink by weight decay, and no gradient reaches the layer's input through
  that branch. This shaped every published RIR number, so ``False`` (default) does the same: the backward branch
  runs without autograd and its parameters get a zero gradient (zero, not None, so that the optimiser's weight
  decay still applies to them, as there); ``True`` trains both directions, as the equations do.
- eq. 16 writes x_cat W_u and x_cat W_v without biases while the authors' GLU has them; the equations also
  leave out the bias of eq. 17 that every implementation has, so we read them as omitting biases, not as
  forbidding them: ``s4d_glu_bias=True`` (the code, default) or ``False`` (eq. 16 literally).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import at_least_fp32, full_precision
from rirlab.models.grc import GRCConfig, LeafTransform
from rirlab.optim import mark_group

S4DInit = Literal["inv", "lin"]  # S4D-Inv or S4D-Lin initialisation of the imaginary parts of A
S4DNorm = Literal["none", "batch", "layer"]  # norm after the pre-chunk residual (authors: skip, batch, layer)


@dataclass(config=STRICT)
class PreChunkConfig(GRCConfig):
    """GRC settings plus the optional S4D pre-chunk layer in front of the RvNN (RIR §3.2, eq. 13-17)."""

    s4d: bool = False
    s4d_state: int = Field(64, ge=2)  # N, the state size of each S4D channel
    s4d_init: S4DInit = "inv"
    s4d_dropout: float = Field(0.1, ge=0, lt=1)  # tied dropout around the GELU of eq. 13-14 (authors: = dropout)
    s4d_glu_bias: bool = True  # biases in W_u, W_v of eq. 16 (authors' code); False: eq. 16 as printed
    s4d_norm: S4DNorm = "none"  # after the residual of eq. 16 (authors' post-norm; RIR-OM, RIR-CRvNN: batch)
    s4d_reverse_trainable: bool = False  # False: the backward direction gets no gradient (authors' code)


def flip_valid(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each (N, S, D) sequence within its length; padding stays in place."""
    s = x.size(1)
    pos = torch.arange(s, device=x.device)  # (S,)
    idx = torch.where(pos < lengths[:, None], lengths[:, None] - 1 - pos, pos)  # (N, S)
    return x.gather(1, idx[..., None].expand_as(x))  # (N, S, D)


def tied_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout on (N, S, H) with one keep mask per (sequence, channel), shared by all S positions."""
    if not training or p == 0:
        return x
    keep = torch.rand(x.size(0), 1, x.size(2), device=x.device) >= p  # (N, 1, H)
    return x * keep * (1.0 / (1 - p))  # (N, S, H)


class S4DKernel(nn.Module):
    """Diagonal SSM convolution kernel, one per channel: (H,) params -> K (H, L)."""

    def __init__(self, h: int, n_state: int = 64, init: str = "inv", dt_min: float = 1e-3, dt_max: float = 1e-1):
        super().__init__()
        n2 = n_state // 2
        self.log_dt = nn.Parameter(torch.rand(h) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))  # (H,)
        self.c = nn.Parameter(torch.randn(h, n2, 2) * math.sqrt(0.5))  # (H, N/2) complex as pairs
        self.b = nn.Parameter(torch.stack([torch.ones(h, n2), torch.zeros(h, n2)], -1))  # (H, N/2) complex, B = 1
        self.log_a_real = nn.Parameter(torch.full((h, n2), math.log(0.5)))  # (H, N/2)
        n = torch.arange(n2, dtype=torch.float)
        imag = n_state / math.pi * (n_state / (2 * n + 1) - 1) if init == "inv" else math.pi * n  # (N/2,)
        self.a_imag = nn.Parameter(imag.repeat(h, 1))  # (H, N/2)

    def forward(self, length: int) -> torch.Tensor:
        return VandermondeKernel.apply(self.log_dt, self.log_a_real, self.a_imag, self.b, self.c, length)  # (H, L)


class VandermondeKernel(torch.autograd.Function):
    """K_l = 2 Re(sum_n C_n dB_n dA_n^l) (H, L) from the kernel's parameters, with its gradient written out.

    Autograd through complex ops costs a conj, a clone and a view per op in the backward: the kernel was 195 ATen
    ops per direction and step (forward and backward), two thirds of an ``s4d`` model's step, each non-view op a
    kernel launch on a GPU; with the backward written out it is 97 (55 of them non-view; issue 57). With z = dt A / 2 the bilinear discretisation (RIR Appendix K) is dA = (1 + z) / (1 - z),
    dB = dt B / (1 - z); the kernel depends on lambda = log dA through dA^l = exp(l lambda). Gradients of the real
    loss wrt a complex w are dL/dRe w + i dL/dIm w (torch's convention, which ``view_as_real`` of the parameters
    pairs with); for the holomorphic maps here they chain by multiplying with conj(dw'/dw). With S0 = sum_l G_l dA^l
    and S1 = sum_l l G_l dA^l (G = dL/dK):
    grad coef = 2 conj(S0), grad lambda = 2 conj(coef S1), dlambda/dz = 2 / (1 - z^2), d dB/dz = dB / (1 - z).
    Both sums and the forward use the block-power trick (l = q S + r: dA^l = dA^r dA^(qS), so O(sqrt L) powers per
    mode and one batched matrix product). Not twice differentiable (no caller needs it).
    """

    @staticmethod
    def forward(ctx, log_dt, log_a_real, a_imag, b, c, length: int):
        blk = max(1, math.isqrt(length - 1) + 1) if length > 1 else 1  # S: powers dA^r for r < S
        nq = -(-length // blk)  # Q: powers dA^(qS) for q < Q
        powers, steps = _vandermonde_consts(blk, nq, log_dt.device, log_dt.dtype)
        dt = log_dt.exp()[:, None]  # (H, 1)
        z = torch.complex(-log_a_real.exp(), a_imag) * (dt * 0.5)  # (H, N/2) dt A / 2
        inv = torch.reciprocal(1 - z)
        dt_inv = dt * inv
        cc = torch.view_as_complex(c)
        db = torch.view_as_complex(b) * dt_inv  # (H, N/2) dB
        coef = cc * db
        lam = torch.log((1 + z) * inv)  # (H, N/2) log dA
        pw = torch.exp(lam[:, None, :] * powers[:, None])  # (H, S+Q, N/2) dA^r then dA^(qS)
        inner = coef[:, None, :] * pw[:, :blk]  # (H, S, N/2)
        k = (inner @ pw[:, blk:].transpose(1, 2)).real * 2  # (H, S, Q)
        ctx.save_for_backward(z, inv, dt, dt_inv, cc, db, coef, pw, steps)
        ctx.shape = (length, blk, nq)
        return k.transpose(1, 2).reshape(k.size(0), -1)[:, :length]  # (H, L)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gk):
        z, inv, dt, dt_inv, cc, db, coef, pw, steps = ctx.saved_tensors
        length, blk, nq = ctx.shape
        h, n2 = z.shape
        g = F.pad(gk, (0, blk * nq - length)).reshape(h, nq, blk)  # (H, Q, S) G_(qS+r)
        g2 = torch.cat([g, g * steps], 1)  # (H, 2Q, S): G_l and l G_l
        t = g2 @ torch.view_as_real(pw[:, :blk]).reshape(h, blk, 2 * n2)  # (H, 2Q, N) sum_r G dA^r as [re, im]
        s01 = (torch.view_as_complex(t.view(h, 2, nq, n2, 2)) * pw[:, None, blk:]).sum(2)  # (H, 2, N/2)
        s0x2 = s01[:, 0] * 2  # conj(grad coef)
        v = s0x2 * cc  # conj(grad dB)
        vdb = v * db
        # conj(grad z): through lambda (4 coef S1 / (1 - z^2)) and through dB (conj(grad dB) dB / (1 - z))
        u = torch.addcmul(vdb * inv, coef * s01[:, 1], torch.reciprocal(1 - z * z), value=4)
        grad_c = torch.view_as_real(torch.conj_physical(s0x2 * db))
        grad_b = torch.view_as_real(torch.conj_physical(v * dt_inv))
        grad_log_a_real = u.real * z.real  # d Re(z) / d log_a_real = Re(z)
        grad_a_imag = u.imag * (dt * -0.5)
        grad_log_dt = torch.addcmul(u * z, v, db).real.sum(1)  # dt d/d dt: z and dB are both linear in dt
        return grad_log_dt, grad_log_a_real, grad_a_imag, grad_b, grad_c, None


_CONSTS: dict = {}


def _vandermonde_consts(blk: int, nq: int, device: torch.device, dtype: torch.dtype):
    """:class:`VandermondeKernel`'s constants, built once per (S, Q, device, dtype), so no op per step: ``powers``
    (S+Q,), the exponents r < S then q S for q < Q; ``steps`` (Q, S), l = q S + r. One entry per sequence length
    seen (a few KB each: every length up to 1,800 is ~7 MB)."""
    key = (blk, nq, device, dtype)
    if key not in _CONSTS:
        powers = torch.cat([torch.arange(blk), torch.arange(nq) * blk])
        steps = torch.arange(nq * blk).view(nq, blk)
        _CONSTS[key] = (powers.to(device, dtype), steps.to(device, dtype))
    return _CONSTS[key]


class S4D(nn.Module):
    """One direction of an S4D layer without non-linearity: y = K * u + D u over (N, S, H); in fp32 under autocast
    (the kernel is a product of up to L powers of dA, and FFTs have no bf16 path on CUDA)."""

    def __init__(self, h: int, n_state: int = 64, init: str = "inv"):
        super().__init__()
        self.kernel = S4DKernel(h, n_state, init)
        self.d = nn.Parameter(torch.randn(h))
        mark_group(self.parameters(), "s4d")  # the papers' code's "S4 group": own lr cap (rirlab.train.param_groups)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        u = at_least_fp32(u)
        with full_precision(u):
            return self.conv(u)

    def conv(self, u: torch.Tensor) -> torch.Tensor:
        return CausalConv.apply(u, self.kernel(u.size(1)), self.d)  # (N, S, H)


class CausalConv(torch.autograd.Function):
    """y = K * u + D u over (N, S, H) by FFT, zero-padded to 2S so the circular convolution is the causal one.

    The backward is written out (autograd's through rfft/irfft and the complex product dispatches ~37 ops per
    direction, conj and clone copies included): both adjoints are correlations, computed with the same FFTs,
    grad u[m] = sum_t g[t] K[t - m] = irfft(rfft(g) conj(rfft(K)))[m] and grad K = the same with u summed over
    the batch; the wrapped-around terms land in the zero padding."""

    @staticmethod
    def forward(ctx, u, k, d):
        s = u.size(1)
        uf = torch.fft.rfft(u.transpose(1, 2), n=2 * s)  # (N, H, S+1)
        kf = torch.fft.rfft(k, n=2 * s)  # (H, S+1)
        y = torch.fft.irfft(uf * kf, n=2 * s)[..., :s]  # (N, H, S) causal conv
        ctx.save_for_backward(u, d, uf, kf)
        # contiguous (N, S, H): a transposed result would make the GELU after it back-propagate ~9x slower
        return torch.addcmul(y.transpose(1, 2).contiguous(), u, d)  # (N, S, H)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        u, d, uf, kf = ctx.saved_tensors
        s = u.size(1)
        gf = torch.fft.rfft(g.transpose(1, 2), n=2 * s)  # (N, H, S+1)
        grad_u = torch.fft.irfft(gf * torch.conj_physical(kf), n=2 * s)[..., :s]  # (N, H, S)
        grad_u = torch.addcmul(grad_u.transpose(1, 2), g, d)  # (N, S, H)
        grad_k = torch.fft.irfft((gf * torch.conj_physical(uf)).sum(0), n=2 * s)[..., :s]  # (H, S)
        grad_d = (g * u).sum((0, 1))  # (H,)
        return grad_u, grad_k, grad_d


class BiS4D(nn.Module):
    """Forward and backward (per-sequence flipped) S4D, each followed by GELU: eq. 13-14 -> [x_f; x_b] (eq. 15).

    ``dropout``: the authors' tied dropout before and after each GELU (:func:`tied_dropout`); 0 for none.
    ``reverse_trainable``: False (the authors' code) runs the backward branch without autograd and gives its
    parameters a zero gradient; True trains both directions.
    """

    def __init__(self, h: int, n_state: int = 64, init: str = "inv", dropout: float = 0.0,
                 reverse_trainable: bool = True):
        super().__init__()
        self.fwd = S4D(h, n_state, init)
        self.bwd = S4D(h, n_state, init)
        self.p = dropout
        self.reverse_trainable = reverse_trainable

    def act(self, y: torch.Tensor) -> torch.Tensor:
        """dropout, GELU, dropout (N, S, H); the identity on the dropouts at eval."""
        return tied_dropout(F.gelu(tied_dropout(y, self.p, self.training)), self.p, self.training)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(1)
        x = x * mask[..., None]  # pads must not enter the causal convolution
        xf = self.act(self.fwd(x))  # (N, S, H) eq. 13
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.reverse_trainable):
            xb = flip_valid(self.act(self.bwd(flip_valid(x, lengths))), lengths)  # (N, S, H) eq. 14
            xb = xb * mask[..., None]  # pads 0, as the authors' reverse() leaves them (seen only by BatchNorm's stats)
        if not self.reverse_trainable and torch.is_grad_enabled():  # a zero gradient, so weight decay still applies
            xb = xb + sum(p.sum() for p in self.bwd.parameters()) * 0.0
        return torch.cat([xf, xb], dim=-1)  # (N, S, 2H) eq. 15


class PreChunkS4D(nn.Module):
    """RIR pre-chunk layer: bidirectional S4D, GLU mixing + residual (eq. 16), leaf transform (eq. 17).

    ``dropout``: tied dropout around each GELU (authors' code); ``glu_bias``: biases in W_u, W_v (authors' code) or
    none (eq. 16 as printed); ``norm``: after the residual (``none``, ``batch``, ``layer``); ``reverse_trainable``:
    see :class:`BiS4D`."""

    def __init__(self, d: int, n_state: int = 64, init: str = "inv", dropout: float = 0.0, glu_bias: bool = True,
                 norm: str = "none", reverse_trainable: bool = True):
        super().__init__()
        self.s4d = BiS4D(d, n_state, init, dropout, reverse_trainable)
        self.w_u = nn.Linear(2 * d, d, bias=glu_bias)  # gate
        self.w_v = nn.Linear(2 * d, d, bias=glu_bias)  # value
        if norm not in NORMS:
            raise ValueError(f"unknown s4d_norm {norm!r}; use one of {tuple(NORMS)}")
        self.norm = NORMS[norm](d)
        self.leaf = LeafTransform(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        cat = self.s4d(x, mask)  # (N, S, 2D)
        out = torch.sigmoid(self.w_u(cat)) * self.w_v(cat) + x  # (N, S, D) eq. 16
        return self.leaf(self.norm(out))  # (N, S, D) the authors' post-norm, eq. 17


class ChannelBatchNorm(nn.BatchNorm1d):
    """BatchNorm1d over the channels of (N, S, D), statistics over every (sequence, position) of the batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


NORMS = {"none": lambda d: nn.Identity(), "batch": ChannelBatchNorm, "layer": nn.LayerNorm}  # keys of S4DNorm


def leaf_layer(cfg: PreChunkConfig) -> nn.Module:
    """The layer before the RvNN: the S4D pre-chunk layer (eq. 13-17) or the leaf transform alone (eq. 17)."""
    if cfg.s4d:
        return PreChunkS4D(cfg.hidden_size, cfg.s4d_state, cfg.s4d_init, cfg.s4d_dropout, cfg.s4d_glu_bias,
                           cfg.s4d_norm, cfg.s4d_reverse_trainable)
    return LeafTransform(cfg.hidden_size)
