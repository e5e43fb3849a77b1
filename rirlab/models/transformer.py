"""The plain pre-LN Transformer (Recurrent Transformers paper §3, eq. 1-4): ``num_layers`` blocks with their own
parameters, over the shared blocks and settings of ``rirlab.models.attention`` (positions, attention, feed-forward,
readout; their defaults follow the paper's public code, see there).
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.attention import Block, Readout, RTConfig, attn_options, ff_options, register_encoder
from rirlab.models.base import EncoderOutput


@dataclass(config=STRICT)
class TransformerConfig(RTConfig):
    num_layers: int = Field(6, ge=1)


class TransformerEncoder(nn.Module):
    """Vanilla pre-LN Transformer: ``num_layers`` blocks with their own parameters (eq. 1-4), mean pooling.

    ``final_norm``: a LayerNorm on the states before pooling (usual for pre-LN stacks; not in the paper).
    """

    def __init__(self, cfg: TransformerConfig, causal: bool, lm: bool):
        super().__init__()
        d = cfg.hidden_size
        self.blocks = nn.ModuleList(Block(d, cfg.num_heads, cfg.d_ff, cfg.dropout, ff=ff_options(cfg),
                                          **attn_options(cfg))
                                    for _ in range(cfg.num_layers))
        self.readout = Readout(d, lm, cfg.pooling or "mean")
        self.norm = nn.LayerNorm(d) if cfg.final_norm else nn.Identity()
        self.causal = causal

    def forward(self, x, mask) -> EncoderOutput:
        h, mask, end_at = self.readout.wrap(x, mask)
        for block in self.blocks:
            h = block(h, mask, self.causal)  # (N, S, D)
        return EncoderOutput(self.readout.pool(self.norm(h), mask, end_at))


register_encoder("transformer", TransformerConfig, TransformerEncoder,
                 "Pre-LN Transformer with xPos (Recurrent Transformers paper eq. 1-4), mean pooling.")
