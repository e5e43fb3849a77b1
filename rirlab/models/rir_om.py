"""``rir_om``: RIR-OM (RIR paper, Appendix Table 5 "RIR-OM" row): the outer recursion of :mod:`rirlab.models.rir`
with Ordered Memory (:mod:`rirlab.models.om`) as the inner RvNN of every chunk.

Defaults: the RIR ListOps settings of the outer recursion (chunk 30, S4D pre-chunk layer, the one chunk rule) and
OM's (21 slots, memory dropout 0.1, the soft stick-breaking mask); each chunk's items are projected, LN(x W + b), before
OM reads them, as the authors' OrderedMemoryRecurrent does (:class:`rirlab.models.om.ProjectedOrderedMemory`). OM keeps one beam, so alignment has nothing to do (as in RIR-GRC). The paper
does not say which inference RIR-OM used; we default to RIR inference (``inference: rir``; ``non_rir`` runs OM over
the whole sequence in eval mode).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.rir import InnerName, RIRConfig, RIREncoder


@dataclass(config=STRICT)
class RIROMConfig(RIRConfig):
    """RIR-OM: Ordered Memory inside a balanced k-ary outer recursion (RIR Table 5)."""

    inner: InnerName = "om"
    om_slots: int = Field(21, ge=1)
    om_memory_dropout: float = Field(0.1, ge=0, lt=1)
    om_mask: Literal["soft", "hard"] = "soft"  # rirlab.models.om: soft, the authors' code (default); hard, 0/1


@register("rir_om", RIROMConfig)
def rir_om(cfg: RIROMConfig, info):
    """RIR with Ordered Memory as inner RvNN: k-ary outer recursion over chunks (RIR §2 eq. 6-7, Table 5)."""
    return TaskModel(RIREncoder(cfg), info, cfg)
