"""Efficient Beam Tree RvNN (EBT paper §3, Algorithm 1 of Appendix E) and its greedy straight-through variant.

Each step scores every adjacent child pair of every beam with the light scorer (eq. 12),
takes the top-k pairs per beam (Gumbel-perturbed "stochastic top-k" while training, plain
top-k at eval), adds their log-softmax scores to the beam scores, keeps the best b of the
b x k candidates, and composes ONLY the chosen pair of each kept beam with the GRC cell.
The caller marginalises the b roots with a softmax over beam scores (:func:`marginalize`).

Two implementations of the same search share the data layout below: the default one is
:func:`rirlab.models.fused_beam.fused_search` (one autograd node, hand-written backward, several
times faster); this module's op-by-op version, recorded by autograd, serves GT-GRC's
straight-through selection and is the reference the fused one is tested against
(``BeamTree.fused = False``).

Where the time goes, and what we do instead of the naive version:
- no copies of sequence states at all: every node vector is written once into a node pool
  (:class:`NodePool`); a beam is a row of node ids (ints), so keeping b beams, deleting the
  right child and placing the parent are integer gathers, and each step reads only the two
  children and two neighbours of each kept beam (O(b d) per row and step);
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

from rirlab.models.fused_beam import NEG, Noise, fused_search, merging_rows
from rirlab.models.grc import GRC
from rirlab.models.scorer import Scorer


def initial_scores(m: int, b: int, like: torch.Tensor) -> torch.Tensor:
    """Beam scores of a fresh search: beam 0 alive (0), the others impossible (NEG). (M, b)"""
    s = like.new_full((m, b), NEG)
    s[:, 0] = 0.0
    return s


def marginalize(roots: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """sum_i softmax(scores)_i * root_i: (M, b, D), (M, b) -> (M, D)."""
    return (F.softmax(scores, dim=-1).unsqueeze(-1) * roots).sum(1)  # (M, D)


class NodePool:
    """Every node vector of one search, written once; gradients of reads are summed per node.

    Reads and writes are custom autograd functions chained by a 0-dim ``token``: the write of
    step t returns the token the later reads take, so in backward every read of a node has
    added its gradient to ``grad`` before the node's write hands that gradient to its producer.
    """

    def __init__(self, rows: int, d: int, like: torch.Tensor):
        self.data = like.new_empty(rows, d)  # (R, D)
        self.grad = None
        self.count = 0
        self.token = like.new_zeros((), requires_grad=like.requires_grad)

    def write(self, values: torch.Tensor) -> torch.Tensor:
        """Store (..., D) values; returns their row ids (...)."""
        k = values[..., 0].numel()
        ids = torch.arange(self.count, self.count + k, device=values.device).view(values.shape[:-1])
        self.token = _Write.apply(self.token, values.reshape(k, -1), self, self.count)
        self.count += k
        return ids

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        return _Read.apply(self.token, self, ids)  # (*ids.shape, D)


class _Write(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, values, pool, start):
        pool.data[start : start + values.size(0)] = values.detach()
        ctx.pool, ctx.start, ctx.k = pool, start, values.size(0)
        return token.detach().clone()

    @staticmethod
    def backward(ctx, g_token):
        pool = ctx.pool
        g = None if pool.grad is None else pool.grad[ctx.start : ctx.start + ctx.k].clone()
        return torch.zeros_like(g_token), g, None, None


class _Read(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, pool, ids):
        ctx.pool, ctx.ids = pool, ids
        return pool.data[ids]

    @staticmethod
    def backward(ctx, g):
        pool = ctx.pool
        if pool.grad is None:
            pool.grad = torch.zeros_like(pool.data)
        pool.grad.index_add_(0, ctx.ids.reshape(-1), g.reshape(-1, g.size(-1)))
        return torch.zeros((), dtype=g.dtype, device=g.device), None, None


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
        self.register_buffer("offsets", torch.tensor([-1, 0, 1, 2]), persistent=False)

    fused = True  # the one-node search of :mod:`rirlab.models.fused_beam`; False: op-by-op autograd (reference)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        m, b_in, width, d = x.shape
        b = self.beam_size
        dev = x.device
        if scores is None:
            scores = initial_scores(m, b, x)  # (M, b)
        if self.fused and not self.straight_through:
            return fused_search(self, x, lengths, scores)
        lengths, order = lengths.sort(descending=True)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(m, device=dev)
        x, scores = x[order], scores[order]
        n_merging = merging_rows(lengths.tolist())
        p = self.cell.drop.p if self.training else 0.0
        noise = Noise(n_merging, b_in, b, width, self.cell.w1.out_features, p, x) if self.training else None
        pool = NodePool(m * b_in * width + b * sum(n_merging[:-1]), d, x)
        ptr = pool.write(x).expand(m, b, width) if b_in == 1 else pool.write(x)  # (M, b, L) node ids
        pieces = []  # (root ids, scores) of finished row ranges; later-finishing ranges come first in sorted order

        n = n_merging[0]
        if n < m:  # rows of length <= 1: the leaf is the root
            pieces.append((ptr[n:, :, 0], scores[n:]))
        ptr, scores, lengths = ptr[:n], scores[:n], lengths[:n]
        ps = None
        if n:
            ps = self.scorer(x[:n, :, :-1], x[:n, :, 1:])  # (n, B_in, L-1)
            pos = torch.arange(width - 1, device=dev)
            ps = ps.masked_fill(pos >= (lengths - 1)[:, None, None], NEG)  # pairs reaching into padding
        for t in range(len(n_merging) - 1):
            ptr, ps, scores = self.step(pool, ptr, ps, scores, lengths - t, noise)
            n_next = n_merging[t + 1]
            if n_next < n:  # rows that just made their last merge
                pieces.append((ptr[n_next:, :, 0], scores[n_next:]))
                ptr, ps, scores, lengths = ptr[:n_next], ps[:n_next], scores[:n_next], lengths[:n_next]
                n = n_next
        roots = pool.read(torch.cat([r for r, _ in reversed(pieces)])[inv])  # (M, b, D)
        final = torch.cat([s for _, s in reversed(pieces)])[inv]  # (M, b)
        return roots, final

    def step(self, pool: NodePool, ptr: torch.Tensor, ps: torch.Tensor, scores: torch.Tensor, cur_len: torch.Tensor,
             noise: Noise | None):
        """One merge in every beam of every row. ptr (n, b, W) node ids, ps (n, B, W-1), scores (n, b)."""
        n, b, w = ptr.shape
        dev = ptr.device
        logp = F.log_softmax(ps, dim=-1)  # (n, B, W-1)
        key = logp + noise.gumbel(logp.shape) if noise is not None else logp
        k1 = min(b, w - 1)
        top_pos = key.topk(k1, dim=-1).indices  # (n, B, k1) per-beam (stochastic) top-k
        cand = scores.view(n, b, 1) + logp.gather(-1, top_pos)  # (n, b, k1) accumulated log-scores
        new_scores, sel = cand.view(n, -1).topk(b, dim=-1)  # (n, b) best b of b x k1
        parent = torch.div(sel, k1, rounding_mode="floor")  # (n, b)
        j = top_pos.expand(n, b, k1).reshape(n, -1).gather(1, sel)  # (n, b) merged pair = (j, j+1)

        ptr = ptr.gather(1, parent[..., None].expand(n, b, w))  # (n, b, W) the kept beams' node ids
        around = (j[..., None] + self.offsets).clamp(0, w - 1)  # (n, b, 4): j-1, j, j+1, j+2
        nodes = pool.read(ptr.gather(2, around))  # (n, b, 4, D) left neighbour, children, right neighbour
        keep = noise.keep_rows(n * b) if noise is not None else None
        new = self.cell.compose(nodes[:, :, 1:3].reshape(n, b, -1), keep)  # (n, b, D) from [child_l; child_r]
        if self.straight_through:  # GT-GRC: value 1 forward, gradient of the soft selection backward
            soft = F.softmax(key / self.tau, dim=-1)  # (n, B, W-1) Gumbel-softmax over pairs
            soft = soft.gather(1, parent[..., None].clamp(max=soft.size(1) - 1).expand(n, b, w - 1))  # (n, b, W-1)
            pj = soft.gather(-1, j[..., None])[..., 0]  # (n, b)
            new = new * (1.0 + pj - pj.detach()).unsqueeze(-1)  # (n, b, D)
        new_id = pool.write(new)  # (n, b)

        pos = torch.arange(w - 1, device=dev)  # (W-1,)
        jj = j[..., None]
        nptr = ptr.gather(2, pos + (pos > jj))  # (n, b, W-1): drop the right child j+1
        nptr = torch.where(pos == jj, new_id[..., None], nptr)  # the parent replaces the left child

        # pair scores: shift the cached ones, re-score only the two pairs touching the new node
        pos2 = torch.arange(w - 2, device=dev)  # (W-2,)
        src_beam = parent[..., None].clamp(max=ps.size(1) - 1).expand(n, b, w - 1)  # B_in = 1: one beam
        old = ps.gather(1, src_beam).gather(2, pos2 + (pos2 > jj))  # (n, b, W-2)
        two = self.scorer(torch.stack([nodes[:, :, 0], new], 2), torch.stack([new, nodes[:, :, 3]], 2))  # (n, b, 2)
        right_ok = (j + 1) < (cur_len - 1)[:, None]  # the right neighbour is a real node
        s_right = two[..., 1].masked_fill(~right_ok, NEG)
        new_ps = torch.where(pos2 == jj - 1, two[..., :1], torch.where(pos2 == jj, s_right[..., None], old))
        return nptr, new_ps, new_scores
