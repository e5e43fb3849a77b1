"""``mega``: Moving-average Equipped Gated Attention, the MEGA row of RIR Tables 1-3.

Ma et al., "Mega: Moving Average Equipped Gated Attention", ICLR 2023, arXiv:2209.10655 (equation numbers
below are that paper's); used as a baseline by Ray Chowdhury & Caragea, "Recursion in Recursion: Two-Level
Nested Recursion for Length Generalization with Scalability", NeurIPS 2023, arXiv:2311.04449, which trains it
on ListOps-O and logical inference "with the same hyperparameters as used for ListOps LRA" by Ma et al.
(RIR App. K). Defaults are therefore MEGA's ListOps-LRA setting (its public LRA script and ``mega_lra_listop``
architecture): 6 layers, d = 80, z = 64 (shared Q/K dim), v = 2d = 160 (value / attention output), FFN 2d = 160,
EMA expansion h = 16, bidirectional EMA, softmax attention, LayerNorm *after* each residual sub-layer (post-norm:
the ListOps script does not pass ``--encoder-normalize-before``), full (un-chunked) attention (MEGA's ListOps
result 63.14 that RIR quotes is the full model, not Mega-chunk), mean pooling, dropout 0.1, attention and
hidden dropout 0. Optimisation (AdamW, betas (0.9, 0.98), lr 1e-3, weight decay 0.01, batch 64, clip 1, 3000
warm-up steps then linear decay to 0) lives in the training config: see ``search_spaces/rir_table3.yaml``.

One Mega layer (single head; Q and K share one representation Z):

* Multi-dimensional damped EMA (eq. 2-3): every channel j is expanded by beta_j in R^h, u_t = beta_j x_{t,j};
  h_t = alpha_j * u_t + (1 - alpha_j * delta_j) * h_{t-1}; y_{t,j} = eta_j^T h_t (alpha, delta in (0, 1) via
  sigmoids; eta scaled by 1/sqrt(h)). Computed as a convolution with the kernel
  K_t = sum_n eta_n alpha_n beta_n (1 - alpha_n delta_n)^t (eq. 4-5) via FFT. Bidirectional (MEGA's LRA
  setting): a second kernel runs right-to-left and the two outputs are added, plus a residual omega * x (the
  code's skip term). X' = SiLU(EMA(X)) (the public code applies SiLU to the EMA output; the paper's eq. 6 writes
  X' = EMA(X)); we follow the code.
* Z = SiLU(X' W_z + b_z) (eq. 7); Q = kappa_q * Z + mu_q, K = kappa_k * Z + mu_k (eq. 8-9);
  V = SiLU(X W_v + b_v) (eq. 10, from the layer input, not X').
* O = f(Q K^T + b_rel) V (eq. 11), f = softmax with Q scaled by 1/sqrt(z) (the setting's
  ``--attention-activation-fn softmax``; ``mega_attention: laplace`` gives eq. 16's Laplace function with the
  scores divided by the number of valid keys, as MEGA does for non-softmax functions); b_rel a learned relative
  position bias b[i - j] (distances clamped to +-(``mega_max_positions`` - 1) on longer inputs: our choice).
* gamma = SiLU(X' W_g + b_g) (reset, eq. 12), phi = sigmoid(X' W_phi + b_phi) (update, eq. 13),
  H = SiLU(X' W_h + (gamma * O) U_h + b_h) (eq. 14), Y = phi * H + (1 - phi) * X (eq. 15), then LayerNorm.
* FFN: Y + W_2 SiLU(W_1 Y), then LayerNorm (post-norm).

Chunking (Mega-chunk, §3.5): ``mega_chunk_size`` > 0 splits the sequence into chunks of that length and attends
within each chunk only (the EMA still spans the whole sequence); -1 (default, the ListOps setting) is full
attention.

Padding (right padding, as every rirlab task collates): the EMA input is zeroed at padded positions, so the
right-to-left direction of a valid token sees nothing from padding; padded keys are masked out of attention; the
mean pooling uses valid positions only. Differences: the task head is rirlab's shared MLP (MEGA's LRA head is
one linear layer of width 160 on the mean-pooled state); the EMA kernel is never truncated (the code's
``truncation_length`` 1024 is longer than every ListOps-O / logic input).
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.grc import FastDropout
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register


@dataclass(config=STRICT)
class MegaConfig:
    """MEGA encoder; defaults = MEGA's ListOps-LRA setting (module docstring)."""

    hidden_size: int = Field(80, ge=2)  # d (encoder_embed_dim)
    num_layers: int = Field(6, ge=1)
    dropout: float = Field(0.1, ge=0, lt=1)
    in_dropout: Optional[float] = Field(None, ge=0, lt=1)  # on the embedded tokens (heads.TaskModel); None = dropout
    mega_z_dim: int = Field(64, ge=1)  # shared Q/K representation Z (eq. 7)
    mega_v_dim: Optional[int] = Field(None, ge=1)  # value / attention output; None = 2 * hidden_size (160)
    mega_ffn_dim: Optional[int] = Field(None, ge=1)  # FFN inner size; None = 2 * hidden_size (160)
    mega_ema_dim: int = Field(16, ge=1)  # EMA expansion h (n_dim)
    mega_bidirectional: bool = True
    mega_attention: Literal["softmax", "laplace"] = "softmax"
    mega_chunk_size: int = Field(-1, ge=-1)  # -1 = full attention; > 0 = Mega-chunk
    mega_attn_dropout: float = Field(0.0, ge=0, lt=1)  # on attention weights (the script: 0)
    mega_act_dropout: float = Field(0.0, ge=0, lt=1)  # on V and the FFN activation (the script: 0)
    mega_max_positions: int = Field(2048, ge=1)  # relative-position bias table covers distances below this

    def __post_init__(self):
        if self.mega_chunk_size == 0:
            raise ValueError("mega_chunk_size must be -1 (full attention) or a positive chunk length")


