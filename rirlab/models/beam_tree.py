"""Efficient Beam Tree RvNN (EBT paper §3, Algorithm 1 of Appendix E) and its greedy straight-through variant.

Each step scores every adjacent child pair of every beam with the light scorer (eq. 12),
takes the top-k pairs per beam (Gumbel-perturbed "stochastic top-k" while training, plain
top-k at eval), adds their log-softmax scores to the beam scores, keeps the best b of the
b x k candidates, and composes ONLY the chosen pair of each kept beam with the GRC cell.
The caller marginalises the b roots with a softmax over beam scores (:func:`marginalize`).

Where the time goes, and what we do instead of the naive version:
- no b x k candidate copies: candidates are (beam, position) index pairs; only the b kept
  beams are materialised, with one row gather that also deletes the right child;
- pair scores are cached per beam; a merge only re-scores the two pairs touching the new node;
- rows (sequences or chunks) are sorted by length, so the rows still merging are a prefix
  and finished rows cost nothing;
- all rows (e.g. every chunk of every sequence under RIR) run as one batch.

Invalid beams (fewer distinct trees than b) carry the score ``NEG`` and get zero weight.
Rows may start from b input beams with scores (RIR levels >= 2) or from one beam (B_in = 1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models.grc import GRC
from rirlab.models.scorer import Scorer

NEG = -1e9  # score of an impossible beam or pair; finite so that no NaN can appear


def gumbel_like(t: torch.Tensor) -> torch.Tensor:
    u = torch.rand_like(t).clamp_(1e-10, 1.0 - 1e-7)
    return -torch.log(-torch.log(u))


def initial_scores(m: int, b: int, like: torch.Tensor) -> torch.Tensor:
    """Beam scores of a fresh search: beam 0 alive (0), the others impossible (NEG). (M, b)"""
    s = like.new_full((m, b), NEG)
    s[:, 0] = 0.0
    return s


def marginalize(roots: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """sum_i softmax(scores)_i * root_i: (M, b, D), (M, b) -> (M, D)."""
    return (F.softmax(scores, dim=-1).unsqueeze(-1) * roots).sum(1)  # (M, D)


class BeamTree(nn.Module):
    """EBT-GRC beam search over merge orders; ``straight_through=True`` with beam 1 is GT-GRC.

    forward(x (M, B_in, L, D), lengths (M,), scores (M, b) or None) -> roots (M, b, D), scores (M, b),
    beams sorted by score (best first) for every row that made at least one merge.
    """

    def __init__(self, cell: GRC, scorer: Scorer, beam_size: int, straight_through: bool = False, tau: float = 1.0):
        super().__init__()
        self.cell = cell
        self.scorer = scorer
        self.beam_size = beam_size
        self.straight_through = straight_through
        self.tau = tau

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        m, b_cur, width, d = x.shape
        b = self.beam_size
        if scores is None:
            scores = initial_scores(m, b, x)  # (M, b)
        lengths, order = lengths.sort(descending=True)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(m, device=order.device)
        x, scores = x[order], scores[order]
        lens = lengths.tolist()
        n_merging = [sum(1 for L in lens if L > t + 1) for t in range(max(lens[0] - 1, 0) + 1)]
        pieces = []  # (roots, scores) of finished row ranges, later-finishing ranges first in sorted order

        n = n_merging[0]
        if n < m:  # rows of length <= 1: the leaf is the root
            pieces.append((x[n:, :, 0].expand(m - n, b, d), scores[n:]))
        x, scores, lengths = x[:n], scores[:n], lengths[:n]
        ps = None
        if n:
            ps = self.scorer(x[:, :, :-1], x[:, :, 1:])  # (n, B_in, L-1)
            pos = torch.arange(width - 1, device=x.device)
            ps = ps.masked_fill(pos >= (lengths - 1)[:, None, None], NEG)  # pairs reaching into padding
        for t in range(len(n_merging) - 1):
            x, ps, scores = self.step(x, ps, scores, lengths - t)
            n_next = n_merging[t + 1]
            if n_next < n:  # rows that just made their last merge
                pieces.append((x[n_next:, :, 0], scores[n_next:]))
                x, ps, scores, lengths = x[:n_next], ps[:n_next], scores[:n_next], lengths[:n_next]
                n = n_next
        roots = torch.cat([r for r, _ in reversed(pieces)])[inv]  # (M, b, D)
        final = torch.cat([s for _, s in reversed(pieces)])[inv]  # (M, b)
        return roots, final

    def step(self, x: torch.Tensor, ps: torch.Tensor, scores: torch.Tensor, cur_len: torch.Tensor):
        """One merge in every beam of every row. x (n, B, W, D), ps (n, B, W-1), scores (n, b)."""
        n, b_cur, w, d = x.shape
        b = self.beam_size
        dev = x.device
        logp = F.log_softmax(ps, dim=-1)  # (n, B, W-1)
        key = logp + gumbel_like(logp) if self.training else logp
        k1 = min(b, w - 1)
        top_pos = key.topk(k1, dim=-1).indices  # (n, B, k1) per-beam stochastic top-k
        cand = scores.view(n, b, 1) + logp.gather(-1, top_pos)  # (n, b, k1) accumulated log-scores
        new_scores, sel = cand.view(n, -1).topk(b, dim=-1)  # (n, b) best b of b x k1
        parent = torch.div(sel, k1, rounding_mode="floor")  # (n, b)
        j = top_pos.expand(n, b, k1).reshape(n, -1).gather(1, sel)  # (n, b) merged pair = (j, j+1)
        src_beam = parent if b_cur == b else torch.zeros_like(parent)  # B_in = 1: all beams equal

        xf = x.reshape(n * b_cur * w, d)  # rows of every node of every beam
        base = (torch.arange(n, device=dev)[:, None] * b_cur + src_beam) * w  # (n, b)
        new = self.cell(xf[base + j], xf[base + j + 1])  # (n, b, D)
        if self.straight_through:  # GT-GRC: value 1 forward, gradient of the soft selection backward
            soft = F.softmax(key / self.tau, dim=-1)  # (n, B, W-1) Gumbel-softmax over pairs
            soft = soft.gather(1, src_beam[..., None].expand(n, b, w - 1))  # (n, b, W-1) of each parent beam
            pj = soft.gather(-1, j[..., None])[..., 0]  # (n, b)
            new = new * (1.0 + pj - pj.detach()).unsqueeze(-1)  # (n, b, D)

        pos = torch.arange(w - 1, device=dev)  # (W-1,)
        src = pos + (pos > j[..., None])  # (n, b, W-1): drop the right child j+1
        nx = xf[base[..., None] + src]  # (n, b, W-1, D)
        nx[torch.arange(n, device=dev)[:, None], torch.arange(b, device=dev), j] = new  # parent replaces left child

        # pair scores: shift the cached ones, re-score only the two pairs touching the new node
        pos2 = torch.arange(w - 2, device=dev)  # (W-2,)
        psf = ps.reshape(-1)
        old = psf[((torch.arange(n, device=dev)[:, None] * b_cur + src_beam) * (w - 1))[..., None]
                  + pos2 + (pos2 > j[..., None])]  # (n, b, W-2)
        nxf = nx.view(n * b * (w - 1), d)
        nbase = (torch.arange(n * b, device=dev) * (w - 1)).view(n, b)
        lnb = nxf[nbase + (j - 1).clamp(min=0)]  # (n, b, D) left neighbour of the new node
        rnb = nxf[nbase + (j + 1).clamp(max=w - 2)]  # (n, b, D) right neighbour
        two = self.scorer(torch.stack([lnb, new], 2), torch.stack([new, rnb], 2))  # (n, b, 2)
        right_ok = (j + 1) < (cur_len - 1)[:, None]  # the right neighbour is a real node
        s_right = two[..., 1].masked_fill(~right_ok, NEG)
        jj = j[..., None]
        new_ps = torch.where(pos2 == jj - 1, two[..., :1], torch.where(pos2 == jj, s_right[..., None], old))
        return nx, new_ps, new_scores
