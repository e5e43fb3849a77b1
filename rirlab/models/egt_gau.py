"""``egt_gau``: EGT-GAU (EBT paper App. F.2 eq. 21-25): the EGT-GRC tree (greedy merges, straight-through
Gumbel-softmax, child-pair scorer) gives the terminals parent attention, then the pair interacts through a GAU stack
(:mod:`rirlab.models.parent_attention`, :mod:`rirlab.models.gau`). The straight-through gradient is by default the
authors' ``EGT_GAU_IN``'s: every pair's Gumbel-softmax probability gets one (``st_gradient``,
:data:`~rirlab.models.beam_tree.STGradient`).

Defaults: EBT App. G and the authors' NLI settings (hidden 300, d_s 64, dropout 0.1, head size 128, two
weight-shared parent-attention blocks, three weight-shared interaction blocks, receptive fields 5 and 10).
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.models.beam_tree import STGradient
from rirlab.models.heads import TaskModel
from rirlab.models.parent_attention import TreeGAUConfig, tree_gau
from rirlab.models.registry import register


@dataclass(config=STRICT)
class EGTGAUConfig(TreeGAUConfig):
    """EGT-GAU: one greedy tree per sequence (beam 1, straight-through Gumbel-softmax)."""

    gumbel_tau: float = Field(1.0, gt=0)
    # the straight-through gradient (rirlab.models.beam_tree.STGradient): "mask", the authors' EGT_GAU_IN (every
    # pair's Gumbel-softmax probability gets a gradient), or "node" (only the merged pair's; rirlab before)
    st_gradient: STGradient = "mask"


@register("egt_gau", EGTGAUConfig)
def egt_gau(cfg: EGTGAUConfig, info):
    """EGT-GAU: EGT-GRC tree's non-terminals as parent attention, then GAU sentence interaction (EBT paper App. F.2)."""
    encoder = tree_gau(cfg, info, 1, straight_through=True, tau=cfg.gumbel_tau, st_gradient=cfg.st_gradient)
    return TaskModel(encoder, info, cfg)
