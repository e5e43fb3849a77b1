"""precision: fp16 with a grad scaler, and micro-batches accumulated into one step (issue 31 items 8, 10): the
dynamic-halt paper's code trains under float16 autocast with torch's GradScaler, and its LRA Retrieval TLB/GUTLB
run micro-batches of 32 into batches of 128."""

from __future__ import annotations

import math

import pytest
import torch

from rirlab.errors import UserError
from rirlab.tasks.batching import BatchPlan, StepBatches
from rirlab.train import Trainer
from rirlab.trial import resolve

TINY = {"task": "listops", "model": "tlb", "hidden_size": 16, "num_heads": 2, "chunk_size": 4, "memory_slots": 2,
        "batch_size": 16, "n_train": 64, "n_dev": 32, "n_test": 32, "eval_splits": ["test"], "log_every": 1,
        "eval_every": 10**6, "num_threads": 1, "device": "cpu", "optimizer": "adamw", "grad_clip": 1.0}
CLIP = torch.nn.utils.clip_grad_norm_


def clipped_norms(monkeypatch, trainer) -> list[float]:
    """Run one training step; return the gradient norms clip_grad_norm_ saw."""
    seen = []

    def spy(params, max_norm, *a, **k):
        norm = CLIP(params, max_norm, *a, **k)
        seen.append(float(norm))
        return norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    metrics = trainer.train_step()
    assert math.isfinite(metrics["train/loss"])
    return seen


def test_fp16_runs_the_forward_in_float16_and_clips_unscaled_gradients(monkeypatch):
    fp16 = Trainer(resolve({**TINY, "precision": "fp16"}))
    assert fp16.scaler.is_enabled() and not Trainer(resolve(TINY)).scaler.is_enabled()
    dtypes = []
    fp16.model.encoder.layers[0].ff.w1.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    norm16 = clipped_norms(monkeypatch, fp16)
    assert dtypes and set(dtypes) == {torch.float16}
    norm32 = clipped_norms(monkeypatch, Trainer(resolve(TINY)))
    # the scaler multiplies the loss by 2**16; clipping must see the true gradients (unscale_ first)
    assert len(norm16) == len(norm32) == 1 and 0.5 < norm16[0] / norm32[0] < 2
    assert fp16.scaler.get_scale() > 1  # the loss was scaled


def test_fp16_scaler_state_is_checkpointed_and_restored():
    a = Trainer(resolve({**TINY, "precision": "fp16"}))
    a.train_step()
    state = a.state_dict()
    state["scaler"]["scale"] = 1024.0
    b = Trainer(resolve({**TINY, "precision": "fp16"}))
    b.load_state_dict(state)
    assert b.scaler.get_scale() == 1024.0
    del state["scaler"]  # a checkpoint from before fp16 existed still loads
    Trainer(resolve(TINY)).load_state_dict(state)


def test_micro_batches_accumulate_the_gradient_of_the_whole_batch():
    """Chunks of fixed size and no dropout: the model does not see the padding, so 4 micro-batches of 4 give the
    full batch's gradient (each micro loss weighted by its share)."""
    cfg = {**TINY, "chunking": "fixed", "dropout": 0.0}
    whole, micro = Trainer(resolve(cfg)), Trainer(resolve({**cfg, "micro_batch_size": 4}))
    micro.model.load_state_dict(whole.model.state_dict())
    batch = micro.next_batch()
    assert isinstance(batch, list) and [len(b["labels"]) for b in batch] == [4, 4, 4, 4]
    micro._batches = None  # start the loader again at step 0
    mw, mm = whole.train_step(), micro.train_step()
    assert mw["train/loss"] == pytest.approx(mm["train/loss"], rel=1e-5)
    assert mw["train/accuracy"] == mm["train/accuracy"]
    for (name, p), q in zip(whole.model.named_parameters(), micro.model.parameters()):
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_each_micro_batch_is_padded_on_its_own():
    examples = [([1] * n, 0) for n in (2, 9, 3, 4)]
    widths = []

    def collate(items):
        widths.append(max(len(x) for x, _ in items))
        return {"labels": torch.zeros(len(items))}

    parts = StepBatches(examples, collate, BatchPlan([2, 9, 3, 4], 4, seed=0), micro=2)[0]
    assert len(parts) == 2 and sorted(widths) != [9, 9]  # not both at the batch's longest


def test_micro_batch_larger_than_the_batch_is_one_line():
    with pytest.raises(UserError, match="micro_batch_size 64 exceeds batch_size 16"):
        resolve({**TINY, "micro_batch_size": 64})
