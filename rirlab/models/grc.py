"""Gated Recursive Cell (RIR paper, Appendix J, eq. 10-11) and the leaf transform (eq. 17)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def fast_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout from a uniform-threshold mask: same distribution as F.dropout, about 2x faster on CPU."""
    if not training or p == 0:
        return x
    return x * ((torch.rand_like(x) >= p) * (1.0 / (1.0 - p)))


class GRC(nn.Module):
    """GELU Gated Recursive Cell R(child_l, child_r) -> parent, eq. 10-11; d_cell = cell_mult * d."""

    def __init__(self, d: int, cell_mult: int = 4, dropout: float = 0.1):
        super().__init__()
        self.w1 = nn.Linear(2 * d, cell_mult * d)
        self.w2 = nn.Linear(cell_mult * d, 4 * d)
        self.drop = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(d)

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        return self.compose(torch.cat([left, right], dim=-1))  # (..., 2D) in

    def compose(self, pair: torch.Tensor) -> torch.Tensor:
        """The cell on [child_l; child_r] given as one (..., 2D) tensor (saves a concatenation)."""
        d = pair.size(-1) // 2
        hidden = fast_dropout(F.gelu(self.w1(pair)), self.drop.p, self.training)  # (..., d_cell)
        out = self.w2(hidden)  # (..., 4D): l, r, g, h of eq. 10
        gates = torch.sigmoid(out[..., : 3 * d])  # (..., 3D) sigma(l), sigma(r), sigma(g)
        mixed = gates[..., :d] * pair[..., :d] + gates[..., d : 2 * d] * pair[..., d:] + gates[..., 2 * d :] * out[..., 3 * d :]
        return self.ln(mixed)  # (..., D) eq. 11


class LeafTransform(nn.Module):
    """Initial leaf transformation inp = LN(x W_init), eq. 17."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.ln(self.w(x))  # mask unused; accepted so leaf layers are interchangeable with PreChunkS4D
