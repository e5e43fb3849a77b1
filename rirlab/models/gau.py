"""``gau``: the GAU block of EBT-GAU (EBT paper App. F.2 eq. 8-15) and the GAU sentence-interaction baseline
(eq. 16-20).

GAU block (Gated Attention Unit, Hua et al., "Transformer Quality in Linear Time", ICML 2022, arXiv:2202.10447, as
the EBT paper specialises it): queries x (n, d), keys and values p (l, d), a boolean mask G (n, l):

    x' = LN(x W_init + b_init); p' = LN(p W_init + b_init)                                  (8)
    u = SiLU(x' W_u + b_u); v = SiLU(p' W_v + b_v)                                           (9)
    q = z_q * SiLU(x' W_z + b_z) + zb_q; k = z_k * SiLU(p' W_z + b_z) + zb_k                 (10)
    A = Softmax((q k^T + pos) / sqrt(2 d_h), mask = G)                                        (11)
    v' = A v; o = Dropout((u * v') W_o + b_o)                                                 (12-13)
    g = Sigmoid([o; x] W_gate + b_gate); out = g * o + (1 - g) * x                           (14-15)

``pos``: a relative-position term, clipped at a receptive field k (Shaw et al. 2018): k = 5 over token positions
for ordinary blocks, k = 10 over tree-height differences for parent attention (EBT App. G). Two forms
(``gau_pos``): ``"query"`` (default, the authors' code): pos_ij = q^p_i . e_{clip(r_ij)}, with a third offset-scale
q^p of the shared z and a learned table e (d_h wide); ``"bias"``: a learned scalar per clipped distance (Raffel
et al., T5, as EBT §4 words it). Scale (``gau_scale``): ``"2dh"`` (default, the authors' code) sqrt(2 d_h), or
``"2d"`` sqrt(2 d) as eq. 11 prints it (d = hidden size; the two differ once d != d_h, e.g. d = 300 on NLI).

Interaction setup (eq. 16-20): inp = [CLS + seg1; x1 + seg1; SEP; CLS + seg2; x2 + seg2] (16), r = GAUStack(inp)
(17), alpha = Softmax(GELU(r W1 + b1) W2 + b2) over the valid positions (18), cls' = sum_i alpha_i r_i (19); the
task head (:class:`rirlab.models.heads.MLP`, GELU with dropout) is eq. 20. Token positions count the valid tokens
only (CLS1 = 0, x1 = 1..n1, SEP, CLS2, x2 follow on), so padding changes nothing. Where the paper is silent we
follow the authors' code: a Linear + LayerNorm on the word vectors before eq. 16 (as eq. 17 of the tree models),
CLS and SEP drawn from N(0, 1), segment embeddings and offsets zero, scales z from N(0, 0.02^2). A single
sequence (a classification task) is [CLS + seg1; x + seg1].

GAU baseline (``gau``): GAUStack = ``num_layers`` = 5 GAU blocks with unshared weights (EBT App. G).
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register

GAUPos = Literal["query", "bias"]  # relative-position term of eq. 11: the authors' code / T5 scalar bias
GAUScale = Literal["2dh", "2d"]  # eq. 11 scale: sqrt(2 d_h) (the authors' code) / sqrt(2 d) (the paper's text)


@dataclass(config=STRICT)
class GAUConfig:
    """GAU blocks (EBT App. F.2, G): head size 128, dropout 0.1 after W_o, relative positions with receptive field 5;
    hidden 300 as the papers' NLI/QQP models (GloVe 840B-300d)."""

    hidden_size: int = Field(300, ge=2)
    dropout: float = Field(0.1, ge=0, lt=1)
    in_dropout: Optional[float] = Field(None, ge=0, lt=1)  # on the embedded tokens (heads.TaskModel); None = dropout
    gau_head_size: int = Field(128, ge=1)  # d_h; the block uses min(d_h, hidden_size) as the authors' code
    gau_rel_k: int = Field(5, ge=1)  # receptive field of token relative positions
    gau_pos: GAUPos = "query"
    gau_scale: GAUScale = "2dh"


