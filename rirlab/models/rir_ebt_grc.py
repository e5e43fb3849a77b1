"""``rir_ebt_grc``: RIR-EBT-GRC (RIR paper §3): S4D pre-chunk layer, the k-ary outer recursion of
:mod:`rirlab.models.rir`, EBT-GRC as inner RvNN, beam alignment.

Defaults: RIR Appendix K ListOps settings (hidden 128, dropout 0.1, d_s 64, beam 7, chunk 30, S4D-Inv,
non-RIR inference). Every row of RIR Table 5 is a config change: ``s4d``, ``alignment``, ``inference``,
``beam_size``, ``chunk_size``.
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.models.beam_tree import BeamSelect
from rirlab.models.heads import TaskModel
from rirlab.models.registry import beam_width, register
from rirlab.models.rir import Inference, InnerName, RIRConfig, RIREncoder


@dataclass(config=STRICT)
class RIREBTConfig(RIRConfig):
    """RIR-EBT-GRC (RIR paper §3): EBT-GRC inside a balanced k-ary outer recursion."""

    inner: InnerName = "ebt_grc"
    beam_size: int = Field(7, ge=1)
    d_s: int = Field(64, ge=1)  # features of each child the scorer reads (EBT Fix 2)
    beam_select: BeamSelect = "stochastic"  # training survivors: Gumbel top-b (authors' code) or plain top-b
    inference: Inference = "non_rir"
    # training steps' merge steps by torch.compile (inductor): ~3x fewer ops dispatched per merge step, the same values;
    # costs a compile per kind of step on a trial's first steps (rirlab.models.compiled_beam; benchmarks/README.md)
    compile: bool = False


@register("rir_ebt_grc", RIREBTConfig, select_by="accuracy", table1_row=11, memory_width=beam_width)
def rir_ebt_grc(cfg: RIREBTConfig, info):
    """RIR-EBT-GRC: S4D pre-chunk layer, k-ary outer recursion, EBT-GRC inner recursion, beam alignment (RIR §3)."""
    return TaskModel(RIREncoder(cfg), info, cfg)