class MultiDimEMA(nn.Module):
    """Multi-dimensional damped EMA (eq. 2-5), optionally bidirectional, as an FFT convolution; (N, S, D) in/out."""

    def __init__(self, d: int, h: int, bidirectional: bool = True):
        super().__init__()
        self.d, self.h, self.bidirectional = d, h, bidirectional
        k = 2 * d if bidirectional else d  # kernels: forward then (if bidirectional) backward
        self.alpha_logit = nn.Parameter(torch.randn(k, h, 1) * 0.2)  # alpha = sigmoid(.)
        self.delta_logit = nn.Parameter(torch.randn(k, h, 1) * 0.2)  # delta = sigmoid(.)
        sign = torch.ones(k, h, 1)
        sign[:, 1::2] = -1  # expansion beta initialised around +-1 alternately (as MEGA's code)
        self.beta = nn.Parameter(sign + 0.02 * torch.randn(k, h, 1))
        self.eta = nn.Parameter(torch.randn(k, h))
        self.omega = nn.Parameter(torch.randn(d))  # residual skip omega * x

    def coeffs(self):
        """(alpha, delta, beta, eta * 1/sqrt(h)) with shapes (K, h, 1) x3 and (K, h)."""
        return (torch.sigmoid(self.alpha_logit), torch.sigmoid(self.delta_logit), self.beta,
                self.eta / math.sqrt(self.h))

    def taps(self, length: int) -> torch.Tensor:
        """The circular length-2S kernel (D, 2S) of one convolution (:class:`_EMATaps`) from
        K_t = sum_n eta_n alpha_n beta_n (1 - alpha_n delta_n)^t, t = 0..S-1, per direction, and omega."""
        alpha, delta, beta, eta = self.coeffs()
        return _EMATaps.apply((alpha * beta)[..., 0] * eta, torch.log1p(-alpha * delta)[..., 0], self.omega, length)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x (N, S, D) -> (N, S, D); ``mask`` (N, S) zeroes padding first (None: x is already 0 there)."""
        if mask is not None:
            x = x.masked_fill(~mask[..., None], 0.0)  # padding contributes 0
        dtype = torch.promote_types(x.dtype, torch.float32)  # a 16-bit x runs in float32 (as MEGA's code)
        return _EMAConv.apply(x.to(dtype), self.taps(x.size(1)).to(dtype)).to(x.dtype)


class _EMATaps(torch.autograd.Function):
    """Circular taps (D, 2S), tap l acting on x_{t-l mod 2S}, from c (K, h), log q (K, h) and omega (D,), K = D or
    2D (bidirectional): K_t = sum_n c_n exp(t log q_n), t < S, per kernel; forward taps at lags 0..S-1, backward
    taps at lags -1..-(S-1) wrapped to the end, 0 at lag S; lag 0 holds both directions' K_0 plus omega (MEGA's
    code: both directions act on x_t, plus the skip omega x_t). Hand-written backward: g_c = sum_t g_t q^t,
    g_log q = c sum_t t g_t q^t over the saved powers, and the taps' gradients read back from their places."""

    @staticmethod
    def forward(ctx, c, log_q, omega, length: int):
        d, s = omega.size(0), length
        t = torch.arange(s, device=c.device, dtype=c.dtype)
        powers = torch.exp(log_q[..., None] * t)  # (K, h, S)
        k = (c[:, None] @ powers)[:, 0]  # (K, S)
        lag0 = k[:d, :1] + omega[:, None]  # (D, 1): K_0 plus omega ...
        if k.size(0) > d:  # ... plus the backward direction's K_0, whose lags -(S-1)..-1 end the row
            taps = torch.cat([lag0 + k[d:, :1], k[:d, 1:], k.new_zeros(d, 1), k[d:, 1:].flip(-1)], 1)
        else:
            taps = torch.cat([lag0, k[:d, 1:], k.new_zeros(d, s)], 1)
        ctx.save_for_backward(c, powers, t)  # (one cat: writing the parts into a zeroed row cost ~19 ops, ~13 views)
        return taps

    @staticmethod
    def backward(ctx, g):
        c, powers, t = ctx.saved_tensors
        d, s = g.size(0), t.size(0)
        g_k = g[:, :s]  # (D, S)
        if c.size(0) > d:
            g_k = torch.cat([g_k, torch.cat([g[:, :1], g[:, s + 1:].flip(-1)], 1)])  # (2D, S)
        sums = (torch.stack([g_k, g_k * t], 1) @ powers.transpose(1, 2)).unbind(1)  # sum_t g_t q^t, sum_t t g_t q^t
        return sums[0], c * sums[1], g[:, 0], None


