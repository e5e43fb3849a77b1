"""``egt_grc``: greedy Gumbel-Tree GRC with the EBT fixes (EGT-GRC of the EBT paper, arXiv:2307.10779, Table 2).

GT-GRC (``gt_grc``, :mod:`rirlab.models.gt_grc`) plus EBT Fix 1 (score the child pair, compose only the chosen one)
and Fix 2 (the scorer reads the first d_s = 64 features of each child), eq. 6-7 / RIR eq. 12.

Beam 1 and straight-through Gumbel-softmax selection: the argmax merge's value forward, the Gumbel-softmax
gradient backward, by default as the authors' public code (``EGT_GRC.py``) has it: every pair's probability gets
a gradient (``st_gradient``, :data:`~rirlab.models.beam_tree.STGradient`). Runs as one autograd node
(:class:`~rirlab.models.fused_greedy.FusedGreedyTree`), the fast path of the reference search
(:class:`~rirlab.models.beam_tree.BeamTree` with beam 1 and ``straight_through=True``): same draws, values and
gradients.
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.models.beam_tree import STGradient
from rirlab.models.fused_greedy import FusedGreedyTree
from rirlab.models.grc import GRC, GRCConfig, OneBeamEncoder
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.scorer import Scorer


@dataclass(config=STRICT)
class EGTConfig(GRCConfig):
    """EGT-GRC: greedy (beam 1) merges, straight-through Gumbel-softmax selection."""

    d_s: int = Field(64, ge=1)
    gumbel_tau: float = Field(1.0, gt=0)
    # the straight-through gradient (rirlab.models.beam_tree.STGradient): "mask", the authors' code's (every pair's
    # Gumbel-softmax probability gets a gradient), or "node" (only the merged pair's; rirlab before)
    st_gradient: STGradient = "mask"


@register("egt_grc", EGTConfig)
def egt_grc(cfg: EGTConfig, info):
    """Efficient Gumbel-Tree GRC: beam 1, straight-through Gumbel-softmax, EBT child-pair scorer (EBT paper EGT-GRC)."""
    # leaves as one beam (eq. 17), merges over the whole sequence
    greedy = FusedGreedyTree(GRC.from_config(cfg), Scorer(cfg.hidden_size, cfg.d_s), cfg.gumbel_tau, cfg.st_gradient)
    return TaskModel(OneBeamEncoder(cfg.hidden_size, greedy), info, cfg)
