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
input as in the authors' cell; memory dropout ``om_memory_dropout`` is applied to the inputs of the attention
query, key and score layers (the authors' code).

Choices (the authors' code, BeamRecursionFamily's OrderedMemoryX):
- the leaf transform LN(x W + b) (RIR eq. 17) is the projection of the input into slot space;
- the mask of eq. 3 treats \\vec\\pi^{i+1} < 1e-5 as 0 (the code's threshold), so float noise cannot open a slot;
- ``om_mask: soft`` (default): the scores are weighted by the mask's values, as the OM code's
  ``process_softmax`` (``x * mask`` then an L1 normalisation, also in BeamRecursionFamily's OrderedMemory(X)), which
  produced the published numbers; ``hard`` restricts a plain softmax to the open slots (the mask as a 0/1 gate).
  They differ wherever a slot is partly open (0 < m < 1): by up to 3.5 in the output at lengths >= 4;
- the authors' input projection and cell share one LayerNorm; ours has one per use (the RIR GRC cell owns its LN).
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
from rirlab.models.grc import GRC, GRCConfig, LeafTransform, OneBeamEncoder
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


class StickBreaking(nn.Module):
    """Scores of the slots and the masked softmax with its cumulative sums (OM eq. 1-3)."""

    def __init__(self, d: int, p: float, mask: str = "soft"):
        super().__init__()
        self.drop = nn.Dropout(p)
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

    def step(self, x, mem, mem_out, prev_p):
        """One OM step: x (M, D), memory and its outputs (M, n, D), p_{t-1} (M, n) or None -> o, M, \\hat M, p."""
        cp, rcp, p = self.attn(x, mem_out, prev_p)  # (M, n) each
        mem = mem * (1 - rcp)[..., None] + mem_out * rcp[..., None]  # (M, n, D) eq. 4
        h, outs = x, []
        for i in range(self.n_slots):  # eq. 5-6, from the first slot down
            composed = self.cell.compose(self.cell_drop(torch.cat([h, mem[:, i]], dim=-1)))  # (M, D)
            h = x * (1 - cp[:, i, None]) + composed * cp[:, i, None]
            outs.append(h)
        return h, mem, torch.stack(outs, dim=1), p  # o_t = \hat M_t^n

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        m, b_in, width, d = x.shape
        assert b_in == 1, "Ordered Memory keeps one beam"
        x = x[:, 0]  # (M, L, D)
        mem = x.new_zeros(m, self.n_slots, d)
        mem_out, p, out = mem, None, x[:, 0]
        ps = []
        for t in range(width):
            o, mem_t, mem_out_t, p_t = self.step(x[:, t], mem, mem_out, p)
            if t == 0:
                mem, mem_out, p, out = mem_t, mem_out_t, p_t, o
            else:
                live = (t < lengths)[:, None]  # (M, 1) a padded step keeps the state
                out = torch.where(live, o, out)
                p = torch.where(live, p_t, p)
                mem = torch.where(live[..., None], mem_t, mem)
                mem_out = torch.where(live[..., None], mem_out_t, mem_out)
            ps.append(p)
        self.last_p = torch.stack(ps, dim=1).detach()
        return out[:, None], x.new_zeros(m, 1) if scores is None else scores  # (M, 1, D), (M, 1)


class ProjectedOrderedMemory(OrderedMemory):
    """OM as RIR-OM's inner RvNN: the authors' ``OrderedMemoryRecurrent`` projects its input, LN(x W + b)
    (``input_projection``), on every call, so each chunk's items (the S4D-transformed leaves at the first level,
    the roots of the chunks below above it) are projected before the memory reads them. Standalone OM needs no
    second projection: its leaf transform is that projection (:class:`OneBeamEncoder`)."""

    single_passes_through = True  # rir_encode: a sequence of one item is its own root, unprojected (as theirs)

    def __init__(self, cfg: OMConfig):
        super().__init__(cfg)
        self.proj = LeafTransform(cfg.hidden_size)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        return super().forward(self.proj(x), lengths, scores)  # x: (M, 1, L, D)


@register("om", OMConfig, table1_row=6)
def om(cfg: OMConfig, info):
    """Ordered Memory (Shen et al., NeurIPS 2019) with the GRC cell: stick-breaking attention over memory slots."""
    return TaskModel(OneBeamEncoder(cfg.hidden_size, OrderedMemory(cfg)), info, cfg)