class _EMAConv(torch.autograd.Function):
    """y_t = sum_l k_l x_{t-l mod 2S}, t < S, for x (N, S, D) zero-padded to 2S and taps k (D, 2S), by FFT along S,
    with a hand-written backward: the adjoints are circular cross-correlations by the same FFTs,
    g_x = irfft(G conj(K)), g_k = irfft(sum_n G conj(X)) (autograd's FFT backward took 4x the forward)."""

    @staticmethod
    def forward(ctx, x, k):
        s = x.size(1)
        xf = torch.fft.rfft(x, n=2 * s, dim=1)  # (N, S + 1, D)
        kf = torch.fft.rfft(k, dim=1).t()  # (S + 1, D)
        ctx.save_for_backward(xf, kf)
        return torch.fft.irfft(xf * kf, n=2 * s, dim=1)[:, :s]

    @staticmethod
    def backward(ctx, g):
        xf, kf = ctx.saved_tensors
        s = g.size(1)
        gf = torch.fft.rfft(g, n=2 * s, dim=1)  # (N, S + 1, D)
        g_x = torch.fft.irfft(gf * kf.conj(), n=2 * s, dim=1)[:, :s] if ctx.needs_input_grad[0] else None
        g_k = torch.fft.irfft((gf * xf.conj()).sum(0), n=2 * s, dim=0).t() if ctx.needs_input_grad[1] else None
        return g_x, g_k


