"""Training and evaluation of ONE trial: a flat config dict in, metrics out through a report callback.

Knows nothing of Ray or MLflow. ``report(metrics, checkpoint=None)`` is called
every ``log_every`` steps (``checkpoint`` is a state dict when the trainer
wants one persisted, every ``checkpoint_every`` steps); the last report holds
the final metrics of every evaluation split and ``final: True``.
"""

from __future__ import annotations

import math
import os
import random
import resource
import time
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from rirlab.config import TrialConfig, resolve
from rirlab.models import registry as models
from rirlab.perf import tune_allocator
from rirlab.tasks import registry as tasks
from rirlab.tasks.batching import BatchPlan, example_length, loader

Report = Callable[..., None]


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or inf."""


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda was asked for but torch sees no CUDA device")
    return torch.device(name)


def rss_mb() -> float:
    """Peak resident set size of this process in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """Builds task data and model from a resolved config; trains with Adam(W); evaluates every split."""

    def __init__(self, cfg: TrialConfig):
        self.cfg = cfg
        t = cfg.train
        tune_allocator()
        if t.num_threads:
            torch.set_num_threads(t.num_threads)
        seed_everything(t.seed)
        self.device = pick_device(t.device)
        self.data = tasks.get(cfg.task).load(cfg.task_cfg)
        self.model = models.get(cfg.model).build(cfg.model_cfg, self.data.info).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
        self.halt_loss_weight = float(getattr(cfg.model_cfg, "halt_loss_weight", 0.0))
        self.step = 0
        self.plan = BatchPlan([example_length(x) for x in self.data.train], t.batch_size, t.seed, t.bucket_factor)
        self.batches_per_epoch = self.plan.batches_per_epoch
        self._batches, self._batches_step = None, -1  # loader iterator and the step it yields next
        self.total_steps = t.epochs * self.batches_per_epoch if t.epochs else t.steps
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, self.lr_factor)

    def lr_factor(self, step: int) -> float:
        t = self.cfg.train
        if step < t.warmup_steps:
            return (step + 1) / t.warmup_steps
        if t.lr_decay == "none":
            return 1.0
        frac = (step - t.warmup_steps) / max(1, self.total_steps - t.warmup_steps)
        return max(0.0, 1 - frac) if t.lr_decay == "linear" else 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))

    # --- data order: a pure function of (seed, step), so a resumed trial sees the same batches ---
    # (rirlab/tasks/batching.py: seeded shuffle, optional length buckets of bucket_factor batches)
    def batch_at(self, step: int) -> dict:
        return self.to_device(self.data.collate([self.data.train[j] for j in self.plan.indices(step)]))

    def next_batch(self) -> dict:
        """The batch of ``self.step`` from a torch DataLoader started at that step (workers: num_workers)."""
        if self._batches is None or self._batches_step != self.step:
            self._batches = iter(loader(self.data.train, self.data.collate, self.plan, self.step, self.total_steps,
                                        self.cfg.train.num_workers))
            self._batches_step = self.step
        self._batches_step += 1
        return self.to_device(next(self._batches))

    def to_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def loss_of(self, batch: dict):
        out = self.model(batch)
        logits, labels = out.logits, batch["labels"]
        if logits.dim() == 3:  # language modelling: loss only where labels >= 0
            keep = labels >= 0
            logits, labels = logits[keep], labels[keep]
        loss = F.cross_entropy(logits, labels)
        total = loss if out.aux_loss is None else loss + self.halt_loss_weight * out.aux_loss
        correct = (logits.argmax(-1) == labels).sum().item()
        return total, loss.detach(), correct, labels.numel(), out

    def train_step(self) -> dict:
        self.model.train()
        batch = self.next_batch()
        total, loss, correct, n, out = self.loss_of(batch)
        if not torch.isfinite(total):
            raise NonFiniteLoss(f"training loss became {total.item()} at step {self.step}")
        self.opt.zero_grad(set_to_none=True)
        total.backward()
        if self.cfg.train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        self.opt.step()
        self.sched.step()
        self.step += 1
        m = {"train/loss": loss.item(), "train/accuracy": correct / max(n, 1)}
        if out.aux_loss is not None:
            m["train/aux_loss"] = out.aux_loss.item()
        m.update({f"train/{k}": float(v) for k, v in out.stats.items()})
        return m

    @torch.no_grad()
    def evaluate(self, examples) -> dict:
        self.model.eval()
        t = self.cfg.train
        if t.max_eval_examples:
            examples = examples[: t.max_eval_examples]
        # sort by length so padding stays small; order does not change the metric
        order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]))
        loss_sum, correct, count = 0.0, 0, 0
        for s in range(0, len(order), t.eval_batch_size):
            batch = self.to_device(self.data.collate([examples[i] for i in order[s : s + t.eval_batch_size]]))
            _, loss, c, n, _ = self.loss_of(batch)
            loss_sum += loss.item() * n
            correct += c
            count += n
        return {"accuracy": 100.0 * correct / max(count, 1), "loss": loss_sum / max(count, 1)}

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "sched": self.sched.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "py_rng": random.getstate(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        random.setstate(state["py_rng"])

    def peak_mem_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return rss_mb()


def run_trial(config: dict, report: Optional[Report] = None, *, state: Optional[dict] = None,
              checkpoint_every: int = 0) -> dict:
    """Train one trial described by a flat ``config`` dict; return the final metrics.

    ``state``: a checkpoint from an earlier ``report(..., checkpoint=...)`` to resume from.
    """
    report = report or (lambda metrics, checkpoint=None: None)
    cfg = resolve(config)
    trainer = Trainer(cfg)
    if state is not None:
        trainer.load_state_dict(state)
    t = cfg.train
    total = trainer.total_steps
    window: list[dict] = []
    final, final_ckpt = {"step": trainer.step}, None  # stays so when resumed from a finished checkpoint
    t0 = time.perf_counter()
    steps_timed = 0
    while trainer.step < total:
        window.append(trainer.train_step())
        steps_timed += 1
        s = trainer.step
        if s % t.log_every == 0 or s % t.eval_every == 0 or s == total:
            elapsed = time.perf_counter() - t0
            metrics = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
            metrics.update(step=s, time_per_step_ms=1000 * elapsed / steps_timed)
            window = []
            if s % t.eval_every == 0 and s < total:
                metrics.update({f"dev/{k}": v for k, v in trainer.evaluate(next(iter(trainer.data.eval_splits.values()))).items()})
            ckpt = trainer.state_dict() if checkpoint_every and (s % checkpoint_every == 0 or s == total) else None
            if s < total:
                report(metrics, checkpoint=ckpt)
            else:
                final = metrics
                final_ckpt = ckpt
    for name, examples in trainer.data.eval_splits.items():
        final.update({f"{name}/{k}": v for k, v in trainer.evaluate(examples).items()})
    for name, obj in getattr(trainer.model, "artifacts", dict)().items():
        final[f"artifact:{name}"] = obj  # JSON-able; the tracker stores it as an MLflow artifact
    final.update(peak_mem_mb=trainer.peak_mem_mb(), num_params=sum(p.numel() for p in trainer.model.parameters()),
                 device=device_name() if trainer.device.type == "cuda" else "cpu", final=True)
    report(final, checkpoint=final_ckpt)
    return final


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"
