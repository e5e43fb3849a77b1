"""Efficient Beam Tree RvNN (EBT paper §3, Algorithm 1 of Appendix E), batched, recorded op by op by autograd.

This is the readable reference of the search. Each step scores every adjacent child pair of every
beam with the light scorer (eq. 12; EBT eq. 6-7), takes the top-k pairs per beam (Gumbel-perturbed
"stochastic top-k" while training, plain top-k at eval), adds their log-softmax scores to the beam
scores, keeps b of the b x k candidates (:func:`keep_survivors`: Gumbel-perturbed top-b while training
under ``beam_select="stochastic"``, plain top-b otherwise) and composes ONLY the chosen pair of each
kept beam with the GRC cell (eq. 10-11). The caller marginalises the b roots with a softmax over the beam
scores (:func:`marginalize`). With ``straight_through=True`` and beam 1 it is EGT-GRC's greedy search: value
of the argmax merge forward, the Gumbel-softmax gradient backward (Choi et al., AAAI 2018, §3.3), in one of two
forms (``st_gradient``, :class:`STGradient`).

Batching: every row (a sequence, or a chunk under RIR) is one search; rows are sorted by length so
the rows still merging at step t are a prefix (:func:`merging_rows`) and finished rows cost nothing.
Pair scores are cached per beam: a merge re-scores only the two pairs touching the new node.
Invalid beams (fewer distinct trees than b) carry the score ``NEG`` and get zero weight, with one
exception (:func:`one_leaf_beams`): a row of ONE item with one input beam returns that item as the root
of all b beams, each with the input beam's score, as the authors' code does; otherwise a one-token
last chunk under RIR would kill every beam but the first at the next level. Rows may start from b
input beams with scores (RIR levels >= 2) or from one beam (B_in = 1).

The same search as one autograd node with a hand-written backward is the fast path
:class:`rirlab.models.fused_beam.FusedBeamTree`; it imports its shared pieces from here (``NEG``,
:class:`Noise`, :func:`merging_rows`, :func:`initial_scores`, :func:`keep_survivors`,
:func:`one_leaf_beams`) and the tests hold the two equal in values and gradients (training mode
included: same draws, same survivors), and both equal to a literal Algorithm 1.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models.base import at_least_fp32
from rirlab.models.grc import dropout_keep_mask

NEG = -1e9  # score of an impossible beam or pair; finite so that no NaN can appear

# The straight-through gradient of a greedy (beam 1) merge. "mask": the authors' public code (BeamRecursionFamily
# ``EGT_GRC.py`` with ``st_gumbel_softmax``, which produced the published EGT-GRC numbers) and Choi et al.'s
# formulation: the selection is the vector sel = onehot(j) + y - y.detach() over every pair, y the Gumbel-softmax;
# the cell reads [sum_k sel_k h_k; sum_k sel_k h_k+1] and the next state is sel_k new + (1 - cumsum(sel)_k) h_k +
# (cumsum(sel)_k - sel_k) h_k+1, with every pair re-scored from the state at every step, so every pair's probability
# gets a gradient (through the children read, the parent and the nodes that stay or move left). "node": only the
# merged pair's probability p_j, node = cell(h_j, h_j+1) * (1 + p_j - p_j.detach()) (rirlab before; 5x smaller
# scorer gradients on a small case). Forward values are the same.
STGradient = Literal["mask", "node"]


def checked_st_gradient(value: str) -> str:
    """``value`` when it is an :data:`STGradient`, else a ValueError naming the choices."""
    if value not in ("mask", "node"):
        raise ValueError(f"st_gradient must be 'mask' or 'node', not {value!r}")
    return value


def pair_scores(scorer: nn.Module, h: torch.Tensor, pos: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
    """Scores (M, b, W'-1) of every adjacent pair of the frontier h (M, b, W', D) of rows with ``cur`` (M,) nodes;
    ``pos`` (W'-1,) the pair positions. Pairs reaching into the padding: NEG."""
    return scorer(h[:, :, :-1], h[:, :, 1:]).masked_fill(pos >= (cur - 1)[:, None, None], NEG)


def select_merge(compose, h: torch.Tensor, soft: torch.Tensor, j: torch.Tensor):
    """The merge of a greedy step under ``st_gradient="mask"`` (:data:`STGradient`; the authors' ``EGT_GRC`` /
    ``EGT_GAU_IN.select_composition``): frontier h (M, b, W', D), soft (M, b, W'-1) the Gumbel-softmax over its pairs,
    j (M, b) the merged pair, ``compose`` the cell on [child_l; child_r] (..., 2D) -> (..., D). With the selection
    sel = onehot(j) + soft - soft.detach() (value one-hot): parent = cell(sum_k sel_k h_k, sum_k sel_k h_k+1)
    (M, b, 1, D) and the next frontier (M, b, W'-1, D) sel_k parent + (1 - cumsum(sel)_k) h_k + (cumsum(sel)_k -
    sel_k) h_k+1, whose values are those of the plain merge (up to rounding)."""
    sel = (F.one_hot(j, soft.size(-1)).to(soft.dtype) + soft - soft.detach()).to(h.dtype)  # (M, b, W'-1)
    left, right = h[:, :, :-1], h[:, :, 1:]  # (M, b, W'-1, D) each pair's children
    row = sel.unsqueeze(-2)  # (M, b, 1, W'-1)
    new = compose(torch.cat([row @ left, row @ right], -1))  # (M, b, 1, D) eq. 10-11 on the selected children
    upto = sel.cumsum(-1).unsqueeze(-1)  # (M, b, W'-1, 1): 0 before j, 1 from j on
    return new, sel.unsqueeze(-1) * new + (1 - upto) * left + (upto - sel.unsqueeze(-1)) * right
BeamSelect = Literal["stochastic", "top"]  # survivor selection while training (eval: always plain top-b)


GUMBEL_MIN = -math.log(24 * math.log(2))  # -log(-log U) at the smallest positive float32 U = 2^-24


def gumbel_like(t: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise -log(-log U), U ~ U[0, 1). U = 0 (p = 2^-24) is read as U = 2^-24: a -inf key would
    let an impossible survivor (score NEG) beat a possible one (the authors' code adds eps = 1e-20 for this)."""
    return torch.rand_like(t).log_().neg_().log_().neg_().clamp_(min=GUMBEL_MIN)  # 4x cheaper than exponential_()


def merging_rows(lens: list[int]) -> list[int]:
    """Rows (sorted by length, descending) still merging at each step: entry t = #rows with length > t + 1."""
    return [sum(1 for L in lens if L > t + 1) for t in range(max(lens[0] - 1, 0) + 1)]


def initial_scores(m: int, b: int, like: torch.Tensor) -> torch.Tensor:
    """Beam scores of a fresh search: beam 0 alive (0), the others impossible (NEG). (M, b), in ``like``'s dtype
    but at least fp32 (beam scores stay fp32 under bf16 autocast)."""
    s = like.new_full((m, b), NEG, dtype=torch.promote_types(like.dtype, torch.float32))
    s[:, 0] = 0.0
    return s


def perturbs_survivors(big_b: int) -> bool:
    """Whether a training step with B input beams draws survivor noise: when B > 1, as in the authors' code, which
    runs the stochastic top-b whenever B k > b (B = b once beams exist; where k = 1 it only reorders the beams,
    and the authors' code reorders finished rows at every later step too). A fresh search's first step (B = 1)
    keeps every valid candidate (at most b), as there."""
    return big_b > 1


def keep_survivors(cand: torch.Tensor, b: int, gumbel: torch.Tensor | None):
    """Keep b of the b x k1 candidates of every row: cand (n, b k1) accumulated log-scores -> scores (n, b), sel (n, b).

    ``gumbel`` None: plain top-b (eval, or ``beam_select="top"``). Else ``gumbel`` (n, b k1) Gumbel(0, 1)
    noise: the stochastic top-b (Gumbel-top-k, Kool et al. 2019) of the authors' code (``stochastic_topk`` on
    the accumulated scores): survivors are the top-b of score + noise, temperature 1, sorted by the perturbed
    key, and each keeps its UNPERTURBED score (the noise decides only who survives). Impossible candidates
    (score about NEG) stay below every possible one, as the authors' beam mask keeps them.
    """
    if gumbel is None:
        return cand.topk(b, dim=-1)  # (n, b), (n, b)
    sel = (cand + gumbel).topk(b, dim=-1).indices  # (n, b) by perturbed key
    return cand.gather(1, sel), sel  # (n, b) unperturbed scores


def one_leaf_beams(final: torch.Tensor, lengths: torch.Tensor, b_in: int) -> torch.Tensor:
    """Scores (M, b) of a search's output with rows of one item and one input beam given b equal live beams.

    Such a row makes no merge; its b roots are all the item, and each gets the input beam's score (column 0)
    instead of [s, NEG, ...]. This is what the authors' code yields for a one-token chunk (b copies of the leaf
    with equal scores); with NEG, string-it alignment and RIR inference would string that NEG into b - 1 of the
    next level's beams and leave one beam alive. Rows with b input beams keep their own scores.
    """
    if b_in != 1 or final.size(1) == 1:
        return final
    return torch.where((lengths <= 1)[:, None], final[:, :1], final)  # (M, b)


def marginalize(roots: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """sum_i softmax(scores)_i * root_i: (M, b, D), (M, b) -> (M, D); the softmax and the sum in (at least) fp32."""
    return (F.softmax(at_least_fp32(scores), dim=-1).unsqueeze(-1) * at_least_fp32(roots)).sum(1)  # (M, D)


class Noise:
    """The random draws of one training-mode search, taken up front in two generator calls.

    Step t draws Gumbel noise of shape (n_t, B_t, W - 1 - t) for the per-beam top-k, then, with
    ``survivors`` and where :func:`perturbs_survivors` (B_t > 1), (n_t, b k_t) for the top-b of the candidates
    (k_t = min(b, W - 1 - t)); its n_t * b compositions draw one dropout keep row (d_cell wide, drop
    probability p) each, in step order. The reference and the fused search both read this stream, so they
    see the same draws. Without ``survivors`` the stream is the pair noise alone (``beam_select="top"``).
    """

    def __init__(self, n_merging: list[int], b_in: int, b: int, width: int, d_cell: int, p: float, like: torch.Tensor,
                 survivors: bool = False):
        steps = n_merging[:-1]
        total = 0
        for t, n in enumerate(steps):
            big_b, k1 = (b_in if t == 0 else b), min(b, width - 1 - t)
            total += n * big_b * (width - 1 - t) + (n * b * k1 if survivors and perturbs_survivors(big_b) else 0)
        self.survivors = survivors
        self.g, self.g_at = gumbel_like(like.new_empty(total)), 0
        rows = b * sum(steps)
        self.keep = dropout_keep_mask((rows, d_cell), p, like.device) if p > 0 else None  # (rows, d_cell)
        self.k_at = 0

    def gumbel(self, shape) -> torch.Tensor:
        """The next ``shape`` draws of the stream (one strided view of it)."""
        stride = [math.prod(shape[i + 1 :]) for i in range(len(shape))]  # contiguous
        out = self.g.as_strided(shape, stride, self.g.storage_offset() + self.g_at)
        self.g_at += math.prod(shape)
        return out

    def survivor_gumbel(self, n: int, big_b: int, b: int, k1: int) -> torch.Tensor | None:
        """Noise (n, b k1) for :func:`keep_survivors` at a step with B = ``big_b``, or None where it draws none."""
        return self.gumbel((n, b * k1)) if self.survivors and perturbs_survivors(big_b) else None

    def keep_rows(self, rows: int) -> torch.Tensor | None:
        if self.keep is None:
            return None
        out = self.keep[self.k_at : self.k_at + rows]  # (rows, d_cell)
        self.k_at += rows
        return out


class BeamTree(nn.Module):
    """EBT-GRC beam search over merge orders (reference); ``straight_through=True`` with beam 1 is GT-GRC.

    ``cell``: ``compose(pair (..., 2D), keep) -> (..., D)`` with attributes ``p`` and ``d_cell`` for its dropout
    keep rows (a :class:`~rirlab.models.grc.GRC`); ``scorer(left, right) -> score`` (a
    :class:`~rirlab.models.scorer.Scorer`).
    forward(x (M, B_in, L, D), lengths (M,), scores (M, b) or None) -> roots (M, b, D), scores (M, b),
    beams sorted by score (best first) for every row that made at least one merge (in training under
    ``beam_select="stochastic"``: by the perturbed key of the row's last merge, as in the authors' code).
    ``beam_select``: survivor selection while training (:func:`keep_survivors`); eval is always plain top-b.
    """

    def __init__(self, cell: nn.Module, scorer: nn.Module, beam_size: int, straight_through: bool = False,
                 tau: float = 1.0, beam_select: BeamSelect = "stochastic", st_gradient: STGradient = "mask"):
        super().__init__()
        if beam_select not in ("stochastic", "top"):
            raise ValueError(f"beam_select must be 'stochastic' or 'top', not {beam_select!r}")
        self.st_gradient = checked_st_gradient(st_gradient)
        self.cell = cell
        self.scorer = scorer
        self.beam_size = beam_size
        self.straight_through = straight_through
        self.tau = tau
        self.beam_select = beam_select
        self.register_buffer("offsets", torch.tensor([-1, 0, 1, 2]), persistent=False)  # j-1, j, j+1, j+2

    @property
    def mask_select(self) -> bool:
        """Greedy merges with the "mask" straight-through gradient (:func:`select_merge`; pairs scored every step)."""
        return self.straight_through and self.st_gradient == "mask"

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        m, b_in, width, d = x.shape
        b = self.beam_size
        if scores is None:
            scores = initial_scores(m, b, x)  # (M, b)
        lengths_in = lengths
        lengths, order = lengths.sort(descending=True)  # (M,): the rows still merging are a prefix
        h, scores = x[order], scores[order]  # (M, B_in, W, D) node states per beam, (M, b)
        n_merging = merging_rows(lengths.tolist())
        noise = self.noise(n_merging, b_in, width, x)
        pieces = []  # (roots (rows, b, D), scores (rows, b)) of finished row ranges, last rows in sorted order first

        n = n_merging[0]
        if n < m:  # rows of length <= 1: the leaf is the root
            pieces.append((h[n:, :, 0].expand(m - n, b, d), scores[n:]))
        h, scores, lengths = h[:n], scores[:n], lengths[:n]
        ps = None
        if n and not self.mask_select:  # (n, B_in, W-1) every adjacent pair (mask_select: scored in every step)
            ps = pair_scores(self.scorer, h, torch.arange(width - 1, device=x.device), lengths)
        for t in range(len(n_merging) - 1):
            h, ps, scores = self.step(h, ps, scores, lengths - t, noise)  # (n, b, W-1-t, D), (n, b, W-2-t), (n, b)
            n_next = n_merging[t + 1]
            if n_next < n:  # rows that just made their last merge
                pieces.append((h[n_next:, :, 0], scores[n_next:]))  # (n - n_next, b, D), (n - n_next, b)
                h, scores, lengths = h[:n_next], scores[:n_next], lengths[:n_next]
                ps = None if ps is None else ps[:n_next]
                n = n_next
        inv = torch.empty_like(order)
        inv[order] = torch.arange(m, device=x.device)  # (M,) sorted position of each row
        roots = torch.cat([r for r, _ in reversed(pieces)])[inv]  # (M, b, D)
        final = torch.cat([s for _, s in reversed(pieces)])[inv]  # (M, b)
        return roots, one_leaf_beams(final, lengths_in, b_in)

    def noise(self, n_merging: list[int], b_in: int, width: int, like: torch.Tensor) -> Noise | None:
        """The draws of a training-mode search (None at eval)."""
        if not self.training:
            return None
        return Noise(n_merging, b_in, self.beam_size, width, self.cell.d_cell, self.cell.p, like,
                     survivors=self.beam_select == "stochastic")

    def step(self, h: torch.Tensor, ps: torch.Tensor, scores: torch.Tensor, cur_len: torch.Tensor,
             noise: Noise | None):
        """One merge in every beam of every row (one iteration of Algorithm 1's loop).

        h (n, B, W, D) node states, ps (n, B, W-1) pair scores, scores (n, b), cur_len (n,) nodes per row now.
        Returns h (n, b, W-1, D), ps (n, b, W-2), scores (n, b).
        """
        n, big_b, w, d = h.shape
        b = self.beam_size
        if self.mask_select:  # every pair re-scored from this step's state, as the authors' loop (its gradient path)
            ps = pair_scores(self.scorer, h, torch.arange(w - 1, device=h.device), cur_len)  # (n, 1, W-1)
        logp = F.log_softmax(at_least_fp32(ps), dim=-1)  # (n, B, W-1) log-probability of merging each pair (fp32)
        key = logp + noise.gumbel(logp.shape) if noise is not None else logp  # (n, B, W-1) Gumbel-perturbed
        k1 = min(b, w - 1)
        top_pos = key.topk(k1, dim=-1).indices  # (n, B, k1) per-beam (stochastic) top-k
        cand = scores.view(n, b, 1) + logp.gather(-1, top_pos)  # (n, b, k1) accumulated log-scores
        gumbel = noise.survivor_gumbel(n, big_b, b, k1) if noise is not None else None  # (n, b k1) or None
        new_scores, sel = keep_survivors(cand.view(n, -1), b, gumbel)  # (n, b) b of b x k1
        parent = torch.div(sel, k1, rounding_mode="floor")  # (n, b) the beam each kept candidate extends
        src = parent.clamp(max=big_b - 1)  # (n, b) its row in h (B = 1: the one input beam)
        j = top_pos.expand(n, b, k1).reshape(n, -1).gather(1, sel)  # (n, b) merged pair = (j, j+1)

        row = torch.arange(n, device=h.device)[:, None]  # (n, 1)
        if big_b == 1:  # one input beam (a fresh search): every candidate extends it, no copy
            h, ps = h.expand(n, b, w, d), ps.expand(n, b, w - 1)  # (n, b, W, D), (n, b, W-1)
        else:  # indexing, not gather: autograd then keeps the indices only, not the (n, B, W, D) states
            h, ps = h[row, src], ps[row, src]  # (n, b, W, D) the kept beams, (n, b, W-1) their pair scores
        keep = noise.keep_rows(n * b) if noise is not None else None  # (n b, d_cell) dropout keep rows
        if self.mask_select:  # the next state (n, 1, W-1, D); its pairs are scored at the next step
            soft = F.softmax(key / self.tau, dim=-1)  # (n, 1, W-1) Gumbel-softmax over the pairs
            _, h = select_merge(lambda pair: self.cell.compose(pair, keep).to(h.dtype), h, soft, j)
            return h, None, new_scores
        around = (j[..., None] + self.offsets).clamp(0, w - 1)  # (n, b, 4): j-1, j, j+1, j+2
        beam = torch.arange(b, device=h.device)[:, None]  # (b, 1)
        four = h[row[..., None], beam, around]  # (n, b, 4, D) left neighbour, children, right neighbour
        new = self.cell.compose(four[:, :, 1:3].reshape(n, b, 2 * d), keep)  # (n, b, D) from [child_l; child_r]
        if self.straight_through:  # st_gradient "node": value 1 forward, gradient of p_j backward
            soft = F.softmax(key / self.tau, dim=-1)  # (n, B, W-1) Gumbel-softmax over pairs
            soft = soft.gather(1, src[..., None].expand(n, b, w - 1))  # (n, b, W-1)
            pj = soft.gather(-1, j[..., None])[..., 0]  # (n, b)
            new = new * (1.0 + pj - pj.detach()).unsqueeze(-1)  # (n, b, D)

        jj = j[..., None]  # (n, b, 1)
        pos = torch.arange(w - 1, device=h.device)  # (W-1,)
        # nodes before the merge stay, the parent takes place j, the nodes past j + 1 move left: one gather from
        # [h; new] (the same values and gradients as selecting with two masks, with less memory traffic)
        src = torch.where(pos == jj, w, pos + (pos > jj))  # (n, b, W-1) place in [h; new] of each new node
        h = torch.cat([h, new[:, :, None].to(h.dtype)], 2).gather(2, src[..., None].expand(n, b, w - 1, d))

        # pair scores: shift the cached ones, re-score only the two pairs touching the new node
        pos2 = pos[:-1]  # (W-2,)
        old = ps.gather(2, pos2 + (pos2 > jj))  # (n, b, W-2)
        two = self.scorer(torch.stack([four[:, :, 0], new], 2), torch.stack([new, four[:, :, 3]], 2))  # (n, b, 2)
        right_ok = (j + 1) < (cur_len - 1)[:, None]  # (n, b) the right neighbour is a real node
        s_right = two[..., 1].masked_fill(~right_ok, NEG)  # (n, b)
        ps = torch.where(pos2 == jj - 1, two[..., :1], torch.where(pos2 == jj, s_right[..., None], old))  # (n, b, W-2)
        return h, ps, new_scores
