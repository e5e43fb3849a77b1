"""Every registered model: its config dataclass (defaults = the papers' ListOps settings) and builder."""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.balanced import BalancedTree, rnn_compose
from rirlab.models.base import EncoderOutput
from rirlab.models.grc import GRC, LeafTransform
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register


@dataclass(config=STRICT)
class GRCConfig:
    """Settings shared by the GRC-based models."""

    hidden_size: int = Field(128, ge=2)
    cell_mult: int = Field(4, ge=1)
    dropout: float = Field(0.1, ge=0, lt=1)


@dataclass(config=STRICT)
class RIRGRCConfig(GRCConfig):
    chunk_size: int = Field(30, ge=2)
    s4d: bool = True  # S4D pre-chunk layer (RIR §3.2, eq. 13-17); RIR-GRC uses it (§4.1)


class TreeEncoder(nn.Module):
    """Leaf transform (eq. 17) then a balanced k-ary tree of GRC compositions."""

    def __init__(self, d: int, cell_mult: int, dropout: float, k: int, leaf: nn.Module | None = None):
        super().__init__()
        self.leaf = leaf or LeafTransform(d)
        self.tree = BalancedTree(GRC(d, cell_mult, dropout), k)

    def forward(self, x, mask) -> EncoderOutput:
        return EncoderOutput(self.tree(self.leaf(x, mask), mask))


class RNNEncoder(nn.Module):
    """Leaf transform then a left-to-right GRC recurrence over the whole sequence (RNN-GRC)."""

    def __init__(self, d: int, cell_mult: int, dropout: float):
        super().__init__()
        self.leaf = LeafTransform(d)
        self.cell = GRC(d, cell_mult, dropout)

    def forward(self, x, mask) -> EncoderOutput:
        return EncoderOutput(rnn_compose(self.cell, self.leaf(x), mask))


@register("bbt_grc", GRCConfig)
def bbt_grc(cfg: GRCConfig, info):
    """Balanced binary tree GRC (RIR paper eq. 3; BBT-GRC of §4.1, no S4D layer)."""
    return TaskModel(TreeEncoder(cfg.hidden_size, cfg.cell_mult, cfg.dropout, k=2), info, cfg.hidden_size, cfg.dropout)


@register("rir_grc", RIRGRCConfig)
def rir_grc(cfg: RIRGRCConfig, info):
    """RIR with a GRC RNN as inner RvNN: balanced k-ary outer recursion over chunks (RIR §2 eq. 6-7, §4.1)."""
    from rirlab.models.s4d import PreChunkS4D

    leaf = PreChunkS4D(cfg.hidden_size) if cfg.s4d else None
    enc = TreeEncoder(cfg.hidden_size, cfg.cell_mult, cfg.dropout, k=cfg.chunk_size, leaf=leaf)
    return TaskModel(enc, info, cfg.hidden_size, cfg.dropout)


@register("rnn_grc", GRCConfig)
def rnn_grc(cfg: GRCConfig, info):
    """Plain recurrent GRC baseline (RNN-GRC, RIR paper eq. 2)."""
    return TaskModel(RNNEncoder(cfg.hidden_size, cfg.cell_mult, cfg.dropout), info, cfg.hidden_size, cfg.dropout)


# Model families in their own modules register themselves on import:
from rirlab.models import zoo_rir  # noqa: E402,F401  ebt_grc, gt_grc, rir_ebt_grc, s4d
from rirlab.models import zoo_halting  # noqa: E402,F401  transformer, ut, gut, tlb, gutlb
