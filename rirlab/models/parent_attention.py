"""Parent attention (EBT paper §4, App. F.2 eq. 21-29): terminals attend to the non-terminal nodes of the induced tree.

:class:`NodeBeamTree` is the EBT-GRC search (:mod:`rirlab.models.beam_tree`, §3, Algorithm 1) that also keeps what
the sentence encoders drop: every beam's non-terminal nodes in creation order, which terminals each one spans (the
adjacency G_ij = 1 iff node j is a parent, direct or indirect, of terminal i) and its height (max of the children's
heights + 1, terminals 0). Beam 1 with straight-through Gumbel-softmax is EGT-GRC. It runs every row for W - 1 steps
(finished rows keep their state) and, as BeamTree, scores only the two pairs a merge changes; at eval its roots and
scores are those of :class:`~rirlab.models.beam_tree.BeamTree` (a test holds them equal).

EGT's straight-through gradient (``st_gradient``, :data:`~rirlab.models.beam_tree.STGradient`): "mask" (default) is
the authors' ``EGT_GAU_IN.select_composition`` while gradients are recorded: sel = onehot(j) + y - y.detach() over
every pair (y the Gumbel-softmax), the parent cell(sum_k sel_k h_k, sum_k sel_k h_k+1) is both the recorded
non-terminal and, through the cumsum masks, the next frontier (:func:`select_merge`), and every pair is scored again
from every step's frontier. Their graph state (spans, heights) goes through sel too, but reaches parent attention only
as a boolean mask and integer heights (PGAU's ``attention_mask.bool()``, ``heights.long()``): no gradient, so here it
stays discrete. "node": only the merged pair's probability, parent * (1 + p_j - p_j.detach()). The two forms have the
same values (up to rounding); without gradients (eval under no_grad) the search takes the cheaper cached-score path.

:class:`TreeGAUEncoder` is EGT-GAU / EBT-GAU: leaf transform (eq. 17), the search, per beam ``parent_layers`` = 2
applications of one GAU block whose keys are the non-terminals with mask G and relative positions = height
differences clipped at ``gau_parent_rel_k`` = 10 (eq. 22 / 28), the terminals marginalised over beams with the
softmax of the beam scores (eq. 29), cls' = GELU MLP of the (marginalised) root (eq. 23), then the interaction stack
of ``interaction_layers`` = 3 applications of one GAU block over the pair (eq. 24-25, 18-19; :mod:`rirlab.models.gau`).

Keys of a terminal (``gau_parent_self``): False (default, what the authors' code computes: its mask includes the
node itself, but the query/key split it then applies leaves each terminal only its strict ancestors) or True (EBT §4:
"the same node ... or some parent", the terminal as a key at height distance 0). A one-token sequence has no
ancestor (``gau_parent_empty`` below).

The batch's last column (``gau_parent_last``): ``"keep"`` (default, the authors' code): the authors' PGAU splits the
2W - 1 nodes of a width-W batch at (2W - 2) // 2 = W - 1, so the terminals of the last column are keys, not queries,
and keep their value through both layers: the last token of the widest sentence gets no parent attention (with
both sentences of a pair padded to one width, as the authors batch them, that is the widest of the two); a sentence's
encoding then depends on its batch's width. ``"attend"``: every terminal is a query (EBT §4, padding-invariant).
Checked against the authors' EGT_GAU_IN / EBT_GAU_IN on shared weights (float64, eval, lengths 1-300, alone and
padded): equal to ~1e-16 with ``"keep"``; a one-token sentence in a wider batch, whose token has no key there,
attends uniformly to every key slot of the authors' split (masked scores
filled with -9999), i.e. to the padding's values (``gau_parent_empty``).

A terminal with no key (``gau_parent_empty``; every terminal of a one-token sentence, and padding): ``"uniform"``
(default, the authors' PGAU, which produced the published numbers: masked scores are filled with -9999 before the
softmax) attends uniformly to every key slot, under ``"keep"`` the W - 1 non-terminal slots and the batch's last
terminal, so a one-token sentence in a wider batch reads its batch's padding; ``"zero"`` (rirlab before) gives it
v' = 0 in eq. 12. A finished row's unused slots hold cell(first, second item of its frontier): the authors' EGT takes
the argmax of all-equal masked scores, the first pair (EGT-GAU equals theirs to ~1e-16 there). Their EBT takes
torch.topk's order among those equal scores, which torch leaves undefined, through its beam bookkeeping; not
reproduced (a one-token sentence in a wider batch: ~2e-3 from theirs in float64, 6e-3 with ``"zero"``).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput, at_least_fp32
from rirlab.models.beam_tree import (NEG, BeamSelect, STGradient, checked_st_gradient, gumbel_like, initial_scores,
                                     keep_survivors, marginalize, one_leaf_beams, pair_scores, perturbs_survivors,
                                     select_merge)
from rirlab.models.gau import GAUBlock, GAUConfig, Interaction
from rirlab.models.grc import GRC, LeafTransform
from rirlab.models.scorer import Scorer

ParentLast = Literal["keep", "attend"]  # last column of the batch: not a query (the authors' code) / a query as any
ParentEmpty = Literal["uniform", "zero"]  # a terminal with no key: averages every key slot (authors' code) / v' = 0


@dataclass(config=STRICT)
class TreeGAUConfig(GAUConfig):
    """EGT-GAU / EBT-GAU (EBT App. F.2, G): GRC tree, two applications of one parent-attention GAU block per
    sequence, three of one GAU block over the pair; parent relative positions clipped at 10."""

    cell_mult: int = Field(4, ge=1)  # d_cell = cell_mult * hidden_size (GRC eq. 1-2)
    d_s: int = Field(64, ge=1)  # features of each child the scorer reads (EBT Fix 2)
    parent_layers: int = Field(2, ge=1)  # GAUStack1 / NGAUStack1: weight-shared applications
    interaction_layers: int = Field(3, ge=1)  # GAUStack2: weight-shared applications
    gau_parent_rel_k: int = Field(10, ge=1)  # receptive field of height differences in parent attention
    gau_parent_self: bool = False  # a terminal also attends to itself (EBT §4 text); False: the authors' code
    gau_parent_last: ParentLast = "keep"  # the batch's last column: "keep" (the authors' split) or "attend"
    gau_parent_empty: ParentEmpty = "uniform"  # a terminal without a parent (module doc); "zero": rirlab before


@dataclasses.dataclass
class TreeNodes:
    """What :class:`NodeBeamTree` returns: b beams per row, W - 1 non-terminal slots per beam (row of length L: the
    first L - 1 are its nodes; the other slots span no terminal)."""

    roots: torch.Tensor  # (M, b, D)
    scores: torch.Tensor  # (M, b) accumulated log-scores (NEG: an impossible beam)
    nodes: torch.Tensor  # (M, b, W-1, D) non-terminals in creation order
    cover: torch.Tensor  # (M, b, W-1, W) bool: terminal i lies under non-terminal t
    height: torch.Tensor  # (M, b, W-1) long


class NodeBeamTree(nn.Module):
    """EBT-GRC beam search (``straight_through`` + beam 1: EGT-GRC) that records the trees' non-terminals."""

    def __init__(self, cell: GRC, scorer: Scorer, beam_size: int, straight_through: bool = False, tau: float = 1.0,
                 beam_select: BeamSelect = "stochastic", st_gradient: STGradient = "mask"):
        super().__init__()
        self.cell, self.scorer, self.beam_size = cell, scorer, beam_size
        self.straight_through, self.tau, self.beam_select = straight_through, tau, beam_select
        self.st_gradient = checked_st_gradient(st_gradient)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> TreeNodes:
        """x (M, W, D) leaves, lengths (M,)."""
        m, w, d = x.shape
        b = self.beam_size
        row, beams = torch.arange(m, device=x.device)[:, None], torch.arange(b, device=x.device)  # (M, 1), (b,)
        scores = initial_scores(m, b, x)  # (M, b): beam 0 alive
        h = x[:, None].expand(m, b, w, d)  # (M, b, W, D) frontier of every beam
        cover = torch.eye(w, dtype=torch.bool, device=x.device).expand(m, b, w, w)  # (M, b, W, W) spans of the frontier
        height = lengths.new_zeros(m, b, w)  # (M, b, W)
        nodes, ncover, nheight = h[:, :, :0], cover[:, :, :0], height[:, :, :0]  # empty (M, b, 0, ...)
        pos = torch.arange(w - 1, device=x.device)  # (W-1,) pairs
        select = self.straight_through and self.st_gradient == "mask" and torch.is_grad_enabled()
        ps = None if select else pair_scores(self.scorer, h, pos, lengths)  # (M, b, W-1) scored once, then cached
        for t in range(w - 1):
            cur = lengths - t  # (M,) nodes per row now
            active = cur > 1  # (M,) rows still merging
            pos = pos[: w - 1 - t]  # (W'-1,) pairs now
            if select:  # every pair scored from this step's frontier, as the authors' select_composition
                ps = pair_scores(self.scorer, h, pos, cur)  # (M, b, W'-1)
            logp = F.log_softmax(at_least_fp32(ps), dim=-1)  # (M, b, W'-1)
            key = logp + gumbel_like(logp) if self.training else logp  # (M, b, W'-1) stochastic top-k
            k1 = min(b, w - 1 - t)
            top_pos = key.topk(k1, dim=-1).indices  # (M, b, k1)
            cand = (scores[..., None] + logp.gather(-1, top_pos)).view(m, b * k1)  # (M, b k1) accumulated
            noisy = self.training and self.beam_select == "stochastic" and perturbs_survivors(1 if t == 0 else b)
            new_scores, sel = keep_survivors(cand, b, gumbel_like(cand) if noisy else None)  # (M, b), (M, b)
            src = torch.where(active[:, None], torch.div(sel, k1, rounding_mode="floor"), beams)  # (M, b) source beam
            j = top_pos.view(m, b * k1).gather(1, sel)  # (M, b) merged pair (j, j+1)
            j = torch.where(active[:, None], j, 0)  # a finished row's unused slot: its first pair, as the authors' argmax
            h, cover, height, ps = h[row, src], cover[row, src], height[row, src], ps[row, src]  # kept beams
            nodes, ncover, nheight = nodes[row, src], ncover[row, src], nheight[row, src]

            jd = j[:, :, None, None]  # (M, b, 1, 1)
            at, before = (pos == j[..., None]), (pos < j[..., None])  # (M, b, W'-1)
            soft = F.softmax(key / self.tau, dim=-1)[row, src] if self.straight_through else None  # (M, b, W'-1)
            if select:  # EGT "mask": the selection vector reads the children and moves the frontier
                new, merged = select_merge(self.cell.compose, h, soft, j)  # (M, b, 1, D), (M, b, W'-1, D)
            else:
                left, right = h.gather(2, jd.expand(m, b, 1, d)), h.gather(2, (jd + 1).expand(m, b, 1, d))
                new = self.cell(left, right)  # (M, b, 1, D) eq. 1-2
                if self.straight_through:  # EGT "node": value 1 forward, gradient of the merged pair's probability
                    pj = soft.gather(-1, j[..., None])  # (M, b, 1)
                    new = new * (1.0 + pj - pj.detach())[..., None]  # (M, b, 1, D)
                merged = merge(h, new, at, before)  # (M, b, W'-1, D)
            span = cover.gather(2, jd.expand(m, b, 1, w)) | cover.gather(2, (jd + 1).expand(m, b, 1, w))  # (M, b, 1, W)
            up = torch.maximum(height.gather(2, j[..., None]), height.gather(2, j[..., None] + 1)) + 1  # (M, b, 1)

            live = active[:, None, None]  # (M, 1, 1)
            h = torch.where(live[..., None], merged, h[:, :, :-1])  # (M, b, W'-1, D)
            cover = torch.where(live[..., None], merge(cover, span, at, before), cover[:, :, :-1])  # (M, b, W'-1, W)
            height = torch.where(live, merge(height[..., None], up[..., None], at, before)[..., 0], height[:, :, :-1])
            scores = torch.where(active[:, None], new_scores, scores)  # (M, b)
            if not select:
                ps = torch.where(live, rescore(self.scorer, h, ps, j, cur), ps[:, :, :-1])  # (M, b, W'-2)
            nodes = torch.cat([nodes, new], 2)  # (M, b, t+1, D)
            ncover = torch.cat([ncover, span & live[..., None]], 2)  # (M, b, t+1, W): a finished row's slot spans none
            nheight = torch.cat([nheight, up], 2)  # (M, b, t+1)
        return TreeNodes(h[:, :, 0], one_leaf_beams(scores, lengths, 1), nodes, ncover, nheight)


