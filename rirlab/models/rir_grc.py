"""``rir_grc`` and ``bbt_grc``: the outer recursion of :mod:`rirlab.models.rir` with a GRC RNN as inner RvNN.

RIR-GRC (RIR paper §4.1): S4D pre-chunk layer, chunks of k = 30 under the one chunk rule of RIR
models (a length of at least k + k // 2, by default the batch's padded length, chunk_by: ceil(L/k) chunks, the
last the remainder; below it one chunk), each compressed by
a GRC RNN (eq. 2), repeated (eq. 6-7). BBT-GRC (eq. 3): the same recursion and rule with k = 2 and no
S4D layer; for k = 2 the rule pairs items from the left and sends an odd last item up alone (L = 2 is
one pair), which is the balanced binary tree.
"""

from __future__ import annotations

from typing import Literal

from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.models.grc import GRCConfig
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.rir import RIRConfig, RIREncoder


@dataclass(config=STRICT)
class RIRGRCConfig(RIRConfig):
    """RIR-GRC: inner ``grc_rnn``, chunk 30, S4D pre-chunk layer on, RIR inference (RIR App. K)."""

    # the GRC RNN's start (rirlab.models.grc.rnn_compose): zero, h_0 = 0 (eq. 2 and the authors' RecurrentGRCX);
    # first_token, h_1 = x_1 (BBT-GRC's pair composition R(x_1, x_2), eq. 3)
    rnn_start: Literal["zero", "first_token"] = "zero"


@register("rir_grc", RIRGRCConfig, select_by="accuracy", table1_row=5)
def rir_grc(cfg: RIRGRCConfig, info):
    """RIR with a GRC RNN as inner RvNN: balanced k-ary outer recursion over chunks (RIR §2 eq. 6-7, §4.1)."""
    return TaskModel(RIREncoder(cfg), info, cfg)


@register("bbt_grc", GRCConfig, table1_row=4)
def bbt_grc(cfg: GRCConfig, info):
    """Balanced binary tree GRC (RIR paper eq. 3; BBT-GRC of §4.1, no S4D layer): RIR-GRC with k = 2."""
    rir = RIRGRCConfig(hidden_size=cfg.hidden_size, cell_mult=cfg.cell_mult, dropout=cfg.dropout, chunk_size=2,
                       s4d=False, inner="grc_rnn", inference="rir", rnn_start="first_token")
    return TaskModel(RIREncoder(rir), info, cfg)
