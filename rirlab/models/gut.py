"""Universal Transformer (Algorithm 1) and Gated Universal Transformer (Algorithm 3), one shared block.

UT: token-level halting, attention A_l = Attention(H_{l-1}, S_{l-1}, S_{l-1}) (keys and values from the
marginalised states, Algorithm 1), plain FeedForward, mean pooling.
GUT: GatedFeedForward (eq. 9-11), global mean halting (eq. 12-16), transition-aware halting input (eq. 17),
A_l = Attention(H_{l-1}, H_{l-1}, H_{l-1}) (Algorithm 3), END-position pooling (Appendix A).
The ablations "-Gate", "-Global Halt", "-Transition" switch one of these off.
"""

from __future__ import annotations

from torch import nn

from rirlab.models.base import EncoderOutput
from rirlab.models.halting import DepthHalting
from rirlab.models.transformer import Block, Readout


class UniversalEncoder(nn.Module):
    """One Transformer block repeated up to ``max_layers`` times under dynamic halting (UT / GUT)."""

    def __init__(self, d: int, heads: int, d_ff: int, dropout: float, *, max_layers: int, alpha_thresh: float,
                 mode: str, gate: bool, global_halt: bool, transition: bool, attend_to_state: bool,
                 causal: bool, lm: bool, pool: str):
        super().__init__()
        self.block = Block(d, heads, d_ff, dropout, gate=gate)
        self.halting = DepthHalting(d, max_layers, alpha_thresh, global_halt, transition, causal, mode)
        self.readout = Readout(d, lm, pool)
        self.norm = nn.LayerNorm(d)
        self.causal, self.attend_to_state = causal, attend_to_state
        self.unit = "sequence" if global_halt and not causal else "token"

    def forward(self, x, mask) -> EncoderOutput:
        h0, mask, end_at = self.readout.wrap(x, mask)  # (N, S', D) with START/END for sentence tasks

        def step(h, s):  # H_l from H_{l-1} (and S_{l-1} for UT)
            return self.block(h, mask, self.causal, kv=s if self.attend_to_state else None)  # (N, S', D)

        res = self.halting(step, h0, mask)
        vec = self.readout.pool(self.norm(res.states), mask, end_at)  # (N, D) or (N, S, D)
        return EncoderOutput(vec, res.act_loss, self.halting.stats(res))

    def artifacts(self) -> dict:
        return self.halting.histogram(self.unit)
