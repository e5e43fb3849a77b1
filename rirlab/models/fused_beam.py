"""EBT-GRC beam search (EBT paper §3, Algorithm 1; RIR eq. 10-12) as ONE autograd node with a hand-written backward.

The fast path of the reference search :class:`rirlab.models.beam_tree.BeamTree`: same search, same
values and gradients (the tests hold the two together and both against a literal Algorithm 1); what
changes is the cost of a merge step, which decides the speed because a search is a long chain of
small steps (29 for a chunk of 30, 999 for a non-RIR pass over 1000 tokens):

- forward runs without autograd recording and keeps, per step, only the tensors the backward needs;
- every node vector is written once into a node pool and every pair score once into a score
  pool; a beam is a row of node ids and a row of score ids, so keeping beams, deleting the right
  child and shifting the cached pair scores are integer gathers (ONE per merge step, through an index
  table per width, :func:`merge_table`), and a merge re-scores only the two pairs touching the new node;
- a step's ops are counted (``rirlab bench`` ``ops_per_step``): on a GPU each is a kernel launch and the
  step is launch-bound, so per-step buffers are cut once (``split``), not sliced per step;
- the random draws of a search (Gumbel noise of every step's per-beam top-k and survivor top-b,
  dropout masks of every composition) are the reference's :class:`~rirlab.models.beam_tree.Noise`
  stream, taken up front, and the survivors are kept by the reference's
  :func:`~rirlab.models.beam_tree.keep_survivors`, so both searches pick the same beams;
- backward (see :meth:`Search.backward`) runs the cheap beam-score chain in reverse step order,
  then the scorer of all LIVE compositions in one batch, then the GRC cells one batch per tree
  depth: a node in no final beam's tree has exactly zero gradient and is skipped (about two thirds
  of them at beam 7), and a node's gradient is complete once every shallower composition is done;
- LayerNorm and GELU use ATen's fused backward kernels, the gate algebra is written out, and each
  weight's gradient is ONE matrix product over the live rows of all steps.

It implements exactly the GRC cell (:class:`~rirlab.models.grc.GRC`, eq. 10-11) and the pair scorer
(:class:`~rirlab.models.scorer.Scorer`, eq. 12), reading them only through ``GRC.weights()`` and
``Scorer.weights()``; any other cell or scorer is refused (:func:`check_fusable`).
Rows are sorted by length so the rows still merging are a prefix; finished rows cost nothing.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models.base import at_least_fp32, full_precision
from rirlab.models.beam_tree import (NEG, BeamSelect, BeamTree, initial_scores, keep_survivors, merging_rows,
                                     one_leaf_beams)
from rirlab.models.grc import GRC, GRCWeights, dropout_scale
from rirlab.models.scorer import Scorer, ScorerWeights

_gelu_backward = torch.ops.aten.gelu_backward
_ln_backward = torch.ops.aten.native_layer_norm_backward


def take(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``t[idx]`` for an index tensor of any shape: rows of ``t`` (R, ...) -> (*idx.shape, ...), by ``index_select``
    (PyTorch's advanced indexing took 5x longer on CPU for a (16, 100, 128) gather, several of which run per merge
    step)."""
    return t.index_select(0, idx.reshape(-1)).view(*idx.shape, *t.shape[1:])


