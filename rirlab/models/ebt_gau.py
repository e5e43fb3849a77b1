"""``ebt_gau``: EBT-GAU (EBT paper §4, App. F.2 eq. 26-29): EBT-GRC's beams of trees give each beam's terminals
parent attention; the beams' terminals are averaged with the softmax of the beam scores, then the pair interacts
through a GAU stack (:mod:`rirlab.models.parent_attention`, :mod:`rirlab.models.gau`).

Defaults: EBT App. G and the authors' NLI settings (hidden 300, beam 5, d_s 64, dropout 0.1, head size 128,
two weight-shared parent-attention blocks, three weight-shared interaction blocks, receptive fields 5 and 10).
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.models.beam_tree import BeamSelect
from rirlab.models.heads import TaskModel
from rirlab.models.parent_attention import TreeGAUConfig, tree_gau
from rirlab.models.registry import beam_width, register


@dataclass(config=STRICT)
class EBTGAUConfig(TreeGAUConfig):
    """EBT-GAU: beam search over merge orders (stochastic top-k while training), parent attention per beam."""

    beam_size: int = Field(5, ge=1)
    beam_select: BeamSelect = "stochastic"  # training survivors: Gumbel top-b (authors' code) or plain top-b


@register("ebt_gau", EBTGAUConfig, memory_width=beam_width)
def ebt_gau(cfg: EBTGAUConfig, info):
    """EBT-GAU: EBT-GRC trees' non-terminals as parent attention, then GAU sentence interaction (EBT paper §4)."""
    return TaskModel(tree_gau(cfg, info, cfg.beam_size, straight_through=False, beam_select=cfg.beam_select), info, cfg)