class MegaLayer(nn.Module):
    """Moving-average gated attention (eq. 6-15) + FFN, each followed by LayerNorm (post-norm)."""

    def __init__(self, cfg: MegaConfig):
        super().__init__()
        d, z = cfg.hidden_size, cfg.mega_z_dim
        v = cfg.mega_v_dim or 2 * d
        f = cfg.mega_ffn_dim or 2 * d
        self.z, self.v, self.d = z, v, d
        self.attention, self.chunk = cfg.mega_attention, cfg.mega_chunk_size
        self.ema = MultiDimEMA(d, cfg.mega_ema_dim, cfg.mega_bidirectional)
        self.v_proj = nn.Linear(d, v)  # eq. 10
        self.mx_proj = nn.Linear(d, z + v + d + d)  # from X': Z (eq. 7), reset (12), update (13), W_h (14)
        self.h_proj = nn.Linear(v, d, bias=False)  # U_h (eq. 14)
        self.kappa = nn.Parameter(torch.randn(2, z) * 0.02)  # kappa_q, kappa_k (eq. 8-9)
        self.mu = nn.Parameter(torch.zeros(2, z))  # mu_q, mu_k
        self.max_pos = cfg.mega_max_positions
        self.rel_bias = nn.Parameter(torch.randn(2 * cfg.mega_max_positions - 1) * 0.02)  # b_rel[i - j]
        self.norm1 = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, f), nn.Linear(f, d)
        self.norm2 = nn.LayerNorm(d)
        # dropout with 16-bit masks (rirlab.models.grc.fast_dropout: several times cheaper than nn.Dropout's on CPU)
        self.drop = FastDropout(cfg.dropout)
        self.attn_drop = FastDropout(cfg.mega_attn_dropout)
        self.act_drop = FastDropout(cfg.mega_act_dropout)

    def bias(self, s: int, device) -> torch.Tensor:
        i = torch.arange(s, device=device)
        rel = (i[:, None] - i[None, :]).clamp(-(self.max_pos - 1), self.max_pos - 1)
        return self.rel_bias[rel + self.max_pos - 1]  # (S, S)

    def attend(self, q, k, v, mask):
        """O = f(Q K^T + b_rel) V within each chunk (or the whole sequence); q, k (N, S, z), v (N, S, v), mask
        (N, S) the valid keys (None: every key valid, no masking)."""
        n, s, _ = q.shape
        c = s if self.chunk <= 0 or self.chunk >= s else self.chunk
        pad = (-s) % c
        if pad:
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
            mask = F.pad(q.new_ones(n, s, dtype=torch.bool) if mask is None else mask, (0, pad), value=False)
        m = (s + pad) // c
        q, k, v = (t.reshape(n * m, c, t.size(-1)) for t in (q, k, v))
        km = None if mask is None else mask.reshape(n * m, c)  # (B, c) valid keys
        scores = q @ k.transpose(1, 2) + self.bias(c, q.device)  # (B, c, c)
        if self.attention == "softmax":
            if km is not None:
                scores = scores.masked_fill(~km[:, None, :], float("-inf"))
            attn = torch.softmax(scores, dim=-1)
            if km is not None and not bool(km.any(-1).all()):
                attn = attn.nan_to_num(0.0)  # an all-padding chunk attends to nothing
        else:  # Laplace (eq. 16): 0.5 * (1 + erf((x - mu) / (sigma sqrt 2))), mu = sqrt(1/2), sigma = sqrt(1/(4 pi))
            lengths = c if km is None else km.sum(-1).clamp(min=1)[:, None, None]
            x = scores / lengths
            attn = 0.5 * (1 + torch.erf((x - math.sqrt(0.5)) / (math.sqrt(0.25 / math.pi) * math.sqrt(2.0))))
            if km is not None:
                attn = attn * km[:, None, :]
        out = self.attn_drop(attn) @ v  # (B, c, v)
        return out.reshape(n, m * c, -1)[:, :s]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, packed=False, groups=None) -> torch.Tensor:
        """x (N, S, D) (mask (N, S); None: every position valid), or with ``packed`` (True, or the flat indices (P,)
        of ``mask``'s valid positions) those positions only, x (P, D) = x[mask]: the position-wise layers then skip
        padding, and only the EMA and the attention see the padded (N, S, .) layout. ``groups``
        (:func:`length_groups`): attention per group of rows, each cut to its longest row."""
        if isinstance(packed, torch.Tensor) or packed:  # flat (N S) indices of the valid positions: index_select / index_copy, cheaper than a bool mask
            n, s = mask.shape
            at = packed if isinstance(packed, torch.Tensor) else mask.view(-1).nonzero()[:, 0]  # (P,)

            def pad(t):  # (P, c) -> (N, S, c), padding 0
                return t.new_zeros(n * s, t.size(-1)).index_copy(0, at, t).view(n, s, -1)

            def unpad(t):  # (N, S, c) -> (P, c)
                return t.reshape(n * s, -1).index_select(0, at)
        else:
            def pad(t):
                return t

            unpad = pad
        residual = x
        v = self.act_drop(F.silu(self.v_proj(x)))  # (N, S, v), eq. 10
        ema_mask = None if pad is not unpad else mask  # pad() leaves 0 at padding already
        mx = self.drop(F.silu(unpad(self.ema(pad(x), ema_mask))))  # X' (N, S, D), eq. 6 (SiLU: the code)
        zz, r, u, hx = self.mx_proj(mx).split([self.z, self.v, self.d, self.d], dim=-1)
        zz, r, u = F.silu(zz), F.silu(r), torch.sigmoid(u)  # eq. 7, 12, 13
        scale = 1 / math.sqrt(self.z) if self.attention == "softmax" else 1.0  # softmax: Q scaled by 1/sqrt(z)
        q = torch.addcmul(self.mu[0] * scale, zz, self.kappa[0] * scale)  # (N, S, z) eq. 8
        k = torch.addcmul(self.mu[1], zz, self.kappa[1])  # eq. 9
        q, k, v = pad(q), pad(k), pad(v)
        if groups is None:
            o = self.attend(q, k, v, mask)  # (N, S, v), eq. 11
        else:  # rows of similar lengths together, each group cut to its longest row (padded keys weigh 0 anyway)
            o = None
            for rows, w in groups:
                part = self.attend(q[rows, :w], k[rows, :w], v[rows, :w], mask[rows, :w])  # (n_g, w, v)
                o = part.new_zeros(*v.shape[:2], part.size(-1)) if o is None else o  # (N, S, v) autocast's dtype
                o[rows, :w] = part
        o = unpad(o)
        h = self.drop(F.silu(hx + self.h_proj(o * r)))  # eq. 14
        dt = torch.promote_types(torch.promote_types(residual.dtype, h.dtype), u.dtype)  # autocast mixes them
        x = self.norm1(torch.lerp(residual.to(dt), h.to(dt), u.to(dt)))  # eq. 15 (u h + (1 - u) x, one pass), post-norm
        y = self.fc2(self.act_drop(F.silu(self.fc1(x))))
        return self.norm2(x + self.drop(y))


