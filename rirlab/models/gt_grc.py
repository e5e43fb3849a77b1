"""``gt_grc``: greedy Gumbel-Tree GRC with the EBT child-pair scorer (the GT-GRC baseline of the EBT paper).

Beam 1 and straight-through Gumbel-softmax selection: the argmax merge's value forward, the
gradient of its Gumbel-softmax probability backward. Runs on the reference search
(:class:`~rirlab.models.beam_tree.BeamTree`), the one that implements straight-through.
"""

from __future__ import annotations

import torch
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.beam_tree import BeamTree
from rirlab.models.grc import GRC, GRCConfig, LeafTransform
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.scorer import Scorer


@dataclass(config=STRICT)
class GTConfig(GRCConfig):
    """GT-GRC: greedy (beam 1) merges, straight-through Gumbel-softmax selection."""

    d_s: int = Field(64, ge=1)
    gumbel_tau: float = Field(1.0, gt=0)


class GTEncoder(nn.Module):
    """Leaf transform (eq. 17), greedy straight-through merges over the whole sequence; the root."""

    def __init__(self, cfg: GTConfig):
        super().__init__()
        self.leaf = LeafTransform(cfg.hidden_size)
        self.tree = BeamTree(GRC.from_config(cfg), Scorer(cfg.hidden_size, cfg.d_s), 1, straight_through=True,
                             tau=cfg.gumbel_tau)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        roots, _ = self.tree(self.leaf(x).unsqueeze(1), mask.sum(1))  # (N, 1, D): one beam
        return EncoderOutput(roots[:, 0])  # (N, D)


@register("gt_grc", GTConfig)
def gt_grc(cfg: GTConfig, info):
    """Greedy Gumbel-Tree GRC with the EBT scorer: beam 1, straight-through Gumbel-softmax (EBT paper GT-GRC)."""
    return TaskModel(GTEncoder(cfg), info, cfg)
