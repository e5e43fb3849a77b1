"""Gated Recursive Cell (RIR paper, Appendix J, eq. 10-11), the leaf transform (eq. 17) and the GRC recurrence (eq. 2).

``GRCConfig`` holds the settings every GRC-based model shares; the families extend it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput


@dataclass(config=STRICT)
class GRCConfig:
    """Settings shared by the GRC-based models (RIR App. K ListOps defaults)."""

    hidden_size: int = Field(128, ge=2)
    cell_mult: int = Field(4, ge=1)  # d_cell = cell_mult * hidden_size
    dropout: float = Field(0.1, ge=0, lt=1)
    in_dropout: Optional[float] = Field(None, ge=0, lt=1)  # on the embedded tokens (heads.TaskModel); None = dropout


def dropout_scale(p: float) -> float:
    """1/(1-p') for the drop probability p' = p rounded to a multiple of 2^-16 that the masks use."""
    return 65536.0 / (65536 - round(p * 65536))


def uniform_int16(n: int, device) -> torch.Tensor:
    """n uniform int16 values from torch's generator of ``device`` by a bounded ``randint`` (the same call on every
    device: CUDA's Philox and CPU's mt19937 are each seeded by torch.manual_seed, so runs repeat per device)."""
    return torch.randint(-(2**15), 2**15, (n,), dtype=torch.int16, device=device)


def random_bits16(n: int, device) -> torch.Tensor:
    """n uniform int16 values. On CPU from numpy's SFC64 seeded by one draw of torch's generator (so
    torch.manual_seed still fixes them): about 1.8x faster than torch's mt19937 for a search's masks.
    Elsewhere (CUDA) :func:`uniform_int16` on the device: no host round trip, reproducible under manual_seed."""
    if torch.device(device).type == "cpu":
        words = (n + 3) // 4
        seed = int(torch.randint(0, 2**62, (1,)))
        return torch.from_numpy(np.random.SFC64(seed).random_raw(words).view(np.int16))[:n]
    return uniform_int16(n, device)


def dropout_keep_mask(shape, p: float, device, out: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean keep mask of inverted dropout (keep with probability 1 - p'), from 16-bit uniform integers.

    Four 16-bit lanes per 64-bit draw on CPU (:func:`random_bits16`): about 6x cheaper than ``rand(...) >= p``;
    on other devices one bounded int16 ``randint`` (:func:`uniform_int16`).
    p' = p rounded to a multiple of 2^-16 (0.1 -> 0.100006); scale kept values by
    :func:`dropout_scale` (which uses p'), so the expectation is exactly preserved.
    """
    u = random_bits16(math.prod(shape), device).view(shape)
    return torch.ge(u, round(p * 65536) - 32768, out=out)


