"""``s4d``: stacked bidirectional S4D-Inv layers, the S4D row of RIR Tables 1-4."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models.base import EncoderOutput
from rirlab.models.heads import TaskModel
from rirlab.models.registry import register
from rirlab.models.s4d import BiS4D, S4DInit


@dataclass(config=STRICT)
class S4DConfig:
    """Stacked bidirectional S4D-Inv (RIR Table 1-4 S4D row)."""

    hidden_size: int = Field(128, ge=2)
    n_layers: int = Field(4, ge=1)
    s4d_state: int = Field(64, ge=2)
    s4d_init: S4DInit = "inv"
    dropout: float = Field(0.1, ge=0, lt=1)
    in_dropout: Optional[float] = Field(None, ge=0, lt=1)  # on the embedded tokens (heads.TaskModel); None = dropout


class S4DStack(nn.Module):
    """Stacked bidirectional S4D layers (pre-LN, GLU output, residual), masked mean pooling -> (N, D)."""

    def __init__(self, cfg: S4DConfig):
        super().__init__()
        d, n = cfg.hidden_size, cfg.n_layers
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(n))
        self.ssms = nn.ModuleList(BiS4D(d, cfg.s4d_state, cfg.s4d_init) for _ in range(n))
        self.outs = nn.ModuleList(nn.Linear(2 * d, 2 * d) for _ in range(n))
        self.drop = nn.Dropout(cfg.dropout)
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        for norm, ssm, out in zip(self.norms, self.ssms, self.outs):
            y = self.drop(ssm(norm(x), mask))  # (N, S, 2D)
            x = x + self.drop(F.glu(out(y), dim=-1))  # (N, S, D)
        m = mask[..., None].float()  # (N, S, 1)
        return EncoderOutput((self.ln(x) * m).sum(1) / m.sum(1).clamp(min=1))  # (N, D)


@register("s4d", S4DConfig, select_by="accuracy", table1_row=3)
def s4d(cfg: S4DConfig, info):
    """Stacked bidirectional S4D (S4D-Inv, bilinear), masked mean pooling."""
    return TaskModel(S4DStack(cfg), info, cfg)