def length_groups(lengths: torch.Tensor, most: int = 3) -> list:
    """Rows split into at most ``most`` groups of similar lengths, [(rows (n_g,), longest length)], chosen to
    minimise the attention's work: sum over groups of n_g * width_g^2, plus one row of the longest length per
    extra group (a group's fixed cost)."""
    lens, order = lengths.sort(descending=True)
    ls = lens.tolist()
    n, top = len(ls), max(ls[0], 1) if ls else 1
    best = {}  # (first row, groups left) -> (cost, splits)

    def cost(i, g):
        if (i, g) in best:
            return best[(i, g)]
        whole = ((n - i) * ls[i] ** 2, [n])  # rows i.. in one group (width ls[i])
        if g > 1:
            for j in range(i + 1, n):
                c, rest = cost(j, g - 1)
                c += (j - i) * ls[i] ** 2 + top ** 2
                if c < whole[0]:
                    whole = (c, [j] + rest)
        best[(i, g)] = whole
        return whole

    groups, i = [], 0
    for j in cost(0, most)[1]:
        groups.append((order[i:j], max(ls[i], 1)))
        i = j
    return groups


class MegaEncoder(nn.Module):
    """Stacked Mega layers, masked mean pooling -> (N, D) (MEGA's LRA ``sen_rep_type mp``; post-norm: no final norm).

    A padded batch runs its position-wise layers on the valid positions only (``MegaLayer(packed=True)``): padding
    never reaches a valid position (the EMA zeroes it, the attention masks it) and the pooling skips it, so the
    values are the same as computing it in full."""

    def __init__(self, cfg: MegaConfig):
        super().__init__()
        self.layers = nn.ModuleList(MegaLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        m = mask[..., None].to(x.dtype)  # (N, S, 1)
        if bool(mask.all()):
            for layer in self.layers:
                x = layer(x, None)  # nothing to mask
            return EncoderOutput(x.sum(1) / m.sum(1).clamp(min=1))  # (N, D)
        at = mask.view(-1).nonzero()[:, 0]  # (P,) the valid positions, flat
        x = x.reshape(-1, x.size(-1)).index_select(0, at)  # (P, D)
        groups = length_groups(mask.sum(1))
        for layer in self.layers:
            x = layer(x, mask, packed=at, groups=groups)
        rows = torch.div(at, mask.size(1), rounding_mode="floor")  # (P,) the row of each position
        pooled = x.new_zeros(mask.size(0), x.size(-1)).index_add(0, rows, x)  # (N, D)
        return EncoderOutput(pooled / m.sum(1).clamp(min=1))  # (N, D)


@register("mega", MegaConfig, select_by="accuracy", table1_row=2)
def mega(cfg: MegaConfig, info):
    """MEGA (Ma et al., ICLR 2023): bidirectional multi-dim EMA + single-head gated softmax attention, post-norm,
    mean pooling; defaults = MEGA's ListOps-LRA setting."""
    return TaskModel(MegaEncoder(cfg), info, cfg)
