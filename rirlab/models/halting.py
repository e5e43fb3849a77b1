"""Dynamic halting over repeated applications of one shared block (Recurrent Transformers paper §4.1, §5.1).

Token-level halting (UT, Algorithm 1, eq. 5-7) and global mean-pooled halting
(GUT, Algorithm 3, eq. 12-16) with the transition-aware input
[mean(H_{l-1}); mean(H_l)] (eq. 17) are one loop that differs only in what the
halting unit reads:

    token-level       h_{l-1}^(t)               -> one halting distribution per position   (N, S)
    global            mean(H_{l-1})             -> one per sequence                        (N, 1)
    global + causal   cumulative mean up to t   -> one per position, no look-ahead         (N, S)

At layer l (run only for units that have not halted) alpha_hat_{l-1} = halt(.),
alpha_{l-1} = alpha_hat_{l-1} prod_{l'<l-1} (1 - alpha_hat_l') (eq. 6, 15) and
S_l = (1 - sum_{l'<l} alpha_l') H_l + sum_{l'<l} alpha_l' H_l' (eq. 7, 16): the weights alpha_0..alpha_{l-1}
plus the remainder on H_l form a distribution over the layers kept. A unit that has halted is frozen
(h_l = h_{l-1}, s_l = s_{l-1}); the loop stops once every unit of the batch has halted.

The paper's public code, whose semantics are the defaults here:
- The threshold-crossing layer is discarded: the layer in which the cumulative alpha reaches alpha_thresh is
  computed, then the unit's state, H and penalty are reset to the previous layer's (Algorithm 1's sum runs
  to l - 1); a unit can thus keep 0 layers (S = H_0). ``keep_crossing_layer=True`` keeps it instead.
- Per-example depth cap: a unit keeps at most (positions its halting loop sees + ``depth_cap_offset``) layers
  (UT/GUT: real tokens + START/END + 1; TLB/GUTLB: the chunk's real tokens + 1); None = no cap.
- L_ACT (eq. 8) = sum_j alpha_j * (j + ``act_index_from``) over kept layers j = 0..k-1, plus the remainder
  (1 - sum alpha) times k, the number of kept layers (without it the penalty would be minimised by never
  halting). The code charges alpha_j as j + 1 (``act_index_from=1``); eq. 8 read literally charges j (0).
  It is averaged over positions (eq. 8: 1/T sum_t) and then over the batch.
- ``mean_layers`` / the depth histogram count kept layers.

``HaltConfig`` (the UT model's config) holds the halting settings every halting model shares; defaults
follow the paper's Appendix A: alpha_thresh = 0.999, beta = halt_loss_weight = 0.1 (tuned on ListOps in
{1, 0.1, 0.01, 0.001}), upper bound 15 layers.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal, Optional, get_args

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import at_least_fp32, full_precision
from rirlab.models.attention import RTConfig, cumulative_mean, masked_mean

Mode = Literal["dynamic", "upper_bound", "none"]  # §7: GUT, "GUT upper bound" (no break), "GUT no halt"
MODES = get_args(Mode)


@dataclass(config=STRICT)
class HaltConfig(RTConfig):
    """UT: token-level halting (Algorithm 1); the halting settings of every halting model."""

    max_layers: int = Field(15, ge=1)  # the upper bound on layers
    alpha_thresh: float = Field(0.999, gt=0, le=1)
    halt_loss_weight: float = Field(0.1, ge=0)  # beta in L = L_main + beta * L_ACT
    halt_mode: Mode = "dynamic"  # §7: GUT / GUT upper bound / GUT no halt
    keep_crossing_layer: bool = False  # keep the layer that crosses alpha_thresh (the code discards it)
    depth_cap_offset: Optional[int] = Field(1, ge=0)  # kept layers <= positions seen + this; None = no cap
    act_index_from: Literal[0, 1] = 1  # L_ACT charges layer j's alpha as j + this (code: 1, eq. 8 literal: 0)
    pair_act: Literal["mean", "sum"] = "mean"  # pair tasks: the two sentences' L_ACT averaged (code) or summed


class HaltUnit(nn.Module):
    """halt(x) = sigmoid(GeLU(x W_h1 + b_h1) W_h2 + b_h2), eq. 5 (W_h1 is 2d x d for eq. 17); in fp32 under autocast
    (the halting probabilities are multiplied over up to ``max_layers`` layers and compared with alpha_thresh)."""

    def __init__(self, d_in: int, d: int):
        super().__init__()
        self.w1 = nn.Linear(d_in, d)
        self.w2 = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = at_least_fp32(x)
        with full_precision(x):
            return torch.sigmoid(self.w2(F.gelu(self.w1(x)))).squeeze(-1)  # (..., D_in) -> (...)


@dataclasses.dataclass
class HaltResult:
    states: torch.Tensor  # S: (N, S, D), the marginalised output (H_L for mode "none")
    act_loss: Optional[torch.Tensor]  # scalar L_ACT, None for mode "none"
    depth: torch.Tensor  # (N, S') layers run per halting unit (S' = 1 for global halting, else S)
    units: torch.Tensor  # (N, S') bool, halting units that hold real tokens
    calls: int  # block applications in this forward
    weights: Optional[torch.Tensor] = None  # (calls + 1, N, S'): alpha_0..alpha_{calls-1} (0 if not kept), remainder
    per_seq: Optional[torch.Tensor] = None  # (N,) L_ACT of each sequence (0 for one without real tokens)


def depth_halting(cfg: HaltConfig, global_halt: bool = False, transition: bool = False,
                  causal: bool = False) -> "DepthHalting":
    """The :class:`DepthHalting` of a halting model's config."""
    return DepthHalting(cfg.hidden_size, cfg.max_layers, cfg.alpha_thresh, global_halt, transition, causal,
                        cfg.halt_mode, cfg.keep_crossing_layer, cfg.depth_cap_offset, cfg.act_index_from)


