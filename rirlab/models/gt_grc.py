"""``gt_grc``: the original Gumbel-Tree GRC (GT-GRC of the EBT paper, arXiv:2307.10779, §2 and Table 2).

Choi et al., "Learning to Compose Task-Specific Tree Structures" (AAAI 2018), with the GRC cell: at every step
ALL adjacent pairs are composed (EBT eq. 3), each candidate parent is scored by ``scorer(p) = W_v p``, the pair
j = argmax of the Gumbel-perturbed scores is merged and the sequence updated by EBT eq. 4. The argmax is made
differentiable with the straight-through Gumbel-softmax (Choi et al. §3.3): the forward uses the one-hot
selection, the backward the gradient of softmax((e + g) / tau) (``gumbel_tau``), applied to the whole selection
mask of eq. 4 (``sel * P + (1 - cumsum sel) * H_left + (cumsum sel - sel) * H_right``, as the authors' GT_GRC.py
code writes it). Eval: plain argmax, no noise. It is :class:`rirlab.models.bt_grc.ParentBeamSearch` with beam 1
and straight-through selection; the EBT fixes (child-pair scorer on d_s features) make ``egt_grc``.
"""

from __future__ import annotations

import torch
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.bt_grc import ParentBeamSearch
from rirlab.models.grc import GRC, GRCConfig, LeafTransform
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register


@dataclass(config=STRICT)
class GTConfig(GRCConfig):
    """GT-GRC: greedy merges chosen on composed parents, straight-through Gumbel-softmax at temperature gumbel_tau."""

    gumbel_tau: float = Field(1.0, gt=0)


class GTEncoder(nn.Module):
    """Leaf transform (RIR eq. 17), greedy straight-through merges over the whole sequence; the root."""

    def __init__(self, cfg: GTConfig):
        super().__init__()
        self.leaf = LeafTransform(cfg.hidden_size)
        self.tree = ParentBeamSearch(GRC.from_config(cfg), cfg.hidden_size, 1, straight_through=True,
                                     tau=cfg.gumbel_tau)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        roots, _ = self.tree(self.leaf(x), mask.sum(1))  # (N, 1, D)
        return EncoderOutput(roots[:, 0])  # (N, D)


@register("gt_grc", GTConfig)
def gt_grc(cfg: GTConfig, info):
    """Gumbel-Tree GRC (Choi et al. 2018; EBT paper GT-GRC): greedy, straight-through, scorer on composed parents."""
    return TaskModel(GTEncoder(cfg), info, cfg)
