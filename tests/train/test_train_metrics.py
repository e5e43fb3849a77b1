"""What the trainer's metrics mean (issue 17 item 4; docs/metrics.md): accuracy in % everywhere, step time
without evaluation, peak memory of the model's tensors on CPU with the process RSS apart."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from rirlab.perf import TensorMemory


def tiny(**kw) -> dict:
    from rirlab.tasks import registry as tasks

    return {"model": "transformer", "task": "listops", **dict(tasks.get("listops").quick), "hidden_size": 16,
            "num_heads": 2, "num_layers": 1, "ff_mult": 1, "batch_size": 8, "max_eval_examples": 16,
            "eval_batch_size": 16, "num_threads": 1, "recipe": "adamw", **kw}


def run(config: dict):
    from rirlab.train import run_trial

    reports = []
    final = run_trial(config, lambda m, checkpoint=None: reports.append(m))
    return reports, final


def test_train_accuracy_is_a_percentage_like_every_eval_accuracy(monkeypatch):
    from rirlab.train import Trainer

    real = Trainer.loss_of

    def three_of_four(self, batch):  # the real loss, with 3 of 4 predictions counted correct
        total, loss, _, _, out = real(self, batch)
        return total, loss, 3, 4, out

    monkeypatch.setattr(Trainer, "loss_of", three_of_four)
    reports, final = run(tiny(steps=2, log_every=1, eval_every=100))
    assert reports[0]["train/accuracy"] == pytest.approx(75.0)  # was 0.75
    assert final["train/accuracy"] == pytest.approx(75.0)
    assert final["test/accuracy"] == pytest.approx(75.0)  # the same unit for evaluation


@pytest.mark.parametrize("recipe", ["adamw", "paper"])
def test_time_per_step_excludes_evaluation(monkeypatch, recipe):
    from rirlab.train import Trainer

    real = Trainer.evaluate

    def slow_evaluate(self, examples):
        if self.step < self.total_steps:  # the evaluations between steps (after the last, nothing is timed)
            time.sleep(1.5)  # an evaluation far slower than a training step of this tiny model (~10-30 ms)
        return real(self, examples)

    monkeypatch.setattr(Trainer, "evaluate", slow_evaluate)
    extra = {"epochs": 2, "n_train": 16} if recipe == "paper" else {"steps": 4}  # paper: dev at each epoch end
    reports, final = run(tiny(recipe=recipe, log_every=1, eval_every=2, **extra))
    assert final["step"] == 4
    # with the evaluations counted the mean would be >= 375 ms (at least 1.5 s of evaluation over 4 steps)
    assert all(r["time_per_step_ms"] < 300 for r in [*reports, final]), [r["time_per_step_ms"] for r in reports]


def test_cpu_time_per_step_is_the_processs_own_not_the_wall_clock(monkeypatch):
    """Issue 33 item 8: a trial waiting for the cores (here: sleeping in its steps) is charged wall time, not CPU
    time; the CPU time is reported beside the wall clock at every report, and counts the step's own work."""
    from rirlab.train import Trainer

    real = Trainer.train_step

    def waiting_step(self):
        time.sleep(0.25)  # what another trial holding the cores looks like from this process: time, no CPU
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", waiting_step)
    reports, final = run(tiny(steps=4, log_every=2, eval_every=100))
    for r in [*reports, final]:
        wall, cpu = r["time_per_step_ms"], r["cpu_time_per_step_ms"]
        assert wall >= 250 and 0 < cpu < wall - 200, (wall, cpu)

    def busy_step(self):
        end = time.process_time() + 0.1  # 100 ms of this process's own CPU work in every step
        while time.process_time() < end:
            pass
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", busy_step)
    _, final = run(tiny(steps=2, log_every=2, eval_every=100))
    assert final["cpu_time_per_step_ms"] >= 100, final


