"""Child-pair scorer of EBT-RvNN: a light MLP on the first d_s features of two adjacent nodes.

RIR paper eq. 12 / EBT paper eq. 6-7 (Fix 1: score child pairs, not composed parents;
Fix 2: slice each child to its first min(d_s, d) features).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models.base import at_least_fp32, full_precision


@dataclasses.dataclass(frozen=True)
class ScorerWeights:
    """What a fused kernel needs of the scorer: the tensors of eq. 12 and the slice width d_s."""

    w1: torch.Tensor  # (d_h, 2 d_s)
    b1: torch.Tensor  # (d_h,)
    w2: torch.Tensor  # (1, d_h)
    b2: torch.Tensor  # (1,)
    d_s: int  # features read from each child: min(d_s, D)


class Scorer(nn.Module):
    """e = W2 GELU(W1 [x[:d_s]; y[:d_s]] + b1) + b2, eq. 12 (W1: 2 d_s -> d_s, W2: d_s -> 1).

    Always in fp32 (at least): its scores decide the merges and feed the beam scores, and it is light (d_s wide),
    so under bf16 autocast it runs outside autocast on fp32 inputs.
    """

    def __init__(self, d: int, d_s: int = 64):
        super().__init__()
        self.ds = min(d_s, d)
        self.w1 = nn.Linear(2 * self.ds, d_s)
        self.w2 = nn.Linear(d_s, 1)

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        pair = at_least_fp32(torch.cat([left[..., : self.ds], right[..., : self.ds]], dim=-1))  # (..., 2 d_s)
        with full_precision(pair):
            return self.w2(F.gelu(self.w1(pair))).squeeze(-1)  # (...,)

    def weights(self) -> ScorerWeights:
        return ScorerWeights(self.w1.weight, self.w1.bias, self.w2.weight, self.w2.bias, self.ds)
