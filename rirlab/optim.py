"""Ranger: RAdam with Lookahead, the optimiser of the RIR / EBT papers' public code for ListOps and logic.

Written from the two definitions:

- RAdam ("On the Variance of the Adaptive Learning Rate and Beyond", Liu et al., ICLR 2020, arXiv 1908.03265,
  Algorithm 2): Adam's moments m_t, v_t; the length of the approximated simple moving average
  rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t), rho_inf = 2 / (1 - beta2) - 1. When rho_t > the threshold
  (5) the step is adaptive and rectified,
  ``p -= lr * r_t * m_t / (1 - beta1^t) / (sqrt(v_t / (1 - beta2^t)) + eps)`` with
  r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)); before that it is
  bias-corrected momentum SGD, ``p -= lr * m_t / (1 - beta1^t)``. As in the Ranger code the papers used,
  eps is added to sqrt(v_t) (not to the bias-corrected one: the sqrt(1 - beta2^t) factor sits in the step
  size) and weight decay is decoupled, ``p -= lr * wd * p`` before the step.
- Lookahead ("Lookahead Optimizer: k steps forward, 1 step back", Zhang et al., NeurIPS 2019, arXiv
  1907.08610, Algorithm 1): slow weights phi start at the initial weights; every k fast steps
  ``phi += alpha * (theta - phi)`` and the fast weights theta restart from phi.

Defaults are the papers' code settings (the Ranger class of the RIR/EBT authors' public code, BeamRecursionFamily's
optimizers/ranger.py, which their agents construct with lr and weight decay only): betas (0.9, 0.999), rho
threshold 5, k 5, alpha 0.8, eps 1e-8. rirlab had 1e-5 (the Ranger of lessw2020's repository) until 2026-12-06;
``TrainConfig.ranger_eps`` sets it. Everything, slow weights included, lives in the optimiser state, so ``state_dict`` /
``load_state_dict`` resume it exactly.

Parameter groups follow the convention of the S4 code (state-spaces/s4, "Efficiently Modeling Long Sequences with
Structured State Spaces", Gu et al., ICLR 2022, arXiv:2111.00396): the module that owns parameters needing their
own learning rate or weight decay marks them with an ``_optim`` dict (:func:`mark_group`), and the optimiser
builder groups parameters by those marks (:func:`param_groups`); the training config says what a named group's
lr and weight decay are, so the trainer knows no model class. A mark is an attribute of the ``nn.Parameter``: it
survives ``Module.to`` and pickling, not ``copy.deepcopy`` (which builds new parameters).
"""

from __future__ import annotations

import math

import torch


