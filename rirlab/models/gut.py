"""``ut`` and ``gut``: Universal Transformer (Algorithm 1) and Gated Universal Transformer (Algorithm 3), one encoder.

UT: token-level halting, attention A_l = Attention(H_{l-1}, S_{l-1}, S_{l-1}) (keys and values from the
marginalised states, Algorithm 1), plain FeedForward, mean pooling.
GUT: GatedFeedForward (eq. 9-11), global mean halting (eq. 12-16), transition-aware halting input (eq. 17),
A_l = Attention(H_{l-1}, H_{l-1}, H_{l-1}) (Algorithm 3), END-position pooling (Appendix A).
The ablations "-Gate", "-Global Halt", "-Transition" switch one of these off. As in the paper's public code,
keys/values come from H exactly when halting is global and from S otherwise, so "GUT-Global Halt" (token-level
halting) reads them from S as UT does. Defaults: the paper's
Appendix A (upper bound 15 layers, alpha_thresh 0.999, beta 0.1).
"""

from __future__ import annotations

from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.halting import HaltConfig, depth_halting
from rirlab.models.attention import Block, Readout, attn_options, ff_options, register_encoder


@dataclass(config=STRICT)
class GUTConfig(HaltConfig):
    """GUT (Algorithm 3); the switches give the ablations -Global Halt, -Gate, -Transition."""

    global_halt: bool = True
    gate: bool = True
    transition: bool = True


class UniversalEncoder(nn.Module):
    """One Transformer block repeated up to ``max_layers`` times under dynamic halting: UT for a
    :class:`HaltConfig`, GUT for a :class:`GUTConfig`."""

    def __init__(self, cfg: HaltConfig, causal: bool, lm: bool):
        super().__init__()
        gut = isinstance(cfg, GUTConfig)
        gate, global_halt, transition = (cfg.gate, cfg.global_halt, cfg.transition) if gut else (False, False, False)
        d = cfg.hidden_size
        self.block = Block(d, cfg.num_heads, cfg.d_ff, cfg.dropout, gate=gate, ff=ff_options(cfg, gate),
                           **attn_options(cfg))
        self.halting = depth_halting(cfg, global_halt, transition, causal)
        self.readout = Readout(d, lm, cfg.pooling or ("end" if gut else "mean"))
        self.norm = nn.LayerNorm(d) if cfg.final_norm else nn.Identity()
        self.causal, self.attend_to_state = causal, not global_halt  # token halting: S_{l-1}; global: H_{l-1}
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


register_encoder("ut", HaltConfig, UniversalEncoder,
                 "Universal Transformer with token-level halting (Algorithm 1, eq. 5-8), mean pooling.",
                 aux_loss_key="halt_loss_weight")
register_encoder("gut", GUTConfig, UniversalEncoder,
                 "Gated Universal Transformer: gating, global mean halting, transition-aware halt (Algorithm 3, "
                 "eq. 9-17).", aux_loss_key="halt_loss_weight")
