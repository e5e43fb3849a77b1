"""Recurrent Transformers with dynamic halt: ``transformer``, ``ut``, ``gut``, ``tlb``, ``gutlb``.

Defaults follow the paper's Appendix A: LRA-ListOps Transformer sizes (d = 512, 8 heads, d_ff = 4d,
6 layers), alpha_thresh = 0.999, beta = halt_loss_weight = 0.1 (tuned on ListOps in {1, 0.1, 0.01, 0.001}),
upper bound 15 layers for UT/GUT, L = 5 for GUTLB, chunk size 10 and 10 memory slots for TLB/GUTLB.
``causal`` None means: causal exactly for language-modelling tasks (flip-flop).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.models.gut import UniversalEncoder
from rirlab.models.halting import DepthHalting
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.tlb import LatentBottleneckEncoder
from rirlab.models.transformer import TransformerEncoder

KINDS = ("classify", "pair", "lm")


@dataclass(config=STRICT)
class RTConfig:
    """Settings shared by every recurrent-Transformer model."""

    hidden_size: int = Field(512, ge=2)
    num_heads: int = Field(8, ge=1)
    ff_mult: int = Field(4, ge=1)  # d_ff = ff_mult * hidden_size (and d_gff = d_ff)
    dropout: float = Field(0.1, ge=0, lt=1)
    causal: Optional[bool] = None  # None: causal for lm tasks, bidirectional otherwise

    @model_validator(mode="after")
    def _heads(self):
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"hidden_size {self.hidden_size} must split into num_heads {self.num_heads} heads "
                             f"of even size (RoPE); pick e.g. num_heads={_heads_for(self.hidden_size)}")
        return self


def _heads_for(d: int) -> int:
    return next(h for h in (8, 4, 2, 1) if d % h == 0 and (d // h) % 2 == 0) if d % 2 == 0 else 1


@dataclass(config=STRICT)
class TransformerConfig(RTConfig):
    num_layers: int = Field(6, ge=1)


@dataclass(config=STRICT)
class HaltConfig(RTConfig):
    """UT: token-level halting (Algorithm 1)."""

    max_layers: int = Field(15, ge=1)  # the upper bound on layers
    alpha_thresh: float = Field(0.999, gt=0, le=1)
    halt_loss_weight: float = Field(0.1, ge=0)  # beta in L = L_main + beta * L_ACT
    halt_mode: Literal["dynamic", "upper_bound", "none"] = "dynamic"  # §7: GUT / GUT upper bound / GUT no halt


@dataclass(config=STRICT)
class GUTConfig(HaltConfig):
    """GUT (Algorithm 3); the switches give the ablations -Global Halt, -Gate, -Transition."""

    global_halt: bool = True
    gate: bool = True
    transition: bool = True


@dataclass(config=STRICT)
class TLBConfig(RTConfig):
    num_layers: int = Field(2, ge=1)  # L per chunk
    chunk_size: int = Field(10, ge=1)
    memory_slots: int = Field(10, ge=1)
    memory_layers: int = Field(1, ge=1)  # U
    num_chunks: Optional[int] = Field(None, ge=1)  # "TLB Fixed Recurrence": this many chunks, any length


@dataclass(config=STRICT)
class GUTLBConfig(GUTConfig):
    max_layers: int = Field(5, ge=1)
    chunk_size: int = Field(10, ge=1)
    memory_slots: int = Field(10, ge=1)
    memory_layers: int = Field(1, ge=1)


def _causal(cfg: RTConfig, info) -> bool:
    lm = info.kind == "lm"
    if lm and cfg.causal is False:
        raise UserError("causal=false on a language-modelling task would let tokens see the future; "
                        "drop it or set causal=true")
    return lm if cfg.causal is None else cfg.causal


def _common(cfg: RTConfig) -> tuple:
    return cfg.hidden_size, cfg.num_heads, cfg.ff_mult * cfg.hidden_size, cfg.dropout


def _wrap(enc, cfg: RTConfig, info) -> TaskModel:
    return TaskModel(enc, info, cfg.hidden_size, cfg.dropout)


@register("transformer", TransformerConfig, kinds=KINDS)
def transformer(cfg: TransformerConfig, info):
    """Pre-LN Transformer with RoPE (Recurrent Transformers paper eq. 1-4), mean pooling."""
    enc = TransformerEncoder(*_common(cfg), cfg.num_layers, _causal(cfg, info), info.kind == "lm")
    return _wrap(enc, cfg, info)


@register("ut", HaltConfig, kinds=KINDS)
def ut(cfg: HaltConfig, info):
    """Universal Transformer with token-level halting (Algorithm 1, eq. 5-8), mean pooling."""
    enc = UniversalEncoder(*_common(cfg), max_layers=cfg.max_layers, alpha_thresh=cfg.alpha_thresh, mode=cfg.halt_mode,
                           gate=False, global_halt=False, transition=False, attend_to_state=True,
                           causal=_causal(cfg, info), lm=info.kind == "lm", pool="mean")
    return _wrap(enc, cfg, info)


@register("gut", GUTConfig, kinds=KINDS)
def gut(cfg: GUTConfig, info):
    """Gated Universal Transformer: gating, global mean halting, transition-aware halt (Algorithm 3, eq. 9-17)."""
    enc = UniversalEncoder(*_common(cfg), max_layers=cfg.max_layers, alpha_thresh=cfg.alpha_thresh, mode=cfg.halt_mode,
                           gate=cfg.gate, global_halt=cfg.global_halt, transition=cfg.transition,
                           attend_to_state=False, causal=_causal(cfg, info), lm=info.kind == "lm", pool="end")
    return _wrap(enc, cfg, info)


@register("tlb", TLBConfig, kinds=KINDS)
def tlb(cfg: TLBConfig, info):
    """Temporal Latent Bottleneck: chunk-wise recurrence with memory slots (Algorithm 2), mean pooling."""
    enc = LatentBottleneckEncoder(*_common(cfg), num_layers=cfg.num_layers, chunk_size=cfg.chunk_size,
                                  memory_slots=cfg.memory_slots, memory_layers=cfg.memory_layers,
                                  causal=_causal(cfg, info), lm=info.kind == "lm", pool="mean",
                                  num_chunks=cfg.num_chunks)
    return _wrap(enc, cfg, info)


@register("gutlb", GUTLBConfig, kinds=KINDS)
def gutlb(cfg: GUTLBConfig, info):
    """Gated Universal Transformer Latent Bottleneck: TLB with a halting GUT per chunk (Algorithm 4)."""
    causal = _causal(cfg, info)
    halting = DepthHalting(cfg.hidden_size, cfg.max_layers, cfg.alpha_thresh, cfg.global_halt, cfg.transition,
                           causal, cfg.halt_mode)
    enc = LatentBottleneckEncoder(*_common(cfg), num_layers=cfg.max_layers, chunk_size=cfg.chunk_size,
                                  memory_slots=cfg.memory_slots, memory_layers=cfg.memory_layers, causal=causal,
                                  lm=info.kind == "lm", pool="end", halting=halting, gate=cfg.gate)
    return _wrap(enc, cfg, info)
