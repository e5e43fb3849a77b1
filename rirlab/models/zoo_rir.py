"""The beam-tree and S4D model family: ``ebt_grc``, ``gt_grc``, ``rir_ebt_grc``, ``s4d``.

Config defaults are the papers' ListOps settings (RIR Appendix K, EBT Appendix G): hidden 128,
dropout 0.1, d_s 64, beam 5 for EBT-GRC, beam 7 and chunk 30 for RIR-EBT-GRC, S4D-Inv.
Every row of RIR Table 5 is a config change: ``s4d``, ``alignment``, ``inference``, ``beam_size``,
``chunk_size``.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.beam_tree import BeamTree, marginalize
from rirlab.models.grc import GRC, LeafTransform
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.rir import rir_encode
from rirlab.models.s4d import PreChunkS4D, S4DStack
from rirlab.models.scorer import Scorer
from rirlab.models.zoo import GRCConfig


@dataclass(config=STRICT)
class EBTConfig(GRCConfig):
    """EBT-GRC (EBT paper §3.1): beam search with the sliced child-pair scorer."""

    beam_size: int = Field(5, ge=1)
    d_s: int = Field(64, ge=1)
    s4d: bool = False  # the S4D pre-chunk layer (RIR eq. 13-17) in front of the tree; EBT-GRC has none
    s4d_state: int = Field(64, ge=2)
    s4d_init: Literal["inv", "lin"] = "inv"


@dataclass(config=STRICT)
class RIREBTConfig(EBTConfig):
    """RIR-EBT-GRC (RIR paper §3): EBT-GRC inside a balanced k-ary outer recursion."""

    beam_size: int = Field(7, ge=1)
    chunk_size: int = Field(30, ge=2)
    alignment: Literal["beam", "string_it", "random"] = "beam"
    s4d: bool = True
    inference: Literal["rir", "non_rir"] = "non_rir"


@dataclass(config=STRICT)
class GTConfig(GRCConfig):
    """GT-GRC: greedy (beam 1) merges, straight-through Gumbel-softmax selection."""

    d_s: int = Field(64, ge=1)
    gumbel_tau: float = Field(1.0, gt=0)


@dataclass(config=STRICT)
class S4DConfig:
    """Stacked bidirectional S4D-Inv (RIR Table 1-4 S4D row)."""

    hidden_size: int = Field(128, ge=2)
    n_layers: int = Field(4, ge=1)
    s4d_state: int = Field(64, ge=2)
    s4d_init: Literal["inv", "lin"] = "inv"
    dropout: float = Field(0.1, ge=0, lt=1)


class BeamTreeEncoder(nn.Module):
    """Leaf layer (eq. 17, or S4D pre-chunk eq. 13-17), then EBT search, optionally inside RIR; softmax-marginalised root."""

    def __init__(self, d: int, cell_mult: int, dropout: float, beam_size: int, d_s: int, s4d: bool = False,
                 s4d_state: int = 64, s4d_init: str = "inv", chunk_size: int | None = None,
                 alignment: str = "beam", inference: str = "non_rir", straight_through: bool = False,
                 tau: float = 1.0):
        super().__init__()
        self.leaf = PreChunkS4D(d, s4d_state, s4d_init) if s4d else LeafTransform(d)
        self.tree = BeamTree(GRC(d, cell_mult, dropout), Scorer(d, d_s), beam_size, straight_through, tau)
        self.chunk_size, self.alignment, self.inference = chunk_size, alignment, inference

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        h = self.leaf(x, mask)  # (N, S, D)
        lengths = mask.sum(1)
        if self.chunk_size is not None and (self.training or self.inference == "rir"):
            roots, scores = rir_encode(self.tree, h, lengths, self.chunk_size, self.alignment)
        else:  # EBT-GRC, or non-RIR inference (RIR Appendix D): the inner search over the whole sequence
            roots, scores = self.tree(h.unsqueeze(1), lengths)  # (N, b, D), (N, b)
        return EncoderOutput(marginalize(roots, scores))  # (N, D)


@register("ebt_grc", EBTConfig)
def ebt_grc(cfg: EBTConfig, info):
    """Efficient Beam Tree GRC (EBT paper §3, Algorithm 1)."""
    enc = BeamTreeEncoder(cfg.hidden_size, cfg.cell_mult, cfg.dropout, cfg.beam_size, cfg.d_s, cfg.s4d,
                          cfg.s4d_state, cfg.s4d_init)
    return TaskModel(enc, info, cfg.hidden_size, cfg.dropout)


@register("gt_grc", GTConfig)
def gt_grc(cfg: GTConfig, info):
    """Greedy Gumbel-Tree GRC with the EBT scorer: beam 1, straight-through Gumbel-softmax (EBT paper GT-GRC)."""
    enc = BeamTreeEncoder(cfg.hidden_size, cfg.cell_mult, cfg.dropout, 1, cfg.d_s, straight_through=True,
                          tau=cfg.gumbel_tau)
    return TaskModel(enc, info, cfg.hidden_size, cfg.dropout)


@register("rir_ebt_grc", RIREBTConfig)
def rir_ebt_grc(cfg: RIREBTConfig, info):
    """RIR-EBT-GRC: S4D pre-chunk layer, k-ary outer recursion, EBT-GRC inner recursion, beam alignment (RIR §3)."""
    enc = BeamTreeEncoder(cfg.hidden_size, cfg.cell_mult, cfg.dropout, cfg.beam_size, cfg.d_s, cfg.s4d,
                          cfg.s4d_state, cfg.s4d_init, cfg.chunk_size, cfg.alignment, cfg.inference)
    return TaskModel(enc, info, cfg.hidden_size, cfg.dropout)


@register("s4d", S4DConfig)
def s4d(cfg: S4DConfig, info):
    """Stacked bidirectional S4D (S4D-Inv, bilinear), masked mean pooling."""
    enc = S4DStack(cfg.hidden_size, cfg.n_layers, cfg.s4d_state, cfg.s4d_init, cfg.dropout)
    return TaskModel(enc, info, cfg.hidden_size, cfg.dropout)
