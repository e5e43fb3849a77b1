"""``rir_om``: RIR-OM (RIR paper, Appendix Table 5 "RIR-OM" row): the outer recursion of :mod:`rirlab.models.rir`
with Ordered Memory (:mod:`rirlab.models.om`) as the inner RvNN of every chunk.

Defaults: the RIR ListOps settings of the outer recursion (chunk 30, the one chunk rule), the S4D pre-chunk layer as
the authors' HOM ListOps config has it (BatchNorm after its residual, ``s4d_norm: batch``, and no S4D dropout,
``s4d_dropout: 0``; :mod:`rirlab.models.s4d`) and OM's (21 slots, memory dropout 0.1, the soft stick-breaking mask);
each chunk's items are projected, LN(x W + b), before OM reads them, as the authors' OrderedMemoryRecurrent does
(:class:`rirlab.models.om.ProjectedOrderedMemory`), its LayerNorm the cell's as theirs (``om_ln: shared``; ``own``:
one of its own, rirlab before). OM keeps one beam, so alignment has nothing to do (as in RIR-GRC).
The paper does not say which inference RIR-OM used; we default to RIR inference (``inference: rir``; ``non_rir``
runs OM over the whole sequence in eval mode).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.rir import InnerName, RIRConfig, RIREncoder
from rirlab.models.s4d import S4DNorm


@dataclass(config=STRICT)
class RIROMConfig(RIRConfig):
    """RIR-OM: Ordered Memory inside a balanced k-ary outer recursion (RIR Table 5)."""

    inner: InnerName = "om"
    om_slots: int = Field(21, ge=1)
    om_memory_dropout: float = Field(0.1, ge=0, lt=1)
    om_mask: Literal["soft", "hard"] = "soft"  # rirlab.models.om: soft, the authors' code (default); hard, 0/1
    # the OM input projection's LayerNorm is the cell's (the authors' code) or its own (rirlab before); om.py
    om_ln: Literal["shared", "own"] = "shared"
    s4d_norm: S4DNorm = "batch"  # the authors' ListOps config (norm="batch" after the S4D residual)
    s4d_dropout: float = Field(0.0, ge=0, lt=1)  # the authors' ListOps config (s4_dropout 0)


@register("rir_om", RIROMConfig)
def rir_om(cfg: RIROMConfig, info):
    """RIR with Ordered Memory as inner RvNN: k-ary outer recursion over chunks (RIR §2 eq. 6-7, Table 5)."""
    return TaskModel(RIREncoder(cfg), info, cfg)
