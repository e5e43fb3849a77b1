"""The dynamic-halt paper's learning-rate recipe values: inverse-square-root decay after warm-up, Adam betas."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from rirlab.config import TrainConfig
from rirlab.train import Trainer, make_optimizer


def factor(step: int, **kw) -> float:
    return Trainer.lr_factor(SimpleNamespace(cfg=SimpleNamespace(train=TrainConfig(**kw)), total_steps=10_000), step)


def test_inverse_sqrt_warms_up_then_decays_as_one_over_sqrt_step():
    kw = {"warmup_steps": 1000, "lr_decay": "inverse_sqrt"}
    assert factor(499, **kw) == pytest.approx(0.5)
    assert factor(999, **kw) == pytest.approx(1.0)
    assert factor(3999, **kw) == pytest.approx(0.5)  # sqrt(1000 / 4000)
    assert factor(8999, **kw) == pytest.approx(math.sqrt(1000 / 9000))
    assert factor(3999, warmup_steps=1000, lr_decay="linear") == pytest.approx(1 - 2999 / 9000)


def test_adam_betas_reach_the_optimizer():
    model = torch.nn.Linear(2, 2)
    opt = make_optimizer(model, TrainConfig(adam_beta2=0.98))
    assert opt.param_groups[0]["betas"] == (0.9, 0.98)


def code_root_warmup(step: int, lr: float, warmup: int) -> float:
    """The dynamic-halt code's RootWarmup.get_lr at last_epoch = step, written out from its two lines."""
    out = lr * min(1, (step + 1) / warmup)
    return out / math.sqrt(max(step + 1, warmup))


@pytest.mark.parametrize("step", [0, 499, 999, 1000, 3999, 99_999])
def test_root_warmup_is_the_codes_schedule_which_peaks_at_lr_over_sqrt_warmup(step):
    """lr 0.05 with 1,000 warm-up steps (the ListOps configs) peaks at 0.05 / sqrt(1000) = 1.6e-3, where
    inverse_sqrt would peak at 0.05: the two differ by sqrt(warmup) at every step."""
    kw = {"warmup_steps": 1000, "lr_decay": "root_warmup"}
    assert 0.05 * factor(step, **kw) == pytest.approx(code_root_warmup(step, 0.05, 1000), rel=1e-12)
    assert factor(step, **kw) == pytest.approx(factor(step, warmup_steps=1000, lr_decay="inverse_sqrt")
                                               / math.sqrt(1000), rel=1e-12)
