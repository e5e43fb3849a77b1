"""What encoders and models return; the precision helpers (:func:`autocast` for the trainer, the fp32 regions
inside models)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

import torch


@dataclasses.dataclass
class EncoderOutput:
    """Sentence encoding (N, D) or token states (N, S, D), plus optional auxiliary loss and scalar stats."""

    vec: torch.Tensor
    aux_loss: Optional[torch.Tensor] = None
    stats: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ModelOutput:
    logits: torch.Tensor  # (N, C) or (N, S, C) for language modelling
    aux_loss: Optional[torch.Tensor] = None
    stats: dict = dataclasses.field(default_factory=dict)


# ---- precision ------------------------------------------------------------------------------------------------
PRECISIONS = ("fp32", "bf16", "fp16")  # the values of the trainer's ``precision``


def device_type(device) -> str:
    """'cpu', 'cuda', ... of a device, a device string or a tensor."""
    return device.device.type if isinstance(device, torch.Tensor) else torch.device(device).type


def autocast(precision: str, device) -> contextlib.AbstractContextManager:
    """Context of a model's forward and loss at ``precision``: ``fp32`` nothing, ``bf16`` / ``fp16`` bfloat16 /
    float16 autocast on the device's type (CUDA, and CPU where it is testable; fp16 needs the trainer's grad
    scaler). Inside, the beam scores, the scorer, the softmaxes and
    marginalisation, the fused search and the halting probabilities run in fp32 (:func:`full_precision`)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision in ("bf16", "fp16"):
        return torch.autocast(device_type(device), dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")


def full_precision(like) -> contextlib.AbstractContextManager:
    """A region where autocast is off on ``like``'s device type: what runs inside keeps its inputs' dtypes."""
    return torch.autocast(device_type(like), enabled=False)


def at_least_fp32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 if it is a lower-precision float (bf16, fp16); float32 and float64 unchanged."""
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t
