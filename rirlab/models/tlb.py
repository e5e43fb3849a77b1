"""Temporal Latent Bottleneck (Algorithm 2) and Gated Universal Transformer Latent Bottleneck (Algorithm 4).

The sequence is cut into chunks of ``chunk_size`` tokens processed left to right. Each chunk C_0 goes
through L layers of self-attention within the chunk (Attention1, RoPE), cross-attention to the memory
M^t (Attention2) and a feed-forward; then the memory slots attend to the chunk's last states in U
layers (Attention3_l + FeedForward_l) to give M^{t+1}.
TLB: L layers with their own parameters. GUTLB: one shared layer with GatedFeedForward repeated under
GUT's global transition-aware halting per chunk (halting restarts at every chunk); the memory reads S_L. As in GUT
(gut.py) and the paper's code, the chunk self-attention takes keys/values from H_{l-1} under global halting and from
S_{l-1} otherwise ("-Global Halt").
A sequence whose chunk is all padding keeps its memory. ``num_chunks`` gives "TLB Fixed Recurrence"
(§6.6, Table 3 "TLB FR"): k chunks of size ceil(S / k) for the batch's padded length S instead of size g.

``chunking``: "torch" (default) is what Algorithm 2 and 4 write and the paper's code runs:
k = ceil(len(H_0) / g), chunks = torch.chunk(H_0, k), i.e. k chunks of ceil(S / k) positions for the padded
length S, so a sequence's chunks (and output) depend on how the batch is padded; "fixed" cuts every
sequence into chunks of exactly g positions (batch-independent; rirlab's earlier behaviour).
``readout``: "memory" (the code): no START/END; a sentence is classified from LayerNorm(final memory), so the
classifier sees the sequence only through the memory bottleneck: ``pooling`` None / "mean" reads the mean over the
slots, "start" / "end" the last slot (the code's "cls" / "end" pooling, which its LRA Image configs use); "tokens":
START/END and pooling of the token states (rirlab's earlier behaviour). Language modelling reads token states.
``memory_norm``: "two" (the code's ``TLBBlock`` / ``GatedTLBBlock`` LN11, LN12 and ``CrossTransformerBlock``): each
memory cross-attention (chunk -> memory and memory -> chunk) normalises its queries and its keys/values with
LayerNorms of their own; "shared": one LayerNorm for both (rirlab before). The two agree at initialisation and part
once trained.
``pair_batch`` (pair tasks): "joint" (the code's ``batch_pair``, on in all its pair configs): the two sentences of
every pair are padded to the longer batch and encoded as one batch (rirlab.models.heads.TaskModel), so, chunking
by the padded length, each sentence gets the code's chunks; "separate": one call per sentence batch (rirlab before;
a sentence's chunks then depend on its own batch's padded length only).
``eval_batches``: "file" (the code's dev/test loaders: consecutive runs of ``eval_batch_size`` examples in the
split's order, sorted only within the batch, which leaves its padded length as it is): an example's evaluation
batch, hence its padded length and chunks, is the code's; "length": the split sorted by length first, for pairs
by the longer sentence (every other model's evaluation, whose outputs do not depend on the batch; rirlab's TLB/GUTLB
before, then sorting pairs by their first sentence). The specs set eval_batch_size to the code's dev_batch_size. Training batches are random draws under both (the code's shuffled loader; bucket_factor 1).
The memory-update feed-forward is d -> ``memory_ff_mult`` d -> d (the code: 1), M^0 starts at zero (the code).
GUTLB's L_ACT is averaged per sequence over its chunks that hold real tokens, then over the batch (the code).
Defaults (the paper's Appendix A): chunk size 10 and 10 memory slots; L = 2 for TLB, upper bound 5 for GUTLB.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.gut import GUTConfig
from rirlab.models.halting import depth_halting
from rirlab.tasks.batching import EvalOrder
from rirlab.models.attention import (Attention, FeedForward, GatedFeedForward, Readout, RTConfig, attn_options,
                                       ff_options, register_encoder)


@dataclass(config=STRICT)
class TLBConfig(RTConfig):
    num_layers: int = Field(2, ge=1)  # L per chunk
    chunk_size: int = Field(10, ge=1)
    memory_slots: int = Field(10, ge=1)
    memory_layers: int = Field(1, ge=1)  # U
    num_chunks: Optional[int] = Field(None, ge=1)  # "TLB Fixed Recurrence": this many chunks, any length
    chunking: Literal["torch", "fixed"] = "torch"  # module doc
    readout: Literal["memory", "tokens"] = "memory"  # module doc
    memory_ff_mult: int = Field(1, ge=1)  # memory-update feed-forward d -> this * d -> d
    memory_norm: Literal["two", "shared"] = "two"  # module doc
    pair_batch: Literal["joint", "separate"] = "joint"  # pairs: both sentences in one padded batch (module doc)
    eval_batches: EvalOrder = "file"  # evaluation batches in the split's order (module doc)


@dataclass(config=STRICT)
class GUTLBConfig(GUTConfig):
    max_layers: int = Field(5, ge=1)
    chunk_size: int = Field(10, ge=1)
    memory_slots: int = Field(10, ge=1)
    memory_layers: int = Field(1, ge=1)
    chunking: Literal["torch", "fixed"] = "torch"
    readout: Literal["memory", "tokens"] = "memory"
    memory_ff_mult: int = Field(1, ge=1)
    memory_norm: Literal["two", "shared"] = "two"
    pair_batch: Literal["joint", "separate"] = "joint"
    eval_batches: EvalOrder = "file"


class CrossAttention(Attention):
    """Attention(Q, K, V) = MHA(LN_q(Q), LN_kv(K), LN_kv(V)) + Q without positions; ``own_kv_norm``: LN_kv is a
    LayerNorm of its own (the code's LN11 / LN12), else LN_q (one LayerNorm, rirlab before)."""

    def __init__(self, d: int, heads: int, dropout: float, own_kv_norm: bool, **attn):
        super().__init__(d, heads, dropout, rotary=False, **attn)
        self.ln_kv = nn.LayerNorm(d) if own_kv_norm else None

    def forward(self, q, kv, key_mask=None, causal: bool = False) -> torch.Tensor:
        lkv = (self.ln if self.ln_kv is None else self.ln_kv)(kv)  # (N, Sk, D)
        return self.drop(self.mha(self.ln(q), lkv, key_mask, causal)) + q  # (N, Sq, D)


class ChunkLayer(nn.Module):
    """A_l = Attention1(C, KV, KV); A_l = Attention2(A_l, M, M); C_l = FeedForward(A_l) or GatedFeedForward(C, A_l);
    KV = C, or S_{l-1} for GUTLB without global halting."""

    def __init__(self, d: int, heads: int, d_ff: int, dropout: float, gate: bool, ff: dict, own_kv_norm: bool,
                 **attn):
        super().__init__()
        self.self_attn = Attention(d, heads, dropout, rotary=True, **attn)  # chunk-local positions
        self.mem_attn = CrossAttention(d, heads, dropout, own_kv_norm, **attn)  # no positions on memory
        ff = dict(ff)
        shared = ff.pop("shared_norm", False)
        self.ff = GatedFeedForward(d, d_ff, dropout, shared, **ff) if gate else FeedForward(d, d_ff, dropout, **ff)
        self.gated = gate

    def forward(self, c, mask, memory, causal: bool, kv=None) -> torch.Tensor:
        a = self.self_attn(c, kv, mask, causal)  # (N, g, D)
        a = self.mem_attn(a, memory)  # (N, g, D)
        return self.ff(c, a) if self.gated else self.ff(a)  # (N, g, D)


class MemoryUpdate(nn.Module):
    """M_l = FeedForward_l(Attention3_l(M_{l-1}, C, C)) for l = 1..U (Algorithm 2, 4)."""

    def __init__(self, d: int, heads: int, d_ff: int, dropout: float, layers: int, ff: dict, own_kv_norm: bool,
                 **attn):
        super().__init__()
        self.attn = nn.ModuleList(CrossAttention(d, heads, dropout, own_kv_norm, **attn) for _ in range(layers))
        self.ff = nn.ModuleList(FeedForward(d, d_ff, dropout, **ff) for _ in range(layers))

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
        self.halting = depth_halting(cfg, cfg.global_halt, cfg.transition, causal) if gutlb else None  # per chunk
        n_layers = 1 if gutlb else cfg.num_layers
        attn = attn_options(cfg)
        gated = gutlb and cfg.gate
        two = cfg.memory_norm == "two"
        self.layers = nn.ModuleList(ChunkLayer(d, heads, d_ff, dropout, gated, ff_options(cfg, gated), two, **attn)
                                    for _ in range(n_layers))
        self.memory0 = nn.Parameter(torch.zeros(1, cfg.memory_slots, d))  # M^0 (zero, as the code)
        self.update = MemoryUpdate(d, heads, cfg.memory_ff_mult * d, dropout, cfg.memory_layers, ff_options(cfg),
                                   two, **attn)
        self.from_memory = cfg.readout == "memory" and not lm
        self.last_slot = self.from_memory and cfg.pooling in ("start", "end")  # the code's "cls" / "end" pooling
        self.kv_from_state = gutlb and not cfg.global_halt  # GUTLB -Global Halt: keys/values from S_{l-1}
        pool = cfg.pooling or ("end" if gutlb else "mean")
        self.readout = Readout(d, True if self.from_memory else lm, pool)  # lm: no START/END
        self.mem_norm = nn.LayerNorm(d) if self.from_memory else None
        self.norm = nn.LayerNorm(d) if cfg.final_norm else nn.Identity()
        self.g, self.causal, self.num_chunks = cfg.chunk_size, causal, None if gutlb else cfg.num_chunks
        self.torch_chunking = cfg.chunking == "torch"

    def forward(self, x, mask) -> EncoderOutput:
        h, mask, end_at = self.readout.wrap(x, mask)  # (N, S, D)
        n, s, d = h.shape
        k = self.num_chunks or (-(-s // self.g) if self.torch_chunking else None)  # torch.chunk(H, k)
        g = -(-s // k) if k else self.g  # k chunks of ceil(S / k) (Algorithm 2), or chunks of g
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

                def step(cc, ss, cm=cm, mem=mem):
                    return self.layers[0](cc, cm, mem, self.causal, ss if self.kv_from_state else None)  # (N, g, D)

                res = self.halting(step, c, cm)
                c = res.states  # S_L, (N, g, D)
                acts.append(res.per_seq * cm.any(1))  # (N,): 0 for a chunk without real tokens
                depths.append((res.depth * res.units).sum())  # no boolean indexing: no host read per chunk
                units.append(res.units.sum())
                calls.append(res.calls)
            keep = cm.any(1)[:, None, None]  # (N, 1, 1): chunk holds real tokens
            memory = torch.where(keep, self.update(memory, c, cm), memory)  # M^{t+1}, (N, slots, D)
            outs.append(c)
        out = torch.cat(outs, dim=1)[:, :s]  # (N, S, D)
        if self.from_memory:
            slots = self.mem_norm(memory)  # (N, slots, D): LayerNorm(final memory)
            vec = slots[:, -1] if self.last_slot else slots.mean(1)  # (N, D): last slot (code's "cls"/"end") or mean
        else:
            vec = self.readout.pool(self.norm(out), mask, end_at)
        if self.halting is None:
            return EncoderOutput(vec)
        n_chunks = torch.stack([c.any(1) for c in mp.split(g, dim=1)]).sum(0)  # (N,) chunks with real tokens
        per_seq = torch.stack(acts).sum(0) / n_chunks.clamp_min(1)  # (N,)
        act = per_seq.sum() / (n_chunks > 0).sum().clamp_min(1)  # per sequence over its chunks, then the batch
        mean_layers, act_value = torch.stack([torch.stack(depths).sum() / torch.stack(units).sum(),
                                              act.detach().float()]).tolist()  # one host read per forward
        stats = {"mean_layers": mean_layers, "max_layers_used": float(max(calls)), "act_loss": act_value}
        return EncoderOutput(vec, act, stats)

    def artifacts(self) -> dict:
        return {} if self.halting is None else self.halting.histogram("chunk")


register_encoder("tlb", TLBConfig, LatentBottleneckEncoder,
                 "Temporal Latent Bottleneck: chunk-wise recurrence with memory slots (Algorithm 2), mean pooling.")
register_encoder("gutlb", GUTLBConfig, LatentBottleneckEncoder,
                 "Gated Universal Transformer Latent Bottleneck: TLB with a halting GUT per chunk (Algorithm 4).",
                 aux_loss_key="halt_loss_weight")
