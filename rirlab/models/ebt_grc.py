"""``ebt_grc``: Efficient Beam Tree GRC (EBT paper §3, Algorithm 1 of Appendix E).

Leaf layer, then the EBT beam search over the whole sequence (the fused fast path of
:mod:`rirlab.models.fused_beam`), then the softmax-marginalised root. Defaults: EBT Appendix G /
RIR Appendix K ListOps settings (hidden 128, dropout 0.1, d_s 64, beam 5, no S4D layer).
"""

from __future__ import annotations

import torch
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.beam_tree import BeamSelect, marginalize
from rirlab.models.fused_beam import FusedBeamTree
from rirlab.models.grc import GRC
from rirlab.models.heads import TaskModel
from rirlab.models.registry import beam_width, register
from rirlab.models.s4d import PreChunkConfig, leaf_layer
from rirlab.models.scorer import Scorer


@dataclass(config=STRICT)
class EBTConfig(PreChunkConfig):
    """EBT-GRC (EBT paper §3.1): beam search with the sliced child-pair scorer; ``s4d`` puts the S4D pre-chunk layer
    (RIR eq. 13-17) in front of the tree (EBT-GRC has none)."""

    beam_size: int = Field(5, ge=1)
    d_s: int = Field(64, ge=1)  # features of each child the scorer reads (EBT Fix 2)
    # survivors of the b x k candidates while training: Gumbel-perturbed top-b (the authors' code; the papers say
    # "stochastic Top-K") or plain top-b; eval is always plain top-b (rirlab.models.beam_tree.keep_survivors)
    beam_select: BeamSelect = "stochastic"
    # training steps' merge steps by torch.compile (inductor): one compiled step per token where the eager one
    # dispatches ~56 ops, the same values; costs a compile per kind of step on a trial's first steps
    # (rirlab.models.compiled_beam; benchmarks/README.md)
    compile: bool = False


def search(cfg: EBTConfig) -> FusedBeamTree:
    """The EBT-GRC search of a config: GRC cell (eq. 10-11), scorer (eq. 12), beam ``beam_size``, ``beam_select``;
    its training merge steps compiled where the config says ``compile`` (:mod:`rirlab.models.compiled_beam`)."""
    tree = FusedBeamTree(GRC.from_config(cfg), Scorer(cfg.hidden_size, cfg.d_s), cfg.beam_size, cfg.beam_select)
    if getattr(cfg, "compile", False):
        from rirlab.models.compiled_beam import CompiledSearch

        tree.search_class = CompiledSearch
    return tree


class EBTEncoder(nn.Module):
    """Leaf layer (eq. 17, or the S4D pre-chunk layer eq. 13-17), EBT search, softmax-marginalised root."""

    def __init__(self, cfg: EBTConfig):
        super().__init__()
        self.leaf = leaf_layer(cfg)
        self.tree = search(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        h = self.leaf(x, mask)  # (N, S, D)
        roots, scores = self.tree(h.unsqueeze(1), mask.sum(1))  # (N, b, D), (N, b)
        return EncoderOutput(marginalize(roots, scores))  # (N, D)


@register("ebt_grc", EBTConfig, table1_row=10, memory_width=beam_width)
def ebt_grc(cfg: EBTConfig, info):
    """Efficient Beam Tree GRC (EBT paper §3, Algorithm 1)."""
    return TaskModel(EBTEncoder(cfg), info, cfg)
