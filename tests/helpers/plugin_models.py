"""Models for the sweep-engine tests, loaded into Ray workers through $RIRLAB_PLUGINS:
``nan_grc`` whose loss turns NaN after a few steps, ``raise_grc`` that raises mid-training and ``flaky_grc`` that
raises only while a file exists (a failure a rerun does not repeat)."""

from __future__ import annotations

import os

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


FAIL_FILE_ENV = "RIRLAB_TEST_FAIL_FILE"


@register("flaky_grc", RIRGRCConfig)
def flaky_grc(cfg, info):
    """rir_grc that raises after 3 training steps while the file named by $RIRLAB_TEST_FAIL_FILE exists, else trains
    normally (test only): a local Ray's workers inherit the driver's environment, so a test removes the file to
    make the next attempt succeed."""
    path = os.environ.get(FAIL_FILE_ENV)
    model = rir_grc(cfg, info)
    return _Faulty(model, "raise") if path and os.path.exists(path) else model
