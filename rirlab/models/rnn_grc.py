"""``rnn_grc``: the GRC cell as a left-to-right RNN (RNN-GRC, RIR paper eq. 2); also RIR-GRC's inner RvNN."""

from __future__ import annotations

import torch
from torch import nn

from rirlab.models.base import EncoderOutput
from rirlab.models.grc import GRC, GRCConfig, LeafTransform, dropout_scaled_mask, rnn_compose
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register


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


class _GRCRecurrence(torch.autograd.Function):
    """Forward and hand-written backward of :func:`fused_rnn_compose`. Per-step tensors are packed step-major:
    step t's n_t rows are contiguous at offset sum_{s<t} n_s (LayerNorm and GELU by ATen's own kernels)."""

    @staticmethod
    def forward(ctx, xs, h0, keep, begin, n_t, eps, w1, b1, w2, b2, gamma, beta):
        m, width, d = xs.shape
        dc = w1.size(0)
        w1h, w1x = w1[:, :d], w1[:, d:]  # (Dc, D) each: the first layer on h and on x_t
        xp = torch.cat([xs[:n, begin + t] for t, n in enumerate(n_t)])  # (R, D) the input of each composition
        r = xp.size(0)
        a = torch.addmm(b1, xp, w1x.t())  # (R, Dc) the inputs' half of the first layer, then + h's
        hp = xs.new_empty(r, d)  # h_{t-1} of each composition
        z, o, y = xs.new_empty(r, dc), xs.new_empty(r, 4 * d), xs.new_empty(r, d)
        u, mean, rstd = xs.new_empty(r, d), xs.new_empty(r, 1), xs.new_empty(r, 1)
        h = h0.clone()  # (M, D) the running state, rows sorted by length
        at = 0
        for n in n_t:
            s = slice(at, at + n)
            hp[s] = h[:n]
            a[s].addmm_(h[:n], w1h.t())  # (n, Dc)
            zs = torch.ops.aten.gelu.out(a[s], out=z[s])
            if keep is not None:
                zs.mul_(keep[s])
            os_ = torch.addmm(b2, zs, w2.t(), out=o[s])  # (n, 4D): l, r, g, h of eq. 10
            torch.sigmoid(os_[:, : 3 * d], out=os_[:, : 3 * d])  # the gates, in place (their values are kept)
            torch.mul(os_[:, :d], h[:n], out=u[s])
            u[s].addcmul_(os_[:, d : 2 * d], xp[s]).addcmul_(os_[:, 2 * d : 3 * d], os_[:, 3 * d :])  # eq. 10
            y[s], mean[s], rstd[s] = torch.native_layer_norm(u[s], (d,), gamma, beta, eps)  # eq. 11
            h[:n] = y[s]
            at += n
        ctx.save_for_backward(xp, hp, keep, w1, w2, gamma, beta, a, z, o, u, mean, rstd)
        ctx.shape, ctx.begin, ctx.n_t = xs.shape, begin, n_t
        return h

    @staticmethod
    def backward(ctx, g_h):
        xp, hp, keep, w1, w2, gamma, beta, a, z, o, u, mean, rstd = ctx.saved_tensors
        (m, width, d), begin, n_t = ctx.shape, ctx.begin, ctx.n_t
        w1h, w1x = w1[:, :d], w1[:, d:]
        g = g_h.clone()  # (M, D) the gradient reaching h_t
        g_y = torch.empty_like(u)  # (R, D) reaching each composition's output
        g_u = torch.empty_like(u)
        g_o = torch.empty_like(o)  # (R, 4D)
        g_a = torch.empty_like(a)  # (R, Dc)
        g_xp = torch.empty_like(xp)  # (R, D) through the gated sum
        offs = [0]
        for n in n_t:
            offs.append(offs[-1] + n)
        for t in range(len(n_t) - 1, -1, -1):
            n, s = n_t[t], slice(offs[t], offs[t + 1])
            g_y[s] = g[:n]
            gu = g_u[s]
            gu.copy_(torch.ops.aten.native_layer_norm_backward(g[:n], u[s], (d,), mean[s], rstd[s], gamma, beta,
                                                               [True, False, False])[0])
            sg, go = o[s], g_o[s]  # gates (sigmoid, in o[:, :3D]) and h of eq. 10 (o[:, 3D:])
            torch.mul(gu, hp[s], out=go[:, :d])  # d/d sigma(l), sigma(r), sigma(g), then through the sigmoid
            torch.mul(gu, xp[s], out=go[:, d : 2 * d])
            torch.mul(gu, sg[:, 3 * d :], out=go[:, 2 * d : 3 * d])
            go[:, : 3 * d].mul_(sg[:, : 3 * d] - sg[:, : 3 * d] * sg[:, : 3 * d])
            torch.mul(gu, sg[:, 2 * d : 3 * d], out=go[:, 3 * d :])
            g_z = go @ w2  # (n, Dc)
            if keep is not None:
                g_z.mul_(keep[s])
            g_a[s] = torch.ops.aten.gelu_backward(g_z, a[s])
            torch.mul(gu, sg[:, d : 2 * d], out=g_xp[s])
            g[:n] = gu * sg[:, :d] + g_a[s] @ w1h
        g_xp.add_(g_a @ w1x)  # (R, D) through the first layer's input half
        g_xs = g_xp.new_zeros(m, width, d)
        for t, n in enumerate(n_t):
            g_xs[:n, begin + t] = g_xp[offs[t] : offs[t + 1]]
        g_h0 = g  # what reaches h_0 (zero start: discarded by autograd; first_token: x_1)
        _, g_gamma, g_beta = torch.ops.aten.native_layer_norm_backward(g_y, u, (d,), mean, rstd, gamma, beta,
                                                                      [False, True, True])
        g_w1 = torch.cat([g_a.t() @ hp, g_a.t() @ xp], 1)  # (Dc, 2D)
        g_w2 = g_o.t() @ z  # (4D, Dc): z holds the dropped hidden layer, what the second layer read
        return g_xs, g_h0, None, None, None, None, g_w1, g_a.sum(0), g_w2, g_o.sum(0), g_gamma, g_beta


@register("rnn_grc", GRCConfig, table1_row=1)
def rnn_grc(cfg: GRCConfig, info):
    """Plain recurrent GRC baseline (RNN-GRC, RIR paper eq. 2)."""
    return TaskModel(RNNEncoder(cfg), info, cfg)
