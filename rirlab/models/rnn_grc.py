"""``rnn_grc``: the GRC cell as a left-to-right RNN (RNN-GRC, RIR paper eq. 2); also RIR-GRC's inner RvNN."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn

from rirlab.models.base import EncoderOutput
from rirlab.models.grc import GRC, GRCConfig, LeafTransform, dropout_scaled_mask, rnn_compose
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register

_ln_backward = torch.ops.aten.native_layer_norm_backward


class GRCRNN(nn.Module):
    """The GRC recurrence h_t = R(h_{t-1}, x_t) over each row as an inner RvNN (one beam, score 0): RIR-GRC's chunks.

    forward(x (M, 1, L, D), lengths (M,), scores (M, 1) or None) -> roots (M, 1, D), scores (M, 1).
    """

    beam_size = 1
    single_passes_through = True  # rir_encode: a sequence of one item is its own root (the authors loop while S > 1)

    def __init__(self, cfg: GRCConfig):
        super().__init__()
        self.cell = GRC.from_config(cfg)
        self.start = getattr(cfg, "rnn_start", "zero")

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        m, b_in = x.shape[:2]
        assert b_in == 1, "a GRC RNN keeps one beam"
        root = recurrence(self.cell, x[:, 0], lengths, self.start)  # (M, D)
        return root[:, None], x.new_zeros(m, 1) if scores is None else scores  # (M, 1, D), (M, 1)


class RNNEncoder(nn.Module):
    """Leaf transform (eq. 17), then the GRC recurrence over the whole sequence; the last state."""

    def __init__(self, cfg: GRCConfig):
        super().__init__()
        self.leaf = LeafTransform(cfg.hidden_size)
        self.cell = GRC.from_config(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        return EncoderOutput(recurrence(self.cell, self.leaf(x), mask.sum(1)))  # (N, D)


def recurrence(cell: GRC, x: torch.Tensor, lengths: torch.Tensor, start: str = "zero") -> torch.Tensor:
    """The GRC recurrence over rows x (M, T, D) of ``lengths`` (M,): :func:`fused_rnn_compose`, or under autocast
    (bf16 / fp16: the hand-written kernel keeps one dtype) the op-by-op :func:`rirlab.models.grc.rnn_compose`."""
    if torch.is_autocast_enabled(x.device.type):
        mask = torch.arange(x.size(1), device=x.device) < lengths[:, None]  # (M, T)
        return rnn_compose(cell, x, mask, start)
    return fused_rnn_compose(cell, x, lengths, start)


def fused_rnn_compose(cell: GRC, x: torch.Tensor, lengths: torch.Tensor, start: str = "zero") -> torch.Tensor:
    """:func:`rirlab.models.grc.rnn_compose` over rows x (M, T, D) of ``lengths`` (M,) (valid positions a prefix),
    as ONE autograd node with a hand-written backward (:class:`_GRCRecurrence`). Returns (M, D).

    The same values and gradients as ``rnn_compose`` (tests/models/test_skeleton.py holds them together in float64);
    faster because the recurrence is a chain of small compositions: rows are sorted by length so the rows still
    reading at step t are a prefix and padded positions cost nothing, the inputs' half of the cell's first layer is
    one product for every position, the forward records nothing for autograd, and the backward computes each
    weight's gradient as one product over all steps. Dropout (training): one keep row per composition, drawn up front.
    """
    m, width, d = x.shape
    lengths = lengths.clamp(min=0, max=width)
    sorted_len, order = lengths.sort(descending=True, stable=True)  # (M,)
    lens = sorted_len.tolist()
    begin = 1 if start == "first_token" else 0
    n_t = [sum(1 for L in lens if L > t) for t in range(begin, lens[0] if lens else 0)]  # rows reading at step t
    xs = x[order]  # (M, T, D)
    if start == "first_token":
        h0 = xs[:, 0]
    else:
        h0 = x.new_zeros(m, d)
    if not n_t:
        return h0[torch.argsort(order)]
    rows = sum(n_t)
    keep = None
    if cell.training and cell.p > 0:
        keep = dropout_scaled_mask((rows, cell.d_cell), cell.p, x.device, x.dtype)  # keep * scale
    out = _GRCRecurrence.apply(xs, h0, keep, begin, n_t, cell.ln.eps, cell.w1.weight, cell.w1.bias, cell.w2.weight,
                               cell.w2.bias, cell.ln.weight, cell.ln.bias)  # (M, D) in sorted order
    inv = torch.empty_like(order)
    inv[order] = torch.arange(m, device=x.device)
    return out[inv]


def step_rows(n_t: list[int], m: int, width: int, begin: int, device: torch.device):
    """Host-built row indices of :class:`_GRCRecurrence`'s step-major packing (composition rows r, step t's n_t rows
    at offset sum_{s<t} n_s): ``x_rows`` (R,), the row of ``xs.view(M T, D)`` each composition reads;
    ``prev_rows`` (R,), the row of [h_0 (M) | every composition's output (R)] it reads as h_{t-1}; ``last`` (M,),
    the row of that same table holding each row's final state. One transfer to the device for the three."""
    n = np.asarray(n_t, dtype=np.int64)
    starts = np.cumsum(n) - n  # step t's first composition row
    step = np.repeat(np.arange(n.size), n)  # (R,) the step of each composition
    row = np.arange(int(n.sum())) - np.repeat(starts, n)  # (R,) its row (sorted order)
    x_rows = row * width + begin + step
    block = np.concatenate([[0], m + starts])  # where h_{t-1} of step t starts in [h_0 | outputs]: h_0, then step t-1's
    prev_rows = block[step] + row
    steps_of = np.searchsorted(-n, -np.arange(m), side="left")  # row i composes at the steps t with n_t > i
    last = np.where(steps_of > 0, block[steps_of] + np.arange(m), np.arange(m))  # output of its last step, or h_0
    flat = torch.from_numpy(np.concatenate([x_rows, prev_rows, last])).to(device)
    return flat.split([x_rows.size, prev_rows.size, m])


class _GRCRecurrence(torch.autograd.Function):
    """Forward and hand-written backward of :func:`fused_rnn_compose`. Per-step tensors are packed step-major:
    step t's n_t rows are contiguous at offset sum_{s<t} n_s (LayerNorm and GELU by ATen's own kernels).

    A step is a chain of small ops, so its op count is its cost on a GPU (one launch each; ``rirlab bench``
    ``ops_per_step``): every buffer is cut into its steps' rows by ONE ``split`` before the loop (no slice per step),
    the ops write their step's rows with ``out=`` (no copy), and what does not depend on the step is computed once
    for all of them: 9 ops per step forward, 7 backward (were ~45 each)."""

    @staticmethod
    def forward(ctx, xs, h0, keep, begin, n_t, eps, w1, b1, w2, b2, gamma, beta):
        m, width, d = xs.shape
        dc = w1.size(0)
        x_rows, prev_rows, last = step_rows(n_t, m, width, begin, xs.device)
        w1h, w1x = w1[:, :d], w1[:, d:]  # (Dc, D) each: the first layer on h and on x_t
        xp = xs.reshape(m * width, d).index_select(0, x_rows)  # (R, D) the input of each composition
        r = xp.size(0)
        a = torch.addmm(b1, xp, w1x.t())  # (R, Dc) the inputs' half of the first layer, then + h's
        z, o, u = xs.new_empty(r, dc), xs.new_empty(r, 4 * d), xs.new_empty(r, d)
        o4 = o.view(r, 4, d)
        cut = lambda t: t.split(n_t)  # noqa: E731
        w1ht, w2t = w1h.t(), w2.t()
        h, ends = h0, []  # h_{t-1}; the final states of rows that stop reading (sorted order), later steps first
        steps = zip(n_t, cut(a), cut(z), cut(o), cut(o[:, : 3 * d]), *(cut(o4[:, k]) for k in range(4)), cut(xp),
                    cut(u), cut(keep) if keep is not None else itertools.repeat(None))
        for n, a_t, z_t, o_t, gates, sl, sr, sg, hh, x_t, u_t, keep_t in steps:
            if h.size(0) > n:  # rows n.. made their last composition: their state is final
                ends.append(h[n:])
                h = h[:n]
            a_t.addmm_(h, w1ht)  # (n, Dc)
            torch.ops.aten.gelu.out(a_t, out=z_t)
            if keep_t is not None:
                z_t.mul_(keep_t)
            torch.addmm(b2, z_t, w2t, out=o_t)  # (n, 4D): l, r, g, h of eq. 10
            gates.sigmoid_()  # the gates, in place (their values are kept)
            torch.mul(sl, h, out=u_t).addcmul_(sr, x_t).addcmul_(sg, hh)  # eq. 10
            h = torch.native_layer_norm(u_t, (d,), gamma, beta, eps)[0]  # eq. 11 (recomputed by the backward)
        ends.append(h)
        out = torch.cat(ends[::-1]) if len(ends) > 1 else h  # (M, D)
        ctx.save_for_backward(xp, h0, keep, w1, w2, gamma, beta, a, z, o, u, x_rows, prev_rows, last)
        ctx.shape, ctx.n_t, ctx.eps = xs.shape, n_t, eps
        return out

    @staticmethod
    def backward(ctx, g_h):
        xp, h0, keep, w1, w2, gamma, beta, a, z, o, u, x_rows, prev_rows, last = ctx.saved_tensors
        (m, width, d), n_t = ctx.shape, ctx.n_t
        r = xp.size(0)
        w1h, w1x = w1[:, :d], w1[:, d:]
        # every composition's output, mean and 1/std again (one LayerNorm over all rows), h_{t-1} of each
        y, mean, rstd = torch.native_layer_norm(u, (d,), gamma, beta, ctx.eps)
        hp = torch.cat([h0, y]).index_select(0, prev_rows)  # (R, D)
        # what does not depend on the output gradients, for all steps at once, side by side per row: d mixed ->
        # d (l, r, g, h) pre-activation [h sigma'(l), x sigma'(r), hh sigma'(g), sigma(g)], then the direct shares
        # of h_{t-1} and x_t [sigma(l), sigma(r)]: ONE product per step gives all six
        o4 = o.view(r, 4, d)
        fac = o.new_empty(r, 6, d)
        torch.mul(o4[:, :3], 1 - o4[:, :3], out=fac[:, :3])  # sigma'
        fac[:, 0].mul_(hp)
        fac[:, 1].mul_(xp)
        fac[:, 2].mul_(o4[:, 3])
        fac[:, 3] = o4[:, 2]
        fac[:, 4:] = o4[:, :2]
        prod = fac  # each step's factors times its d mixed, in place: (R, 6, D) d (l, r, g, h), d h_{t-1}, d x_t
        g_o = prod.view(r, 6 * d)[:, : 4 * d]
        g_a = torch.empty_like(a)  # (R, Dc)
        # the gradient reaching [h_0 | each output]: each row's final state first, the rest written by the steps
        g_all = g_h.new_zeros(m + r, d).index_copy_(0, last, g_h)
        g_h0, g_y = g_all.split([m, r])
        cut = lambda t: t.split(n_t)  # noqa: E731
        g_ys = cut(g_y)
        steps = zip(range(len(n_t) - 1, -1, -1), *(reversed(cut(t)) for t in (u, mean, rstd, prod, g_o, prod[:, 4],
                                                                               a, g_a)),
                    reversed(cut(keep)) if keep is not None else itertools.repeat(None))
        for t, u_t, mean_t, rstd_t, prod_t, go_t, dh_t, a_t, ga_t, keep_t in steps:
            gu = _ln_backward(g_ys[t], u_t, (d,), mean_t, rstd_t, gamma, beta, [True, False, False])[0]  # (n, D)
            prod_t.mul_(gu.unsqueeze(1))
            g_z = torch.mm(go_t, w2)  # (n, Dc)
            if keep_t is not None:
                g_z.mul_(keep_t)
            torch.ops.aten.gelu_backward.grad_input(g_z, a_t, grad_input=ga_t)
            g_prev = g_ys[t - 1] if t else g_h0  # the gradient reaching h_{t-1}: only from this step
            n = ga_t.size(0)
            torch.addmm(dh_t, ga_t, w1h, out=g_prev if g_prev.size(0) == n else g_prev[:n])
        g_xp = torch.addmm(prod[:, 5], g_a, w1x)  # (R, D) through the gated sum and the first layer's input half
        g_xs = g_xp.new_zeros(m * width, d).index_copy_(0, x_rows, g_xp).view(m, width, d)
        _, g_gamma, g_beta = _ln_backward(g_y, u, (d,), mean, rstd, gamma, beta, [False, True, True])
        g_w1 = torch.cat([g_a.t() @ hp, g_a.t() @ xp], 1)  # (Dc, 2D)
        g_w2 = g_o.t() @ z  # (4D, Dc): z holds the dropped hidden layer, what the second layer read
        # g_h0: what reaches h_0 (zero start: discarded by autograd; first_token: x_1)
        return g_xs, g_h0, None, None, None, None, g_w1, g_a.sum(0), g_w2, g_o.sum(0), g_gamma, g_beta


@register("rnn_grc", GRCConfig, table1_row=1)
def rnn_grc(cfg: GRCConfig, info):
    """Plain recurrent GRC baseline (RNN-GRC, RIR paper eq. 2)."""
    return TaskModel(RNNEncoder(cfg), info, cfg)
