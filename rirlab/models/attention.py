"""Pre-LayerNorm Transformer pieces (Recurrent Transformers paper §3, eq. 1-4; gated FFN eq. 9-11).

Relative positions (``positions``): xPos (the paper §6.1 and its public code; default), RoPE, or none.
xPos is RoPE times a per-dimension scale zeta_i^((n - c)/gamma) on the query at position n and
zeta_i^(-(m - c)/gamma) on the key at m, zeta_i = (2i + 0.4 Dh) / (1.4 Dh), gamma = ``xpos_scale_base`` (512).
The paper's code applies it unchanged to bidirectional encoders, with positions 0..len-1 shifted by
-S // 2 (half the padded length) before scaling, c = S // 2 above, which keeps each factor near 1 while the score q.k only sees zeta^((n - m)/gamma) (c cancels); keys to the right of a query
are thus up-weighted, as in the code. Memory (cross) attentions of TLB/GUTLB use no positions; TLB/GUTLB
chunks use chunk-local positions. With zeta = 1 xPos is exactly RoPE (tests/models/test_transformer.py).
Other defaults follow the paper's public code (JRC1995/InvestigatingRecurrentTransformers), each a config value
with the alternative beside it:
- ``attn_bias`` (False): no bias on the Q/K/V/output projections.
- ``attn_dropout`` (None = ``dropout``): dropout on the attention weights, apart from the residual dropout.
- ``gate_norm`` ("shared"): GatedFeedForward's gate reads the feed-forward's LayerNorm; "own": its own.
- ``ff_dropout`` ("code"): Linear, Dropout, GELU, Linear, Dropout in the feed-forward and in the gate (whose
  second dropout acts on the logits before the sigmoid); "post_gelu": dropout after the GELU and on the
  output branch, none in the gate (rirlab before).
- ``init_scheme`` ("code"): token embeddings N(0, 0.02^2), Xavier-uniform with gain 1/sqrt(2) on Q/K/V and 1 on
  the output projection, Xavier-uniform feed-forward and gate weights with biases N(0, 1e-6^2); "torch":
  PyTorch's defaults for all of these. Either way START/END are drawn from N(0, 1) and TLB's M^0 is zero (the
  code's choices; tlb.py).
- ``final_norm`` (False): no LayerNorm before pooling (rirlab used one before, in neither paper nor code).
- ``head_dim`` (None = hidden_size / num_heads): the code sets heads and head size apart; Q/K/V project d to
  num_heads x head_dim and the output projects back to d. Only its LRA Image config makes them differ
  (8 heads of 8 at d = 128).
- ``pooling`` (None = the model's: mean, END for GUT/GUTLB, Appendix A): the sentence vector is the mean over
  the valid positions ("mean"), the END state ("end") or the START state ("start", the code's "cls", which
  its LRA Image configs use for Transformer and UT). TLB/GUTLB with ``readout: memory`` read the memory instead.
- ``head`` ("code"): the task head is the code's Linear-ReLU-Linear without dropout (one logit for two classes, as
  its sigmoid; rirlab.models.heads.CodeHead), on the sentence vector, the pair features or every token (flip-flop,
  whose labels are the read bits, two classes, under its task value ``read_target: bit``: the code's one sigmoid);
  "gelu": rirlab's MLP with dropout and GELU (one linear layer per token for language modelling), as before.
The paper's code trained under float16 autocast with a grad scaler: the training value ``precision: fp16`` (``bf16``
for bfloat16 autocast; halting arithmetic stays fp32 under both); the default stays fp32, which CPUs run faster and
which the papers' RvNN baselines used.

Attention runs through ``torch.nn.functional.scaled_dot_product_attention``.

``RTConfig`` holds the settings every recurrent-Transformer model shares (the plain Transformer, UT, GUT, TLB
and GUTLB extend it). Defaults follow the paper's Appendix A: LRA-ListOps Transformer sizes (d = 512, 8 heads,
d_ff = 4d, 6 layers). No model is registered here: transformer.py, gut.py and tlb.py are the families.
"""

from __future__ import annotations

import functools
import math
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register

KINDS = ("classify", "pair", "lm")  # task kinds every recurrent-Transformer model supports