@dataclass(config=STRICT)
class GAUBaselineConfig(GAUConfig):
    """The GAU baseline: a stack of unshared GAU blocks over the concatenated pair (EBT App. G: five)."""

    num_layers: int = Field(5, ge=1)


class GAUBlock(nn.Module):
    """GAUBlock(x, p, G), eq. 8-15; ``rel`` (n, l) long indexes the ``n_rel`` relative-position entries."""

    def __init__(self, cfg: GAUConfig, n_rel: int, uniform_empty: bool = False):
        super().__init__()
        self.uniform_empty = uniform_empty  # a query with no key: uniform over every key slot (the authors' PGAU)
        d = cfg.hidden_size
        self.dh = min(cfg.gau_head_size, d)
        self.init = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d))  # eq. 8
        self.wu, self.wv = nn.Linear(d, 2 * d), nn.Linear(d, 2 * d)  # eq. 9
        self.wz = nn.Linear(d, self.dh)  # eq. 10
        self.z = nn.Parameter(torch.randn(3, self.dh) * 0.02)  # z_q, z_q^pos, z_k (the authors' code: N(0, 0.02^2))
        self.zb = nn.Parameter(torch.zeros(3, self.dh))
        self.query_pos = cfg.gau_pos == "query"
        self.pos = nn.Parameter(torch.randn(n_rel, self.dh) if self.query_pos else torch.zeros(n_rel))
        self.wo = nn.Linear(2 * d, d)  # eq. 13
        self.drop = nn.Dropout(cfg.dropout)
        self.gate = nn.Linear(2 * d, d)  # eq. 14
        self.scale = math.sqrt(2 * (self.dh if cfg.gau_scale == "2dh" else d))

    def keys(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Values v (..., l, 2D) and keys k (..., l, dh) of p (..., l, D), eq. 8-10: computed once where p is fixed
        across applications of the block (parent attention's non-terminals)."""
        pn = self.init(p)  # (..., l, D) eq. 8
        return F.silu(self.wv(pn)), F.silu(self.wz(pn)) * self.z[2] + self.zb[2]  # eq. 9, 10

    def forward(self, x: torch.Tensor, p: Optional[torch.Tensor], mask: torch.Tensor, rel: torch.Tensor,
                kv: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """x (..., n, D) queries, p (..., l, D) keys/values (None: p = x; or their :meth:`keys` given as ``kv``),
        mask (..., n, l) bool, rel (..., n, l). Leading dims of x may be 1 where mask's are larger (broadcast)."""
        xn = self.init(x)  # (..., n, D) eq. 8
        u = F.silu(self.wu(xn))  # (..., n, 2D) eq. 9
        zx = F.silu(self.wz(xn))  # (..., n, dh)
        q = zx * self.z[0] + self.zb[0]  # (..., n, dh) eq. 10
        if kv is not None:
            v, k = kv  # (..., l, 2D), (..., l, dh)
        elif p is None:
            v, k = F.silu(self.wv(xn)), zx * self.z[2] + self.zb[2]  # (..., n, 2D), (..., n, dh)
        else:
            v, k = self.keys(p)  # (..., l, 2D), (..., l, dh)
        energy = q @ k.transpose(-1, -2)  # (..., n, l)
        if self.query_pos:  # q^p_i . e_r, gathered at each pair's clipped distance
            qp = zx * self.z[1] + self.zb[1]  # (..., n, dh)
            energy = energy + (qp @ self.pos.t()).expand(*rel.shape[:-1], -1).gather(-1, rel)  # (..., n, l)
        else:
            energy = energy + self.pos[rel]  # (..., n, l)
        if self.uniform_empty:  # masked scores -9999 as the authors' PGAU: a query with no key averages every slot
            attn = F.softmax((energy / self.scale).masked_fill(~mask, -9999.0), dim=-1)  # (..., n, l) eq. 11
        else:  # a query with no key gets v' = 0
            attn = F.softmax((energy / self.scale).masked_fill(~mask, -1e9), dim=-1) * mask  # (..., n, l) eq. 11
        o = self.drop(self.wo(u * (attn @ v)))  # (..., n, D) eq. 12-13
        g = torch.sigmoid(self.gate(torch.cat([o, x.expand_as(o)], dim=-1)))  # (..., n, D) eq. 14
        return g * o + (1 - g) * x  # (..., n, D) eq. 15


def relative_positions(pos: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (N, S, S) into 2k + 1 entries of the clipped distance pos_j - pos_i in [-k, k] (pos (N, S))."""
    return (pos[:, None, :] - pos[:, :, None]).clamp(-k, k) + k  # (N, S, S)


class Interaction(nn.Module):
    """Eq. 16-19 (and 24-25): [cls + seg1; x1 + seg1; SEP; cls2 + seg2; x2 + seg2] through ``stack``, pooled.

    ``stack``: the GAU blocks applied in order (the same block several times where weights are shared); ``pair``:
    whether the task gives two sequences (a SEP vector only then).
    """

    def __init__(self, cfg: GAUConfig, stack: list[nn.Module], pair: bool = True):
        super().__init__()
        d = cfg.hidden_size
        self.blocks = nn.ModuleList(dict.fromkeys(stack))  # each distinct block once (parameters)
        self.order = [list(self.blocks).index(b) for b in stack]
        self.rel_k = cfg.gau_rel_k
        self.sep = nn.Parameter(torch.randn(d)) if pair else None
        self.seg = nn.Parameter(torch.zeros(2, d))
        self.energy = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))  # eq. 18

    def forward(self, segments: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """segments: one or two (cls (N, D), x (N, S_i, D), mask (N, S_i)); returns cls' (N, D), eq. 19."""
        parts, valid = [], []
        for i, (cls, x, mask) in enumerate(segments):
            if i:  # SEP between the two sequences
                parts.append(self.sep.expand(x.size(0), 1, -1))  # (N, 1, D)
                valid.append(mask.new_ones(x.size(0), 1))
            parts.append(torch.cat([cls[:, None], x], dim=1) + self.seg[i])  # (N, 1 + S_i, D)
            valid += [mask.new_ones(x.size(0), 1), mask]
        h, valid = torch.cat(parts, dim=1), torch.cat(valid, dim=1)  # (N, S, D), (N, S)
        pos = valid.long().cumsum(1) - 1  # (N, S) positions of the valid tokens, padding skipped
        rel = relative_positions(pos, self.rel_k)  # (N, S, S)
        keys = valid[:, None, :].expand(-1, h.size(1), -1)  # (N, S, S) every query sees the valid keys
        for i in self.order:
            h = self.blocks[i](h, None, keys, rel)  # (N, S, D)
        e = self.energy(h).squeeze(-1).masked_fill(~valid, float("-inf"))  # (N, S)
        return (F.softmax(e, dim=-1).unsqueeze(-1) * h).sum(1)  # (N, D) eq. 18-19


class GAUEncoder(nn.Module):
    """GAU baseline (EBT App. F.2 eq. 16-19): word vectors -> Linear + LN -> [CLS; x] per sequence -> unshared stack.

    ``joint_pair``: :class:`~rirlab.models.heads.TaskModel` calls :meth:`pair` with both sequences of a pair task.
    """

    joint_pair = True

    def __init__(self, cfg: GAUBaselineConfig, pair: bool = True):
        super().__init__()
        d = cfg.hidden_size
        self.content = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d))
        self.cls = nn.Parameter(torch.randn(d))
        blocks = [GAUBlock(cfg, 2 * cfg.gau_rel_k + 1) for _ in range(cfg.num_layers)]
        self.interaction = Interaction(cfg, blocks, pair)

    def segment(self, x: torch.Tensor, mask: torch.Tensor):
        return self.cls.expand(x.size(0), -1), self.content(x), mask  # (N, D), (N, S, D), (N, S)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        return EncoderOutput(self.interaction([self.segment(x, mask)]))  # (N, D)

    def pair(self, x1, mask1, x2, mask2) -> EncoderOutput:
        return EncoderOutput(self.interaction([self.segment(x1, mask1), self.segment(x2, mask2)]))  # (N, D)


@register("gau", GAUBaselineConfig)
def gau(cfg: GAUBaselineConfig, info):
    """GAU baseline: five unshared GAU blocks over the concatenated pair (EBT paper App. F.2, eq. 16-20)."""
    return TaskModel(GAUEncoder(cfg, info.kind == "pair"), info, cfg)
