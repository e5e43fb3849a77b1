"""Dynamic halting over repeated applications of one shared block (Recurrent Transformers paper §4.1, §5.1).

Token-level halting (UT, Algorithm 1, eq. 5-7) and global mean-pooled halting
(GUT, Algorithm 3, eq. 12-16) with the transition-aware input
[mean(H_{l-1}); mean(H_l)] (eq. 17) are one loop that differs only in what the
halting unit reads:

    token-level       h_{l-1}^(t)               -> one halting distribution per position   (N, S)
    global            mean(H_{l-1})             -> one per sequence                        (N, 1)
    global + causal   cumulative mean up to t   -> one per position, no look-ahead         (N, S)

At layer l (run only while sum_{l'<l-1} alpha_l' < alpha_thresh for that unit)
alpha_hat_{l-1} = halt(.), alpha_{l-1} = alpha_hat_{l-1} prod_{l'<l-1} (1 - alpha_hat_l')
(eq. 6, 15) and S_l = (1 - sum_{l'<l} alpha_l') H_l + sum_{l'<l} alpha_l' H_l' (eq. 7, 16):
the weights alpha_0..alpha_{l-1} plus the remainder on H_l form a distribution
over the layers computed. A unit that has halted is frozen (h_l = h_{l-1},
s_l = s_{l-1}); the loop stops once every unit of the batch has halted.

L_ACT (eq. 8) is sum_l alpha_l * l with the remainder 1 - sum alpha counted as
the halting mass of the last layer run (it weights H_l in eq. 7); without it the
penalty would be minimised by never halting. It is the expected halting depth,
averaged over positions (eq. 8: 1/T sum_t) and then over the batch.

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
from rirlab.models.transformer import RTConfig, cumulative_mean, masked_mean

Mode = Literal["dynamic", "upper_bound", "none"]  # §7: GUT, "GUT upper bound" (no break), "GUT no halt"
MODES = get_args(Mode)


@dataclass(config=STRICT)
class HaltConfig(RTConfig):
    """UT: token-level halting (Algorithm 1); the halting settings of every halting model."""

    max_layers: int = Field(15, ge=1)  # the upper bound on layers
    alpha_thresh: float = Field(0.999, gt=0, le=1)
    halt_loss_weight: float = Field(0.1, ge=0)  # beta in L = L_main + beta * L_ACT
    halt_mode: Mode = "dynamic"  # §7: GUT / GUT upper bound / GUT no halt


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
    weights: Optional[torch.Tensor] = None  # (calls + 1, N, S'): alpha_0..alpha_{calls-1}, remainder


class DepthHalting(nn.Module):
    """Runs ``step(H_{l-1}, S_{l-1}) -> H_l`` up to ``max_layers`` times with dynamic halting."""

    def __init__(self, d: int, max_layers: int, alpha_thresh: float = 0.999, global_halt: bool = False,
                 transition: bool = False, causal: bool = False, mode: str = "dynamic"):
        super().__init__()
        assert mode in MODES, mode
        self.max_layers, self.thresh, self.mode = max_layers, alpha_thresh, mode
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
        cum = h0.new_zeros(units.shape, dtype=fp)  # sum of alpha so far, (N, S')
        remain = h0.new_ones(units.shape, dtype=fp)  # prod (1 - alpha_hat) so far
        expect = h0.new_zeros(units.shape, dtype=fp)  # sum_l alpha_l * l
        depth = torch.zeros(units.shape, dtype=torch.long, device=h0.device)
        acc = torch.zeros_like(h0)  # sum_l alpha_l * H_l, (N, S, D)
        h, state, weights, calls = h0, h0, [], 0
        for layer in range(1, self.max_layers + 1):
            active = (cum < self.thresh) & units  # (N, S'): not yet halted
            if self.mode == "dynamic" and not bool(active.any()):
                break  # early exit: every unit has halted
            h_new = step(h, state)  # (N, S, D)
            calls += 1
            x = self.pool(h, mask)
            if self.transition:
                x = torch.cat([x, self.pool(h_new, mask)], dim=-1)  # (N, S', 2D), eq. 17
            a_hat = self.halt(x) * active  # (N, S'), eq. 5 / 12-13
            alpha = a_hat * remain  # eq. 6 / 15
            remain = remain * (1 - a_hat)
            acc = acc + alpha[..., None] * h  # (N, S, D)
            cum = cum + alpha
            expect = expect + alpha * (layer - 1)
            depth = depth + active.long()
            h = torch.where(active[..., None], h_new, h)  # halted units keep h_{l-1}
            state = (1 - cum)[..., None] * h + acc  # (N, S, D), eq. 7 / 16
            if keep_weights:
                weights.append(alpha)
        expect = expect + (1 - cum) * depth  # the remainder halts at the last layer run
        fu = units.to(fp)
        per_seq = (expect * fu).sum(1) / fu.sum(1).clamp_min(1)  # (N,), eq. 8: 1/T sum_t
        act = per_seq.sum() / units.any(1).sum().clamp_min(1)  # mean over sequences with real tokens
        w = torch.stack([*weights, 1 - cum]) if keep_weights else None  # (calls + 1, N, S')
        return self._done(HaltResult(state, act, depth, units, calls, w))

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
