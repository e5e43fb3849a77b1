"""``om``: Ordered Memory (Shen et al., "Ordered Memory", NeurIPS 2019, arXiv:1910.13466) with the GRC cell, as
RIR and EBT use it (RIR paper Table 2 "OM" row; ListOps: 21 memory slots, memory dropout 0.1). Also the inner RvNN
of ``rir_om`` (RIR paper Table 5 "RIR-OM" row).

One step t (OM paper §3, eq. 1-7), memory M_{t-1} (n slots), the memory's outputs \\hat M_{t-1}, the input x_t:

- stick-breaking attention (eq. 1-3): scores beta_i = w^T GELU(LN(W_q x_t) + LN(W_k \\hat M_{t-1}^i)) / sqrt(D);
  p_t^i = exp(beta_i) m^i / sum_j exp(beta_j) m^j with the soft mask m^i = \\vec\\pi_{t-1}^{i+1} (m^n = 1) where
  \\vec\\pi = cumsum(p) (the "pointer" can move at most one slot further down than where it was, OM eq. 3);
  \\vec\\pi_t = cumsum(p_t), \\overleftarrow\\pi_t = reverse cumsum(p_t). At t = 1 there is no p_0: \\vec\\pi = 0,
  \\overleftarrow\\pi = 1, p = 0 (nothing is in memory yet).
- write (eq. 4): M_t^i = M_{t-1}^i (1 - \\overleftarrow\\pi_t^i) + \\hat M_{t-1}^i \\overleftarrow\\pi_t^i.
- compose from the first slot down (eq. 5-6): h^0 = x_t,
  \\hat M_t^i = x_t (1 - \\vec\\pi_t^i) + cell(h^{i-1}, M_t^i) \\vec\\pi_t^i, h^i = \\hat M_t^i; output o_t = \\hat M_t^n.
- the root is o_L of the last token (eq. 7).

The cell is the GRC of the RIR paper (eq. 10-11, :class:`rirlab.models.grc.GRC`) on [h; M^i], with dropout on its
input as in the authors' cell (in front of its first layer only: its gated sum takes h and M^i undropped, as theirs);
memory dropout ``om_memory_dropout`` is applied to the inputs of the attention query, key and score layers (the
authors' code).

Speed (same values): a slot closed in every live row (\\vec\\pi^i = 0) is not composed, since eq. 6 gives
\\hat M^i = x there (the authors skip the slots closed for the whole batch); the open slots of a step are composed by
:func:`compose_slots`, one autograd node with a hand-written backward (:meth:`OrderedMemory.compose_slots_reference`
is the op-by-op form it is tested against).

Choices (the authors' code, BeamRecursionFamily's OrderedMemoryX):
- the leaf transform LN(x W + b) (RIR eq. 17) is the projection of the input into slot space;
- the mask of eq. 3 treats \\vec\\pi^{i+1} < 1e-5 as 0 (the code's threshold), so float noise cannot open a slot;
- ``om_mask: soft`` (default): the scores are weighted by the mask's values, as the OM code's
  ``process_softmax`` (``x * mask`` then an L1 normalisation, also in BeamRecursionFamily's OrderedMemory(X)), which
  produced the published numbers; ``hard`` restricts a plain softmax to the open slots (the mask as a 0/1 gate).
  They differ wherever a slot is partly open (0 < m < 1): by up to 3.5 in the output at lengths >= 4;
- ``om_ln: shared`` (default): the leaf transform's LayerNorm is the cell's, one pair of parameters trained by both
  uses, as the authors' ``OrderedMemoryRecurrent`` (its ``input_projection`` and ``Cell`` share the LayerNorm module
  ``activation``; standalone OM and RIR-OM alike); ``own``: a LayerNorm each (rirlab before). The two agree on the
  same weights and part once trained.
Padding: a padded step leaves the state unchanged, so a padded batch gives each sequence what it gets alone.
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
from rirlab.models.grc import (GRC, FastDropout, GRCConfig, LeafTransform, OneBeamEncoder, dropout_scaled_mask,
                               fast_dropout)
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register

OPEN_EPS = 1e-5  # \vec\pi below this does not open the slot above it (authors' code)


@dataclass(config=STRICT)
class OMConfig(GRCConfig):
    """Ordered Memory with the GRC cell (RIR/EBT ListOps settings: hidden 128, dropout 0.1, 21 slots, memory dropout
    0.1)."""

    om_slots: int = Field(21, ge=1)  # n, memory slots
    om_memory_dropout: float = Field(0.1, ge=0, lt=1)  # dropout in the stick-breaking attention
    om_mask: Literal["soft", "hard"] = "soft"  # soft: scores weighted by the open share (the code); hard: 0/1
    # the leaf transform's LayerNorm is the cell's (the authors' OrderedMemoryRecurrent: input_projection and cell
    # use one LayerNorm module, ``activation``) or its own (rirlab before)
    om_ln: Literal["shared", "own"] = "shared"


class StickBreaking(nn.Module):
    """Scores of the slots and the masked softmax with its cumulative sums (OM eq. 1-3)."""

    def __init__(self, d: int, p: float, mask: str = "soft"):
        super().__init__()
        self.drop = FastDropout(p)  # nn.Dropout's distribution with 16-bit masks (grc.fast_dropout; p to 2^-16)
        self.mask = mask
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.q_ln, self.k_ln = nn.LayerNorm(d), nn.LayerNorm(d)
        self.w = nn.Linear(d, 1)
        self.d = d

    def scores(self, x: torch.Tensor, m_out: torch.Tensor) -> torch.Tensor:
        """beta (M, n) from x (M, D) and the memory outputs (M, n, D)."""
        q = self.q_ln(self.q(self.drop(x)))  # (M, D)
        k = self.k_ln(self.k(self.drop(m_out)))  # (M, n, D)
        return self.w(self.drop(F.gelu(q[:, None] + k))).squeeze(-1) / math.sqrt(self.d)  # (M, n)

    def forward(self, x: torch.Tensor, m_out: torch.Tensor, prev_p: torch.Tensor | None):
        """-> \\vec\\pi (M, n), \\overleftarrow\\pi (M, n), p (M, n)."""
        beta = self.scores(x, m_out)  # (M, n)
        if prev_p is None:
            zeros = torch.zeros_like(beta)
            return zeros, torch.ones_like(beta), zeros
        opened = prev_p.cumsum(1)[:, 1:]  # (M, n-1) \vec\pi_{t-1}^{i+1}
        opened = torch.where(opened < OPEN_EPS, torch.zeros_like(opened), opened)
        mask = torch.cat([opened, torch.ones_like(opened[:, :1])], dim=1)  # (M, n) m^i, the last slot always 1
        if self.mask == "soft":  # exp(beta - max) * m, L1-normalised (the OM code's process_softmax)
            w = torch.exp(beta - beta.max(dim=1, keepdim=True).values) * mask  # (M, n)
            p = w / w.sum(1, keepdim=True).clamp_min(1e-12)  # (M, n)
        else:
            p = torch.softmax(beta.masked_fill(mask <= 0, float("-inf")), dim=1)  # (M, n)
        return p.cumsum(1), p.flip(1).cumsum(1).flip(1), p


class OrderedMemory(nn.Module):
    """OM over each row as an inner RvNN (one beam, score 0).

    forward(x (M, 1, L, D), lengths (M,), scores (M, 1) or None) -> roots (M, 1, D), scores (M, 1).
    """

    beam_size = 1

    def __init__(self, cfg: OMConfig):
        super().__init__()
        d = cfg.hidden_size
        self.attn = StickBreaking(d, cfg.om_memory_dropout, cfg.om_mask)
        self.cell = GRC.from_config(cfg)
        self.cell_drop = nn.Dropout(cfg.dropout)  # on the cell's input [h; M^i] (authors' cell)
        self.n_slots = cfg.om_slots
        self.last_p = None  # (M, L, n) attention of the last forward, for inspection
        self.fused = True  # eq. 5-6 as one autograd node (compose_slots); False: op by op (the reference)

    def step(self, x, mem, mem_out, prev_p):
        """One OM step: x (M, D), memory and its outputs (M, n, D), p_{t-1} (M, n) or None -> o, M, \\hat M, p.

        Slots closed (\\vec\\pi = 0) in every row are not composed: there eq. 6 gives \\hat M^i = x exactly (the
        authors' code skips the slots closed for the whole batch; :meth:`forward` passes only the rows still reading).
        """
        cp, rcp, p = self.attn(x, mem_out, prev_p)  # (M, n) each
        mem = mem * (1 - rcp)[..., None] + mem_out * rcp[..., None]  # (M, n, D) eq. 4
        first = self.n_slots if prev_p is None else first_open(cp)
        if first == self.n_slots:  # nothing open anywhere (the first step): every \\hat M^i = x
            outs = x[:, None].expand(-1, self.n_slots, -1)  # (M, n, D)
            return x, mem, outs, p
        if self.fused and not torch.is_autocast_enabled(x.device.type):
            opened = compose_slots(self.cell, x, mem[:, first:], cp[:, first:], self.cell_drop.p, self.training)
        else:
            opened = self.compose_slots_reference(x, mem[:, first:], cp[:, first:])  # (M, n - first, D)
        outs = torch.cat([x[:, None].expand(-1, first, -1), opened], dim=1) if first else opened  # (M, n, D)
        return outs[:, -1], mem, outs, p  # o_t = \hat M_t^n

    def compose_slots_reference(self, x, mem, cp):
        """Eq. 5-6 over the slots given, op by op (autograd records each): x (M, D), mem (M, n', D), cp (M, n')."""
        h, outs = x, []
        for i in range(mem.size(1)):
            left, right = self.cell_drop(h), self.cell_drop(mem[:, i])  # dropout on the cell's input (theirs)
            composed = grc_children(self.cell, torch.cat([left, right], dim=-1), h, mem[:, i])  # (M, D)
            h = x * (1 - cp[:, i, None]) + composed * cp[:, i, None]
            outs.append(h)
        return torch.stack(outs, dim=1)  # (M, n', D)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        m, b_in, width, d = x.shape
        assert b_in == 1, "Ordered Memory keeps one beam"
        order = torch.argsort(lengths, descending=True, stable=True)  # (M,) longest first: live rows are a prefix
        x, live_rows = x[order, 0], (lengths[order][None] > torch.arange(width, device=x.device)[:, None]).sum(1)
        live_rows = live_rows.tolist()  # rows still reading at each step (one host sync per forward)
        mem = x.new_zeros(m, self.n_slots, d)
        mem_out, p, out = mem, None, x[:, 0]
        ps = []
        for t in range(width):
            k = m if t == 0 else live_rows[t]  # a padded step keeps the state: only the first k rows step
            if k == 0:  # every row has ended (a width beyond the longest row)
                ps.append(p)
                continue
            o, mem_t, mem_out_t, p_t = self.step(x[:k, t], mem[:k], mem_out[:k], None if p is None else p[:k])
            if k == m:
                mem, mem_out, p, out = mem_t, mem_out_t, p_t, o
            else:
                out, p = torch.cat([o, out[k:]]), torch.cat([p_t, p[k:]])
                mem, mem_out = torch.cat([mem_t, mem[k:]]), torch.cat([mem_out_t, mem_out[k:]])
            ps.append(p)
        inverse = torch.argsort(order)  # (M,) back to the caller's row order
        out = out[inverse]
        self.last_p = torch.stack(ps, dim=1)[inverse].detach()
        return out[:, None], x.new_zeros(m, 1) if scores is None else scores  # (M, 1, D), (M, 1)


def first_open(cp: torch.Tensor) -> int:
    """The first slot i with \\vec\\pi^i > 0 in some row of cp (M, n) (n if none): the slots before it are closed in
    every row (\\vec\\pi is a cumulative sum, so the open slots of a row are a suffix). One host sync per step."""
    return int((cp > 0).any(0).logical_not().sum()) if cp.numel() else cp.size(1)


def grc_children(cell: GRC, pair: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """The GRC cell (eq. 10-11) as the authors' OM cell applies it: the gates read ``pair`` = [left; right] after the
    input dropout, the gated sum takes the children themselves (M, D) each."""
    d = left.size(-1)
    out = cell.w2(fast_dropout(F.gelu(cell.w1(pair)), cell.p, cell.training))  # (M, 4D)
    gates = torch.sigmoid(out[..., : 3 * d])  # (M, 3D)
    mixed = gates[..., :d] * left + gates[..., d : 2 * d] * right + gates[..., 2 * d :] * out[..., 3 * d :]
    return cell.ln(mixed)  # (M, D)


def compose_slots(cell: GRC, x: torch.Tensor, mem: torch.Tensor, cp: torch.Tensor, p_in: float,
                  training: bool) -> torch.Tensor:
    """Eq. 5-6 over the slots of mem (M, n', D) from the first down, as ONE autograd node (:class:`_ComposeSlots`):
    h^0 = x (M, D), h^i = x (1 - cp^i) + cell(h^{i-1}, M^i) cp^i; returns every h^i (M, n', D).

    The same values and gradients as :meth:`OrderedMemory.compose_slots_reference` (the tests hold them together); it
    is faster because a step of OM is a chain of n' small compositions: the memory's half of the cell's first layer
    is one product for all slots, the forward records nothing, and the backward computes each weight's gradient
    as one product over all slots. Dropout (training): p_in on the cell's input, the cell's p on its hidden layer,
    masks drawn as :func:`rirlab.models.grc.dropout_scaled_mask` (keep * scale written at once).
    """
    m, n, d = mem.shape
    keep = [dropout_scaled_mask(shape, p, x.device, x.dtype) if training and p > 0 else None
            for shape, p in (((m, n, d), p_in), ((m, n, d), p_in), ((m, n, cell.w1.out_features), cell.p))]
    return _ComposeSlots.apply(x, mem, cp, keep[0], keep[1], keep[2], cell.w1.weight, cell.w1.bias, cell.w2.weight,
                               cell.w2.bias, cell.ln.weight, cell.ln.bias, cell.ln.eps)


class _ComposeSlots(torch.autograd.Function):
    """Forward and hand-written backward of :func:`compose_slots` (LayerNorm and GELU by ATen's own kernels).
    Per-slot tensors are kept slot-major, (n', M, .), so each slot's rows are contiguous; the loops take each slot's
    views from one ``unbind`` and write into preallocated buffers (a step runs n' compositions of a few small ops, so
    per-op overhead is a large share of its time)."""

    @staticmethod
    def forward(ctx, x, mem, cp, keep_h, keep_m, keep_z, w1, b1, w2, b2, gamma, beta, eps):
        m, n, d = mem.shape
        w1ht, w2t = w1[:, :d].t(), w2.t()  # (D, Dc): the cell's first layer on h; (Dc, 4D)
        memt = mem.transpose(0, 1).contiguous()  # (n', M, D)
        mdt = memt if keep_m is None else memt * keep_m.transpose(0, 1)
        a = torch.addmm(b1, mdt.view(n * m, d), w1[:, d:].t()).view(n, m, -1)  # (n', M, Dc) memory's half, + h's
        hs = x.new_empty(n + 1, m, d)  # h^{i-1} of slot i, then the last h
        hs[0] = x
        zd, o, u = (x.new_empty(n, m, k) for k in (w1.size(0), 4 * d, d))  # o: the gates (sigmoid, in place), c
        xc = x * (1 - cp.t()[..., None])  # (n', M, D) x (1 - cp^i) of eq. 6, at once
        cpt = cp.t()[..., None].contiguous()  # (n', M, 1)
        kh = keep_h.unbind(1) if keep_h is not None else None
        kz = keep_z.unbind(1) if keep_z is not None else None
        hv, av, zv, ov, uv, mv, xcv, cpv = (t.unbind(0) for t in (hs, a, zd, o, u, memt, xc, cpt))
        ys, means, rstds = [], [], []
        for i in range(n):
            h = hv[i]  # (M, D)
            av[i].addmm_(h if kh is None else h * kh[i], w1ht)  # (M, Dc)
            z = torch.ops.aten.gelu.out(av[i], out=zv[i])  # (M, Dc)
            if kz is not None:
                z.mul_(kz[i])
            oi = torch.addmm(b2, z, w2t, out=ov[i])  # (M, 4D)
            oi[:, : 3 * d].sigmoid_()
            sl, sr, sg, c = oi.split(d, 1)  # (M, D) each: the gates of h, M^i, c, and c
            ui = torch.mul(sl, h, out=uv[i]).addcmul_(sr, mv[i]).addcmul_(sg, c)  # (M, D) eq. 10
            yi, mean, rstd = torch.native_layer_norm(ui, (d,), gamma, beta, eps)  # eq. 11
            ys.append(yi), means.append(mean), rstds.append(rstd)
            torch.addcmul(xcv[i], yi, cpv[i], out=hv[i + 1])  # eq. 6
        y, mean, rstd = torch.stack(ys), torch.stack(means), torch.stack(rstds)  # (n', M, D), (n', M, 1) twice
        ctx.save_for_backward(x, memt, cpt, keep_h, keep_m, keep_z, w1, w2, gamma, beta, hs, a, zd, o, u, y, mean,
                              rstd)
        return hs[1:].transpose(0, 1).clone()  # (M, n', D)

    @staticmethod
    def backward(ctx, g_out):
        x, memt, cpt, keep_h, keep_m, keep_z, w1, w2, gamma, beta, hs, a, zd, o, u, y, mean, rstd = ctx.saved_tensors
        n, m, d = memt.shape
        w1h, w1m = w1[:, :d], w1[:, d:]
        s3 = o[..., : 3 * d]  # (n', M, 3D) the gates
        ds = s3 - s3 * s3  # sigma' = sigma - sigma^2, every slot at once
        g_memt = torch.empty_like(memt)
        g_a = torch.empty_like(a)  # (n', M, Dc)
        g_o = torch.empty_like(o)  # (n', M, 4D)
        g_hs = torch.empty_like(u)  # (n', M, D) total gradient reaching h^i
        g_h = torch.zeros_like(x)  # gradient reaching h^i from the slots below it
        kh = keep_h.unbind(1) if keep_h is not None else None
        kz = keep_z.unbind(1) if keep_z is not None else None
        gv, ghv, gav, gov, gmv, hv, mv, ov, dsv, uv, av, meanv, rstdv, cpv = (t.unbind(0) for t in (
            g_out.transpose(0, 1), g_hs, g_a, g_o, g_memt, hs, memt, o, ds, u, a, mean, rstd, cpt))
        for i in range(n - 1, -1, -1):
            g = torch.add(gv[i], g_h, out=ghv[i])  # (M, D) d/d h^i
            gu = torch.ops.aten.native_layer_norm_backward(g * cpv[i], uv[i], (d,), meanv[i], rstdv[i], gamma, beta,
                                                           [True, False, False])[0]  # (M, D)
            sl, sr, sg, c = ov[i].split(d, 1)
            gl, gr, gg, gc = gov[i].split(d, 1)
            torch.mul(gu, hv[i], out=gl)  # d/d sigma(l), sigma(r), sigma(g), then through the sigmoid
            torch.mul(gu, mv[i], out=gr)
            torch.mul(gu, c, out=gg)
            gov[i][:, : 3 * d].mul_(dsv[i])
            torch.mul(gu, sg, out=gc)
            g_z = gov[i] @ w2  # (M, Dc)
            if kz is not None:
                g_z.mul_(kz[i])
            torch.ops.aten.gelu_backward.grad_input(g_z, av[i], grad_input=gav[i])
            g_hd = gav[i] @ w1h  # (M, D)
            g_h = gu * sl + (g_hd if kh is None else g_hd * kh[i])
            torch.mul(gu, sr, out=gmv[i])
        g_x = g_h + (g_hs * (1 - cpt)).sum(0)  # h^0 = x, and x (1 - cp^i) in every slot
        g_cp = (g_hs * (y - x)).sum(-1).t()  # (M, n')
        _, g_gamma, g_beta = torch.ops.aten.native_layer_norm_backward(
            (g_hs * cpt).view(n * m, d), u.view(n * m, d), (d,), mean.view(n * m, 1), rstd.view(n * m, 1), gamma,
            beta, [False, True, True])
        ga = g_a.view(n * m, -1)  # (n' M, Dc)
        g_md = (ga @ w1m).view(n, m, d)
        if keep_m is not None:
            g_md = g_md * keep_m.transpose(0, 1)
        g_mem = (g_memt + g_md).transpose(0, 1)  # (M, n', D)
        hd = hs[:-1] if keep_h is None else hs[:-1] * keep_h.transpose(0, 1)  # (n', M, D) what slot i's layer read
        md = memt if keep_m is None else memt * keep_m.transpose(0, 1)
        g_w1 = torch.cat([ga.t() @ hd.reshape(n * m, d), ga.t() @ md.reshape(n * m, d)], 1)  # (Dc, 2D)
        go = g_o.view(n * m, -1)
        g_w2 = go.t() @ zd.view(n * m, -1)  # (4D, Dc)
        return (g_x, g_mem, g_cp, None, None, None, g_w1, ga.sum(0), g_w2, go.sum(0), g_gamma, g_beta, None)


class ProjectedOrderedMemory(OrderedMemory):
    """OM as RIR-OM's inner RvNN: the authors' ``OrderedMemoryRecurrent`` projects its input, LN(x W + b)
    (``input_projection``), on every call, so each chunk's items (the S4D-transformed leaves at the first level,
    the roots of the chunks below above it) are projected before the memory reads them. Standalone OM needs no
    second projection: its leaf transform is that projection (:class:`OneBeamEncoder`).

    ``om_ln`` (RIR-OM's config): "shared" (default; the authors' code, whose projection and cell use one LayerNorm
    module, ``OrderedMemoryRecurrent.activation``): the projection's LayerNorm is the cell's, one pair of parameters
    trained by both uses; "own": a LayerNorm each (rirlab before). The two agree on the same weights and part once
    trained."""

    single_passes_through = True  # rir_encode: a sequence of one item is its own root, unprojected (as theirs)

    def __init__(self, cfg: OMConfig):
        super().__init__(cfg)
        self.proj = LeafTransform(cfg.hidden_size)
        if getattr(cfg, "om_ln", "own") == "shared":
            self.proj.ln = self.cell.ln  # one module: its parameters appear once in parameters()

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        return super().forward(self.proj(x), lengths, scores)  # x: (M, 1, L, D)


@register("om", OMConfig, table1_row=6)
def om(cfg: OMConfig, info):
    """Ordered Memory (Shen et al., NeurIPS 2019) with the GRC cell: stick-breaking attention over memory slots."""
    encoder = OneBeamEncoder(cfg.hidden_size, OrderedMemory(cfg))
    if cfg.om_ln == "shared":  # one module: its parameters appear once in parameters() (the authors' code)
        encoder.leaf.ln = encoder.tree.cell.ln
    return TaskModel(encoder, info, cfg)