def dropout_scaled_mask(shape, p: float, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """:func:`dropout_keep_mask`'s draw as ``keep * dropout_scale(p)`` in ``dtype`` (float32 or float64): the
    comparison writes 1.0 / 0.0 directly (about 4x cheaper than a bool mask on CPU), and ``x * mask`` is one pass
    where ``x * keep * scale`` was two with a bool promotion (x * 1 * scale = x * scale, x * 0 = 0: same values)."""
    u = random_bits16(math.prod(shape), device).view(shape)
    out = torch.empty(shape, dtype=dtype, device=device)
    return torch.ge(u, round(p * 65536) - 32768, out=out).mul_(dropout_scale(p))


def fast_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout with :func:`dropout_keep_mask` (several times cheaper than F.dropout's mask on CPU)."""
    if not training or p == 0:
        return x
    if x.dtype in (torch.float32, torch.float64):
        return x * dropout_scaled_mask(x.shape, p, x.device, x.dtype)
    return x * dropout_keep_mask(x.shape, p, x.device) * dropout_scale(p)


class FastDropout(nn.Module):
    """``nn.Dropout`` with :func:`fast_dropout`'s masks (p rounded to a multiple of 2^-16); ``p`` may be set later."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


@dataclasses.dataclass(frozen=True)
class GRCWeights:
    """What a fused kernel needs of a GRC cell: the tensors of eq. 10-11, the dropout p and the LayerNorm eps."""

    w1: torch.Tensor  # (d_cell, 2D)
    b1: torch.Tensor  # (d_cell,)
    w2: torch.Tensor  # (4D, d_cell)
    b2: torch.Tensor  # (4D,)
    gamma: torch.Tensor  # (D,) LayerNorm weight
    beta: torch.Tensor  # (D,) LayerNorm bias
    p: float  # dropout on the hidden layer (training mode)
    eps: float  # LayerNorm eps


class GRC(nn.Module):
    """GELU Gated Recursive Cell R(child_l, child_r) -> parent, eq. 10-11; d_cell = cell_mult * d.

    What searches use: :meth:`compose` on [child_l; child_r] with an optional keep mask of shape (rows, ``d_cell``)
    drawn with probability ``p``; :meth:`weights` for a fused kernel.
    """

    def __init__(self, d: int, cell_mult: int = 4, dropout: float = 0.1):
        super().__init__()
        self.w1 = nn.Linear(2 * d, cell_mult * d)
        self.w2 = nn.Linear(cell_mult * d, 4 * d)
        self.ln = nn.LayerNorm(d)
        self.p, self.d_cell = dropout, cell_mult * d

    @classmethod
    def from_config(cls, cfg: GRCConfig) -> GRC:
        return cls(cfg.hidden_size, cfg.cell_mult, cfg.dropout)

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        return self.compose(torch.cat([left, right], dim=-1))  # (..., 2D) in

    def compose(self, pair: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """The cell on [child_l; child_r] given as one (..., 2D) tensor (saves a concatenation).

        ``keep``: a dropout keep mask drawn by the caller (rows of (..., d_cell) flattened), else one is drawn here.
        """
        d = pair.size(-1) // 2
        hidden = F.gelu(self.w1(pair))  # (..., d_cell)
        if keep is not None:
            hidden = hidden * keep.view(hidden.shape) * dropout_scale(self.p)
        else:
            hidden = fast_dropout(hidden, self.p, self.training)
        out = self.w2(hidden)  # (..., 4D): l, r, g, h of eq. 10
        gates = torch.sigmoid(out[..., : 3 * d])  # (..., 3D) sigma(l), sigma(r), sigma(g)
        mixed = gates[..., :d] * pair[..., :d] + gates[..., d : 2 * d] * pair[..., d:]  # sigma(l) c_l + sigma(r) c_r
        mixed = mixed + gates[..., 2 * d :] * out[..., 3 * d :]  # (..., D) + sigma(g) h
        return self.ln(mixed)  # (..., D) eq. 11

    def weights(self) -> GRCWeights:
        return GRCWeights(self.w1.weight, self.w1.bias, self.w2.weight, self.w2.bias, self.ln.weight, self.ln.bias,
                          self.p, self.ln.eps)


class LeafTransform(nn.Module):
    """Initial leaf transformation inp = LN(x W_init), eq. 17."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.ln(self.w(x))  # mask unused; accepted so leaf layers are interchangeable with PreChunkS4D


class OneBeamEncoder(nn.Module):
    """Leaf transform (eq. 17), then an RvNN that keeps one beam run over the whole sequence as one chunk; its root.

    ``tree`` follows the inner-RvNN interface of the RIR recursion (rirlab.models.rir): (M, 1, W, D) leaves and
    (M,) lengths in, (M, 1, D) roots and (M, 1) scores out (OM, CRvNN, the greedy EGT search).
    """

    def __init__(self, hidden_size: int, tree: nn.Module):
        super().__init__()
        self.leaf = LeafTransform(hidden_size)
        self.tree = tree

    def forward(self, x: torch.Tensor, mask: torch.Tensor, **tree_kwargs) -> EncoderOutput:
        """``tree_kwargs``: passed on to the tree (a subclass's extra inputs)."""
        roots, _ = self.tree(self.leaf(x).unsqueeze(1), mask.sum(1), **tree_kwargs)  # (N, 1, D)
        return EncoderOutput(roots[:, 0])  # (N, D)


def rnn_compose(cell: GRC, x: torch.Tensor, mask: torch.Tensor, start: str = "zero") -> torch.Tensor:
    """Left-to-right GRC recurrence over the middle axis, h_t = R(h_{t-1}, x_t) (RIR eq. 2).

    ``start``: ``zero`` (default): h_0 = 0, so the first token is composed too, h_1 = R(0, x_1), as eq. 2 writes
    R(h_0, x_1) and the authors' RecurrentGRC / RecurrentGRCX run; ``first_token``: h_1 = x_1, which makes a pair
    R(x_1, x_2), BBT-GRC's composition (eq. 3, the authors' BalancedTreeCell).
    x: (..., T, D), mask: (..., T) with valid positions a prefix. Returns (..., D).
    """
    if start == "first_token":
        h, begin = x[..., 0, :], 1  # (..., D)
    else:
        h, begin = torch.zeros_like(x[..., 0, :]), 0  # (..., D) h_0
    for t in range(begin, x.size(-2)):
        h = torch.where(mask[..., t, None], cell(h, x[..., t, :]), h)  # (..., D)
    return h


def grc_cell(cell: GRC, pair: torch.Tensor, pre: torch.Tensor | None = None) -> torch.Tensor:
    """``cell.compose(pair)`` for rows pair (P, 2D) as ONE autograd node with a hand-written backward
    (:class:`_GRCCell`): the same values, gradients and dropout draws (one keep row per composition, from
    :func:`dropout_keep_mask` as :func:`fast_dropout` draws it), fewer intermediate tensors and no per-op autograd
    records. For the searches that compose many pairs at once (CRvNN, BT-GRC, GT-GRC). Under autocast it is the
    op-by-op cell (the hand-written kernel keeps one dtype).

    ``pre`` (P, d_cell), optional: the first layer's pre-activation ``W1 pair + b1`` of these rows, computed by the
    caller (a search that keeps it for pairs that did not change since an earlier step); the forward then skips
    that product. The backward is the same: it treats ``pre`` as that function of ``pair`` (ignored under
    autocast)."""
    if torch.is_autocast_enabled(pair.device.type):
        return cell.compose(pair)
    keep = None
    if cell.training and cell.p > 0:  # keep * scale, in float32 for a reduced-precision pair (z.mul_ rounds once)
        keep = dropout_scaled_mask((pair.size(0), cell.d_cell), cell.p, pair.device,
                                   torch.promote_types(pair.dtype, torch.float32))
    return _GRCCell.apply(pair, pre, keep, dropout_scale(cell.p), cell.ln.eps, cell.w1.weight, cell.w1.bias,
                          cell.w2.weight, cell.w2.bias, cell.ln.weight, cell.ln.bias)


class _GRCCell(torch.autograd.Function):
    """Forward and hand-written backward of :func:`grc_cell` (LayerNorm and GELU by ATen's own kernels)."""

    @staticmethod
    def forward(ctx, pair, pre, keep, scale, eps, w1, b1, w2, b2, gamma, beta):
        d = pair.size(1) // 2
        a = torch.addmm(b1, pair, w1.t()) if pre is None else pre  # (P, Dc)
        z = F.gelu(a)
        if keep is not None:  # keep: the scaled mask (dropout_scaled_mask), as fast_dropout's x * keep * scale
            z.mul_(keep)
        o = torch.addmm(b2, z, w2.t())  # (P, 4D): l, r, g, h of eq. 10
        torch.sigmoid(o[:, : 3 * d], out=o[:, : 3 * d])  # the gates, in place (their values are kept)
        u = o[:, :d] * pair[:, :d]
        u.addcmul_(o[:, d : 2 * d], pair[:, d:]).addcmul_(o[:, 2 * d : 3 * d], o[:, 3 * d :])  # (P, D) eq. 10
        y, mean, rstd = torch.native_layer_norm(u, (d,), gamma, beta, eps)  # eq. 11
        ctx.save_for_backward(pair, keep, w1, w2, gamma, beta, a, z, o, u, mean, rstd)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, g_y):
        pair, keep, w1, w2, gamma, beta, a, z, o, u, mean, rstd = ctx.saved_tensors
        d = pair.size(1) // 2
        g_u, g_gamma, g_beta = torch.ops.aten.native_layer_norm_backward(g_y, u, (d,), mean, rstd, gamma, beta,
                                                                         [True, True, True])
        g_o = torch.empty_like(o)  # (P, 4D)
        sg = o[:, : 3 * d]
        torch.mul(g_u, pair[:, :d], out=g_o[:, :d])  # d/d sigma(l), sigma(r), sigma(g), then through the sigmoid
        torch.mul(g_u, pair[:, d:], out=g_o[:, d : 2 * d])
        torch.mul(g_u, o[:, 3 * d :], out=g_o[:, 2 * d : 3 * d])
        torch.ops.aten.sigmoid_backward(g_o[:, : 3 * d], sg, grad_input=g_o[:, : 3 * d])
        torch.mul(g_u, o[:, 2 * d : 3 * d], out=g_o[:, 3 * d :])
        g_z = g_o @ w2  # (P, Dc)
        if keep is not None:
            g_z.mul_(keep)  # the scaled mask
        g_a = torch.ops.aten.gelu_backward(g_z, a)  # (P, Dc)
        g_pair = g_a @ w1  # (P, 2D)
        g_pair[:, :d].addcmul_(g_u, o[:, :d])
        g_pair[:, d:].addcmul_(g_u, o[:, d : 2 * d])
        return (g_pair, None, None, None, None, g_a.t() @ pair, g_a.sum(0), g_o.t() @ z, g_o.sum(0), g_gamma, g_beta)
