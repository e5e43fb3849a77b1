"""Models for the sweep-engine tests, loaded into Ray workers through $RIRLAB_PLUGINS:
``nan_grc`` whose loss turns NaN after a few steps and ``raise_grc`` that raises mid-training."""

from __future__ import annotations

import torch

from rirlab.models.registry import register
from rirlab.models.rir_grc import RIRGRCConfig, rir_grc


class _Faulty(torch.nn.Module):
    def __init__(self, inner, mode: str, after: int = 3):
        super().__init__()
        self.inner, self.mode, self.after, self.calls = inner, mode, after, 0

    def forward(self, batch):
        out = self.inner(batch)
        if self.training:
            self.calls += 1
            if self.calls > self.after:
                if self.mode == "raise":
                    raise RuntimeError(f"deliberate failure at training call {self.calls}")
                out.logits = out.logits * float("nan")
        return out


@register("nan_grc", RIRGRCConfig)
def nan_grc(cfg, info):
    """rir_grc whose logits become NaN after 3 training steps (test only)."""
    return _Faulty(rir_grc(cfg, info), "nan")


@register("raise_grc", RIRGRCConfig)
def raise_grc(cfg, info):
    """rir_grc that raises after 3 training steps (test only)."""
    return _Faulty(rir_grc(cfg, info), "raise")
