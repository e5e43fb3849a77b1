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
    opt = make_optimizer(model, TrainConfig(adam_beta2=0.98, adam_eps=1e-9))
    assert opt.param_groups[0]["betas"] == (0.9, 0.98) and opt.param_groups[0]["eps"] == 1e-9


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


FLIPFLOP = {"n_train": 64, "n_dev": 8, "n_eval": 8, "train_len": 16, "eval_splits": ["p0.8_len512"]}


def test_one_cycle_is_the_flipflop_codes_schedule_with_beta1_cycled():
    """The dynamic-halt code's "linearwarmup" (OneCycleLR, linear): lr / 25 at the first step, lr after the
    warm-up, lr / 2.5e5 at the last step; Adam's beta1 0.95 -> 0.85 at the peak -> 0.95 at the end."""
    cfg = {"model": "transformer", "task": "flipflop", **FLIPFLOP, "hidden_size": 16, "num_heads": 2,
           "num_layers": 1, "lr": 3e-4, "warmup_steps": 5, "lr_decay": "one_cycle", "steps": 20, "batch_size": 2,
           "max_eval_examples": 2, "num_threads": 1}
    from rirlab.trial import resolve

    trainer = Trainer(resolve(cfg))
    lrs, beta1 = [], []
    for _ in range(20):
        lrs.append(trainer.lr)
        beta1.append(trainer.opt.param_groups[0]["betas"][0])
        trainer.train_step()
    # OneCycleLR peaks at step pct_start * total - 1 (here 4), as in the code, which uses it unchanged
    assert lrs[0] == pytest.approx(3e-4 / 25) and max(lrs) == pytest.approx(3e-4) and lrs.index(max(lrs)) == 4
    assert lrs[-1] < lrs[-2] < lrs[4] and all(a > b for a, b in zip(lrs[4:], lrs[5:]))  # linear decay after it
    assert beta1[0] == pytest.approx(0.95) and beta1[4] == pytest.approx(0.85) and beta1[-1] > 0.94
    with pytest.raises(Exception, match="optimizer=adamw"):
        TrainConfig(lr_decay="one_cycle", warmup_steps=5, optimizer="ranger")


def test_dev_every_selects_and_counts_patience_between_epoch_ends():
    """dev_every: dev is evaluated (and the best weights kept, misses counted) every N steps within an epoch,
    as the code's chunked evaluation; without it, only at epoch ends."""
    from rirlab.trial import resolve

    base = {"model": "transformer", "task": "flipflop", **FLIPFLOP, "hidden_size": 16, "num_heads": 2,
            "num_layers": 1, "epochs": 1, "batch_size": 8, "select_by": "accuracy", "max_eval_examples": 4,
            "num_threads": 1}
    points, misses = {}, {}
    for every in (None, 2):
        trainer = Trainer(resolve({**base, "dev_every": every}))
        trainer.evaluate = lambda examples: {"accuracy": 50.0, "loss": 1.0}  # never improves after the first
        seen = []
        while trainer.step < trainer.total_steps:
            trainer.train_step()
            if trainer.selection_point() is not None:
                seen.append(trainer.step)
        points[every], misses[every] = seen, trainer.bad_epochs
    assert points[None] == [8] and points[2] == [2, 4, 6, 8]
    assert misses == {None: 0, 2: 3}  # every dev evaluation after the best counts, as the code's impatience
