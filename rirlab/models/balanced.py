"""Balanced k-ary tree recursion (RIR paper §2, eq. 5-7) with a recurrent GRC chunk encoder.

``k = 2`` with the GRC cell is BBT-GRC (eq. 3); larger ``k`` with a GRC RNN as
RK is RIR-GRC (§4.1). Padding is handled per sequence: a sequence of length L
is chunked exactly as it would be alone, so padded batches equal single runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models.grc import GRC


def pad_to_multiple(x: torch.Tensor, mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad (N, S, D) states and (N, S) mask so that S is a multiple of k."""
    extra = (-x.size(1)) % k
    if extra:
        x = F.pad(x, (0, 0, 0, extra))  # (N, S', D)
        mask = F.pad(mask, (0, extra), value=False)  # (N, S')
    return x, mask


def rnn_compose(cell: GRC, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Left-to-right GRC recurrence over the middle axis: h_1 = x_1, h_t = R(h_{t-1}, x_t) (eq. 2).

    x: (..., T, D), mask: (..., T) with valid positions a prefix. Returns (..., D).
    """
    h = x[..., 0, :]  # (..., D)
    for t in range(1, x.size(-2)):
        h = torch.where(mask[..., t, None], cell(h, x[..., t, :]), h)  # (..., D)
    return h


class BalancedTree(nn.Module):
    """Balanced k-ary tree RvNN (BKT-RvNN): chunk, compress each chunk with a GRC RNN, repeat (eq. 6-7)."""

    def __init__(self, cell: GRC, k: int):
        super().__init__()
        self.cell = cell
        self.k = k

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        while x.size(1) > 1:
            k = min(self.k, x.size(1))
            x, mask = pad_to_multiple(x, mask, k)
            n, s, d = x.shape
            chunks = x.view(n, s // k, k, d)  # (N, S/k, k, D)
            cmask = mask.view(n, s // k, k)  # (N, S/k, k)
            x = rnn_compose(self.cell, chunks, cmask)  # (N, S/k, D)
            mask = cmask[..., 0]  # (N, S/k)
        return x[:, 0]  # (N, D)