class DepthHalting(nn.Module):
    """Runs ``step(H_{l-1}, S_{l-1}) -> H_l`` up to ``max_layers`` times with dynamic halting."""

    def __init__(self, d: int, max_layers: int, alpha_thresh: float = 0.999, global_halt: bool = False,
                 transition: bool = False, causal: bool = False, mode: str = "dynamic",
                 keep_crossing: bool = False, cap_offset: Optional[int] = None, act_from: int = 0):
        super().__init__()
        assert mode in MODES, mode
        self.max_layers, self.thresh, self.mode = max_layers, alpha_thresh, mode
        self.keep_crossing, self.cap_offset, self.act_from = keep_crossing, cap_offset, act_from
        self.global_halt, self.transition, self.causal = global_halt, transition, causal
        self.halt = HaltUnit(2 * d if transition else d, d) if mode != "none" else None
        self.register_buffer("depth_counts", torch.zeros(max_layers + 1, dtype=torch.long), persistent=False)

    def pool(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """What the halting unit reads from H: (N, S, D) -> (N, S', D)."""
        if not self.global_halt:
            return h  # token-level, Algorithm 1
        if self.causal:
            return cumulative_mean(h, mask)  # (N, S, D), Appendix A
        return masked_mean(h, mask)[:, None, :]  # (N, 1, D), eq. 13-14

    def forward(self, step: Callable, h0: torch.Tensor, mask: torch.Tensor, keep_weights: bool = False) -> HaltResult:
        n, s, _ = h0.shape
        units = mask.any(1, keepdim=True) if self.global_halt and not self.causal else mask  # (N, S')
        if self.mode == "none":
            h = h0
            for _ in range(self.max_layers):
                h = step(h, h)  # (N, S, D)
            return self._done(HaltResult(h, None, units * self.max_layers, units, self.max_layers))
        fp = torch.promote_types(h0.dtype, torch.float32)  # halting arithmetic in (at least) fp32
        cum = h0.new_zeros(units.shape, dtype=fp)  # sum of alpha over kept layers, (N, S')
        remain = h0.new_ones(units.shape, dtype=fp)  # prod (1 - alpha_hat) over kept layers
        expect = h0.new_zeros(units.shape, dtype=fp)  # sum_j alpha_j * (j + act_from)
        depth = torch.zeros(units.shape, dtype=torch.long, device=h0.device)  # layers kept
        halted = ~units  # (N, S')
        cap = None if self.cap_offset is None else mask.sum(1, keepdim=True) + self.cap_offset  # (N, 1)
        acc = torch.zeros_like(h0)  # sum_l alpha_l * H_l, (N, S, D)
        h, state, weights, calls = h0, h0, [], 0
        for layer in range(1, self.max_layers + 1):
            active = ~halted  # (N, S'): not yet halted
            # early exit (one host read per layer, as before): every unit has halted or reached its depth cap, so
            # this layer's block would be computed only to be discarded
            live = active if cap is None else active & ~(layer > cap)  # (N, S')
            if self.mode == "dynamic" and not bool(live.any()):
                break
            h_new = step(h, state)  # (N, S, D)
            calls += 1
            x = self.pool(h, mask)
            if self.transition:
                x = torch.cat([x, self.pool(h_new, mask)], dim=-1)  # (N, S', 2D), eq. 17
            a_hat = self.halt(x) * active  # (N, S'), eq. 5 / 12-13
            alpha = a_hat * remain  # eq. 6 / 15
            crossed = cum + alpha >= self.thresh
            capped = torch.zeros_like(active) if cap is None else (layer > cap)  # (N, S')
            keep = active & ~capped if self.keep_crossing else active & ~capped & ~crossed
            halted = halted | ~keep | crossed  # a kept crossing layer halts the unit after it
            alpha = alpha * keep
            remain = torch.where(keep, remain * (1 - a_hat), remain)
            acc = acc + alpha[..., None] * h  # (N, S, D)
            cum = cum + alpha
            expect = expect + alpha * (layer - 1 + self.act_from)
            depth = depth + keep.long()
            h = torch.where(keep[..., None], h_new, h)  # halted units keep h_{l-1}
            state = (1 - cum)[..., None] * h + acc  # (N, S, D), eq. 7 / 16; unchanged where not kept
            if keep_weights:
                weights.append(alpha)
        expect = expect + (1 - cum) * depth  # the remainder is charged the number of layers kept
        fu = units.to(fp)
        per_seq = (expect * fu).sum(1) / fu.sum(1).clamp_min(1)  # (N,), eq. 8: 1/T sum_t
        act = per_seq.sum() / units.any(1).sum().clamp_min(1)  # mean over sequences with real tokens
        w = torch.stack([*weights, 1 - cum]) if keep_weights else None  # (calls + 1, N, S')
        return self._done(HaltResult(state, act, depth, units, calls, w, per_seq))

    def _done(self, res: HaltResult) -> HaltResult:
        if not self.training:  # accumulate the halting-depth histogram over evaluation passes (no host read)
            self.depth_counts.scatter_add_(0, res.depth.flatten().long(), res.units.flatten().long())
        return res

    def stats(self, res: HaltResult) -> dict:
        """Scalar stats of a forward; their values reach the host in ONE read."""
        units = res.units.float()
        mean = (res.depth * units).sum() / units.sum()  # mean halting depth over real units (NaN if none, as before)
        vals = torch.stack([mean, res.act_loss.detach().float()] if res.act_loss is not None else [mean]).tolist()
        out = {"mean_layers": vals[0], "max_layers_used": float(res.calls)}
        if res.act_loss is not None:
            out["act_loss"] = vals[1]
        return out

    def histogram(self, unit: str) -> dict:
        """{"halting_depth.json": ...} once an evaluation pass ran, else {}."""
        counts = self.depth_counts.tolist()
        if not any(counts):
            return {}
        return {"halting_depth.json": {"counts": counts, "edges": list(range(self.max_layers + 2)),
                                       "unit": unit, "max_layers": self.max_layers, "mode": self.mode}}