@dataclass(config=STRICT)
class RTConfig:
    """Settings shared by every recurrent-Transformer model."""

    hidden_size: int = Field(512, ge=2)
    num_heads: int = Field(8, ge=1)
    ff_mult: int = Field(4, ge=1)  # d_ff = ff_mult * hidden_size (and d_gff = d_ff)
    dropout: float = Field(0.1, ge=0, lt=1)
    in_dropout: Optional[float] = Field(None, ge=0, lt=1)  # on the embedded tokens (heads.TaskModel); None = dropout
    causal: Optional[bool] = None  # None: causal exactly for language-modelling tasks (flip-flop)
    positions: Literal["xpos", "rope", "none"] = "xpos"  # relative positions in self-attention (module doc)
    xpos_scale_base: float = Field(512.0, gt=0)  # gamma of xPos
    attn_bias: bool = False  # bias on the Q/K/V/output projections (the paper's code: none)
    attn_dropout: Optional[float] = Field(None, ge=0, lt=1)  # dropout on attention weights; None = dropout
    final_norm: bool = False  # a LayerNorm on the states before pooling (neither paper nor code)
    gate_norm: Literal["shared", "own"] = "shared"  # GatedFeedForward: the gate reads the FFN's LayerNorm (code)
    ff_dropout: Literal["code", "post_gelu"] = "code"  # feed-forward/gate dropout placement (module doc)
    init_scheme: Literal["code", "torch"] = "code"  # the paper's code's initialisation or PyTorch's (module doc)
    head_dim: Optional[int] = Field(None, ge=2)  # per-head size; None = hidden_size / num_heads (module doc)
    pooling: Optional[Literal["mean", "end", "start"]] = None  # sentence readout; None = the model's (module doc)
    head: Literal["code", "gelu"] = "code"  # task head: the code's Linear-ReLU-Linear, or rirlab's before (module doc)

    @model_validator(mode="after")
    def _heads(self):
        if self.head_dim is not None:
            if self.head_dim % 2:
                raise ValueError(f"head_dim {self.head_dim} must be even (RoPE / xPos rotate pairs of dimensions)")
            return self
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"hidden_size {self.hidden_size} must split into num_heads {self.num_heads} heads "
                             f"of even size (RoPE); pick e.g. num_heads={_heads_for(self.hidden_size)}, or set "
                             f"head_dim")
        return self

    @property
    def d_ff(self) -> int:
        return self.ff_mult * self.hidden_size