def rescore(scorer: Scorer, h: torch.Tensor, ps: torch.Tensor, j: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
    """Pair scores (M, b, W'-2) of the merged frontier h (M, b, W'-1, D) from the cached ones ps (M, b, W'-1): shifted
    past the merge at j (M, b), and only the two pairs touching the new node at j scored again (as BeamTree does)."""
    m, b, w1, d = h.shape
    pos = torch.arange(w1 - 1, device=h.device)  # (W'-2,)
    jj = j[..., None]  # (M, b, 1)
    old = ps.gather(2, pos + (pos > jj))  # (M, b, W'-2) pair p before j, p + 1 after
    at = (jj + torch.tensor([-1, 0, 1], device=h.device)).clamp(0, w1 - 1)  # (M, b, 3): left neighbour, new, right
    three = h.gather(2, at[..., None].expand(m, b, 3, d))  # (M, b, 3, D)
    two = scorer(three[:, :, :2], three[:, :, 1:])  # (M, b, 2): (left, new), (new, right)
    right = two[..., 1:].masked_fill(jj + 1 >= (cur - 1)[:, None, None], NEG)  # (M, b, 1) unless past the end
    return torch.where(pos == jj - 1, two[..., :1], torch.where(pos == jj, right, old))  # (M, b, W'-2)


def merge(h: torch.Tensor, new: torch.Tensor, at: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """Frontier (M, b, W', F) after merging pair (j, j+1) into ``new`` (M, b, 1, F): nodes before j, new, the rest."""
    out = torch.where(at[..., None], new, h[:, :, 1:])  # (M, b, W'-1, F)
    return torch.where(before[..., None], h[:, :, :-1], out)  # (M, b, W'-1, F)


class ParentAttention(nn.Module):
    """GAUStack1 / NGAUStack1 (eq. 22, 28): ``layers`` applications of one GAU block, terminals as queries, the
    non-terminals that span them as keys and values, relative positions = height differences (terminals: 0)."""

    def __init__(self, cfg: TreeGAUConfig):
        super().__init__()
        self.self_key = cfg.gau_parent_self
        self.k = cfg.gau_parent_rel_k
        uniform = cfg.gau_parent_empty == "uniform"
        self.block = GAUBlock(cfg, self.k + int(self.self_key), uniform)  # distances 1..k (and 0 for the node itself)
        self.layers = cfg.parent_layers
        self.keep_last = cfg.gau_parent_last == "keep"
        self.last_key = uniform and self.keep_last and not self.self_key  # the authors' split: their last key slot

    def forward(self, x: torch.Tensor, tree: TreeNodes, mask: torch.Tensor) -> torch.Tensor:
        """x (M, W, D) terminals, mask (M, W) -> (M, W, D), the beams' results weighted by softmax(scores), eq. 29."""
        m, w, _ = x.shape
        b = tree.scores.size(1)
        node_ok = mask[:, 1:]  # (M, W-1) slot t is a node of a row of length L iff t < L - 1
        g = tree.cover.transpose(-1, -2) & node_ok[:, None, None, :]  # (M, b, W, W-1) G_it: t is above terminal i
        lo = 0 if self.self_key else 1
        rel = (tree.height.clamp(lo, self.k) - lo)[:, :, None, :].expand(m, b, w, w - 1)  # (M, b, W, W-1)
        if self.self_key:  # the terminal itself as a key, at height distance 0
            eye = torch.eye(w, dtype=torch.bool, device=x.device) & mask[:, None, None, :]  # (M, 1, W, W)
            g = torch.cat([eye.expand(m, b, w, w), g], -1)  # (M, b, W, 2W-1)
            rel = torch.cat([rel.new_zeros(m, b, w, w), rel], -1)  # (M, b, W, 2W-1)
        nodes_kv = self.block.keys(tree.nodes)  # (M, b, W-1, 2D), (M, b, W-1, dh): the same for every layer
        h = x[:, None]  # (M, 1, W, D) eq. 27 repeat(x, b): the beams' queries are equal until the first layer
        q = w - 1 if self.keep_last else w  # queries: the first q columns; the others keep their value
        g, rel = g[:, :, :q], rel[:, :, :q]  # (M, b, q, .)
        if self.last_key and q:  # the last column, never a query, is a key slot of the authors' split, always masked
            last = self.block.keys(x[:, None, q:])  # (M, 1, 1, 2D), (M, 1, 1, dh): its value never changes
            nodes_kv = tuple(torch.cat([nk, lk.expand(m, b, 1, -1)], 2) for nk, lk in zip(nodes_kv, last))  # (M, b, W, .)
            g, rel = F.pad(g, (0, 1)), F.pad(rel, (0, 1))  # (M, b, q, W)
        for _ in range(self.layers if q else 0):
            kv = nodes_kv
            if self.self_key:  # the terminals' own keys, then the non-terminals'
                kv = tuple(torch.cat([own.expand(m, b, *own.shape[2:]), nk], 2)
                           for own, nk in zip(self.block.keys(h), nodes_kv))  # (M, b, 2W-1, .)
            out = self.block(h[:, :, :q], None, g, rel, kv)  # (M, b, q, D)
            h = torch.cat([out, h[:, :, q:].expand(m, out.size(1), w - q, -1)], 2) if q < w else out  # (M, b, W, D)
        weights = F.softmax(at_least_fp32(tree.scores), dim=-1)  # (M, b) eq. 29
        return (weights[:, :, None, None] * at_least_fp32(h)).sum(1).to(x.dtype)  # (M, W, D)


class TreeGAUEncoder(nn.Module):
    """EGT-GAU / EBT-GAU (eq. 21-29, then 23-25 and 18-19) around a :class:`NodeBeamTree`."""

    joint_pair = True  # rirlab.models.heads.TaskModel calls pair() with both sequences of a pair task

    def __init__(self, cfg: TreeGAUConfig, tree: NodeBeamTree, pair: bool = True):
        super().__init__()
        d = cfg.hidden_size
        self.leaf = LeafTransform(d)  # eq. 17 (the authors' init_transform)
        self.tree = tree
        self.parent = ParentAttention(cfg)
        self.cls = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))  # eq. 23
        shared = GAUBlock(cfg, 2 * cfg.gau_rel_k + 1)
        self.interaction = Interaction(cfg, [shared] * cfg.interaction_layers, pair)  # GAUStack2, weight-shared

    def segment(self, x: torch.Tensor, mask: torch.Tensor):
        """One sequence -> (cls' (N, D), contextualised terminals (N, S, D), mask), eq. 21-23 / 26-29."""
        h = self.leaf(x)  # (N, S, D)
        tree = self.tree(h, mask.sum(1))  # b beams of roots, non-terminals, adjacency, heights
        cls = marginalize(tree.roots, tree.scores).to(h.dtype)  # (N, D) beam-score-weighted root
        return self.cls(cls), self.parent(h, tree, mask), mask  # (N, D), (N, S, D), (N, S)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        return EncoderOutput(self.interaction([self.segment(x, mask)]))  # (N, D)

    def pair(self, x1, mask1, x2, mask2) -> EncoderOutput:
        return EncoderOutput(self.interaction([self.segment(x1, mask1), self.segment(x2, mask2)]))  # (N, D)


def tree_gau(cfg: TreeGAUConfig, info, beam_size: int, straight_through: bool, tau: float = 1.0,
             beam_select: BeamSelect = "stochastic", st_gradient: STGradient = "mask") -> TreeGAUEncoder:
    """The encoder of a config for a task (``info``): GRC cell (eq. 1-2), child-pair scorer (eq. 6-7), the search
    with these settings."""
    d = cfg.hidden_size
    tree = NodeBeamTree(GRC(d, cfg.cell_mult, cfg.dropout), Scorer(d, cfg.d_s), beam_size, straight_through, tau,
                        beam_select, st_gradient)
    return TreeGAUEncoder(cfg, tree, info.kind == "pair")