@functools.lru_cache(maxsize=8192)
def state_shift(w: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Column pattern of a merge at width W: the next state's column c reads column ``source[c]``, plus one
    where ``key[c] > j`` (past the merged pair). Node ids 0..W-2 from 0..W-2 (+1 past j), score ids
    0..W-3 from W..2W-3 (+1 past j), the spare column from 2W-1. Built on the device from ``arange`` (no
    host-to-device copy), once per (W, device)."""
    c = torch.arange(2 * w - 2, device=device)  # (2W-2,) columns of the next state
    source = c + (c >= w - 1)  # [0..W-2, W..2W-3, 2W-2]
    key = torch.where(c < w - 1, c, c - (w - 1))  # [0..W-2, 0..W-3, W-2] ...
    key[-1] = 2 * w  # ... and the spare column never shifts: [0..W-2, 0..W-3, 2W]
    return source, key


LEAD = 6  # columns before a beam's state in the beam search's merge rows: the 2 children the cell reads, 4 the scorer
TABLE_MAX = 64  # widest merge step indexed through a table (b B (W-1) rows of 2W + 6: O(W^2) memory per width)


@functools.lru_cache(maxsize=8192)
def merge_table(w: int, big_b: int, b: int, device: torch.device) -> torch.Tensor:
    """Everything a merge moves, as gather indices: entry [p (W-1) + j, i] (parent beam p, merged pair j, kept beam
    i) indexes [B beams of merge rows (LEAD + 2W wide) | the 3 new ids (node, left and right pair
    score) of each of the b kept beams] and yields the kept beam's merge row at width W-1:
    [nodes j, j+1 (the cell's children) | left node j-1, new, new, right node j+2 (clamped; the two pairs the
    scorer reads) | the next state: :func:`state_shift` of beam p with the new ids placed (:meth:`Search.next_state`)].
    Built once per (W, B, b, device); (B (W-1), b, LEAD + 2W - 2), so that a step looks up all its rows in one
    indexing op (:func:`merge_index`)."""
    source, key = state_shift(w, torch.device("cpu"))
    rows = []  # per j: columns of beam p's merge row, or NEW + k for the k-th new id
    new = 1 << 20
    for j in range(w - 1):
        four = [min(max(j + o, 0), w - 1) for o in (-1, 0, 1, 2)]
        nxt = [LEAD + int(s) + int(k > j) for s, k in zip(source, key)]
        for k, col in enumerate((j, (j - 1) % (w - 1) + w - 1, j + w - 1)):  # as next_state's scatter, in order
            nxt[col] = new + k
        rows.append([LEAD + j, LEAD + j + 1, LEAD + four[0], new, new, LEAD + four[3]] + nxt)
    t = torch.tensor(rows)  # (W-1, LEAD + 2W - 2)
    beam = torch.arange(big_b)[:, None, None] * (LEAD + 2 * w)  # (B, 1, 1) offset of beam p's merge row
    kept = big_b * (LEAD + 2 * w) + 3 * torch.arange(b)[:, None, None, None]  # (b, 1, 1, 1) its new ids
    full = torch.where(t >= new, kept + (t - new), beam + t)  # (b, B, W-1, LEAD + 2W - 2)
    return full.view(b, -1, t.size(1)).transpose(0, 1).contiguous().to(device)


@functools.lru_cache(maxsize=64)
def beam_ids(b: int, device: torch.device) -> torch.Tensor:
    """(b,) 0 .. b-1: the kept beams' column of :func:`merge_table`."""
    return torch.arange(b, device=device)


@functools.lru_cache(maxsize=16)
def pair_table(rows: int, device: torch.device) -> torch.Tensor:
    """(rows, 16) what a wide merge step (:func:`merge_index` above :data:`TABLE_MAX`) looks up per merged pair j, for
    every width at once (``rows`` a power of two above the widest pair seen): the lead columns' offsets in the parent's
    node ids (j, j+1, j-1 clamped at 0, two unused, j+2; :func:`merge_table`'s lead), then P (5) and E (5): the columns
    of the next merge row that take the new ids are P + (W-1) E (the lead's new node twice, the node j, the left pair
    score at (j-1) mod (W-1) + W-1, the right one at j + W-1; the mod only wraps at j = 0, where E counts W-1 twice)."""
    j = torch.arange(rows, device=device)[:, None]
    zero = torch.zeros_like(j)
    lead = torch.cat([j, j + 1, (j - 1).clamp_(min=0), zero, zero, j + 2], 1)
    p = torch.cat([zero + 3, zero + 4, LEAD + j, LEAD + j - 1, LEAD + j], 1)
    e = torch.cat([zero, zero, zero, 1 + (j == 0).long(), zero + 1], 1)
    return torch.cat([lead, p, e], 1)


@functools.lru_cache(maxsize=8192)
def wide_new_ids(w: int, big_b: int, b: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(b, 5) where a wide merge step's new ids (the lead's new node twice, the node, the left and the right pair
    score of kept beam i) sit in its gather's source: after the B merge rows (LEAD + 2W each), 3 per kept beam;
    and LEAD as a tensor (the parent's merge row starts at LEAD + p (LEAD + 2W))."""
    ids = big_b * (LEAD + 2 * w) + 3 * torch.arange(b, device=device)[:, None] + torch.tensor([0, 0, 0, 1, 2],
                                                                                              device=device)
    return ids, torch.tensor(LEAD, device=device)


@functools.lru_cache(maxsize=8192)
def merge_table_by_parent(w: int, big_b: int, b: int, device: torch.device) -> torch.Tensor:
    """:func:`merge_table` as (B, W-1, b, LEAD + 2W - 2): looked up by parent beam and pair (no p (W-1) + j per step)."""
    return merge_table(w, big_b, b, device).view(big_b, w - 1, b, -1)


def merge_index(w: int, big_b: int, b: int, jj: torch.Tensor, parent: torch.Tensor):
    """The :func:`merge_table` entries (n, b, LEAD + 2W - 2) of the kept beams (merged pair ``jj`` (n, b), parent beam
    ``parent``, ignored where B = 1): one lookup up to :data:`TABLE_MAX`; above it (a non-RIR
    pass over a long sequence, where a table per width would be O(W^2)) the same indices in 9 ops: the pair's lead
    columns and new-id columns (one lookup, :func:`pair_table`), [lead | :func:`state_shift`'s source, + 1 past its
    key], plus the parent's merge row, the new ids scattered in (was ~24 ops: aranges, shifts and a scatter index
    built per step)."""
    dev = jj.device
    if w <= TABLE_MAX:
        if big_b == 1:
            return merge_table(w, big_b, b, dev)[jj, beam_ids(b, dev)]
        return merge_table_by_parent(w, big_b, b, dev)[parent, jj, beam_ids(b, dev)]
    stride = LEAD + 2 * w  # one beam's merge row
    source, key = state_shift(w, dev)
    new_ids, lead0 = wide_new_ids(w, big_b, b, dev)
    rows = pair_table(1 << (w - 2).bit_length(), dev)  # covers j <= W-2
    lead, p, e = F.embedding(jj, rows).split([6, 5, 5], 2)  # (n, b, 6 | 5 | 5)
    j = jj.unsqueeze(2)
    shift = torch.cat([lead.clamp_(max=w - 1), torch.add(source, torch.gt(key, j))], 2)  # (n, b, LEAD + 2W - 2)
    at = shift.add_(torch.add(lead0, parent, alpha=stride).unsqueeze(2) if big_b > 1 else lead0)
    return at.scatter_(2, torch.add(p, e, alpha=w - 1), new_ids.expand(*jj.shape, 5))


def flat1(t: torch.Tensor) -> torch.Tensor:
    """``t`` as one dimension: itself where it is one already (a ``view`` is an op dispatched, one per step)."""
    return t if t.dim() == 1 else t.view(-1)


BLOCK = 1 << 21  # log-probabilities per batched log-softmax backward: bounds its buffers (~24 bytes each) in a long
# non-RIR search (1 x 1800: ~11M); one block holds a RIR level (128 x 100: ~1.5M)


def step_blocks(sizes: list[int]) -> list[tuple[int, int]]:
    """Runs [t0, t1) of consecutive steps with at most :data:`BLOCK` log-probabilities (``sizes``) each; a wider step
    is a run of its own."""
    blocks, t0, acc = [], 0, 0
    for t, p in enumerate(sizes):
        if acc and acc + p > BLOCK:
            blocks.append((t0, t))
            t0, acc = t, 0
        acc += p
    return blocks + [(t0, len(sizes))]


@functools.lru_cache(maxsize=4)
def segment_index(shapes: tuple, device: torch.device) -> torch.Tensor:
    """(P,) int32 for a run of steps with (n, B, W) ``shapes``: the (step, row, beam) log-softmax each of the P
    log-probabilities (the steps' (n, B, W-1), flattened in order) belongs to; built once per shapes."""
    widths = np.concatenate([np.full(n * big_b, w - 1, dtype=np.int64) for n, big_b, w in shapes])
    return torch.from_numpy(np.repeat(np.arange(widths.size, dtype=np.int32), widths)).to(device)


@functools.lru_cache(maxsize=8)
def contribution_rows(shapes: tuple, b: int, device: torch.device) -> torch.Tensor:
    """(sum n b,) the (row, final beam) of every (step, row, final beam) of :func:`lineage`: 0 .. n_t b - 1 per step."""
    return torch.from_numpy(np.concatenate([np.arange(n * b, dtype=np.int64) for n, _, _ in shapes])).to(device)


def lineage(shapes, r0s, n_merging, b, n_leaf, n_rows, parents, chosen, roots, ids):
    """The host's share of :meth:`Search.backward` (numpy, no device op): per step t (shapes (n, B, W), first
    composition row r0), ``parents`` and ``chosen`` (n b each, flattened, all steps): the beam before the step and
    the log-probability index (in (B, W-1)) of every beam after it; ``roots`` (M b,) the final beams' node ids,
    ``ids`` (R, 2) every composition's children.

    Returns, per step t (lists), for each (row r < n_t, final beam f): ``pos``, the flat index (in all steps'
    log-probabilities) of the log-probability f's lineage chose at t, and ``seg``, its (step, row, beam) segment;
    ``g0`` (n_0 b,): the flat (row, input beam) each final beam descends from; ``live``: the compositions in some
    final beam's tree, by depth (longest path from a root), then by row; ``counts``: how many per depth."""
    qo = np.cumsum([0] + [n * b for n, _, _ in shapes])
    po = np.cumsum([0] + [n * big_b * (w - 1) for n, big_b, w in shapes])
    so = np.cumsum([0] + [n * big_b for n, big_b, _ in shapes])
    anc = np.empty((n_merging[0], b), dtype=np.int64)  # the beam each final beam descends from, at the current step
    beams = np.arange(b, dtype=np.int64)
    pos, seg = [None] * len(shapes), [None] * len(shapes)
    for t in range(len(shapes) - 1, -1, -1):
        n, big_b, w = shapes[t]
        anc[n_merging[t + 1] : n] = beams  # rows whose last merge is step t: each final beam is itself
        a, rows = anc[:n], np.arange(n, dtype=np.int64)[:, None]
        par, ch = parents[qo[t] : qo[t + 1]].reshape(n, b), chosen[qo[t] : qo[t + 1]].reshape(n, b)
        pos[t] = (po[t] + rows * (big_b * (w - 1)) + np.take_along_axis(ch, a, 1)).reshape(-1)
        p = np.take_along_axis(par, a, 1)  # (n, b) the beam before step t
        seg[t] = (so[t] + rows * big_b + p * (big_b > 1)).reshape(-1)  # B = 1: one softmax per row
        anc[:n] = p
    g0 = (np.arange(n_merging[0], dtype=np.int64)[:, None] * b + anc).reshape(-1)
    # depth per composition (-1: in no final beam's tree); every user of a node as a child is a later step
    depth = np.full(n_rows, -1, dtype=np.int64)
    r = roots - n_leaf
    depth[r[r >= 0]] = 0
    children = ids - n_leaf  # (R, 2) composition rows of the children, negative for leaves
    for t in range(len(shapes) - 1, -1, -1):
        r0, r1 = r0s[t], r0s[t] + shapes[t][0] * b
        dd = depth[r0:r1]
        for c in (children[r0:r1, 0], children[r0:r1, 1]):
            k = (dd >= 0) & (c >= 0)
            np.maximum.at(depth, c[k], dd[k] + 1)
    order = np.argsort(depth, kind="stable")
    live = order[int((depth < 0).sum()) :]
    return pos, seg, g0, live, np.bincount(depth[live]).tolist()


class Search:
    """One EBT-GRC beam search over a batch of rows; ``save=True`` keeps what :meth:`backward` needs."""

    step_buffers = False  # save the cell's node ids, the padding mask and the scorer's inputs in buffers (a backward
    # that reads them step by step); else per step in lists, the scorer's inputs re-read from the node pool

    def __init__(self, tree: BeamTree, cw: GRCWeights, sw: ScorerWeights, x, lengths, scores, save: bool):
        self.tree = tree
        self.w1, self.b1, self.w2, self.b2, self.gamma, self.beta = cw.w1, cw.b1, cw.w2, cw.b2, cw.gamma, cw.beta
        self.sw1, self.sb1, self.sw2, self.sb2 = sw.w1, sw.b1, sw.w2, sw.b2
        self.p = cw.p if tree.training else 0.0
        self.scale = dropout_scale(self.p)
        self.eps = cw.eps
        self.ds = sw.d_s
        m, b_in, w0, d = x.shape
        self.m, self.b_in, self.w0, self.d, self.b = m, b_in, w0, d, tree.beam_size
        lengths, self.order = lengths.sort(descending=True)
        self.x = x[self.order]
        self.scores0 = scores[self.order]
        self.lengths = lengths
        self.n_merging = merging_rows(lengths.tolist())
        self.n_leaf = m * b_in * w0
        self.n_rows = self.b * sum(self.n_merging[:-1])  # composed nodes over all steps
        self.n_sc0 = self.n_merging[0] * b_in * max(w0 - 1, 0)  # leaf pair scores
        self.pool = x.new_empty(self.n_leaf + self.n_rows, d)
        self.spool = x.new_empty(self.n_sc0 + 2 * self.n_rows)
        self.noise = tree.noise(self.n_merging, b_in, w0, x)
        self.steps = []  # per step: the indices the backward's score pass reads
        self.buf = None
        if save:  # what the backward reads, one row per composition (scorer: two rows) over all steps
            r, c, h = self.n_rows, self.w1.size(0), self.sw1.size(0)
            e = lambda *shape, dtype=x.dtype: torch.empty(*shape, dtype=dtype, device=x.device)  # noqa: E731
            self.buf = {"h1": e(r, c), "gh": e(r, 4 * d), "mixed": e(r, d), "mean": e(r, 1), "rstd": e(r, 1),
                        "shp": e(2 * r, h), "sha": e(2 * r, h)}
            if self.step_buffers:
                self.buf.update(ids=e(r, 4, dtype=torch.long), right_bad=e(r, dtype=torch.bool),
                                sin=e(2 * r, 2 * self.ds))
        # each step's rows of the pools and buffers, cut once (one split each, not one slice per step and buffer),
        # keyed by the step's first row (scorer buffers and the score pool: two rows per composition)
        nbs = [self.b * n for n in self.n_merging[:-1]]
        starts = list(itertools.accumulate([0] + nbs[:-1]))
        rows = lambda t, k=1: dict(zip([k * r for r in starts], t.split([k * nb for nb in nbs])))  # noqa: E731
        self.new_nodes, self.new_scores = rows(self.pool[self.n_leaf :]), rows(self.spool[self.n_sc0 :], 2)
        # the right pair's score of every composition, (n_t, b) per step: where a merge with no right neighbour
        # writes NEG (one strided view, cut once, not one per step)
        self.right_scores = dict(zip(starts, self.spool[self.n_sc0 :].view(-1, self.b, 2)[..., 1].split(
            self.n_merging[:-1]))) if nbs else {}
        self.parts = {} if self.buf is None else {
            name: rows(t, 2 if name in ("sin", "shp", "sha") else 1) for name, t in self.buf.items()}
        self.saved = {"ids": [], "pids": [], "right_bad": []}  # per step, concatenated by the backward

    def slot(self, name: str, r0: int, r1: int) -> torch.Tensor | None:
        """Rows r0..r1 (one step's) of a saved buffer (the op writes there), or None when nothing is saved."""
        return None if self.buf is None else self.parts[name][r0]

    # ---- forward -------------------------------------------------------------------------------
    def score(self, inp: torch.Tensor, out: torch.Tensor | None = None, rows: tuple[int, int] | None = None):
        """Scorer MLP (eq. 12) on (R, 2 d_s) pair inputs -> scores (R,), hidden (R, d_s) before and after GELU.
        ``rows``: scorer buffer rows to write the hidden layer to."""
        shp, sha = (self.slot("shp", *rows), self.slot("sha", *rows)) if rows else (None, None)
        hp = torch.addmm(self.sb1, inp, self.sw1t, out=shp)
        ha = F.gelu(hp) if sha is None else torch.ops.aten.gelu.out(hp, out=sha)
        return torch.addmv(self.sb2, ha, self.sw2v, out=out), hp, ha

    def compose(self, r0: int, nb: int, ids4: torch.Tensor, keep: torch.Tensor | None, out: torch.Tensor | None = None):
        """GRC cell (eq. 10-11) on the middle two of each row's four nodes (left neighbour, children, right);
        ``out``: where the new nodes go (their rows of the node pool)."""
        d, r1 = self.d, r0 + nb
        nodes = F.embedding(ids4, self.pool).view(nb, 4 * d)
        h1 = torch.addmm(self.b1, nodes[:, d : 3 * d], self.w1t, out=self.slot("h1", r0, r1))  # [c_l; c_r] in place
        act = F.gelu(h1)
        if keep is not None:  # dropout: 0/1 keep mask here, its 1/(1-p) scale folded into the W2 products
            act.mul_(keep)
        gh = torch.addmm(self.b2, act, self.w2t, alpha=self.scale, out=self.slot("gh", r0, r1))  # l, r, g, h of eq. 10
        gh[:, : 3 * d].sigmoid_()
        gl, gr, gg, hh = gh.view(nb, 4, d).unbind(1)
        four = nodes.view(nb, 4, d).unbind(1)  # left neighbour, child_l, child_r, right neighbour
        mixed = torch.mul(gg, hh, out=self.slot("mixed", r0, r1))  # sigma(g) h + sigma(l) c_l + sigma(r) c_r
        mixed.addcmul_(gl, four[1]).addcmul_(gr, four[2])
        if self.buf is None:
            new = torch.native_layer_norm(mixed, (d,), self.gamma, self.beta, self.eps)[0]  # eq. 11
            return four, new if out is None else out.copy_(new)
        new = mixed.new_empty(nb, d) if out is None else out
        torch.ops.aten.native_layer_norm.out(mixed, (d,), self.gamma, self.beta, self.eps, out0=new,
                                             out1=self.slot("mean", r0, r1), out2=self.slot("rstd", r0, r1))
        return four, new

    def compose_children(self, r0: int, nb: int, children: torch.Tensor, keep: torch.Tensor | None, out: torch.Tensor):
        """GRC cell (eq. 10-11) on each row's two children (node ids ``children`` (n, b, 2)) into ``out`` (their rows
        of the node pool): :meth:`compose` with fewer ops, as a merge step's count is what a GPU step waits on. The
        cell reads only [c_l; c_r]; eq. 10's sum sigma(l) c_l + sigma(r) c_r + sigma(g) h is ONE product of the
        gates [sigma(l), sigma(r), sigma(g)] with [c_l, c_r, h] summed over the three."""
        d, r1 = self.d, r0 + nb
        pair = F.embedding(children, self.pool).view(nb, 2 * d)  # [c_l; c_r]
        h1 = torch.addmm(self.b1, pair, self.w1t, out=self.slot("h1", r0, r1))
        act = F.gelu(h1)
        if keep is not None:  # dropout: 0/1 keep mask here, its 1/(1-p) scale folded into the W2 products
            act.mul_(keep)
        gh = torch.addmm(self.b2, act, self.w2t, alpha=self.scale, out=self.slot("gh", r0, r1))  # l, r, g, h of eq. 10
        gates, h = gh.split([3 * d, d], 1)
        terms = torch.cat([pair, h], 1).mul_(gates.sigmoid_()).view(nb, 3, d)  # sigma(l) c_l, sigma(r) c_r, sigma(g) h
        mixed = torch.sum(terms, 1, out=self.slot("mixed", r0, r1))
        if self.buf is None:
            return out.copy_(torch.native_layer_norm(mixed, (d,), self.gamma, self.beta, self.eps)[0])  # eq. 11
        torch.ops.aten.native_layer_norm.out(mixed, (d,), self.gamma, self.beta, self.eps, out0=out,
                                             out1=self.slot("mean", r0, r1), out2=self.slot("rstd", r0, r1))
        return out

    def start(self):
        """Leaves into the node pool, their pair scores (eq. 12, ``NEG`` past a row's end) into the score pool.
        Returns the state (n, B_in, 2W) of the n rows that merge (see :meth:`run`), their scores (n, b) and lengths
        (n,), and ``pieces``: (root ids, scores) of finished row ranges (here the rows of one leaf)."""
        m, b_in, w0, d, b, ds = self.m, self.b_in, self.w0, self.d, self.b, self.ds
        dev = self.x.device
        self.w1t, self.w2t, self.sw1t, self.sw2v = self.w1.t(), self.w2.t(), self.sw1.t(), self.sw2[0]
        self.pool_ds = self.pool[:, :ds]  # what the scorer reads of every node
        self.pool[: self.n_leaf] = self.x.reshape(-1, d)
        leaf_ids = torch.arange(self.n_leaf, device=dev).view(m, b_in, w0)
        scores = self.scores0
        pieces = []  # (root ids, scores) of finished row ranges, later-finishing ranges first in sorted order
        n = self.n_merging[0]
        if n < m:  # rows of length <= 1: the leaf is the root
            pieces.append((leaf_ids[n:, :, :1].expand(m - n, b, 1)[..., 0], scores[n:]))
        scores, lengths = scores[:n], self.lengths[:n]
        state = leaf_ids.new_zeros(0, b_in, 2 * w0)
        if n:
            xs = self.x[:n, :, :, :ds]
            inp = torch.cat([xs[:, :, :-1], xs[:, :, 1:]], -1).view(-1, 2 * ds)  # (n B_in (W-1), 2 d_s)
            ps0, hp0, ha0 = self.score(inp)
            self.valid0 = torch.arange(w0 - 1, device=dev) < (lengths - 1)[:, None, None]  # pairs inside the row
            self.spool[: self.n_sc0] = ps0.view(n, b_in, w0 - 1).masked_fill(~self.valid0, NEG).view(-1)
            self.leaf_scorer = (inp, hp0, ha0)
            state = torch.cat([leaf_ids[:n], torch.arange(self.n_sc0, device=dev).view(n, b_in, w0 - 1),
                               leaf_ids.new_zeros(n, b_in, 1)], 2)  # (n, B_in, 2W)
        return state, scores, lengths, pieces

    def new_ids(self) -> torch.Tensor:
        """(rows, 3): the node id of composition r and the score ids of its left and right pairs."""
        r_all = torch.arange(self.n_rows, device=self.x.device)
        return torch.stack([r_all + self.n_leaf, 2 * r_all + self.n_sc0, 2 * r_all + self.n_sc0 + 1], 1)

    def finish(self, pieces):
        """roots (M, b, D) and scores (M, b) in the input's row order from the finished pieces."""
        m, b, d = self.m, self.b, self.d
        dev = self.x.device
        self.root_ids = torch.cat([r for r, _ in reversed(pieces)])  # (M, b) sorted order
        self.inv = inv = torch.empty_like(self.order)  # (M,) sorted position of each row (the backward's too)
        inv[self.order] = torch.arange(m, device=dev)
        roots = self.pool[self.root_ids.view(-1)].view(m, b, d)[inv]
        final = torch.cat([s for _, s in reversed(pieces)])[inv]
        return roots, final

    def run(self):
        """The search. Beam state per row: S (rows, B, 2W) = [node ids (W) | score ids of the W-1 adjacent pairs |
        one spare column], kept as the last 2W columns of a merge row (:data:`LEAD` more in front); a merge is ONE
        gather (:func:`merge_table`: the nodes the cell and the scorer read; the kept parent beam without the right
        child, the pair scores shifted, the parent node and its two pair scores placed)."""
        b = self.b
        dev = self.x.device
        state, scores, lengths, pieces = self.start()
        state = F.pad(state, (LEAD, 0))  # (n, B, LEAD + 2W) merge rows
        # per step, cut once: the three new ids of each kept beam (n, 1, 3b) and the dropout keep rows (n b, d_cell)
        new3 = dict(zip(self.new_nodes, self.new_ids().view(-1, 1, 3 * b).split(self.n_merging[:-1])))
        keep = self.noise is not None and self.noise.keep is not None
        keeps = dict(zip(self.new_nodes, self.noise.keep.split([n * b for n in self.n_merging[:-1]]))) if keep else {}
        lims = self.step_limits(lengths)
        r0, w0 = 0, self.w0
        sid = state[..., LEAD + w0 : LEAD + 2 * w0 - 1]  # (n, B, W-1) score ids of the adjacent pairs
        for t in range(len(self.n_merging) - 1):
            n, big_b, w = state.size(0), state.size(1), (state.size(2) - LEAD) // 2
            nb = n * b
            logp = F.log_softmax(torch.take(self.spool, sid), dim=-1)  # (n, B, W-1)
            key = logp + self.noise.gumbel(logp.shape) if self.noise is not None else logp
            k1 = min(b, w - 1)
            top_pos = key.topk(k1, dim=-1).indices  # (n, B, k1) per-beam (stochastic) top-k
            cand = scores.view(n, b, 1) + logp.gather(-1, top_pos)  # (n, b, k1) accumulated log-scores
            gumbel = self.noise.survivor_gumbel(n, big_b, b, k1) if self.noise is not None else None
            new_scores, sel = keep_survivors(cand.view(n, -1), b, gumbel)  # (n, b) b of b x k1
            parent = torch.div(sel, k1, rounding_mode="floor")  # (n, b) kept beam's predecessor
            if big_b == 1:  # one input beam (a fresh search): every candidate extends it
                jj = top_pos.view(n, k1).gather(1, sel.remainder(k1))  # (n, b) merged pair = (j, j+1)
            else:  # (the chosen log-probability p (W-1) + j in (B, W-1): by the backward, on the host)
                jj = top_pos.view(n, b * k1).gather(1, sel)  # (n, b) merged pair = (j, j+1)
            at = merge_index(w, big_b, b, jj, parent)  # (n, b, LEAD + 2W - 2)
            src = torch.cat([state.view(n, 1, -1), new3[r0]], 2)  # (n, 1, B (LEAD + 2W) + 3b), one per kept beam:
            state = src.expand(n, b, src.size(2)).gather(2, at)  # (n, b, LEAD + 2W - 2)
            # (n, b, 2) children j, j+1; (n, b, 4) the scored pairs; the next step's score ids (n, b, W-2)
            ids, pids, _, next_sid, _ = state.split([2, 4, w - 1, w - 2, 1], 2)
            self.compose_children(r0, nb, ids, keeps.get(r0), self.new_nodes[r0])
            bad = self.score_pairs(r0, pids, jj, lims[t])
            if self.buf is not None:
                self.steps.append((n, big_b, w, r0, parent, jj, sid, logp))
                for name, v in (("ids", ids), ("pids", pids), ("right_bad", bad)):
                    self.saved[name].append(v)
            scores = new_scores
            r0 += nb
            n_next = self.n_merging[t + 1]
            sid = next_sid
            if n_next < n:  # rows that made their last merge leave the batch: root ids (column LEAD), scores
                pieces.append((state[n_next:, :, LEAD], scores[n_next:]))
                state, scores, sid = state[:n_next], scores[:n_next], sid[:n_next]
        return self.finish(pieces)

    def step_limits(self, lengths: torch.Tensor) -> list[torch.Tensor]:
        """Per step t, (n_t, 1): length - 2 - t of the rows merging (a merge at j has a right neighbour iff j < it),
        cut from one (n, T) table with one ``unbind`` per run of steps with the same rows (was a subtraction per
        step and a slice per row drop)."""
        steps = self.n_merging[:-1]
        table = (lengths - 2).view(-1, 1, 1) - torch.arange(len(steps), device=lengths.device).view(-1, 1)  # (n, T, 1)
        lims, t = [], 0
        for n, run in itertools.groupby(steps):
            k = len(list(run))
            part = table if k == table.size(1) else table.narrow(1, t, k)
            lims += (part if n == table.size(0) else part[:n]).unbind(1)
            t += k
        return lims

    def score_pairs(self, r0: int, pids: torch.Tensor, jj: torch.Tensor, lim: torch.Tensor) -> torch.Tensor:
        """Score (eq. 12) the two pairs touching each new node of compositions r0.., (left neighbour, new) and
        (new, right neighbour), node ids ``pids`` (n, b, 4), into the score pool; a merge at ``jj`` (n, b) >= ``lim``
        (n, 1) has no right neighbour: that pair is padding (``NEG``). Returns that mask (n, b)."""
        n, b = jj.shape
        sin = F.embedding(pids, self.pool_ds).view(2 * n * b, 2 * self.ds)  # (2 n b, 2 d_s)
        two = self.new_scores[2 * r0]
        self.score(sin, out=two, rows=(2 * r0, 2 * r0 + 2 * n * b))
        bad = jj >= lim
        self.right_scores[r0].masked_fill_(bad, NEG)  # the right pairs
        return bad

    def score_new_pairs(self, r0: int, four, new: torch.Tensor, jj: torch.Tensor, lim: torch.Tensor):
        """Score (eq. 12) the two pairs touching each new node (compositions r0.., ``new`` (nb, D)), (left neighbour,
        new) and (new, right neighbour), into the score pool; a merge at ``jj`` (n, b, 1) >= ``lim`` (n, 1) has no
        right neighbour: that pair is padding (``NEG``)."""
        nb, ds = new.size(0), self.ds
        n = lim.size(0)
        nds = new[:, :ds]
        sin = self.slot("sin", 2 * r0, 2 * r0 + 2 * nb)
        sin = torch.stack([four[0][:, :ds], nds, nds, four[3][:, :ds]], 1,
                          out=None if sin is None else sin.view(nb, 4, ds))  # (nb, 4, d_s)
        two = self.new_scores[2 * r0]
        self.score(sin.view(2 * nb, 2 * ds), out=two, rows=(2 * r0, 2 * r0 + 2 * nb))
        right_bad = self.slot("right_bad", r0, r0 + nb)
        right_bad = torch.ge(jj.view(n, -1), lim, out=None if right_bad is None else right_bad.view(n, -1))
        two.view(n, -1, 2)[..., 1].masked_fill_(right_bad, NEG)  # no right neighbour: the pair is padding

    def drop_finished(self, t: int, pieces: list, state: torch.Tensor, scores: torch.Tensor, lim: torch.Tensor,
                      col: int = 0):
        """Rows that made their last merge at step t leave the batch (their root ids, column ``col`` of the state,
        and scores go to ``pieces``): the next step's state, scores and ``lim``."""
        n, n_next = state.size(0), self.n_merging[t + 1]
        if n_next < n:
            pieces.append((state[n_next:, :, col], scores[n_next:]))
            state, scores, lim = state[:n_next], scores[:n_next], lim[:n_next]
        return state, scores, lim

    @staticmethod
    def next_state(flat: torch.Tensor, at: torch.Tensor, key: torch.Tensor, jj: torch.Tensor, ids: torch.Tensor):
        """The state after a merge at ``jj`` (n, b, 1): gather ``flat`` (n, B 2W) at ``at`` (+1 where ``key`` > j:
        keep the parent beam, drop the right child, shift the pair scores), then place the three new ``ids``
        (n b, 3) (:meth:`new_ids`; a merge at j = 0 has no left pair: its id goes to the spare column)."""
        n, b, w = jj.size(0), jj.size(1), key.size(0) // 2 + 1
        state = flat.gather(1, (at + (key > jj)).view(n, -1)).view(n, b, 2 * w - 2)
        where = torch.cat([jj, (jj - 1).remainder_(w - 1).add_(w - 1), jj + (w - 1)], 2)
        return state.scatter_(2, where, ids.view(n, b, 3))

    # ---- backward ------------------------------------------------------------------------------
    def score_backward(self, g: torch.Tensor, inp: torch.Tensor, hp: torch.Tensor, ha: torch.Tensor,
                       inputs: bool = True) -> torch.Tensor | None:
        """Scorer rows with output gradient g (R,) -> input gradient (R, 2 d_s) (None for ``inputs=False``); packs
        the weights' row terms."""
        g_hp = _gelu_backward(g[:, None] * self.sw2v, hp)
        self.sc_rows.append((g, g_hp, inp, ha))
        return g_hp @ self.sw1 if inputs else None

    def cell_backward(self, g_pool, g_new, children, pair, h1, keep, mixed, mean, rstd, gh, go, g_h1):
        """GRC cells (eq. 10-11) of k compositions backward from the gradient g_new (k, D) of their outputs: adds the
        children's (ids ``children`` (2k,), values ``pair`` (k, 2D)) gradients to ``g_pool``, writes the gradients
        of the gate/content layer (``go`` (k, 4D)) and of h1 (``g_h1`` (k, d_cell), without the dropout scale)
        for the weight products; returns the LayerNorm weight and bias gradients and the children's gradients
        (k, 2D). ``keep``: the 0/1 dropout rows."""
        k, d = g_new.size(0), self.d
        g_mixed, gg, gb = _ln_backward(g_new, mixed, [d], mean, rstd, self.gamma, self.beta, [True, True, True])
        gates = gh[:, : 3 * d]
        dsig = gates * (1 - gates)  # sigmoid'
        gm = g_mixed.unsqueeze(1)  # (k, 1, D)
        torch.mul((pair.view(k, 2, d) * gm).view(k, 2 * d), dsig[:, : 2 * d], out=go[:, : 2 * d])
        torch.mul(gh[:, 3 * d :] * g_mixed, dsig[:, 2 * d :], out=go[:, 2 * d : 3 * d])
        torch.mul(gates[:, 2 * d :], g_mixed, out=go[:, 3 * d :])
        g_act = torch.mm(go, self.w2)
        if keep is not None:
            g_act.mul_(keep)
        gh1 = torch.ops.aten.gelu_backward.grad_input(g_act, h1, grad_input=g_h1)
        g_pair = torch.addmm((gates[:, : 2 * d].view(k, 2, d) * gm).view(k, 2 * d), gh1, self.w1, alpha=self.scale)
        g_pool.index_add_(0, children, g_pair.view(2 * k, d))
        return gg, gb, g_pair

    def backward(self, g_roots: torch.Tensor, g_final: torch.Tensor):
        """Three passes instead of one per step.

        1. Beam scores (:meth:`beam_score_grads`): d final scores -> d log-probabilities of the chosen merges ->
           d pair scores, all steps at once from the lineage the host walks once, and the depth of every LIVE
           composition (the same host walk): a node that is
           in no final beam's tree (its beam was pruned later) influences neither a root nor a final score, so
           its gradient is exactly zero (about two thirds of all compositions at beam 7). Depth = longest path
           from a root through compositions that use the node as a child.
        2. The scorer of every live composition's two new pairs, in one batch (its output gradients are known).
        3. The GRC cells, one batch per depth: every composition using a node as a child is shallower, so a
           node's gradient is complete when its depth is reached. Depths are about half as many as steps.
        """
        d, ds, off, buf = self.d, self.ds, self.n_leaf, self.buf
        dev = self.pool.device
        g_pool = torch.zeros_like(self.pool)
        g_spool = torch.zeros_like(self.spool)
        self.sc_rows = []
        g_roots, g_final = g_roots[self.order], g_final[self.order]  # sorted order
        g_pool.index_add_(0, self.root_ids.reshape(-1), g_roots.reshape(-1, d))
        def cat(key: str, dtype) -> torch.Tensor:
            parts = self.saved[key]  # one per step (a compiled search: one for all its steps, read as is)
            if not parts:  # no merge step at all (every sequence one token): nothing saved
                return torch.empty(0, dtype=dtype, device=dev)
            return parts[0] if len(parts) == 1 and parts[0].is_contiguous() else torch.cat(parts)  # (an eager step's
            # are views of its state)

        ids = cat("ids", torch.long).view(-1, 2)  # (R, 2) children
        # 1. the beam-score chain and the depth pass are integer bookkeeping over the whole search: ONE host read of
        # the parents, the chosen pairs, the roots and the children (instead of ~13 small ops per step on the device),
        # the lineage and depths computed on the host (:meth:`lineage`), then a few batched ops over all steps
        g_scores, live, counts = self.beam_score_grads(g_spool, g_final, ids)
        k_all = live.numel()
        pids = cat("pids", torch.long).view(-1, 4).index_select(0, live)  # (K, 4) left, new, new, right
        # 2. scorer of the two new pairs of every live composition (two rows each: one gather of row pairs); a masked
        # right pair is a constant
        g_two = g_spool[self.n_sc0 :].view(-1, 2).index_select(0, live)  # (K, 2)
        g_two[:, 1].masked_fill_(cat("right_bad", torch.bool).view(-1).index_select(0, live), 0.0)
        sin = F.embedding(pids, self.pool_ds).view(2 * k_all, 2 * ds)  # the scorer's inputs, re-read
        hs = self.sw1.size(0)
        g_sin = self.score_backward(g_two.view(-1), sin, *(buf[k].view(-1, 2 * hs).index_select(0, live).view(-1, hs)
                                                           for k in ("shp", "sha")))
        g_pool[:, :ds].index_add_(0, pids.view(-1), g_sin.view(4 * k_all, ds))
        # 3. GRC cells by depth; what does not depend on the output gradients is gathered for all live rows at once
        g_gh, g_h1, pair, act, (g_new, mixed, mean, rstd) = self.cells_backward(g_pool, ids.index_select(0, live), live,
                                                                                counts)
        _, g_gamma, g_beta = _ln_backward(g_new, mixed, [d], mean, rstd, self.gamma, self.beta, [False, True, True])
        return self.input_and_weight_grads(g_pool, g_spool, g_scores, g_gamma, g_beta, g_gh, act, g_h1, pair)

    def beam_score_grads(self, g_spool, g_final, ids):
        """Pass 1 of :meth:`backward`: the beam scores' gradients into the score pool (through every step's
        log-softmax), the input scores' gradients (M, b) and the live compositions by depth.

        A final beam's score is the sum of the log-probabilities its lineage chose (new = scores[parent] +
        logp[p, j]), so the gradient of a chosen log-probability at step t is the sum of the final gradients of the
        final beams descending from it. Which those are is integer bookkeeping over the parents, known when the
        forward ends: one host read of the parents, the chosen pairs, the roots and the children, the lineage and the
        depths walked on the host (:func:`lineage`), then ONE scatter of the final gradients for all steps, the
        log-softmax backward over all steps at once (in runs of :data:`BLOCK` log-probabilities: one run in RIR),
        and one ``put_`` per step (its score ids are a strided view of that step's state). Was ~13 device ops per
        step (scatter chain, log-softmax backward, depth scatters)."""
        dev, b, steps = g_final.device, self.b, self.steps
        if not steps:  # no merge at all (every sequence one token)
            return g_final, torch.empty(0, dtype=torch.long, device=dev), []
        shapes = tuple((n, big_b, w) for n, big_b, w, *_ in steps)
        q = b * sum(n for n, _, _ in shapes)  # kept beams over all steps
        flat = torch.cat([*self.parents_and_pairs(), self.root_ids.view(-1), ids.view(-1)])
        host = flat.cpu().numpy()  # the one host read of the backward
        # the chosen log-probability in (B, W-1) of every kept beam: p (W-1) + j (j where B = 1), here, not per step
        per_beam = np.repeat([(w - 1) * (big_b > 1) for _, big_b, w in shapes], [n * b for n, _, _ in shapes])
        chosen = host[q : 2 * q] + host[:q] * per_beam
        pos, seg, g0, live, counts = lineage(shapes, [s[3] for s in steps], self.n_merging, b, self.n_leaf,
                                             self.n_rows, host[:q], chosen, host[2 * q : 2 * q + self.m * b],
                                             host[2 * q + self.m * b :].reshape(-1, 2))
        sizes, segs = [n * big_b * (w - 1) for n, big_b, w in shapes], [n * big_b for n, big_b, _ in shapes]
        po, so = np.cumsum([0] + sizes), np.cumsum([0] + segs)
        blocks = step_blocks(sizes)
        arrays = ([np.concatenate(pos[t0:t1]) - po[t0] for t0, t1 in blocks]
                  + [np.concatenate(seg[t0:t1]) - so[t0] for t0, t1 in blocks] + [g0, live])
        idx = torch.from_numpy(np.concatenate(arrays)).to(dev, non_blocking=True).split([a.size for a in arrays])
        g_flat = g_final.view(-1)
        for k, (t0, t1) in enumerate(blocks):
            run = shapes[t0:t1]
            # contributions (step t, row r, final beam f), r < n_t, in step order: the final gradient of (r, f)
            vals = g_flat.index_select(0, contribution_rows(run, b, dev))
            g_lp = g_final.new_zeros(po[t1] - po[t0]).index_add_(0, idx[k], vals)  # d log-probabilities
            sums = g_final.new_zeros(so[t1] - so[t0]).index_add_(0, idx[len(blocks) + k], vals)  # per softmax
            logp = torch.cat([flat1(s[7]) for s in steps[t0:t1]]).exp_()  # softmax
            g_ps = torch.addcmul(g_lp, logp, sums.index_select(0, segment_index(run, dev)), value=-1)  # its backward
            self.put_scores(g_spool, steps[t0:t1], g_ps, sizes[t0:t1])
        g0, live = idx[-2:]
        n0, m = self.n_merging[0], self.m
        g_in = g_final.new_zeros(n0 * b).index_add_(0, g0, g_final.view(-1)[: n0 * b]).view(n0, b)
        return (g_in if n0 == m else torch.cat([g_in, g_final[n0:]])), live, counts

    def parents_and_pairs(self) -> list[torch.Tensor]:
        """Flat tensors whose concatenation is every step's kept beams' parents (Q = sum n b), then their merged pairs
        (Q): steps' (n, b) ``parent`` and ``jj``."""
        return [torch.cat([s[4] for s in self.steps]).view(-1), torch.cat([s[5] for s in self.steps]).view(-1)]

    def put_scores(self, g_spool, steps, g_ps, sizes):
        """The log-probabilities' gradients ``g_ps`` of a run of ``steps`` (``sizes`` each) into the score pool at
        their score ids: one ``put_`` per step (a step's ids are a strided view of its state)."""
        for s, g in zip(steps, g_ps.split(sizes)):
            g_spool.put_(s[6], g, accumulate=True)

    def cells_backward(self, g_pool, children, live, counts):
        """The GRC cells (eq. 10-11) of the ``live`` compositions (children ``children`` (K, 2)), one batch per depth
        (``counts`` rows each, shallowest first), backward into the node pool: the cell's algebra of
        :meth:`cell_backward` with every factor that does not depend on the output gradient computed once for all
        K rows, in ONE buffer per row that each batch multiplies by its d mixed in one op, and each batch's slices
        of every tensor cut by one ``split`` per tensor (7 ops per depth). Returns the rows the weights' products
        read (gate/content and hidden gradients, children, hidden activations) and the output gradients with the
        LayerNorm's saved rows (K, 1, D) (for the LayerNorm weights)."""
        d, off, buf, k_all = self.d, self.n_leaf, self.buf, live.numel()
        pair = F.embedding(children, self.pool).view(k_all, 2 * d)  # (K, 2D) [c_l; c_r]
        h1 = buf["h1"].index_select(0, live)
        act = F.gelu(h1)
        keep = self.noise.keep.index_select(0, live) if self.p > 0 else None
        if keep is not None:  # GELU's derivative times the 0/1 keep rows, once for all rows (into h1's rows): a depth
            act.mul_(keep)  # multiplies it by its d act in ONE op (bitwise g keep gelu'(h1), as mul_ + gelu_backward)
            torch.ops.aten.gelu_backward.grad_input(keep.to(h1.dtype), h1, grad_input=h1)  # (keep is bool)
        gh = buf["gh"].index_select(0, live).view(k_all, 4, d)  # sigma(l), sigma(r), sigma(g), h
        # d mixed -> d (l, r, g, h) pre-activation: [c_l sigma'(l), c_r sigma'(r), h sigma'(g), sigma(g)] * d mixed,
        # and the children's direct share [sigma(l), sigma(r)] * d mixed: the six factors side by side per row
        fac = self.pool.new_empty(k_all, 6, d)
        torch.mul(gh[:, :3], 1 - gh[:, :3], out=fac[:, :3])  # sigma'
        fac[:, :2].mul_(pair.view(k_all, 2, d))
        fac[:, 2].mul_(gh[:, 3])
        fac[:, 3] = gh[:, 2]
        fac[:, 4:] = gh[:, :2]
        del gh
        g_gh, sig_lr = fac.view(k_all, 6 * d).split([4 * d, 2 * d], 1)  # (K, 4D), (K, 2D): rows 6D apart
        g_pair = self.pool.new_empty(k_all, 2 * d)  # the children's gradients, (k, 2D) per batch = (2k, D)
        mixed, mean, rstd = (buf[k].index_select(0, live).view(k_all, 1, w) for k, w in (("mixed", d), ("mean", 1),
                                                                                          ("rstd", 1)))
        parts = (z.split(counts) for z in ((live + off).view(k_all, 1), mixed, mean, rstd, fac, g_gh, sig_lr, h1,
                                           g_pair))
        parts = zip(*parts, *(z.split([2 * k for k in counts]) for z in (children.reshape(-1),
                                                                          g_pair.view(2 * k_all, d))))
        g_new = []
        for rows_k, mixed_k, mean_k, rstd_k, fac_k, go, sig_k, h1_k, g_pair_k, ch, g_ch in parts:
            g_new.append(F.embedding(rows_k, g_pool))  # (k, 1, D) d output, complete at this depth
            g_mixed = _ln_backward(g_new[-1], mixed_k, [d], mean_k, rstd_k, self.gamma, self.beta,
                                   [True, False, False])[0]  # (k, 1, D)
            fac_k.mul_(g_mixed)  # go: d (l, r, g, h); sig_k: the children's direct share
            g_act = torch.mm(go, self.w2)
            if keep is None:
                gh1 = torch.ops.aten.gelu_backward.grad_input(g_act, h1_k, grad_input=h1_k)  # h1's rows: now d h1
            else:  # h1's rows hold keep gelu'(h1): now d h1
                gh1 = torch.mul(g_act, h1_k, out=h1_k)
            torch.addmm(sig_k, gh1, self.w1, alpha=self.scale, out=g_pair_k)
            g_pool.index_add_(0, ch, g_ch)
        g_new = torch.cat(g_new) if g_new else mixed.new_empty(0, 1, d)
        return g_gh, h1, pair, act, (g_new, mixed, mean, rstd)

    def input_and_weight_grads(self, g_pool, g_spool, g_scores, g_gamma, g_beta, g_gh, act, g_h1, pair,
                               leaf_inputs: bool = True):
        """The leaves' pair scorer backward, then (inputs' gradients, input scores' gradients, weights' gradients) in
        the input's row order; each cell weight's gradient is ONE product over the saved rows of all compositions
        (``g_gh``/``act``, ``g_h1``/``pair``; rows that are not live are left out by the caller).
        ``leaf_inputs=False``: the leaf pairs' scores reached the leaves already (their weights' rows only)."""
        d, ds, off = self.d, self.ds, self.n_leaf
        n0 = self.n_merging[0]
        g_x = g_pool[:off].view(self.m, self.b_in, self.w0, d)  # the leaves' rows (the pool is not read after this)
        if self.n_sc0:
            g0 = g_spool[: self.n_sc0].view(n0, self.b_in, self.w0 - 1) * self.valid0
            g_in = self.score_backward(g0.view(-1), *self.leaf_scorer).view(n0, self.b_in, self.w0 - 1, 2 * ds)
            if leaf_inputs:  # in place on views (a `+=` on an indexed tensor re-slices it to write the sum back)
                g_x[:n0, :, :-1, :ds].add_(g_in[..., :ds])
                g_x[:n0, :, 1:, :ds].add_(g_in[..., ds:])
        # weight gradients: one product over the live rows of all steps (dropout scale folded in)
        g_w1, g_b1 = torch.mm(g_h1.t(), pair).mul_(self.scale), g_h1.sum(0).mul_(self.scale)
        g_w2, g_b2 = torch.mm(g_gh.t(), act).mul_(self.scale), g_gh.sum(0)
        rows = self.sc_rows or [(g_spool[:0], self.sw1.new_empty(0, self.sw1.size(0)), self.sw1.new_empty(0, 2 * ds),
                                 self.sw1.new_empty(0, self.sw1.size(0)))]  # no pair scored: one token per sequence
        g_sc, g_shp, s_in, s_ha = (torch.cat(z) for z in zip(*rows))
        g_sw1, g_sb1 = g_shp.t() @ s_in, g_shp.sum(0)
        g_sw2, g_sb2 = torch.mm(g_sc.view(1, -1), s_ha), g_sc.sum(0, keepdim=True)  # (1, H), (1,)
        # back to the input's row order: one gather each by the inverse permutation (:meth:`finish`)
        inv_x, inv_s = g_x.index_select(0, self.inv), g_scores.index_select(0, self.inv)
        return inv_x, inv_s, (g_w1, g_b1, g_w2, g_b2, g_gamma, g_beta, g_sw1, g_sb1, g_sw2, g_sb2)


class _FusedSearch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tree, cw, sw, x, lengths, scores, *params):  # params: the tensors of cw and sw, for autograd
        search = tree.search_class(tree, cw, sw, x, lengths, scores, save=True)
        ctx.search = search
        return search.run()

    @staticmethod
    def backward(ctx, g_roots, g_final):
        g_x, g_scores, g_params = ctx.search.backward(g_roots, g_final)
        ctx.search = None
        return (None, None, None, g_x, None, g_scores, *g_params)


def check_fusable(cell: nn.Module, scorer: nn.Module) -> None:
    """Refuse a cell or scorer whose maths this file does not implement (a subclass may change it)."""
    for part, kind, role in ((cell, GRC, "cell"), (scorer, Scorer, "scorer")):
        if type(part) is not kind:
            raise TypeError(f"the fused beam search implements only the {kind.__name__} {role}, not "
                            f"{type(part).__name__}; run it on the reference rirlab.models.beam_tree.BeamTree instead")


def fused_search(tree: BeamTree, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor):
    """roots (M, b, D), scores (M, b) of the beam search; one autograd node when gradients are wanted.

    In (at least) fp32 whatever autocast says: the hand-written backward's saved buffers and the beam scores
    are fp32, and its small per-step products are launch-bound, not arithmetic-bound, so bf16 would gain little.
    """
    check_fusable(tree.cell, tree.scorer)
    with full_precision(x):
        return _fused_search(tree, at_least_fp32(x), lengths, at_least_fp32(scores))


def _fused_search(tree: BeamTree, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor):
    cw, sw = tree.cell.weights(), tree.scorer.weights()
    params = (cw.w1, cw.b1, cw.w2, cw.b2, cw.gamma, cw.beta, sw.w1, sw.b1, sw.w2, sw.b2)  # Search.backward's order
    if torch.is_grad_enabled() and (x.requires_grad or scores.requires_grad or any(p.requires_grad for p in params)):
        roots, final = _FusedSearch.apply(tree, cw, sw, x, lengths, scores, *params)
    else:
        with torch.no_grad():
            roots, final = tree.search_class(tree, cw, sw, x, lengths, scores, save=False).run()
    return roots, one_leaf_beams(final, lengths, x.size(1))  # outside the node: autograd routes its gradient


class FusedBeamTree(BeamTree):
    """:class:`~rirlab.models.beam_tree.BeamTree` (no straight-through) whose search runs as :func:`fused_search`.

    ``fused = False`` runs the reference search instead (same parameters, same draws).
    """

    fused = True
    search_class = Search  # what runs the search (a subclass for another search over the same pools)

    def __init__(self, cell: GRC, scorer: Scorer, beam_size: int, beam_select: BeamSelect = "stochastic"):
        check_fusable(cell, scorer)
        super().__init__(cell, scorer, beam_size, beam_select=beam_select)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        if not self.fused:
            return super().forward(x, lengths, scores)
        if scores is None:
            scores = initial_scores(x.size(0), self.beam_size, x)  # (M, b)
        return fused_search(self, x, lengths, scores)