def _heads_for(d: int) -> int:
    return next(h for h in (8, 4, 2, 1) if d % h == 0 and (d // h) % 2 == 0) if d % 2 == 0 else 1


def causal_for(cfg: RTConfig, info) -> bool:
    """Whether attention is causal on this task: ``cfg.causal``, by default exactly for language modelling."""
    lm = info.kind == "lm"
    if lm and cfg.causal is False:
        raise UserError("causal=false on a language-modelling task would let tokens see the future; "
                        "drop it or set causal=true")
    return lm if cfg.causal is None else cfg.causal


def task_model(encoder_cls, cfg: RTConfig, info) -> TaskModel:
    """``encoder_cls(cfg, causal, lm)`` under the task's head: the builder of every recurrent-Transformer model.

    ``init_scheme="code"``: token embeddings N(0, 0.02^2) as the paper's code (the padding row stays zero, but
    where it is a real token, ``info.pad_is_token``: the flip-flop code's "w", drawn too, as its ``normal_`` after
    ``padding_idx``); a task's pretrained vectors (an embedding that is not a plain ``nn.Embedding``) are left as
    they are."""
    model = TaskModel(encoder_cls(cfg, causal_for(cfg, info), info.kind == "lm"), info, cfg)
    if cfg.init_scheme == "code" and isinstance(model.embed, nn.Embedding):
        with torch.no_grad():
            nn.init.normal_(model.embed.weight, std=0.02)
            if model.embed.padding_idx is not None and not getattr(info, "pad_is_token", False):
                model.embed.weight[model.embed.padding_idx].zero_()
    return model


def register_encoder(name: str, config: type, encoder_cls, doc: str, **entry) -> None:
    """Register ``name`` as ``encoder_cls`` (built from ``config``) under the task's head, for every task kind;
    ``entry``: the other keywords of :func:`rirlab.models.registry.register`."""
    register(name, config, kinds=KINDS, doc=doc, **entry)(functools.partial(task_model, encoder_cls))


def xpos_zeta(dh: int, device=None) -> torch.Tensor:
    """xPos's per-frequency scale zeta_i = (2i + 0.4 Dh) / (1.4 Dh), i = 0..Dh/2-1."""
    return (torch.arange(0, dh, 2, device=device, dtype=torch.float32) + 0.4 * dh) / (1.4 * dh)


def rotate(x: torch.Tensor, zeta: Optional[torch.Tensor] = None, base: float = 512.0,
           downscale: bool = False) -> torch.Tensor:
    """Apply RoPE to (N, H, S, Dh) with positions 0..S-1 (Dh even); with ``zeta`` (Dh/2,), xPos: the rotated pair i
    times zeta_i^((n - S//2)/base) (queries) or its inverse (``downscale``, keys), as the paper's code."""
    s, dh = x.size(-2), x.size(-1)
    # angles in fp32 (fp64 for fp64 inputs: fp32 sin/cos differ between CPU and CUDA by an ulp, which a float64
    # comparison of the two devices would otherwise see)
    dt = torch.promote_types(x.dtype, torch.float32)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dh, 2, device=x.device, dtype=dt) / dh))  # (Dh/2,)
    pos = torch.arange(s, device=x.device, dtype=dt)  # (S,)
    ang = pos[:, None] * inv_freq  # (S, Dh/2)
    cos, sin = ang.cos(), ang.sin()
    if zeta is not None:
        scale = zeta.to(x.device, dt)[None, :] ** ((pos[:, None] + float(-s // 2)) / base)  # (S, Dh/2)
        scale = 1 / scale if downscale else scale
        cos, sin = cos * scale, sin * scale
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (N, H, S, Dh/2) each
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (N, H, S, Dh/2, 2)
    return out.flatten(-2)  # (N, H, S, Dh)


def attention_mask(key_mask: Optional[torch.Tensor], sq: int, causal: bool, device) -> Optional[torch.Tensor]:
    """Boolean SDPA mask (N, 1, Sq, Sk) or (1, 1, Sq, Sk); True = may attend. No query row is left empty."""
    mask = None
    if key_mask is not None:
        empty = ~key_mask.any(dim=1, keepdim=True)  # (N, 1): sequence (or chunk) with no valid key
        mask = (key_mask | empty)[:, None, None, :]  # (N, 1, 1, Sk)
    if causal:
        sk = key_mask.size(1) if key_mask is not None else sq
        tri = torch.ones(sq, sk, dtype=torch.bool, device=device).tril()[None, None]  # (1, 1, Sq, Sk)
        if mask is None:
            return tri
        mask = mask & tri  # (N, 1, Sq, Sk)
        mask = mask | (tri & ~mask.any(-1, keepdim=True))  # a row with no valid key falls back to causal
    return mask


class MultiHeadAttention(nn.Module):
    """Standard multi-head attention MHA(Q, K, V) with xPos / RoPE / no positions (self-attention only).

    ``positions``: "xpos", "rope" or "none" (``rotary=False`` = "none"); ``bias``: on the projections;
    ``code_init``: Xavier-uniform, gain 1/sqrt(2) on Q/K/V and 1 on the output (the paper's code).
    """

    def __init__(self, d: int, heads: int, dropout: float, rotary: bool = True, positions: str = "rope",
                 bias: bool = True, xpos_base: float = 512.0, code_init: bool = False,
                 head_dim: Optional[int] = None):
        super().__init__()
        self.h, self.p = heads, dropout
        self.dh = head_dim or d // heads
        inner = heads * self.dh
        self.positions = positions if rotary else "none"
        self.xpos_base = xpos_base
        self.q = nn.Linear(d, inner, bias=bias)
        self.kv = nn.Linear(d, 2 * inner, bias=bias)
        self.o = nn.Linear(inner, d, bias=bias)
        self.register_buffer("zeta", xpos_zeta(self.dh), persistent=False)
        if code_init:
            nn.init.xavier_uniform_(self.q.weight, gain=1 / math.sqrt(2))
            for w in self.kv.weight.chunk(2, dim=0):  # K and V, each as its own d -> inner projection
                with torch.no_grad():
                    w.copy_(nn.init.xavier_uniform_(torch.empty_like(w), gain=1 / math.sqrt(2)))
            nn.init.xavier_uniform_(self.o.weight)

    def forward(self, q_in, kv_in, key_mask=None, causal: bool = False) -> torch.Tensor:
        n, sq, _ = q_in.shape
        sk, dh = kv_in.size(1), self.dh
        q = self.q(q_in).view(n, sq, self.h, dh).transpose(1, 2)  # (N, H, Sq, Dh)
        k, v = self.kv(kv_in).view(n, sk, 2, self.h, dh).permute(2, 0, 3, 1, 4)  # 2 x (N, H, Sk, Dh)
        if self.positions == "rope":
            q, k = rotate(q), rotate(k)
        elif self.positions == "xpos":
            q = rotate(q, self.zeta, self.xpos_base)
            k = rotate(k, self.zeta, self.xpos_base, downscale=True)
        mask = attention_mask(key_mask, sq, causal, q_in.device)
        p = self.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # (N, H, Sq, Dh)
        return self.o(out.transpose(1, 2).reshape(n, sq, self.h * dh))  # (N, Sq, D)


def attn_options(cfg: RTConfig) -> dict:
    """Keyword arguments of :class:`Attention` / :class:`Block` from a model config."""
    return {"positions": cfg.positions, "bias": cfg.attn_bias, "xpos_base": cfg.xpos_scale_base,
            "code_init": cfg.init_scheme == "code", "attn_dropout": cfg.attn_dropout, "head_dim": cfg.head_dim}


class Attention(nn.Module):
    """Attention(Q, K, V) = MHA(LN(Q), LN(K), LN(V)) + Q, eq. 3 (pre-LN with residual).

    ``attn_dropout`` (None = ``dropout``) on the attention weights, ``dropout`` on the output branch."""

    def __init__(self, d: int, heads: int, dropout: float, rotary: bool = True, positions: str = "rope",
                 bias: bool = True, xpos_base: float = 512.0, code_init: bool = False,
                 attn_dropout: Optional[float] = None, head_dim: Optional[int] = None):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.mha = MultiHeadAttention(d, heads, dropout if attn_dropout is None else attn_dropout, rotary,
                                      positions, bias, xpos_base, code_init, head_dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, q, kv=None, key_mask=None, causal: bool = False) -> torch.Tensor:
        lq = self.ln(q)
        lkv = lq if kv is None else self.ln(kv)
        return self.drop(self.mha(lq, lkv, key_mask, causal)) + q  # (N, Sq, D)


def code_linear_init(*layers: nn.Linear) -> None:
    """The paper's code's feed-forward initialisation: Xavier-uniform weights (gain 1), biases N(0, 1e-6^2)."""
    for lin in layers:
        nn.init.xavier_uniform_(lin.weight)
        nn.init.normal_(lin.bias, std=1e-6)


class FeedForward(nn.Module):
    """H = GeLU(LN(A) W1 + b1) W2 + b2 + A, eq. 4.

    ``dropout_at``: "code" -- dropout on LN(A) W1 + b1 before the GeLU and on the output branch (the paper's
    code: Linear, Dropout, GELU, Linear, Dropout); "post_gelu" -- after the GeLU and on the output branch
    (rirlab before). ``code_init``: :func:`code_linear_init` on W1, W2; else PyTorch's default."""

    def __init__(self, d: int, d_ff: int, dropout: float, dropout_at: str = "post_gelu", code_init: bool = False):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.w1 = nn.Linear(d, d_ff)
        self.w2 = nn.Linear(d_ff, d)
        self.drop = nn.Dropout(dropout)
        self.pre_gelu = dropout_at == "code"
        if code_init:
            code_linear_init(self.w1, self.w2)

    def forward(self, a: torch.Tensor, la: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``la``: LN(A) when the caller has it (a gate sharing this LayerNorm)."""
        u = self.w1(self.ln(a) if la is None else la)  # (N, S, D_ff)
        u = F.gelu(self.drop(u)) if self.pre_gelu else self.drop(F.gelu(u))
        return self.drop(self.w2(u)) + a  # (N, S, D)


class GatedFeedForward(nn.Module):
    """H_l = G * FeedForward(A_l) + (1 - G) * H_{l-1}, G = sigmoid(GeLU(LN(A_l) Wg1 + bg1) Wg2 + bg2), eq. 9-11.

    ``shared_norm`` (the paper's code): the gate reads the feed-forward's LayerNorm; else its own.
    ``dropout_at`` "code": the gate has the feed-forward's dropouts too, before its GeLU and on its logits
    (before the sigmoid), as the code's FFN_gate; "post_gelu": no dropout in the gate (rirlab before).
    ``code_init``: :func:`code_linear_init` on the gate's and the feed-forward's linear maps."""

    def __init__(self, d: int, d_ff: int, dropout: float, shared_norm: bool = False, dropout_at: str = "post_gelu",
                 code_init: bool = False):
        super().__init__()
        self.ff = FeedForward(d, d_ff, dropout, dropout_at, code_init)
        self.shared = shared_norm
        self.ln = self.ff.ln if shared_norm else nn.LayerNorm(d)
        self.g1 = nn.Linear(d, d_ff)  # d_gff = d_ff (Appendix A)
        self.g2 = nn.Linear(d_ff, d)
        self.drop = nn.Dropout(dropout) if dropout_at == "code" else nn.Identity()
        if code_init:
            code_linear_init(self.g1, self.g2)

    def gate(self, a: torch.Tensor, la: Optional[torch.Tensor] = None) -> torch.Tensor:
        u = self.g1(self.ln(a) if la is None else la)  # (N, S, D_ff)
        return torch.sigmoid(self.drop(self.g2(F.gelu(self.drop(u)))))  # (N, S, D), eq. 10

    def forward(self, h_prev: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        la = self.ln(a) if self.shared else None  # one LayerNorm for both (N, S, D)
        g = self.gate(a, la)
        return g * self.ff(a, la) + (1 - g) * h_prev  # eq. 9, 11


def ff_options(cfg: "RTConfig", gate: bool = False) -> dict:
    """Keyword arguments of :class:`FeedForward` (``gate``: :class:`GatedFeedForward`) from a model config."""
    out = {"dropout_at": cfg.ff_dropout, "code_init": cfg.init_scheme == "code"}
    return {**out, "shared_norm": cfg.gate_norm == "shared"} if gate else out


class Block(nn.Module):
    """One Transformer layer: A = Attention(H, KV, KV) (eq. 1, 3), then FeedForward (eq. 2, 4) or GatedFeedForward.

    ``ff``: keyword arguments of the feed-forward (:func:`ff_options`); ``attn``: of the attention
    (:func:`attn_options`)."""

    def __init__(self, d: int, heads: int, d_ff: int, dropout: float, gate: bool = False,
                 ff: Optional[dict] = None, **attn):
        super().__init__()
        self.attn = Attention(d, heads, dropout, **attn)
        ff = dict(ff or {})
        if not gate:
            ff.pop("shared_norm", None)
        self.ff = GatedFeedForward(d, d_ff, dropout, **ff) if gate else FeedForward(d, d_ff, dropout, **ff)
        self.gated = gate

    def forward(self, h, mask=None, causal: bool = False, kv=None) -> torch.Tensor:
        a = self.attn(h, kv, mask, causal)  # (N, S, D)
        return self.ff(h, a) if self.gated else self.ff(a)  # (N, S, D)


def add_start_end(x: torch.Tensor, mask: torch.Tensor, start: torch.Tensor, end: torch.Tensor):
    """Wrap each sequence as [START] x [END] (Appendix A); END goes right after the last real token.

    x: (N, S, D), mask: (N, S) prefix-valid. Returns (N, S+2, D), mask (N, S+2), END index (N,).
    """
    n, s, d = x.shape
    lengths = mask.sum(1)  # (N,)
    out = torch.cat([start.expand(n, 1, d), x * mask[..., None], x.new_zeros(n, 1, d)], dim=1)  # (N, S+2, D)
    end_at = lengths + 1  # (N,)
    hit = torch.arange(s + 2, device=x.device)[None, :] == end_at[:, None]  # (N, S+2)
    out = torch.where(hit[..., None], end.expand(n, s + 2, d), out)  # (N, S+2, D)
    new_mask = torch.arange(s + 2, device=x.device)[None, :] <= end_at[:, None]  # (N, S+2)
    return out, new_mask, end_at


def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over valid positions: (N, S, D), (N, S) -> (N, D)."""
    m = mask[..., None].to(h.dtype)  # (N, S, 1)
    return (h * m).sum(1) / m.sum(1).clamp_min(1.0)  # (N, D)


def cumulative_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Causal mean: position t gets the mean of valid h_0..h_t (Appendix A). (N, S, D) -> (N, S, D)."""
    m = mask[..., None].to(h.dtype)  # (N, S, 1)
    return (h * m).cumsum(1) / m.cumsum(1).clamp_min(1.0)  # (N, S, D)


class Readout(nn.Module):
    """START/END wrapping of the input and pooling of the output (Appendix A).

    Sentence tasks: [START] x [END], then mean pooling over valid positions (``pool="mean"``), the state at
    the END position (``pool="end"``, GUT/GUTLB) or at the START position (``pool="start"``, the code's "cls").
    Language modelling (``lm``): no wrapping, token states out.
    """

    def __init__(self, d: int, lm: bool, pool: str):
        super().__init__()
        self.lm, self.how = lm, pool
        if not lm:
            self.start = nn.Parameter(torch.randn(1, 1, d))  # N(0, 1), as the paper's code
            self.end = nn.Parameter(torch.randn(1, 1, d))

    def wrap(self, x: torch.Tensor, mask: torch.Tensor):
        if self.lm:
            return x, mask, None
        return add_start_end(x, mask, self.start, self.end)  # (N, S+2, D), (N, S+2), (N,)

    def pool(self, h: torch.Tensor, mask: torch.Tensor, end_at) -> torch.Tensor:
        if self.lm:
            return h  # (N, S, D)
        if self.how == "end":
            return h[torch.arange(h.size(0), device=h.device), end_at]  # (N, D)
        if self.how == "start":
            return h[:, 0]  # (N, D)
        return masked_mean(h, mask)  # (N, D)
