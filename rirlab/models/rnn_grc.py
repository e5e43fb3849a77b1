"""``rnn_grc``: the GRC cell as a left-to-right RNN (RNN-GRC, RIR paper eq. 2); also RIR-GRC's inner RvNN."""

from __future__ import annotations

import torch
from torch import nn

from rirlab.models.base import EncoderOutput
from rirlab.models.grc import GRC, GRCConfig, LeafTransform, rnn_compose
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register


class GRCRNN(nn.Module):
    """The GRC recurrence h_t = R(h_{t-1}, x_t) over each row as an inner RvNN (one beam, score 0): RIR-GRC's chunks.

    forward(x (M, 1, L, D), lengths (M,), scores (M, 1) or None) -> roots (M, 1, D), scores (M, 1).
    """

    beam_size = 1
    single_passes_through = True  # rir_encode: a sequence of one item is its own root (the authors loop while S > 1)

    def __init__(self, cfg: GRCConfig):
        super().__init__()
        self.cell = GRC.from_config(cfg)
        self.start = getattr(cfg, "rnn_start", "zero")

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor | None = None):
        m, b_in, width, _ = x.shape
        assert b_in == 1, "a GRC RNN keeps one beam"
        mask = torch.arange(width, device=x.device) < lengths[:, None]  # (M, L)
        root = rnn_compose(self.cell, x[:, 0], mask, self.start)  # (M, D)
        return root[:, None], x.new_zeros(m, 1) if scores is None else scores  # (M, 1, D), (M, 1)


class RNNEncoder(nn.Module):
    """Leaf transform (eq. 17), then the GRC recurrence over the whole sequence; the last state."""

    def __init__(self, cfg: GRCConfig):
        super().__init__()
        self.leaf = LeafTransform(cfg.hidden_size)
        self.cell = GRC.from_config(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        return EncoderOutput(rnn_compose(self.cell, self.leaf(x), mask))  # (N, D)


@register("rnn_grc", GRCConfig, table1_row=1)
def rnn_grc(cfg: GRCConfig, info):
    """Plain recurrent GRC baseline (RNN-GRC, RIR paper eq. 2)."""
    return TaskModel(RNNEncoder(cfg), info, cfg)
