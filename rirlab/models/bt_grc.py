"""``bt_grc`` and ``bt_grc_os``: Beam Tree Recursive Cells with the GRC cell (BT-GRC, BT-GRC OneSoft).

Beam Tree Recursive Cells (Ray Chowdhury & Caragea, ICML 2023, arXiv:2305.19999), as the EBT paper
(Efficient Beam Tree Recursion, NeurIPS 2023, arXiv:2307.10779) restates it in §2: at every step of every
beam ALL adjacent pairs are composed with the GRC cell (EBT eq. 3, the cell of eq. 1-2 = RIR eq. 10-11), each
candidate parent is scored by ``scorer(p) = W_v p`` (a linear map d -> 1 of the *composed parent*), the scores
are log-softmaxed over the pairs, the top-k pairs of each beam extend it (accumulating their log-probabilities),
b of the b x k candidates survive, and the b roots are marginalised with a softmax over the beam scores.
Because eq. 3 runs the cell on every position at every step, memory grows with L^2 (L steps x L positions
x b beams x d_cell features held for backward): the cost the EBT fixes remove and RIR Table 1 reports as OOM
at lengths 1500-2000 on a 48 GB GPU.

Selection while training (``bt_topk``): the papers call it a "stochastic Top-K"; the authors' public code
(BeamRecursionFamily, BT_GRC.py) calls its top-k with ``training=False``, i.e. a plain top-k in both stages
(per-beam pairs and surviving candidates) with gradients only through the accumulated scores. ``"top"``
(default) is the code; ``"stochastic"`` perturbs both stages with Gumbel noise (Gumbel-top-k) in training.
Eval is always plain top-k.

OneSoft (``bt_grc_os``, BT-RvNN §"OneSoft top-k"; the authors' BT_GRC_OS.py): in training, of the b x k
candidates sorted by accumulated score the first b - 1 survive as they are and ALL the others are merged into
one soft beam, weighted by the softmax of their scores: its score, selection mask, candidate parents and node
states are the weighted sums, and its next state is ``sel * P + (1 - cumsum(sel)) * H_left +
(cumsum(sel) - sel) * H_right`` on those sums (as the code computes it). Eval is plain top-b.

The search keeps b beam slots from the start (beam 0 alive, the others at score ``NEG``, as
:func:`rirlab.models.beam_tree.initial_scores`), so every row always has b beams; impossible beams get zero
weight in :func:`rirlab.models.beam_tree.marginalize`. A row that has reached its root keeps it (a "stay"
option of log-probability 0) while longer rows of the batch still merge, so a padded batch equals each
sequence alone. With ``beam_size`` >= the number of merge orders ((L-1)! for L leaves) and eval, the search
is exhaustive: the output is the softmax-of-total-log-probability marginal over all merge orders.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput, at_least_fp32
from rirlab.models.beam_tree import NEG, gumbel_like, initial_scores, keep_survivors, marginalize
from rirlab.models.grc import GRC, GRCConfig, LeafTransform, grc_cell
from rirlab.models.heads import TaskModel
from rirlab.models.registry import beam_width, register

BTTopK = Literal["top", "stochastic"]


@dataclass(config=STRICT)
class BTConfig(GRCConfig):
    """BT-GRC / BT-GRC OS (EBT paper §2; BT-RvNN): beam ``beam_size`` over merge orders, parent scorer.

    ``bt_topk``: selection in training, ``top`` (the authors' code, default) or ``stochastic`` (the papers'
    "stochastic Top-K": Gumbel-perturbed pairs and survivors). Eval is always plain top-k.
    """

    beam_size: int = Field(5, ge=1)
    bt_topk: BTTopK = "top"


def update_nodes(h: torch.Tensor, parents: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """Next node sequence from a selection over pairs (EBT eq. 4 in mask form, as the authors' code writes it).

    h (..., W, D) nodes, parents (..., W-1, D) candidate parents, sel (..., W-1) one-hot, soft or zero (no merge:
    the row keeps its nodes). Returns (..., W-1, D): sel * P + (1 - cumsum sel) * h[:-1] + (cumsum sel - sel) * h[1:].
    """
    c = sel.cumsum(-1)  # (..., W-1)
    return (sel[..., None] * parents + (1 - c)[..., None] * h[..., :-1, :]
            + (c - sel)[..., None] * h[..., 1:, :])  # (..., W-1, D)


def straight_through_update(h, packed, at, sel, j, cur_len):
    """``update_nodes(h, parents, sel)`` for one beam whose selection ``sel`` (n, 1, W-1) is zero except at the pair
    ``j`` (n,) (straight-through: the forward value is the one-hot, the gradient reaches every pair), with the
    parents packed as :meth:`ParentBeamSearch.compose_packed` returns them (``packed``, ``at``): only the merged
    parent of each row is gathered, the dense (n, W-1, D) parents are never built, and the backward is one node
    (:class:`_STUpdate`). Rows with no valid pair at j (done rows: sel is 0 there) take no parent. Same values."""
    n, _, w, d = h.shape
    nv = (cur_len - 1).clamp(min=0, max=w - 1)  # (n,) valid pairs of each row: a prefix
    ok = j < nv  # (n,)
    if at is None:
        pidx = torch.arange(n, device=h.device) * (w - 1) + j
    else:
        pidx = nv.cumsum(0) - nv + j  # (n,) the row's pairs are consecutive in the packed order
    if packed.size(0) == 0:
        pj = packed.new_zeros(n, d)
    else:
        pj = packed.index_select(0, torch.where(ok, pidx, 0))  # (n, D) the merged parent (anything where not ok)
    return _STUpdate.apply(h[:, 0], pj, sel[:, 0], j, ok, packed.detach(), at)[:, None]  # (n, 1, W-1, D)


class _STUpdate(torch.autograd.Function):
    """sel * P + (1 - cumsum sel) * h[:-1] + (cumsum sel - sel) * h[1:] with sel zero but at the pairs j (rows ok),
    summed in :func:`update_nodes`' order (the zero terms add nothing), and its hand-written backward: P's gradient
    sel * g is zero but at j (pj's), sel's gradient reads every parent (``packed`` at ``at``, no gradient)."""

    @staticmethod
    def forward(ctx, h, pj, sel, j, ok, packed, at):  # h (n, W, D), pj (n, D), sel (n, W-1), j, ok (n,)
        c = sel.cumsum(-1)  # (n, W-1)
        out = (1 - c)[..., None] * h[:, :-1]  # (n, W-1, D)
        r = ok.nonzero()[:, 0]
        jr = j.index_select(0, r)
        out[r, jr] += sel[r, jr][:, None] * pj.index_select(0, r)
        out += (c - sel)[..., None] * h[:, 1:]
        ctx.save_for_backward(h, pj, sel, c, r, jr, packed, at)
        return out

    @staticmethod
    def backward(ctx, g):
        h, pj, sel, c, r, jr, packed, at = ctx.saved_tensors
        g_h = torch.empty_like(h)  # (n, W, D)
        torch.mul(g, (1 - c)[..., None], out=g_h[:, :-1])
        g_h[:, -1] = 0
        g_h[:, 1:] += (c - sel)[..., None] * g
        dl = (g * h[:, :-1]).sum(-1)  # (n, W-1) <g_k, h_k>
        dr = (g * h[:, 1:]).sum(-1)  # (n, W-1) <g_k, h_{k+1}>
        g_sel = (dr - dl).flip(-1).cumsum(-1).flip(-1) - dr  # through c = cumsum(sel), and the -sel h[1:] term
        gf = g.reshape(-1, g.size(-1))  # (n (W-1), D)
        if at is None:  # <g_k, P_k> at every pair
            g_sel += (gf * packed).sum(-1).view_as(g_sel)
        else:
            g_sel.view(-1).index_add_(0, at, (gf.index_select(0, at) * packed).sum(-1))
        g_pj = torch.zeros_like(pj)
        g_pj[r] = sel[r, jr][:, None] * g[r, jr]
        return g_h, g_pj, g_sel, None, None, None, None


def pair_log_probs(e: torch.Tensor, cur_len: torch.Tensor) -> torch.Tensor:
    """Masked log-softmax of pair scores e (n, B, W-1) over the valid pairs j < cur_len - 1 of each row; rows that
    are done (cur_len <= 1) get the "stay" option: 0 at j = 0, ``NEG`` elsewhere."""
    pos = torch.arange(e.size(-1), device=e.device)  # (W-1,)
    valid = (pos < (cur_len - 1)[:, None])[:, None]  # (n, 1, W-1)
    logp = F.log_softmax(at_least_fp32(e).masked_fill(~valid, NEG), dim=-1)  # (n, B, W-1)
    stay = torch.where(pos == 0, 0.0, NEG).to(logp.dtype)  # (W-1,)
    return torch.where((cur_len <= 1)[:, None, None], stay, logp)  # (n, B, W-1)


class ParentBeamSearch(nn.Module):
    """Beam search over merge orders with the scorer on composed parents (BT-RvNN; beam 1 + ST is GT-RvNN).

    forward(x (N, L, D), lengths (N,)) -> roots (N, b, D), scores (N, b) (accumulated pair log-probabilities;
    ``NEG`` for impossible beams). ``one_soft``: the OneSoft survivor rule in training. ``straight_through``
    (beam 1 only): Choi et al.'s straight-through Gumbel-softmax selection (see :mod:`rirlab.models.gt_grc`).
    """

    def __init__(self, cell: GRC, d: int, beam_size: int, topk: BTTopK = "top", one_soft: bool = False,
                 straight_through: bool = False, tau: float = 1.0):
        super().__init__()
        if straight_through and beam_size != 1:
            raise ValueError("straight-through selection is the greedy (beam 1) search")
        self.cell = cell
        self.scorer = nn.Linear(d, 1)  # scorer(p) = W_v p on the composed parent (EBT §2)
        self.beam_size, self.topk, self.one_soft = beam_size, topk, one_soft
        self.straight_through, self.tau = straight_through, tau

    def forward(self, x: torch.Tensor, lengths: torch.Tensor):
        n, width, d = x.shape
        b = self.beam_size
        lens, order = lengths.sort(descending=True, stable=True)  # rows still merging at step t: a prefix
        h = x[order].unsqueeze(1).expand(n, b, width, d)  # (N, b, W, D) every slot starts from the leaves
        scores = initial_scores(n, b, x)  # (N, b): beam 0 alive
        row = torch.arange(n, device=x.device)[:, None]  # (N, 1)
        lens_list = lens.tolist()
        done = []  # (roots, scores) of the rows that reached their root, the last sorted rows first
        m = n
        # grc_cell takes ``pre`` (not under autocast); a OneSoft beam mixes nodes: no cache there
        cached = not torch.is_autocast_enabled(x.device.type) and not (self.one_soft and self.training)
        pre = self.pre_activations(h[:, :1]).expand(n, b, width - 1, -1) if cached else None  # (N, b, W-1, d_cell)
        for t in range(width - 1):
            m_t = sum(1 for L in lens_list[:m] if L > t + 1)  # rows with a merge left (cur_len >= 2)
            if m_t < m:  # a finished row only stays (its node 0 is its root): it leaves the batch
                done.append((h[m_t:, :, 0], scores[m_t:]))
                h, scores, m = h[:m_t], scores[:m_t], m_t
                pre = None if pre is None else pre[:m_t]
            if m == 0:
                break
            rows = order[:m]  # their places in the input: each draws the noise it drew in the whole batch

            def draw(like, rows=rows):
                return gumbel_like(like.new_empty(n, *like.shape[1:]))[rows]

            h, scores, pre = self.step(h, scores, lens[:m] - t, row[:m], draw, pre)  # (m, b, W-1-t, D), (m, b)
        roots = torch.cat([h[:, :, 0]] + [r for r, _ in reversed(done)])  # (N, b, D) in sorted order
        final = torch.cat([scores] + [sc for _, sc in reversed(done)])  # (N, b)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(n, device=x.device)
        return roots[inv], final[inv]  # (N, b, D), (N, b)

    def step(self, h: torch.Tensor, scores: torch.Tensor, cur_len: torch.Tensor, row: torch.Tensor, draw=gumbel_like,
             pre: torch.Tensor | None = None):
        """One merge of every beam of the rows h (n, b, W, D); ``draw(like)``: Gumbel noise shaped like ``like``.
        ``pre``: the cell's first-layer pre-activations of every pair (n, b, W-1, d_cell) (:meth:`pre_activations`),
        kept up to date for the next step (returned; None where not given or after a OneSoft step)."""
        n, b, w, d = h.shape
        if self.straight_through:  # the parents stay packed: only the merged one enters the update
            packed, at, e = self.compose_packed(h, cur_len, pre)  # (P, D), (P,) or None, (n, 1, W-1)
        else:
            parents, e = self.compose_pairs(h, cur_len, pre)  # (n, b, W-1, D) EBT eq. 3, (n, b, W-1) e_i = scorer(p_i)
        logp = pair_log_probs(e, cur_len)  # (n, b, W-1)
        active = (cur_len >= 2).to(h.dtype)[:, None, None]  # (n, 1, 1) rows still merging
        noisy = self.training and (self.topk == "stochastic" or self.straight_through)
        key = logp + draw(logp) if noisy else logp  # (n, b, W-1)
        if self.straight_through:  # GT-RvNN: one-hot forward, Gumbel-softmax gradient backward
            soft = F.softmax(key / self.tau, dim=-1)  # (n, 1, W-1)
            pick = key.argmax(-1)  # (n, 1)
            hard = F.one_hot(pick, w - 1).to(soft.dtype)  # (n, 1, W-1)
            sel = ((hard + soft - soft.detach()) * active).to(h.dtype)  # (n, 1, W-1)
            h = straight_through_update(h, packed, at, sel, pick[:, 0], cur_len)  # (n, 1, W-1, D)
            return h, scores, None if pre is None else self.next_pre_activations(pre, h, pick)
        k = min(b, w - 1)
        top_pos = key.topk(k, dim=-1).indices  # (n, b, k) per-beam top-k pairs
        cand = (scores[..., None] + logp.gather(-1, top_pos)).view(n, b * k)  # (n, b k) accumulated log-scores
        pos_flat = top_pos.view(n, b * k)  # (n, b k)
        if k == 1:  # b candidates for b slots: nothing to select (as the authors' code: B k <= b)
            new_scores, keep = cand, torch.arange(b, device=h.device).expand(n, b)
        elif self.one_soft and self.training:
            return *self.one_soft_step(h, parents, cand, pos_flat, k, active, row), None
        else:
            gumbel = draw(cand) if self.training and self.topk == "stochastic" else None
            new_scores, keep = keep_survivors(cand, b, gumbel)  # (n, b), (n, b)
        src = torch.div(keep, k, rounding_mode="floor")  # (n, b) beam each survivor extends
        j = pos_flat.gather(1, keep)  # (n, b) merged pair (j, j+1)
        sel = F.one_hot(j, w - 1).to(h.dtype) * active  # (n, b, W-1); done rows merge nothing
        h = update_nodes(h[row, src], parents[row, src], sel)  # (n, b, W-1, D)
        return h, new_scores, None if pre is None else self.next_pre_activations(pre[row, src], h, j)

    @torch.no_grad()
    def pre_activations(self, h: torch.Tensor) -> torch.Tensor:
        """W1 [h_j; h_j+1] + b1 of every adjacent pair of h (n, b, W, D): (n, b, W-1, d_cell), no gradient (what
        :func:`rirlab.models.grc.grc_cell` takes as ``pre``)."""
        return F.linear(torch.cat([h[:, :, :-1], h[:, :, 1:]], -1), self.cell.w1.weight, self.cell.w1.bias)

    @torch.no_grad()
    def next_pre_activations(self, pre: torch.Tensor, h: torch.Tensor, j: torch.Tensor) -> torch.Tensor | None:
        """The pre-activations (n, b, W-2, d_cell) of the pairs of h (n, b, W-1, D), the nodes after merging pair j
        (n, b) of the nodes whose pairs had ``pre`` (n, b, W-1, d_cell): the pairs left of j - 1 and right of j are
        the old ones (shifted past j), only the two touching the new node j are computed. The authors' code
        recomputes every pair at every step; the values are the same up to rounding (the update copies the
        unchanged nodes, up to a factor 1 + p - p under straight-through). None when no pair is left."""
        n, b, w1, c = pre.shape
        if w1 < 2:
            return None
        k = torch.arange(w1 - 1, device=h.device)
        nxt = pre.gather(2, (k + (k >= j[..., None]))[..., None].expand(n, b, w1 - 1, c))  # (n, b, W-2, d_cell)
        n, j = n * b, j.reshape(-1)  # every beam of every row
        rows, hn = torch.arange(n, device=h.device), h.reshape(n, w1, -1)  # (n b, W-1, D)
        jl, jr = (j - 1).clamp(min=0), j.clamp(max=w1 - 2)  # the new left pair (j >= 1), the new right pair (j <= W-3)
        pairs = torch.cat([torch.cat([hn[rows, jl], hn[rows, jl + 1]], -1),
                           torch.cat([hn[rows, jr], hn[rows, jr + 1]], -1)])  # (2n, 2D)
        new = F.linear(pairs, self.cell.w1.weight, self.cell.w1.bias)  # (2n, d_cell)
        v = nxt.view(n, w1 - 1, c)  # (n b, W-2, d_cell)
        v[rows, jl] = new[:n]
        v[rows, jr] = torch.where((j <= w1 - 2)[:, None], new[n:], v[rows, jr])  # no right pair: keep the left one
        return nxt

    def compose_pairs(self, h: torch.Tensor, cur_len: torch.Tensor, pre: torch.Tensor | None = None):
        """Every adjacent pair of every beam composed (EBT eq. 3) and scored: parents (n, b, W-1, D), scores
        (n, b, W-1). Only the pairs j < cur_len - 1 of a row are computed (the authors' code composes every
        position of the padded batch); the others are 0: their scores are masked out of the selection
        (:func:`pair_log_probs`) and their selection weight is 0, so values and gradients are the same."""
        n, b, w, d = h.shape
        packed, at, e = self.compose_packed(h, cur_len, pre)
        if at is None:
            return packed.view(n, b, w - 1, d), e
        return packed.new_zeros(n * b * (w - 1), d).index_copy(0, at, packed).view(n, b, w - 1, d), e

    def compose_packed(self, h: torch.Tensor, cur_len: torch.Tensor, pre: torch.Tensor | None = None):
        """:meth:`compose_pairs` with the parents packed: (P, D) for the valid pairs, ``at`` (P,) their flat index
        in (n, b, W-1) (None when every pair is valid: then P = n b (W-1) in that order), scores (n, b, W-1).
        ``pre`` (n, b, W-1, d_cell): the cell's first-layer pre-activations of the pairs, if known."""
        n, b, w, d = h.shape
        pre = None if pre is None else pre.reshape(-1, pre.size(-1))  # (n b (W-1), d_cell)
        pos = torch.arange(w - 1, device=h.device)  # (W-1,)
        valid = (pos < (cur_len - 1)[:, None])[:, None].expand(n, b, w - 1)  # (n, b, W-1)
        if bool(valid.all()):
            pairs = torch.cat([h[:, :, :-1], h[:, :, 1:]], dim=-1)  # (n, b, W-1, 2D)
            packed = grc_cell(self.cell, pairs.view(-1, 2 * d), pre)  # (n b (W-1), D)
            return packed, None, self.scorer(packed).view(n, b, w - 1)
        at = valid.reshape(-1).nonzero()[:, 0]  # (P,) flat index of each valid pair in (n, b, W-1)
        left = torch.div(at, w - 1, rounding_mode="floor") * w + at % (w - 1)  # (P,) its left node in (n, b, W)
        hf = h.reshape(n * b * w, d)
        packed = grc_cell(self.cell, torch.cat([hf.index_select(0, left), hf.index_select(0, left + 1)], -1),
                          None if pre is None else pre.index_select(0, at))  # (P, D)
        e_at = self.scorer(packed).squeeze(-1)  # (P,)
        e = e_at.new_zeros(n * b * (w - 1)).index_copy(0, at, e_at).view(n, b, w - 1)  # (n, b, W-1)
        return packed, at, e

    def one_soft_step(self, h, parents, cand, pos_flat, k, active, row):
        """OneSoft survivors (training): the top b - 1 candidates kept, the rest merged into one soft beam."""
        n, b, w, d = h.shape
        order = cand.argsort(dim=-1, descending=True)  # (n, b k) no gradient through the ranking
        cand_s = cand.gather(1, order)  # (n, b k)
        src = torch.div(order, k, rounding_mode="floor")  # (n, b k)
        sel = F.one_hot(pos_flat.gather(1, order), w - 1).to(h.dtype) * active  # (n, b k, W-1)
        hard = update_nodes(h[row, src[:, : b - 1]], parents[row, src[:, : b - 1]], sel[:, : b - 1])  # (n, b-1, ..)
        rest = cand_s[:, b - 1 :]  # (n, r) r = b k - b + 1
        wgt = F.softmax(rest, dim=-1)  # (n, r)
        mix = lambda t: (wgt.view(n, -1, *([1] * (t.dim() - 2))).to(t.dtype) * t).sum(1, keepdim=True)  # noqa: E731
        soft = update_nodes(mix(h[row, src[:, b - 1 :]]), mix(parents[row, src[:, b - 1 :]]),
                            mix(sel[:, b - 1 :]))  # (n, 1, W-1, D)
        scores = torch.cat([cand_s[:, : b - 1], (wgt * rest.clamp(min=NEG)).sum(1, keepdim=True)], dim=1)  # (n, b)
        return torch.cat([hard, soft], dim=1), scores


class BTEncoder(nn.Module):
    """Leaf transform (RIR eq. 17), BT search over the whole sequence, softmax-marginalised root."""

    def __init__(self, cfg: BTConfig, one_soft: bool = False):
        super().__init__()
        self.leaf = LeafTransform(cfg.hidden_size)
        self.tree = ParentBeamSearch(GRC.from_config(cfg), cfg.hidden_size, cfg.beam_size, cfg.bt_topk, one_soft)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        roots, scores = self.tree(self.leaf(x), mask.sum(1))  # (N, b, D), (N, b)
        return EncoderOutput(marginalize(roots, scores))  # (N, D)


@register("bt_grc", BTConfig, table1_row=8, memory_width=beam_width)
def bt_grc(cfg: BTConfig, info):
    """Beam Tree GRC (BT-RvNN, ICML 2023; EBT paper §2): beam search, scorer on composed parents."""
    return TaskModel(BTEncoder(cfg), info, cfg)


@register("bt_grc_os", BTConfig, table1_row=9, memory_width=beam_width)
def bt_grc_os(cfg: BTConfig, info):
    """BT-GRC with the OneSoft top-k in training (BT-RvNN; the authors' BT_GRC_OS)."""
    return TaskModel(BTEncoder(cfg, one_soft=True), info, cfg)
