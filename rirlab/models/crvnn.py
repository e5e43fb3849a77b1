"""``crvnn``: Continuous Recursive Neural Network (Ray Chowdhury & Caragea, "Modeling Hierarchical Structures with
Continuous Recursive Neural Networks", ICML 2021, arXiv:2106.06038) with the GRC cell, as the RIR paper runs it
(Table 2 "CRvNN" row). Also the inner RvNN of ``rir_crvnn`` (RIR Table 5 "RIR-CRvNN" row).

Every item i of the sequence [START, x_1..x_L, END] carries an existential probability e_i (1 at the start,
CRvNN §3.1). One iteration (CRvNN §3.2-3.4):

- neighbour retrieval (§3.2): the soft right neighbour of i is R_ij = e_j while sum_{i<k<=j} e_k <= 1, then the
  remaining mass max(0, 1 - sum_{i<k<j} e_k); the left neighbour L is the same from the right. Repeated products
  give the k-th neighbours.
- composition probabilities (§3.3): a scorer s_i = w^T GELU(W [left_2; left_1; x_i; right_1; right_2]) over a window
  of 5 soft neighbours; exp(s_i) competes with a no-op (score 0) and with the compose scores of the soft left and
  right neighbours: c_i = e^{s_i} / (e^{s_i} + 1 + (L e^{s})_i + (R e^{s})_i); c = 0 at START, END and the last
  token (which is never absorbed and ends as the root).
- update (§3.4): item i is absorbed into its right neighbour with probability c_i: the right neighbour becomes
  x_j <- (L c)_j cell(left_1(j), x_j) + (1 - (L c)_j) x_j, and e_i <- e_i (1 - c_i).
- dynamic halting (§3.5, ``crvnn_halt``): a sequence stops once at most one item (besides START and END) has
  e_i > ``crvnn_stop_threshold`` (0.1), or at its step limit (``crvnn_max_steps``, below).

The root is the state of the last token. The cell is the RIR paper's GRC (eq. 10-11).

START and END are trained vectors. Standalone (``crvnn``) they go through the leaf transform with the tokens, as in
the authors' CRvNN.py, which adds them before its initial transform LN(W x + b) (so that transform's gradient also
gets their terms); inside RIR-CRvNN they enter as they are, as in the authors' CRvNNX.py (HCRvNN.py applies the
initial transform before chunking, CRvNNX adds START and END to each chunk after it).

``crvnn_halt`` (the authors' code offers two files; the RIR paper uses the second for timing, Table 1, "CRvNN in
the no halting mode"):
- ``dynamic`` (default, accuracy runs; the authors' CRvNN.py): per-sequence halting, the loop ends once every
  sequence has halted;
- ``full_loop`` (the authors' CRvNN_nohalt.py, RIR Table 1 timing): the same per-sequence halting, so the same
  outputs, but the loop always runs max(L) iterations (the worst-case cost);
- ``off``: no threshold halting: every sequence runs to its step limit (``crvnn_max_steps``).

``crvnn_max_steps``, the step limit of a sequence of L items; the paper (§3.5) bounds the loop by the sequence
length, the authors' code differs where a batch is padded, and this changes outputs, so both are offered:
- ``padded`` (default, the authors' code, CRvNN.py / CRvNNX.py inside HCRvNN.py, which produced the published
  numbers): the loop runs over the padded width W of the call, and a sequence halts once ``L - 2.0 < t`` with L + 2
  items counted with START and END, i.e. after min(L + 1, W) iterations: L + 1 when a wider sequence shares the
  batch (in RIR-CRvNN: a chunk narrower than the widest chunk of its level), L when alone. An extra iteration is
  not a no-op (items still carry existence mass), so a padded batch does NOT give each sequence what it gets alone;
- ``length``: every sequence stops after its own L iterations, so a padded batch gives each sequence what it gets
  alone (rirlab's earlier rule).

Other choices: the normaliser is the authors' ``sum_normalize``: each of the four terms gets 1e-8 (:data:`NORM_EPS`)
before the sum, in the units of the exponentials shifted by the maximum score. The authors shift by the maximum over
the whole batch (every position, and the no-op's 0); we shift by each sequence's own maximum over its selectable
items and 0, and equal theirs where the two maxima coincide (a sequence alone whose largest score is at a selectable
item or below 0); elsewhere the epsilon's weight differs. That is ~1e-7 in the output while the batch's scores stay
within a few units of each row's (float64, shared weights: CRvNN 5e-8, RIR-CRvNN 1e-5 on a padded batch), but where a
row's terms lie about 12 or more below the batch maximum (exp(s - max) near 1e-8) the authors' epsilon shrinks that
row's probabilities: with a batch maximum of 12-14 and row maxima near 0, CRvNN's outputs differed by 3e-2; in
RIR-CRvNN, whose batch is every chunk of every sequence (all-padding chunks and padding positions included), a batch
maximum of 17 against row maxima of 4-7 gave 0.5 (outputs about 3). Their maximum is taken over positions rirlab
never scores (padding, START, END, halted rows, all-padding chunks), so it is not reproduced (matching it would
mean scoring every position of every row at every iteration). A later check at the defaults (float64, shared
weights, alone and padded) found CRvNN and RIR-CRvNN within about 1e-9 of the authors' everywhere: this shift.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.grc import GRC, GRCConfig, OneBeamEncoder, grc_cell
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register

CRvNNHalt = Literal["dynamic", "full_loop", "off"]
CRvNNMaxSteps = Literal["padded", "length"]  # step limit: min(L + 1, padded width) (authors' code) or L


NORM_EPS = 1e-8  # added to each term of the composition-probability normaliser (the authors' sum_normalize)


@dataclass(config=STRICT)
class CRvNNConfig(GRCConfig):
    """CRvNN with the GRC cell (RIR/BT-RvNN ListOps settings: hidden 128, dropout 0.1, window 5, threshold 0.1)."""

    crvnn_halt: CRvNNHalt = "dynamic"
    crvnn_stop_threshold: float = Field(0.1, ge=0, lt=1)
    crvnn_window: int = Field(5, ge=3)  # scorer window, odd: the item and (window-1)/2 soft neighbours each side
    crvnn_max_steps: CRvNNMaxSteps = "padded"  # the authors' code; "length": L iterations (batch-independent)


def neighbours(e: torch.Tensor, valid: torch.Tensor):
    """Soft left and right neighbour matrices L, R (M, S, S) from existential probabilities e (M, S) (CRvNN §3.2)."""
    def right_of(ev, vv):
        s = ev.size(1)
        mat = torch.triu((ev * vv)[:, None, :].expand(-1, s, -1), diagonal=1)  # (M, S, S) e_j for j > i
        csum = mat.cumsum(-1)
        before = torch.cat([torch.zeros_like(csum[..., :1]), csum[..., :-1]], dim=-1)  # sum_{i<k<j} e_k
        rest = (1 - before).clamp(min=0)
        return torch.where(csum > 1, rest, mat) * vv[:, None, :]

    v = valid.to(e.dtype)
    both = right_of(torch.cat([e.flip(1), e]), torch.cat([v.flip(1), v]))  # (2M, S, S) both directions at once
    return both[: e.size(0)].flip(1, 2), both[e.size(0):]


class CRvNN(nn.Module):
    """CRvNN over each row as an inner RvNN (one beam, score 0).

    forward(x (M, 1, L, D), lengths (M,), scores (M, 1) or None, ends (2, D) or None) -> roots (M, 1, D), scores
    (M, 1). ``ends``: the START and END vectors to use (:class:`CRvNNEncoder`: through the leaf transform); None:
    the parameters ``start`` and ``end`` as they are (RIR-CRvNN).
    After a forward: ``last_steps`` (M,) iterations each row ran, ``last_probs`` (M, S, 4) the normalised
    [compose, no-op, left compose, right compose] terms of each row's last iteration (beyond a row's items:
    [0, 1, 0, 0]; under ``full_loop``: the loop's last iteration, every row).

    Each iteration runs on the rows still updating only, cut to the widest of them, and where those hold padding,
    the scorer on the selectable items only and the cell on tokens 2..L only (the others' results were never read):
    the same values as the whole padded batch (the cell's dropout draws fall on fewer rows).
    ``full_loop`` keeps the whole batch at every iteration, as that mode is the worst-case cost.
    """

    beam_size = 1

    def __init__(self, cfg: CRvNNConfig):
        super().__init__()
        d = cfg.hidden_size
        self.start = nn.Parameter(torch.randn(d))
        self.end = nn.Parameter(torch.randn(d))
        self.conv = nn.Linear(cfg.crvnn_window * d, d)
        self.score = nn.Linear(d, 1)
        self.cell = GRC.from_config(cfg)
        self.halt, self.threshold, self.window = cfg.crvnn_halt, cfg.crvnn_stop_threshold, cfg.crvnn_window
        self.max_steps = cfg.crvnn_max_steps
        self.last_steps = self.last_probs = None

    def window_of(self, seq, left, right):
        """[left_k .. left_1, x, right_1 .. right_k] (M, S, W, D) by repeated soft neighbour retrieval."""
        lefts, rights, lk, rk = [], [], seq, seq
        for _ in range(self.window // 2):
            lk, rk = left @ lk, right @ rk
            lefts.insert(0, lk)
            rights.append(rk)
        return torch.stack(lefts + [seq] + rights, dim=2)

    def probs(self, win, left, right, selectable, valid=None):
        """Normalised [compose, no-op, left compose, right compose] (M, S, 4) (CRvNN §3.3); column 0 is c.

        ``valid`` (P,): the scorer runs on these positions of (M S) only (at least the selectable ones: the others'
        scores are never read, c is 0 there)."""
        m, s, w, d = win.shape
        if valid is None:
            logit = self.score(F.gelu(self.conv(win.reshape(m, s, w * d)))).squeeze(-1)  # (M, S)
        else:  # valid: flat indices (P,) in (M S)
            packed = self.score(F.gelu(self.conv(win.reshape(m * s, w * d).index_select(0, valid)))).squeeze(-1)
            logit = packed.new_zeros(m * s).index_copy(0, valid, packed).view(m, s)  # (M, S)
        shift = torch.where(selectable, logit, torch.zeros_like(logit)).amax(1, keepdim=True).clamp(min=0).detach()
        e_c = torch.exp(torch.where(selectable, logit, torch.full_like(logit, -1e4)) - shift) * selectable
        terms = torch.stack([e_c, torch.exp(-shift).expand_as(e_c), (left @ e_c[..., None])[..., 0],
                             (right @ e_c[..., None])[..., 0]], dim=-1)  # (M, S, 4)
        return terms / (terms + NORM_EPS).sum(-1, keepdim=True)  # the authors' sum_normalize

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None,
                ends: torch.Tensor | None = None):
        m, b_in, width, d = x.shape
        assert b_in == 1, "CRvNN keeps one beam"
        s = width + 2
        pos = torch.arange(s, device=x.device)  # (S,)
        valid = pos <= (lengths + 1)[:, None]  # (M, S) START, tokens, END
        end = pos == (lengths + 1)[:, None]
        last = pos == lengths[:, None]  # the last token: the root
        selectable = valid & (pos > 0) & ~end & ~last  # items that can be absorbed
        start_v, end_v = (self.start, self.end) if ends is None else ends  # (D,) each
        seq = torch.cat([start_v.expand(m, 1, d), x[:, 0], x.new_zeros(m, 1, d)], dim=1)  # (M, S, D)
        seq = torch.where(end[..., None], end_v.expand(m, s, d), seq) * valid[..., None]
        e = valid.to(seq.dtype)  # (M, S)
        steps = torch.zeros_like(lengths)
        active = lengths > 0
        last_probs = None
        if self.max_steps == "padded":  # the authors' `L - 2.0 < t` over a loop of the padded width
            limit, n_loop = (lengths + 1).clamp(max=width), width
        else:
            limit, n_loop = lengths, int(lengths.max())
        every_row = self.halt == "full_loop"  # RIR Table 1's worst-case timing: every row at every iteration
        at = torch.arange(s, device=x.device)
        for t in range(n_loop):
            if every_row:
                rows, w = None, s
                e_a, seq_a, valid_a, sel_a = e, seq, valid, selectable
            else:  # only the rows still updating, up to the widest of them, and the scorer and cell on their items
                rows = active.nonzero()[:, 0]  # (Ma,)
                if rows.numel() == 0:
                    break
                w = int(lengths[rows].max()) + 2
                e_a, seq_a, valid_a, sel_a = e[rows, :w], seq[rows, :w], valid[rows, :w], selectable[rows, :w]
            left, right = neighbours(e_a, valid_a)
            win = self.window_of(seq_a, left, right)
            gather = not every_row and not bool(valid_a.all())  # else every position is an item: no gathering
            scored = sel_a.reshape(-1).nonzero()[:, 0] if gather else None  # (P,) flat in (Ma w): the logits read
            probs = self.probs(win, left, right, sel_a, scored)
            c = probs[..., 0] * sel_a  # (Ma, w)
            lc = (left @ c[..., None])  # (Ma, w, 1) compose prob of the left neighbour
            left_1 = win[:, :, self.window // 2 - 1]  # cell(left_1, x) below
            if not gather:
                composed = grc_cell(self.cell, torch.cat([left_1, seq_a], -1).view(-1, 2 * d)).view(seq_a.shape)
            else:  # tokens 2..L only: lc is exactly 0 at START, the first token and END (their left neighbour is
                # START or the last token, c = 0 there), so their compositions are never read
                at_c = F.pad(sel_a[:, :-1], (1, 0)).reshape(-1).nonzero()[:, 0]  # (Pc,) flat in (Ma w)
                pairs = torch.cat([left_1.reshape(-1, d).index_select(0, at_c),
                                   seq_a.reshape(-1, d).index_select(0, at_c)], -1)  # (Pc, 2D)
                composed = seq_a.new_zeros(seq_a.numel() // d, d).index_copy(0, at_c, grc_cell(self.cell, pairs))
                composed = composed.view(seq_a.shape)
            new_seq = (lc * composed + (1 - lc) * seq_a) * valid_a[..., None]
            new_e = e_a * (1 - c) * valid_a
            if every_row:
                seq = torch.where(active[:, None, None], new_seq, seq)
                e = torch.where(active[:, None], new_e, e)
                last_probs = probs
            elif rows.numel() == m and w == s:  # every row, whole: nothing kept from before
                seq, e = new_seq, new_e
                last_probs = probs.detach().clone()  # written into in place by a later iteration
            else:
                seq = seq.index_put((rows[:, None], at[None, :w]), new_seq)
                e = e.index_put((rows[:, None], at[None, :w]), new_e)
                if last_probs is None:
                    last_probs = probs.new_zeros(m, s, 4)
                    last_probs[..., 1] = 1.0
                last_probs[rows, :w] = probs.detach()
            steps = steps + active.long()
            active = active & (steps < limit)
            if self.halt != "off":
                alive = ((e > self.threshold) & valid).sum(1) - 2  # items besides START and END
                active = active & (alive > 1)
            if self.halt == "dynamic" and not bool(active.any()):
                break
        self.last_steps, self.last_probs = steps, None if last_probs is None else last_probs.detach()
        root = seq[torch.arange(m, device=x.device), lengths]  # (M, D) the last token
        return root[:, None], x.new_zeros(m, 1) if scores is None else scores


class CRvNNEncoder(OneBeamEncoder):
    """Leaf transform, CRvNN over the whole sequence, its root; START and END go through the leaf transform too
    (the authors' CRvNN.py: the initial transform runs after START and END are added)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        return super().forward(x, mask, ends=self.leaf(torch.stack([self.tree.start, self.tree.end])))  # ends (2, D)


# RIR Table 1 times CRvNN without its early exit ("no halting", the authors' CRvNN_nohalt): same outputs,
# every sequence runs its whole loop; a --set of the same key wins
@register("crvnn", CRvNNConfig, table1_row=7, table1_settings={"crvnn_halt": "full_loop"})
def crvnn(cfg: CRvNNConfig, info):
    """Continuous Recursive Neural Network (Ray Chowdhury & Caragea, ICML 2021) with the GRC cell."""
    return TaskModel(CRvNNEncoder(cfg.hidden_size, CRvNN(cfg)), info, cfg)