class Ranger(torch.optim.Optimizer):
    """RAdam (rectified Adam) + Lookahead; per-group ``lr`` and ``weight_decay`` (ReduceLROnPlateau-friendly)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, alpha: float = 0.8, k: int = 5, rho_threshold: float = 5.0):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"Ranger: alpha={alpha} must be in [0, 1]")
        if k < 1:
            raise ValueError(f"Ranger: lookahead steps k={k} must be >= 1")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, alpha=alpha, k=k,
                        rho_threshold=rho_threshold)
        super().__init__(params, defaults)

    @staticmethod
    def rectification(step: int, beta2: float) -> tuple[float, float]:
        """(rho_t, r_t) of RAdam Algorithm 2 at step t >= 1; r_t is 0 where rho_t <= 4 (undefined there)."""
        rho_inf = 2 / (1 - beta2) - 1
        b2t = beta2**step
        rho = rho_inf - 2 * step * b2t / (1 - b2t)
        if rho <= 4:
            return rho, 0.0
        return rho, math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))

    @torch.no_grad()
    def step(self, closure=None):
        """One step of every parameter with a gradient, as multi-tensor (``torch._foreach_*``) ops over the parameters
        that share a step count (normally all of a group): the same arithmetic as a loop over parameters, in a
        number of kernel launches that does not grow with the number of parameters (on a GPU the per-parameter loop
        was ~8 launches x 35 parameters of RIR-EBT-GRC's ~1,550 per training step, which is launch-bound)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            by_step: dict[int, list] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Ranger does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["slow"] = p.detach().clone()  # Lookahead phi_0 = theta_0
                state["step"] += 1
                by_step.setdefault(state["step"], []).append(p)
            for t, params in by_step.items():
                self._update(group, t, params)
        return loss

    def _update(self, group: dict, t: int, params: list) -> None:
        """RAdam then Lookahead at step ``t`` for ``params`` (module doc)."""
        beta1, beta2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        grads = [p.grad for p in params]
        m = [self.state[p]["exp_avg"] for p in params]
        v = [self.state[p]["exp_avg_sq"] for p in params]
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, grads, alpha=1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        if wd:
            torch._foreach_mul_(params, 1 - lr * wd)
        rho, r = self.rectification(t, beta2)
        if rho > group["rho_threshold"]:
            step_size = lr * r * math.sqrt(1 - beta2**t) / (1 - beta1**t)
            denom = torch._foreach_sqrt(v)
            torch._foreach_add_(denom, group["eps"])
            torch._foreach_addcdiv_(params, m, denom, value=-step_size)
        else:
            torch._foreach_add_(params, m, alpha=-lr / (1 - beta1**t))
        if t % group["k"] == 0:  # Lookahead: slow weights move toward the fast ones, fast restart there
            slow = [self.state[p]["slow"] for p in params]
            torch._foreach_add_(slow, torch._foreach_sub(params, slow), alpha=group["alpha"])
            if hasattr(torch, "_foreach_copy_"):  # torch >= 2.2
                torch._foreach_copy_(params, slow)
            else:
                for p, s in zip(params, slow):
                    p.copy_(s)


def mark_group(params, group: str) -> None:
    """Mark ``params`` as members of the optimiser group ``group`` (module docstring)."""
    for p in params:
        p._optim = {"group": group}


def marked(model: torch.nn.Module, group: str) -> list:
    """The parameters of ``model`` marked as members of ``group``, in ``model.parameters()`` order."""
    return [p for p in model.parameters() if getattr(p, "_optim", {}).get("group") == group]


def param_groups(model: torch.nn.Module, lr: float, weight_decay: float, groups: dict[str, dict]) -> list[dict]:
    """The trainable parameters of ``model`` as optimiser groups: for each name of ``groups`` whose marked
    parameters include a trainable one, those with that entry's settings (``lr``, ``weight_decay``), in the order of
    ``groups``; then every other trainable parameter with ``lr`` and ``weight_decay``."""
    out, taken = [], set()
    for name, settings in groups.items():
        mine = [p for p in marked(model, name) if p.requires_grad and id(p) not in taken]
        if mine:
            out.append({"params": mine, **settings})
            taken.update(id(p) for p in mine)
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in taken]
    return out + [{"params": rest, "lr": lr, "weight_decay": weight_decay}]


def adamw_kernel(groups: list[dict]) -> dict:
    """The keyword that picks ``torch.optim.AdamW``'s implementation for these parameter groups: ``fused=True`` when
    every parameter is on a CUDA device, else torch's default (nothing).

    On CUDA torch's default is the multi-tensor (``foreach``) step, which keeps each parameter's step count as a CPU
    tensor and reads it on the host twice per parameter per step for the bias corrections (the 142
    ``_local_scalar_dense`` of an S4D training step, 70 of RIR-EBT-GRC's) around a dozen multi-tensor launches; the
    fused step is one kernel over every parameter with the counts on the device. Same arithmetic (AdamW, Loshchilov
    & Hutter, ICLR 2019, arXiv:1711.05101, Algorithm 2): updates agree to float rounding
    (tests/train/test_optimizer_kernel.py), not bit for bit. On the CPU the trainer keeps torch's default (one
    parameter at a time), with which every CPU record of this project was trained."""
    params = [p for g in groups for p in g["params"]]
    return {"fused": True} if params and all(p.is_cuda for p in params) else {}
