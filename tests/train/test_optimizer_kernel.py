"""AdamW's implementation (issue 57 item 3): the fused kernel where every parameter is on CUDA (one launch, no host
read of the step counts), torch's default on the CPU (what every CPU record was trained with); the two agree to
float rounding, so `rirlab bench` counts the fused step on the CPU as the GPU's."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from rirlab.bench.base import BenchOptions, bench_optimizer, build_model, one_step, random_batch
from rirlab.bench.ops import OpCounter
from rirlab.config import TrainConfig
from rirlab.optim import adamw_kernel
from rirlab.train import make_optimizer


def test_fused_only_when_every_parameter_is_on_cuda():
    on = SimpleNamespace(is_cuda=True)
    off = SimpleNamespace(is_cuda=False)
    assert adamw_kernel([{"params": [on, on]}, {"params": [on]}]) == {"fused": True}
    assert adamw_kernel([{"params": [on]}, {"params": [off]}]) == {}
    assert adamw_kernel([{"params": []}]) == {}


def test_the_trainer_keeps_torchs_default_adamw_on_the_cpu():
    model = torch.nn.Linear(3, 2)
    opt = make_optimizer(model, TrainConfig(recipe="adamw"))
    assert isinstance(opt, torch.optim.AdamW)
    assert not opt.defaults["fused"] and not opt.defaults["foreach"]


def test_fused_adamw_follows_the_default_to_float_rounding_on_s4d():
    torch.manual_seed(0)
    model = build_model("s4d", BenchOptions(batch=2, length=40)).train()
    twin = copy.deepcopy(model)
    batch = random_batch(2, 40, "cpu")
    opts = [torch.optim.AdamW(model.parameters(), lr=1e-3), bench_optimizer(twin)]
    for _ in range(4):
        for m, opt in zip((model, twin), opts):
            torch.manual_seed(1)  # the same dropout masks in both
            F.cross_entropy(m(batch).logits, batch["labels"]).backward()
            opt.step()
            opt.zero_grad()
    moved = max((a - b).abs().max().item() for a, b in zip(model.parameters(), twin.parameters()))
    assert 0 <= moved < 1e-5
    torch.manual_seed(0)
    start = build_model("s4d", BenchOptions(batch=2, length=40))  # the same initial weights: the steps moved them
    assert max((a - b).abs().max().item() for a, b in zip(start.parameters(), twin.parameters())) > 1e-4


def test_an_s4d_training_step_reads_nothing_back_to_the_host():
    """The 142 host reads of an S4D step (issue 57) were AdamW's multi-tensor step reading each parameter's step
    count twice; the fused step reads none and is one op."""
    torch.manual_seed(0)
    model = build_model("s4d", BenchOptions(batch=2, length=40)).train()
    opt = bench_optimizer(model)
    batch = random_batch(2, 40, "cpu")
    one_step(model, opt, batch, True)
    with OpCounter() as ops:
        one_step(model, opt, batch, True)
    assert ops.by_name["_fused_adamw_"] == 1 and ops.by_name["addmm"] > 0
    assert ops.by_name["_local_scalar_dense"] == 0, ops.by_name.most_common(12)