def test_tensor_memory_counts_parameters_gradients_optimiser_state_and_saved_activations():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))
    opt = torch.optim.AdamW(model.parameters())
    mem = TensorMemory(model, opt)
    n_params = sum(p.numel() for p in model.parameters())

    def step(batch: int):
        x = torch.randn(batch, 64)
        with mem.track():
            loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

    step(32)
    assert mem.static_bytes() == 4 * n_params * 4  # parameters, gradients, AdamW's exp_avg and exp_avg_sq
    # saved for backward: x (32 x 64) for the first Linear's weight grad, the ReLU output (32 x 256), shared by
    # ReLU's backward and the second Linear (one storage, counted once); the weights are parameters, not counted
    first = mem.peak_saved
    assert first == 4 * 32 * (64 + 256) or first == 4 * 32 * (64 + 2 * 256)  # ReLU may save its input too
    step(8)  # a smaller batch does not lower the high-water mark
    assert mem.peak_saved == first
    step(64)  # a larger one raises it in proportion
    assert mem.peak_saved == 2 * first
    assert mem.peak_bytes() == mem.static_bytes() + 2 * first


def test_cpu_peak_memory_is_the_models_tensors_and_rss_is_reported_apart():
    reports, final = run(tiny(steps=2, log_every=1, eval_every=100))
    params = final["num_params"]
    # was the process's peak RSS (hundreds of MB: the interpreter, torch, the data) for a model of a few kB
    assert 4 * params * 4 / 2**20 < final["peak_mem_mb"] < 10
    assert final["process_rss_mb"] > 50 * final["peak_mem_mb"]


def test_a_training_step_and_an_evaluation_read_the_device_once(cache):
    """The trainer's own host reads (each a wait for the GPU's queue on CUDA): one per training step (loss, correct
    count and finiteness together, before backward) and one per evaluated split (not two per batch), for a model
    with no reads of its own. Was three per step and two per eval batch (the H100 profile's Trainer.train_step)."""
    from rirlab.train import Trainer
    from rirlab.trial import resolve
    from tests.helpers.devices import HostReads

    trainer = Trainer(resolve(tiny(recipe="paper", max_eval_examples=48, eval_batch_size=16)))
    trainer.train_step()
    with HostReads() as step_reads:
        metrics = trainer.train_step()
    with HostReads() as eval_reads:
        dev = trainer.evaluate(trainer.dev_split())
    assert step_reads.calls == ["tolist"] and eval_reads.calls == ["tolist"]  # 3 batches of 16, one read
    assert 0 <= metrics["train/accuracy"] <= 100 and metrics["train/loss"] > 0
    assert 0 <= dev["accuracy"] <= 100 and dev["loss"] > 0


def test_a_non_finite_loss_stops_before_the_update(cache, monkeypatch):
    """A NaN loss raises NonFiniteLoss (value and step) from the step's one host read, before backward and the
    optimiser touch the weights."""
    import math

    import rirlab.train as train
    from rirlab.train import NonFiniteLoss, Trainer
    from rirlab.trial import resolve

    trainer = Trainer(resolve(tiny(recipe="paper")))
    trainer.train_step()
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    real = train.training_loss

    def nan_loss(*args, **kw):
        total, *rest = real(*args, **kw)
        return (total * float("nan"), *rest)

    monkeypatch.setattr(train, "training_loss", nan_loss)
    with pytest.raises(NonFiniteLoss) as err:
        trainer.train_step()
    assert math.isnan(err.value.value) and err.value.step == 2 and trainer.step == 1
    assert all(torch.equal(v, trainer.model.state_dict()[k]) for k, v in before.items())


def test_process_rss_is_the_trials_own_peak_after_a_bigger_one_in_the_same_process():
    """A reused worker (reuse_workers) runs trials one after another: each trial's process_rss_mb starts again
    from the resident size at its start (reset_peak_rss), not from an earlier trial's peak."""
    from rirlab.train import reset_peak_rss, rss_mb

    import mmap

    big = mmap.mmap(-1, 400 * 2**20)  # an earlier trial's peak: 400 MiB touched, then unmapped (a heap block might
    big.write(b"x" * (400 * 2**20))  # stay resident after free: the trainer tunes the allocator to keep memory)
    peak_with_it = rss_mb()
    big.close()
    reset_peak_rss()
    assert rss_mb() < peak_with_it - 300
