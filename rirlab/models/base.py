"""What encoders and models return."""

from __future__ import annotations

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
