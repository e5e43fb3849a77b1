"""The fused EBT-GRC search (:mod:`rirlab.models.fused_beam`) with its merge step compiled (``torch.compile``).

Issue 57 item 2: a merge step of the eager search dispatches about 46 ATen ops (selection, one gather of the
bookkeeping, the GRC cell, the scorer), and on a GPU each is a launch. :func:`merge_step` is that step as one
function of tensors with no host read and no ``out=`` write, compiled once per kind of step (dynamic batch and
width), so that inductor fuses its pointwise and indexing chains into a few kernels. The values are the eager
step's (same ops, same draws: tests/models/test_compiled_beam.py); the backward is :class:`Search`'s, which reads
what each step returns (the per-step buffers are gathered by ONE ``cat`` per buffer after the loop).

A compiled step is 6 inductor kernels and 5 externs (3 ``addmm``, 2 ``topk``), at any width (its gather indices are
computed, :func:`merge_columns`): RIR-EBT-GRC's training step goes from ~2,605 to ~1,472 ops at 128 x 100 and ~4,161
to ~2,130 at 1 x 1800, EBT-GRC's from ~100,570 to ~20,340 at 1 x 1800 (benchmarks/README.md), but is not faster on
the CPU. Hence opt-in (``compile: true`` in the model config): inductor builds C++ kernels for its ~4 graphs on a
trial's first step (minutes on a loaded 2-core machine; later processes read the on-disk cache).
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.fx.experimental._config
import torch.nn.functional as F

from rirlab.models.beam_tree import NEG, keep_survivors, perturbs_survivors
from rirlab.models.fused_beam import LEAD, Search


def merge_step(pool, spool, state, scores, noise, keep, lengths, w1t, b1, w2t, b2, gamma, beta, sw1t,
               sb1, sw2v, sb2, *, n: int, t: int, g_at: int, survivors: bool, r0: int, n_leaf: int, n_sc0: int, b: int,
               k1: int, w: int, scale: float, eps: float, ds: int):
    """One merge step of :meth:`Search.run` (its loop body) as one function of tensors, with two writes: the new nodes
    into ``pool`` rows n_leaf + r0.. and their two pair scores into ``spool`` from n_sc0 + 2 r0 (r0: the step's first
    composition; the step's new ids, :meth:`Search.new_ids`, are computed in the graph from it). ``state`` (>= n, B,
    LEAD + 2W) the merge rows and ``scores`` (>= n, b) of the rows still merging first, ``noise`` the search's Gumbel
    stream (or None; this step's draws start at ``g_at``, the survivors' follow where ``survivors``), ``keep`` the
    dropout keep rows of all steps (or None), ``lengths`` the rows' sorted lengths (step ``t``); the merge's gather
    indices are :func:`merge_columns` (any width). Every tensor argument is a whole buffer or the previous step's
    output, never a slice of one, and no output is a view of another: a view argument guards on its base (a
    recompile where the base differs) and an aliased output costs the runtime a view op per step.
    Returns the next merge rows, the scores, and what the backward reads."""
    big_b = state.size(1)
    nb, d = n * b, pool.size(1)
    state, scores = state[:n], scores[:n]
    sid = state[..., LEAD + w : LEAD + 2 * w - 1]  # (n, B, W-1) score ids of the adjacent pairs
    logp = F.log_softmax(torch.take(spool, sid), dim=-1)  # (n, B, W-1)
    npair = n * big_b * (w - 1)
    key = logp if noise is None else logp + noise[g_at : g_at + npair].view(n, big_b, w - 1)
    top_pos = key.topk(k1, dim=-1).indices
    cand = scores.view(n, b, 1) + logp.gather(-1, top_pos)
    gs = noise[g_at + npair : g_at + npair + nb * k1].view(n, b * k1) if survivors else None
    new_scores, sel = keep_survivors(cand.view(n, -1), b, gs)
    parent = torch.div(sel, k1, rounding_mode="floor")
    if big_b == 1:
        jj = top_pos.view(n, k1).gather(1, sel.remainder(k1))
    else:
        jj = top_pos.view(n, b * k1).gather(1, sel)
    at = merge_columns(w, big_b, b, jj, parent)
    r = torch.arange(r0, r0 + nb, device=state.device)  # this step's compositions: node, left and right pair score ids
    new3 = torch.stack([r + n_leaf, 2 * r + n_sc0, 2 * r + (n_sc0 + 1)], 1).view(n, 1, 3 * b)
    src = torch.cat([state.reshape(n, 1, -1), new3], 2)
    state = src.expand(n, b, src.size(2)).gather(2, at)  # (n, b, LEAD + 2W - 2)
    ids, pids = state[..., :2], state[..., 2:LEAD]
    # the GRC cell (eq. 10-11) on the two children
    pair = F.embedding(ids, pool).view(nb, 2 * d)
    h1 = torch.addmm(b1, pair, w1t)
    act = F.gelu(h1)
    if keep is not None:
        act = act * keep[r0 : r0 + nb]
    gh = torch.addmm(b2, act, w2t, alpha=scale)
    gates, h = gh.split([3 * d, d], 1)
    sg = gates.sigmoid()
    gh = torch.cat([sg, h], 1)  # what the backward reads: sigma(l), sigma(r), sigma(g), h
    mixed = (torch.cat([pair, h], 1) * sg).view(nb, 3, d).sum(1)
    new, mean, rstd = torch.native_layer_norm(mixed, (d,), gamma, beta, eps)
    pool[n_leaf + r0 : n_leaf + r0 + nb] = new
    # the scorer (eq. 12) on the two pairs touching each new node
    sin = F.embedding(pids, pool[:, :ds]).view(2 * nb, 2 * ds)
    hp = torch.addmm(sb1, sin, sw1t)
    ha = F.gelu(hp)
    two = torch.addmv(sb2, ha, sw2v).view(n, b, 2)
    bad = jj >= (lengths[:n] - (2 + t)).view(n, 1)  # a merge at j >= length - 2 - t has no right neighbour
    two = torch.stack([two[..., 0], two[..., 1].masked_fill(bad, NEG)], 2)
    spool[n_sc0 + 2 * r0 : n_sc0 + 2 * r0 + 2 * nb] = two.view(-1)
    # flat or stacked as the backward reads them (a view of an output or an intermediate is a view op per step)
    return (state, new_scores, torch.stack([parent, jj]), logp.reshape(-1).clone(), sid.reshape(-1).clone(),
            ids.clone(), pids.clone(), bad, h1, gh, mixed, mean, rstd, hp, ha)


def merge_columns(w: int, big_b: int, b: int, jj: torch.Tensor, parent: torch.Tensor) -> torch.Tensor:
    """:func:`~rirlab.models.fused_beam.merge_table`'s entries (n, b, LEAD + 2W - 2) of the kept beams (merged pair
    ``jj`` (n, b), parent beam ``parent``, ignored where B = 1) computed from j, p and the column, elementwise: no
    table, so a width of any size (EBT-GRC's non-RIR pass, 1,800 wide) is one symbolic size in a compiled step, whose
    gather kernel computes these indices where it reads them. Sources as the table's: the B merge rows (LEAD + 2W
    each), then 3 new ids per kept beam (node, left and right pair score)."""
    stride = LEAD + 2 * w
    j = jj.unsqueeze(2)  # (n, b, 1)
    base = LEAD + (parent.unsqueeze(2) * stride if big_b > 1 else 0)  # the parent's merge row
    new = big_b * stride + 3 * torch.arange(b, device=jj.device).view(1, b, 1)  # the kept beam's new node id
    col = torch.arange(LEAD + 2 * w - 2, device=jj.device)  # (C,) columns of the kept beam's merge row
    c = col - LEAD  # its state columns: node ids 0..W-2, pair score ids W-1..2W-3, one spare (state_shift)
    key = torch.where(c < w - 1, c, c - (w - 1))
    key = torch.where(c == 2 * w - 3, 2 * w, key)  # the spare column never shifts
    at = base + c + (c >= w - 1).long() + (key > j).long()  # the parent's column, one further past the pair
    # the new ids (in merge_table's order, a later one winning: at W = 2 both pair scores fall on the spare column)
    at = torch.where(c == j, new, at)
    at = torch.where(c == (j - 1).remainder(w - 1) + (w - 1), new + 1, at)
    at = torch.where(c == j + (w - 1), new + 2, at)
    # the lead: children j, j+1; the scorer's left node j-1 (clamped), the new node twice, right node j+2 (clamped)
    lead = torch.where(col == 0, j, torch.where(col == 1, j + 1, torch.where(col == 2, (j - 1).clamp(min=0),
                                                                               (j + 2).clamp(max=w - 1))))
    lead = torch.where((col == 3) | (col == 4), new, base + lead)
    return torch.where(col < LEAD, lead, at)


@functools.lru_cache(maxsize=4)
def compiled_merge_step(backend: str = "inductor"):
    """:func:`merge_step` compiled with dynamic shapes (the rows, the width, the offsets are symbolic; a graph per
    kind of step: B = 1 or not, k1 = 1 or more, noise and dropout or not), built on first use. ``backend``: the
    tests' "aot_eager" checks the capture (mutations, dynamic shapes) in seconds, without inductor's C++ build."""
    return torch.compile(merge_step, dynamic=True, fullgraph=True, backend=backend)


class CompiledSearch(Search):
    """:class:`Search` whose merge steps run as :func:`compiled_merge_step` when it saves for a backward, at any width
    (RIR's chunks, EBT-GRC's whole sequence); a search that saves nothing (no gradient wanted: evaluation) runs the
    eager steps."""

    backend = "inductor"  # torch.compile's backend (see :func:`compiled_merge_step`)

    def __init__(self, tree, cw, sw, x, lengths, scores, save: bool):
        self.compiled = save
        super().__init__(tree, cw, sw, x, lengths, scores, save and not self.compiled)  # no per-step buffers
        if self.compiled:
            self.buf = {}  # filled by :meth:`run`: what every step returned, concatenated

    def run(self):
        if not self.compiled:
            return super().run()
        b = self.b
        step = compiled_merge_step(self.backend)
        state, _, _, pieces = self.start()
        state, scores = F.pad(state, (LEAD, 0)), self.scores0  # the step reads their first n rows
        noise = self.noise  # None at eval
        g, keep = (None, None) if noise is None else (noise.g, noise.keep)  # (draws,) the Gumbel stream, at offsets
        outs = []
        r0 = 0
        for t in range(len(self.n_merging) - 1):
            n, n_next = self.n_merging[t], self.n_merging[t + 1]
            big_b, w = state.size(1), (state.size(2) - LEAD) // 2
            k1 = min(b, w - 1)
            survivors, g_at = False, 0
            if noise is not None:  # this step's draws: the pairs' (n, B, W-1), then the survivors' (n, b k1)
                survivors, g_at = noise.survivors and perturbs_survivors(big_b), noise.g_at
                noise.g_at += n * big_b * (w - 1) + (n * b * k1 if survivors else 0)
            with _no_duck_shapes():
                out = step(self.pool, self.spool, state, scores, g, keep, self.lengths, self.w1t,
                           self.b1, self.w2t, self.b2, self.gamma, self.beta, self.sw1t, self.sb1, self.sw2v,
                           self.sb2, n=n, t=t, g_at=g_at, survivors=survivors, r0=r0, n_leaf=self.n_leaf,
                           n_sc0=self.n_sc0, b=b, k1=k1, w=w, scale=self.scale, eps=self.eps, ds=self.ds)
            state, scores, pj, logp, sid = out[:5]
            self.steps.append((n, big_b, w, r0, pj, None, sid, logp))  # pj: (2, n, b) parents and merged pairs
            outs.append(out[5:])
            r0 += n * b
            if n_next < n:  # rows that made their last merge leave the batch: root ids (column LEAD), scores
                pieces.append((state[n_next:, :, LEAD], scores[n_next:]))
        if outs:
            ids, pids, bad, *rows = (torch.cat(z) for z in zip(*outs))
            self.saved = {"ids": [ids], "pids": [pids], "right_bad": [bad]}  # one each: the backward reads it as is
            self.buf = dict(zip(("h1", "gh", "mixed", "mean", "rstd", "shp", "sha"), rows))
        else:  # no merge at all (every row one token): the empty buffers the backward reads
            e, d, h = self.pool.new_empty, self.d, self.sw1.size(0)
            self.buf = {"h1": e(0, self.w1.size(0)), "gh": e(0, 4 * d), "mixed": e(0, d), "mean": e(0, 1),
                        "rstd": e(0, 1), "shp": e(0, h), "sha": e(0, h)}
        return self.finish(pieces)

    def parents_and_pairs(self) -> list[torch.Tensor]:
        """[parents (Q) | merged pairs (Q)] of all steps: ONE ``cat`` of the steps' stacked (2, n, b)."""
        return [torch.cat([s[4] for s in self.steps], 1).view(-1)]

    def put_scores(self, g_spool, steps, g_ps, sizes):
        """The log-probabilities' gradients into the score pool: ONE ``put_`` for a run of steps (each step's score
        ids came out of the compiled step flat)."""
        g_spool.put_(torch.cat([s[6] for s in steps]), g_ps, accumulate=True)


@contextlib.contextmanager
def _no_duck_shapes():
    """Dynamo's shape environment without duck sizing while a step compiles: two sizes that happen to be equal (the
    rows merging and the rows of the lengths) would otherwise become one symbol and recompile when they differ. And a
    recompile limit above the kinds of step (training has at most 8, Dynamo's default limit, and a search with
    gradients in eval mode adds more): with ``fullgraph=True`` Dynamo raises past the limit."""
    with torch.fx.experimental._config.patch(use_duck_shape=False), torch._dynamo.config.patch(recompile_limit=64):
        yield
