"""``rir_crvnn``: RIR-CRvNN (RIR paper, Appendix Table 5 "RIR-CRvNN" row): the outer recursion of
:mod:`rirlab.models.rir` with a CRvNN (:mod:`rirlab.models.crvnn`) as the inner RvNN of every chunk.

Defaults: the RIR ListOps settings of the outer recursion (chunk 30, the one chunk rule), the S4D pre-chunk layer as
the authors' HCRvNN ListOps config has it (BatchNorm after its residual, ``s4d_norm: batch``, and no S4D dropout,
``s4d_dropout: 0``; :mod:`rirlab.models.s4d`) and CRvNN's (window 5, dynamic halting at 0.1, the authors' step
limit ``crvnn_max_steps: padded``: a chunk narrower than the widest chunk of its level runs L + 1 iterations, see
:mod:`rirlab.models.crvnn`). CRvNN keeps one beam, so alignment has nothing to do. The paper does not say which
inference RIR-CRvNN used; we default to RIR inference (``inference: rir``).
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.models.crvnn import CRvNNHalt, CRvNNMaxSteps
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.rir import InnerName, RIRConfig, RIREncoder
from rirlab.models.s4d import S4DNorm


@dataclass(config=STRICT)
class RIRCRvNNConfig(RIRConfig):
    """RIR-CRvNN: CRvNN inside a balanced k-ary outer recursion (RIR Table 5)."""

    inner: InnerName = "crvnn"
    crvnn_halt: CRvNNHalt = "dynamic"
    crvnn_stop_threshold: float = Field(0.1, ge=0, lt=1)
    crvnn_window: int = Field(5, ge=3)
    crvnn_max_steps: CRvNNMaxSteps = "padded"  # the authors' step limit (rirlab.models.crvnn); "length": L
    s4d_norm: S4DNorm = "batch"  # the authors' ListOps config (norm="batch" after the S4D residual)
    s4d_dropout: float = Field(0.0, ge=0, lt=1)  # the authors' ListOps config (s4_dropout 0)


@register("rir_crvnn", RIRCRvNNConfig)
def rir_crvnn(cfg: RIRCRvNNConfig, info):
    """RIR with CRvNN as inner RvNN: k-ary outer recursion over chunks (RIR §2 eq. 6-7, Table 5)."""
    return TaskModel(RIREncoder(cfg), info, cfg)
