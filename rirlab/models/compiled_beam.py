"""The fused EBT-GRC search (:mod:`rirlab.models.fused_beam`) with its merge step compiled (``torch.compile``).

Issue 57 item 2: a merge step of the eager search dispatches about 46 ATen ops (selection, one gather of the
bookkeeping, the GRC cell, the scorer), and on a GPU each is a launch. :func:`merge_step` is that step as one
function of tensors with no host read and no ``out=`` write, compiled once per kind of step (dynamic batch and
width), so that inductor fuses its pointwise and indexing chains into a few kernels. The values are the eager
step's (same ops, same draws: tests/models/test_compiled_beam.py); the backward is :class:`Search`'s, which reads
what each step returns (the per-step buffers are gathered by ONE ``cat`` per buffer after the loop).

Opt-in (``compile: true`` in the model config): inductor compiles a C++ kernel per graph on the CPU (minutes on a
loaded 2-core machine for the first trial; later trials read the on-disk cache).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from rirlab.models.beam_tree import NEG, keep_survivors, perturbs_survivors
from rirlab.models.fused_beam import LEAD, TABLE_MAX, Search, merge_table, merge_table_by_parent


def merge_step(pool, spool, state, scores, new3, noise, keep, table, lengths, w1t, b1, w2t, b2, gamma, beta, sw1t,
               sb1, sw2v, sb2, *, t: int, g_at: int, survivors: bool, r0: int, sc0: int, b: int, k1: int, w: int,
               scale: float, eps: float, ds: int):
    """One merge step of :meth:`Search.run` (its loop body) as one function of tensors, with two writes: the new nodes
    into ``pool`` rows r0.. and their two pair scores into ``spool`` from ``sc0``. ``state`` (n, B, LEAD + 2W) the
    merge rows, ``scores`` (n, b), ``new3`` (n, 1, 3b) the new ids, ``noise`` the search's Gumbel stream (or None;
    this step's draws start at ``g_at``, the survivors' follow where ``survivors``), ``keep`` the dropout keep rows (or
    None), ``table`` the merge table (:func:`merge_table`, by parent where B > 1), ``lengths`` the merging rows'
    lengths (at least n; step ``t``). Returns the next merge rows, the scores, and what the backward reads, none of
    them a view of another (an output that aliases costs the runtime a view op per step)."""
    n, big_b = state.size(0), state.size(1)
    nb, d = n * b, pool.size(1)
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
        at = table[jj, torch.arange(b, device=jj.device)]
    else:
        jj = top_pos.view(n, b * k1).gather(1, sel)
        at = table[parent, jj, torch.arange(b, device=jj.device)]
    src = torch.cat([state.reshape(n, 1, -1), new3], 2)
    state = src.expand(n, b, src.size(2)).gather(2, at)  # (n, b, LEAD + 2W - 2)
    ids, pids = state[..., :2], state[..., 2:LEAD]
    # the GRC cell (eq. 10-11) on the two children
    pair = F.embedding(ids, pool).view(nb, 2 * d)
    h1 = torch.addmm(b1, pair, w1t)
    act = F.gelu(h1)
    if keep is not None:
        act = act * keep
    gh = torch.addmm(b2, act, w2t, alpha=scale)
    gates, h = gh.split([3 * d, d], 1)
    sg = gates.sigmoid()
    gh = torch.cat([sg, h], 1)  # what the backward reads: sigma(l), sigma(r), sigma(g), h
    mixed = (torch.cat([pair, h], 1) * sg).view(nb, 3, d).sum(1)
    new, mean, rstd = torch.native_layer_norm(mixed, (d,), gamma, beta, eps)
    pool[r0 : r0 + nb] = new
    # the scorer (eq. 12) on the two pairs touching each new node
    sin = F.embedding(pids, pool[:, :ds]).view(2 * nb, 2 * ds)
    hp = torch.addmm(sb1, sin, sw1t)
    ha = F.gelu(hp)
    two = torch.addmv(sb2, ha, sw2v).view(n, b, 2)
    bad = jj >= (lengths[:n] - (2 + t)).view(n, 1)  # a merge at j >= length - 2 - t has no right neighbour
    two = torch.stack([two[..., 0], two[..., 1].masked_fill(bad, NEG)], 2)
    spool[sc0 : sc0 + 2 * nb] = two.view(-1)
    return (state, new_scores, parent, jj, logp, sid.clone(), state[..., :LEAD].clone(), bad, h1, gh, mixed, mean,
            rstd, hp, ha)


@functools.lru_cache(maxsize=4)
def compiled_merge_step(backend: str = "inductor"):
    """:func:`merge_step` compiled with dynamic shapes (the rows, the width, the offsets are symbolic; a graph per
    kind of step: B = 1 or not, k1 = 1 or more, noise and dropout or not), built on first use. ``backend``: the
    tests' "aot_eager" checks the capture (mutations, dynamic shapes) in seconds, without inductor's C++ build."""
    return torch.compile(merge_step, dynamic=True, fullgraph=True, backend=backend)


class CompiledSearch(Search):
    """:class:`Search` whose merge steps run as :func:`compiled_merge_step` when it saves for a backward and every step
    is at most :data:`TABLE_MAX` wide (RIR's chunks); a wider search (a non-RIR pass over a long sequence) and one that
    saves nothing (no gradient wanted) run the eager steps."""

    backend = "inductor"  # torch.compile's backend (see :func:`compiled_merge_step`)

    def __init__(self, tree, cw, sw, x, lengths, scores, save: bool):
        self.compiled = save and x.size(2) <= TABLE_MAX
        super().__init__(tree, cw, sw, x, lengths, scores, save and not self.compiled)  # no per-step buffers
        if self.compiled:
            self.buf = {}  # filled by :meth:`run`: what every step returned, concatenated

    def run(self):
        if not self.compiled:
            return super().run()
        b = self.b
        step = compiled_merge_step(self.backend)
        state, scores, lengths, pieces = self.start()
        state = F.pad(state, (LEAD, 0))
        new3 = self.new_ids().view(-1, 1, 3 * b).split(self.n_merging[:-1])
        noise = self.noise  # None at eval
        g = None if noise is None else noise.g  # (draws,) the Gumbel stream, read at offsets
        keeps = None if noise is None or noise.keep is None else noise.keep.split([n * b for n in self.n_merging[:-1]])
        outs = []
        r0 = 0
        for t in range(len(self.n_merging) - 1):
            n, big_b, w = state.size(0), state.size(1), (state.size(2) - LEAD) // 2
            k1 = min(b, w - 1)
            survivors, g_at = False, 0
            if noise is not None:  # this step's draws: the pairs' (n, B, W-1), then the survivors' (n, b k1)
                survivors, g_at = noise.survivors and perturbs_survivors(big_b), noise.g_at
                noise.g_at += n * big_b * (w - 1) + (n * b * k1 if survivors else 0)
            out = step(self.pool, self.spool, state, scores, new3[t], g, keeps[t] if keeps else None,
                       merge_table(w, big_b, b, state.device) if big_b == 1 else merge_table_by_parent(
                           w, big_b, b, state.device), lengths, self.w1t, self.b1, self.w2t, self.b2, self.gamma,
                       self.beta, self.sw1t, self.sb1, self.sw2v, self.sb2, t=t, g_at=g_at, survivors=survivors,
                       r0=self.n_leaf + r0, sc0=self.n_sc0 + 2 * r0, b=b, k1=k1, w=w, scale=self.scale, eps=self.eps,
                       ds=self.ds)
            state, scores, parent, jj, logp, sid = out[:6]
            self.steps.append((n, big_b, w, r0, parent, jj, sid, logp))
            outs.append(out[6:])
            r0 += n * b
            n_next = self.n_merging[t + 1]
            if n_next < n:  # rows that made their last merge leave the batch: root ids (column LEAD), scores
                pieces.append((state[n_next:, :, LEAD], scores[n_next:]))
                state, scores = state[:n_next], scores[:n_next]
        if outs:
            lead, bad, *rows = (torch.cat(z) for z in zip(*outs))
            self.saved = {"ids": [lead[..., :2]], "pids": [lead[..., 2:]], "right_bad": [bad]}
            self.buf = dict(zip(("h1", "gh", "mixed", "mean", "rstd", "shp", "sha"), rows))
        return self.finish(pieces)
