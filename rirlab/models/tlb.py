"""Temporal Latent Bottleneck (Algorithm 2) and Gated Universal Transformer Latent Bottleneck (Algorithm 4).

The sequence is cut into chunks of ``chunk_size`` tokens processed left to right. Each chunk C_0 goes
through L layers of self-attention within the chunk (Attention1, RoPE), cross-attention to the memory
M^t (Attention2) and a feed-forward; then the memory slots attend to the chunk's last states in U
layers (Attention3_l + FeedForward_l) to give M^{t+1}.
TLB: L layers with their own parameters. GUTLB: one shared layer with GatedFeedForward repeated under
GUT's global transition-aware halting per chunk (halting restarts at every chunk); the memory reads S_L.
A sequence whose chunk is all padding keeps its memory. ``num_chunks`` gives "TLB Fixed Recurrence"
(§6.6, Table 3 "TLB FR"): k chunks of size ceil(S / k) for the batch's padded length S instead of size g.
Defaults (the paper's Appendix A): chunk size 10 and 10 memory slots; L = 2 for TLB, upper bound 5 for GUTLB.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.gut import GUTConfig
from rirlab.models.halting import DepthHalting
from rirlab.models.transformer import Attention, FeedForward, GatedFeedForward, Readout, RTConfig, register_encoder


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


class ChunkLayer(nn.Module):
    """A_l = Attention1(C, C, C); A_l = Attention2(A_l, M, M); C_l = FeedForward(A_l) or GatedFeedForward(C, A_l)."""

    def __init__(self, d: int, heads: int, d_ff: int, dropout: float, gate: bool):
        super().__init__()
        self.self_attn = Attention(d, heads, dropout, rotary=True)
        self.mem_attn = Attention(d, heads, dropout, rotary=False)
        self.ff = GatedFeedForward(d, d_ff, dropout) if gate else FeedForward(d, d_ff, dropout)
        self.gated = gate

    def forward(self, c, mask, memory, causal: bool) -> torch.Tensor:
        a = self.self_attn(c, None, mask, causal)  # (N, g, D)
        a = self.mem_attn(a, memory)  # (N, g, D)
        return self.ff(c, a) if self.gated else self.ff(a)  # (N, g, D)


class MemoryUpdate(nn.Module):
    """M_l = FeedForward_l(Attention3_l(M_{l-1}, C, C)) for l = 1..U (Algorithm 2, 4)."""

    def __init__(self, d: int, heads: int, d_ff: int, dropout: float, layers: int):
        super().__init__()
        self.attn = nn.ModuleList(Attention(d, heads, dropout, rotary=False) for _ in range(layers))
        self.ff = nn.ModuleList(FeedForward(d, d_ff, dropout) for _ in range(layers))

    def forward(self, m, c, mask) -> torch.Tensor:
        for attn, ff in zip(self.attn, self.ff):
            m = ff(attn(m, c, mask))  # (N, slots, D)
        return m


class LatentBottleneckEncoder(nn.Module):
    """TLB (a :class:`TLBConfig`) or GUTLB (a :class:`GUTLBConfig`: DepthHalting over one shared gated ChunkLayer)."""

    def __init__(self, cfg: TLBConfig | GUTLBConfig, causal: bool, lm: bool):
        super().__init__()
        gutlb = isinstance(cfg, GUTLBConfig)
        d, heads, d_ff, dropout = cfg.hidden_size, cfg.num_heads, cfg.d_ff, cfg.dropout
        self.halting = DepthHalting(d, cfg.max_layers, cfg.alpha_thresh, cfg.global_halt, cfg.transition, causal,
                                    cfg.halt_mode) if gutlb else None  # GUT's halting per chunk
        n_layers = 1 if gutlb else cfg.num_layers
        self.layers = nn.ModuleList(ChunkLayer(d, heads, d_ff, dropout, gutlb and cfg.gate) for _ in range(n_layers))
        self.memory0 = nn.Parameter(torch.randn(1, cfg.memory_slots, d) * 0.02)  # M^0
        self.update = MemoryUpdate(d, heads, d_ff, dropout, cfg.memory_layers)
        self.readout = Readout(d, lm, "end" if gutlb else "mean")
        self.norm = nn.LayerNorm(d)
        self.g, self.causal, self.num_chunks = cfg.chunk_size, causal, None if gutlb else cfg.num_chunks

    def forward(self, x, mask) -> EncoderOutput:
        h, mask, end_at = self.readout.wrap(x, mask)  # (N, S, D)
        n, s, d = h.shape
        g = -(-s // self.num_chunks) if self.num_chunks else self.g  # TLB fixed recurrence: k chunks whatever S
        extra = (-s) % g
        hp = F.pad(h, (0, 0, 0, extra))  # (N, k*g, D)
        mp = F.pad(mask, (0, extra), value=False)  # (N, k*g)
        memory = self.memory0.expand(n, -1, -1)  # (N, slots, D)
        outs, acts, depths, units, calls = [], [], [], [], []
        for c, cm in zip(hp.split(g, dim=1), mp.split(g, dim=1)):  # (N, g, D), (N, g)
            if self.halting is None:
                for layer in self.layers:
                    c = layer(c, cm, memory, self.causal)  # (N, g, D)
            else:
                mem = memory

                def step(cc, _s, cm=cm, mem=mem):
                    return self.layers[0](cc, cm, mem, self.causal)  # (N, g, D)

                res = self.halting(step, c, cm)
                c = res.states  # S_L, (N, g, D)
                acts.append(res.act_loss)
                depths.append((res.depth * res.units).sum())  # no boolean indexing: no host read per chunk
                units.append(res.units.sum())
                calls.append(res.calls)
            keep = cm.any(1)[:, None, None]  # (N, 1, 1): chunk holds real tokens
            memory = torch.where(keep, self.update(memory, c, cm), memory)  # M^{t+1}, (N, slots, D)
            outs.append(c)
        out = torch.cat(outs, dim=1)[:, :s]  # (N, S, D)
        vec = self.readout.pool(self.norm(out), mask, end_at)
        if self.halting is None:
            return EncoderOutput(vec)
        act = torch.stack(acts).mean()
        mean_layers, act_value = torch.stack([torch.stack(depths).sum() / torch.stack(units).sum(),
                                              act.detach().float()]).tolist()  # one host read per forward
        stats = {"mean_layers": mean_layers, "max_layers_used": float(max(calls)), "act_loss": act_value}
        return EncoderOutput(vec, act, stats)

    def artifacts(self) -> dict:
        return {} if self.halting is None else self.halting.histogram("chunk")


register_encoder("tlb", TLBConfig, LatentBottleneckEncoder,
                 "Temporal Latent Bottleneck: chunk-wise recurrence with memory slots (Algorithm 2), mean pooling.")
register_encoder("gutlb", GUTLBConfig, LatentBottleneckEncoder,
                 "Gated Universal Transformer Latent Bottleneck: TLB with a halting GUT per chunk (Algorithm 4).")
