"""Training and evaluation of ONE trial: a flat config dict in, metrics out through a report callback.

Knows nothing of Ray or MLflow (and imports neither: ``rirlab bench`` runs it on machines without them).
``report(metrics, checkpoint=None)`` is called every ``log_every`` steps and at every epoch end where dev is
evaluated (``checkpoint`` is a state dict when the trainer wants one persisted, every ``checkpoint_every``
steps); the last report holds the final metrics of every evaluation split and ``final: True``.

The recipe (rirlab.config.RECIPES) decides the optimiser, the lr scheduler, early stopping and which weights
the evaluation splits see. Under ``select_by`` accuracy / loss (recipe paper: auto) dev is evaluated at every
epoch end and at the last step (and every ``dev_every`` steps when set); the best of those (improvement > 1e-4,
as the papers' code) is kept and every split is evaluated with it at the end. The final report then carries
``best/step``, ``best/epoch``, ``best/dev_accuracy``, ``best/dev_loss``, ``stopped_epoch``, ``early_stopped``
(1 when early stopping ended the trial) and ``last/dev_accuracy``, ``last/dev_loss``: the last step's dev evaluation
(the last weights, under ``dev_inference`` where set), whose step the final ``dev/*`` of the tested weights takes.

Metrics: the names in rirlab.contract, whose ``METRICS`` says what each means and in which unit (one unit per kind:
accuracy %, loss nats, time ms, memory MiB); docs/metrics.md's table is generated from it. Only those are reported.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import re
import resource
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from rirlab import contract as C
from rirlab import optim
from rirlab.errors import UserError
from rirlab.optim import Ranger
from rirlab.models import registry as models
from rirlab.models.base import autocast
from rirlab.perf import TensorMemory, tune_allocator
from rirlab.redact import MASK, redact_all
from rirlab.tasks import registry as tasks
from rirlab.tasks.batching import BatchPlan, eval_batches, example_length, loader, pool_length
from rirlab.trial import TrialConfig, resolve

Report = Callable[..., None]

IMPROVEMENT = 1e-4  # a dev score must beat the best by more than this to count (papers' code)


def selection_metric(model: str, select_by: str) -> str:
    """"accuracy" or "loss": what the dev score is (for selection, the plateau scheduler and early stopping)."""
    if select_by in ("accuracy", "loss"):
        return select_by
    return models.get(model).select_by  # auto: the model's, declared in its @register


def param_groups(model: torch.nn.Module, t) -> list[dict]:
    """One group, or (s4d_lr_cap > 0) the parameters the model marks "s4d" (rirlab.optim.mark_group: the S4D
    kernels' and their layers' D) with lr min(cap, lr) first, then the rest (RIR code's agent)."""
    wd = t.weight_decay if t.s4d_weight_decay is None else t.s4d_weight_decay
    groups = {"s4d": {"lr": min(t.s4d_lr_cap, t.lr), "weight_decay": wd}} if t.s4d_lr_cap else {}
    return optim.param_groups(model, t.lr, t.weight_decay, groups)


def make_optimizer(model: torch.nn.Module, t) -> torch.optim.Optimizer:
    groups = param_groups(model, t)
    if t.optimizer == "ranger":
        return Ranger(groups, lr=t.lr, weight_decay=t.weight_decay, eps=t.ranger_eps)
    return torch.optim.AdamW(groups, lr=t.lr, weight_decay=t.weight_decay, betas=(t.adam_beta1, t.adam_beta2),
                             eps=t.adam_eps, **optim.adamw_kernel(groups))


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or inf at training step ``step`` (1-based: the step that would have made the
    ``step`` metric equal ``step``)."""

    def __init__(self, value: float, step: int):
        super().__init__(f"training loss became {value} at step {step}")
        self.value, self.step = value, step

    def __reduce__(self):  # picklable across processes (Ray) despite the two-argument constructor
        return type(self), (self.value, self.step)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda was asked for but torch sees no CUDA device")
    return torch.device(name)


def rss_mb() -> float:
    """Peak resident set size of this process in MB (Linux reports KB), since :func:`reset_peak_rss`."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> None:
    """Start :func:`rss_mb`'s peak again from the current resident size (Linux: ``/proc/self/clear_refs`` 5 resets
    the high-water mark that ``ru_maxrss`` reports), so a trial in a reused worker (a sweep's ``reuse_workers``)
    reports its own peak, not an earlier trial's. Elsewhere a no-op: the process's peak since it started."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def aux_loss_weight(cfg: TrialConfig) -> float:
    """The weight of the model's auxiliary loss: the config field its registry entry names (halting models'
    halt_loss_weight); 0 for a model without one."""
    key = models.get(cfg.model).aux_loss_key
    return float(getattr(cfg.model_cfg, key)) if key else 0.0


def training_loss(model, batch: dict, precision: str, device, aux_weight: float):
    """The training objective of one batch: the task's cross-entropy (token-level where labels >= 0 for language
    modelling) plus ``aux_weight`` x the model's auxiliary loss. Returns (total, task loss, logits, labels, the
    model's output). The trainer and the dry run's step timing both call this."""
    with autocast(precision, device):  # bf16 / fp16: the models keep beam scores etc. in fp32
        out = model(batch)
    logits, labels = out.logits.float(), batch["labels"]
    if logits.dim() == 3:  # language modelling: loss only where labels >= 0
        keep = labels >= 0
        logits, labels = logits[keep], labels[keep]
    loss = F.cross_entropy(logits, labels)
    total = loss if out.aux_loss is None else loss + aux_weight * out.aux_loss.float()
    return total, loss, logits, labels, out


def host_values(values: list) -> list[float]:
    """Scalars (0-d tensors on any device, or numbers) as Python floats in ONE host read: on CUDA every ``.item()``
    waits for the queue to drain, so the step's loss, accuracy count and auxiliary loss are read together."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    read = iter(torch.stack([v.detach().reshape(()).to(torch.float64) for v in tensors]).tolist() if tensors else [])
    return [next(read) if isinstance(v, torch.Tensor) else float(v) for v in values]


def checkpoint_config(cfg: TrialConfig) -> dict:
    """The trial's resolved flat config as its checkpoints carry it (``contract.STATE_CONFIG``), so that a checkpoint
    says what it is and ``rirlab evaluate CHECKPOINT`` needs no spec: plain JSON types only (what torch's
    weights-only loader reads; ``resolve`` of it gives the same config back), passwords in URLs masked as in every
    record of a trial (rirlab.redact)."""
    return json.loads(json.dumps(redact_all(cfg.flat()), default=str))


# keys a resumed trial takes from this run rather than from its checkpoint: where and how fast it runs, not what it
# trains (a cache folder the driver made absolute, the threads, the device)
RUNTIME_KEYS = frozenset({"num_threads", "device", "cache_dir"})

# training keys newer than some checkpoints, with the value an earlier rirlab trained with where a checkpoint's config
# lacks them: a trial started before batch_order existed (2026-12-07) shuffled all of an epoch's batches together
LEGACY_VALUES = {"batch_order": "shuffled"}


def drifted_keys(saved: dict, cfg: TrialConfig) -> dict:
    """{key: (checkpoint's value, this code's value)} of the training keys on which ``cfg`` (the trial's config as
    this rirlab resolves it) differs from ``saved``, the resolved config its checkpoint was trained with
    (``checkpoint_config``). The spec and its flags are the same on ``--resume`` (the spec hash says so), so such a
    difference is a default that changed between the rirlab that started the trial and the one resuming it (Ranger's
    eps, 2026-12-06); a key the checkpoint lacks counts at the value the rirlab before it trained with
    (``LEGACY_VALUES``); keys this rirlab no longer has, runtime keys and masked values are left out."""
    now = checkpoint_config(cfg)
    saved = {**LEGACY_VALUES, **saved}
    return {k: (v, now[k]) for k, v in saved.items()
            if k in now and k not in RUNTIME_KEYS and v != now[k] and MASK not in json.dumps(v)}


def resumed_config(config: dict, state: Optional[dict]) -> TrialConfig:
    """The resolved config a trial resumed from ``state`` continues with: ``config`` as resolved now, except that
    every training key whose value changed since the checkpoint was written (``drifted_keys``) keeps the
    checkpoint's value, so one run never trains under two settings while its params record one; a warning names
    them."""
    cfg = resolve(config)
    saved = (state or {}).get(C.STATE_CONFIG)
    if not isinstance(saved, dict):
        return cfg
    drift = drifted_keys(saved, cfg)
    if not drift:
        return cfg
    logging.getLogger(__name__).warning(
        "resumed from a checkpoint of an earlier rirlab: keeping its %s (this rirlab's defaults: %s)",
        ", ".join(f"{k}={v!r}" for k, (v, _) in sorted(drift.items())),
        ", ".join(f"{k}={n!r}" for k, (_, n) in sorted(drift.items())))
    return resolve({**cfg.flat(), **{k: v for k, (v, _) in drift.items()}})


class Trainer:
    """Builds task data and model from a resolved config; trains under its recipe; evaluates every split."""

    def __init__(self, cfg: TrialConfig):
        self.cfg = cfg
        t = cfg.train
        tune_allocator()
        if t.num_threads:
            torch.set_num_threads(t.num_threads)
        seed_everything(t.seed)
        self.device = pick_device(t.device)
        self.task = tasks.get(cfg.task)
        self.data = self.task.load(cfg.task_cfg)
        self.model = models.get(cfg.model).build(cfg.model_cfg, self.data.info).to(self.device)
        self.opt = make_optimizer(self.model, t)
        # fp16 (the dynamic-halt code's float16 autocast): a dynamic loss scale; disabled, it passes everything through
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=t.precision == "fp16")
        self.micro = t.micro_batch_size if t.micro_batch_size and t.micro_batch_size < t.batch_size else None
        self.memory = TensorMemory(self.model, self.opt)  # CPU: tensor-level high-water mark (peak_mem_mb)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)  # this trial's peak, not an earlier one's in the worker
        self.aux_loss_weight = aux_loss_weight(cfg)
        self.step = 0
        # the authors' collater sorts a pool by len(sequence_vec): for pairs S1 + <SEP> + S2 (pool_length)
        key = pool_length if t.batch_order == "pools" else example_length
        self.plan = BatchPlan([key(x) for x in self.data.train], t.batch_size, t.seed, t.bucket_factor, t.batch_order)
        self.batches_per_epoch = self.plan.batches_per_epoch
        self._batches, self._batches_step = None, -1  # loader iterator and the step it yields next
        self.total_steps = t.epochs * self.batches_per_epoch if t.epochs else t.steps
        if t.scheduler == "plateau":  # mode max on the dev score (accuracy, or -loss), as the papers' code
            self.sched = torch.optim.lr_scheduler.ReduceLROnPlateau(self.opt, mode="max", factor=t.plateau_factor,
                                                                    patience=t.plateau_patience)
        elif t.lr_decay == "one_cycle":  # the dynamic-halt code's "linearwarmup" (config.py), momentum cycled too
            if self.total_steps <= t.warmup_steps:
                raise UserError(f"lr_decay=one_cycle needs more training steps ({self.total_steps}) than "
                                f"warmup_steps ({t.warmup_steps})")
            self.sched = torch.optim.lr_scheduler.OneCycleLR(
                self.opt, max_lr=[g["lr"] for g in self.opt.param_groups], total_steps=self.total_steps,
                pct_start=t.warmup_steps / self.total_steps, anneal_strategy="linear")
        else:
            self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, self.lr_factor)
        self.metric = selection_metric(cfg.model, t.select_by)
        self.best: dict = {}  # step, epoch, dev_accuracy, dev_loss, score of the best dev evaluation so far
        self.best_weights: Optional[dict] = None
        self.bad_epochs = 0  # epoch-end dev evaluations since the last improvement
        self.stopped = False  # early stopping ended training

    def lr_factor(self, step: int) -> float:
        t = self.cfg.train
        if t.lr_decay == "root_warmup":  # the dynamic-halt code's RootWarmup: warm-up and 1/sqrt decay, unnormalised
            w = max(1, t.warmup_steps)
            return min(1.0, (step + 1) / w) / math.sqrt(max(step + 1, w))
        if step < t.warmup_steps:
            return (step + 1) / t.warmup_steps
        if t.lr_decay == "none":
            return 1.0
        if t.lr_decay == "inverse_sqrt":  # (fairseq-style) lr * sqrt(warmup / step) after the warm-up
            return math.sqrt(max(1, t.warmup_steps) / (step + 1))
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
                                        self.cfg.train.num_workers, self.micro))
            self._batches_step = self.step
        self._batches_step += 1
        return self.to_device(next(self._batches))

    def to_device(self, batch):
        """A collated batch (dict of tensors), or a list of them (micro-batches), on the trial's device."""
        if isinstance(batch, list):
            return [self.to_device(b) for b in batch]
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def loss_of(self, batch: dict):
        """(total, task loss, correct predictions, predictions, model output): the count a device tensor, read
        with the step's other values in one host read (:func:`host_values`)."""
        total, loss, logits, labels, out = training_loss(self.model, batch, self.cfg.train.precision, self.device,
                                                         self.aux_loss_weight)
        correct = (logits.argmax(-1) == labels).sum()
        return total, loss.detach(), correct, labels.numel(), out

    def train_step(self) -> dict:
        """One optimiser step on the batch of ``self.step``: its micro-batches (``micro_batch_size``) forward and
        backward in turn, each loss weighted by its share of the batch's examples; fp16: through the grad scaler."""
        self.model.train()
        batch = self.next_batch()
        parts = batch if isinstance(batch, list) else [batch]
        size = sum(len(p["labels"]) for p in parts)  # examples in the batch
        self.opt.zero_grad(set_to_none=True)
        loss_sum, correct, n, aux, stats = 0.0, 0, 0, 0.0, {}
        for part in parts:
            if self.device.type == "cuda":
                total, loss, c, k, out = self.loss_of(part)
            else:
                with self.memory.track():
                    total, loss, c, k, out = self.loss_of(part)
            has_aux = out.aux_loss is not None
            total_v, loss_v, c_v, *aux_v = host_values([total.detach(), loss, c]
                                                       + ([out.aux_loss.detach()] if has_aux else []))
            if not math.isfinite(total_v):
                raise NonFiniteLoss(total_v, self.step + 1)
            share = len(part["labels"]) / size
            self.scaler.scale(total * share if len(parts) > 1 else total).backward()
            loss_sum += share * loss_v
            correct, n = correct + int(c_v), n + k
            if has_aux:
                aux += share * aux_v[0]
            for key, v in out.stats.items():
                stats[key] = stats.get(key, 0.0) + share * float(v)
        if self.cfg.train.grad_clip > 0:
            self.scaler.unscale_(self.opt)  # fp16: clip the true gradients (no-op otherwise)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        self.scaler.step(self.opt)  # fp16: skipped when a gradient is inf/NaN; otherwise opt.step()
        self.scaler.update()
        if not isinstance(self.sched, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.sched.step()
        self.step += 1
        m = {C.TRAIN_LOSS: loss_sum, C.TRAIN_ACCURACY: 100.0 * correct / max(n, 1)}
        if out.aux_loss is not None:
            m[C.TRAIN_AUX_LOSS] = aux
        m.update({C.TRAIN_PREFIX + k: v for k, v in stats.items()})
        return m

    @torch.no_grad()
    def evaluate(self, examples) -> dict:
        self.model.eval()
        t = self.cfg.train
        if t.max_eval_examples:
            examples = examples[: t.max_eval_examples]
        # by length (padding stays small) or, for a model whose output follows the batch's padding, as its authors'
        # loader (its ``eval_batches``: TLB/GUTLB "file", the RIR models "buckets" of bucket_factor batches)
        order = getattr(self.cfg.model_cfg, "eval_batches", "length")
        sums, count = [], 0  # per batch: its summed loss and correct count, on the device until the end
        for idx in eval_batches(examples, t.eval_batch_size, order, t.bucket_factor, self.task.bucket_cuts):
            batch = self.to_device(self.data.collate([examples[i] for i in idx]))
            _, loss, c, n, _ = self.loss_of(batch)
            sums += [loss.double() * n, c]
            count += n
        values = host_values(sums)  # one host read for the whole split, not two per batch
        loss_sum, correct = sum(values[0::2]), sum(values[1::2])
        return {"accuracy": 100.0 * correct / max(count, 1), "loss": loss_sum / max(count, 1), C.EXAMPLES: count}

    @property
    def epoch(self) -> float:
        return self.step / self.batches_per_epoch

    @property
    def lr(self) -> float:
        return self.opt.param_groups[-1]["lr"]

    def dev_split(self):
        return next(iter(self.data.eval_splits.values()))  # "dev" comes first

    def evaluate_dev(self) -> dict:
        """Dev during training, under the model's ``dev_inference`` where it has one (RIR models)."""
        with dev_inference(self.model):
            return self.evaluate(self.dev_split())

    def selection_point(self) -> Optional[dict]:
        """After a step: at an epoch end (and at the last step) of a recipe that selects, schedules or stops on
        dev, evaluate dev and act on it (:meth:`consider`); returns the dev metrics, or None where none is due."""
        t = self.cfg.train
        if not t.per_epoch_dev:
            return None
        epoch_end = self.step % self.batches_per_epoch == 0
        periodic = t.dev_every is not None and self.step % t.dev_every == 0
        if not (epoch_end or periodic or self.step == self.total_steps):
            return None
        dev = self.evaluate_dev()
        self.consider(dev, epoch_end, counts=epoch_end or periodic)
        return dev

    def consider(self, dev: dict, epoch_end: bool, counts: bool) -> None:
        """A dev evaluation at an epoch end, a ``dev_every`` point or the last step: plateau scheduler (epoch ends),
        best weights, early stopping (``counts``: whether a miss counts towards the patience; epoch ends and
        ``dev_every`` points, as the code's impatience counts every dev evaluation)."""
        t = self.cfg.train
        score = dev["accuracy"] if self.metric == "accuracy" else -dev["loss"]
        if epoch_end and isinstance(self.sched, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.sched.step(score)
        if not self.best or score - self.best["score"] > IMPROVEMENT:
            self.best = {"score": score, "step": self.step, "epoch": self.epoch, "dev_accuracy": dev["accuracy"],
                         "dev_loss": dev["loss"]}
            self.best_weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.bad_epochs = 0
        elif counts:
            self.bad_epochs += 1
            self.stopped = bool(t.early_stop_patience) and self.bad_epochs > t.early_stop_patience

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "best": dict(self.best),
            "best_weights": self.best_weights,
            "bad_epochs": self.bad_epochs,
            "stopped": self.stopped,
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},  # not aliases: the
            # final checkpoint must keep the last weights after the best-dev ones are loaded for evaluation
            "opt": self.opt.state_dict(),
            "sched": self.sched.state_dict(),
            "scaler": self.scaler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "py_rng": random.getstate(),
            C.STATE_CONFIG: checkpoint_config(self.cfg),  # read by `rirlab evaluate` and by a resume (resumed_config)
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.best, self.best_weights = dict(state.get("best", {})), state.get("best_weights")
        self.bad_epochs, self.stopped = state.get("bad_epochs", 0), state.get("stopped", False)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        random.setstate(state["py_rng"])

    def use_final_weights(self, weights: str = "auto") -> str:
        """Load the weights the test splits see and say which: ``best`` (the best dev evaluation's, where there
        was one), ``last`` (the current ones), ``auto`` (a trial's end: best unless the recipe selects ``last``)."""
        if weights == "auto":
            weights = "last" if self.cfg.train.select_by == "last" else "best"
        if weights == "best" and self.best_weights is not None:
            self.model.load_state_dict(self.best_weights)
            return "best"
        return "last"

    def peak_mem_mb(self) -> float:
        """What the model's training uses (module doc, metrics table): the CUDA allocator's peak, or on CPU the
        tensor-level high-water mark of :class:`rirlab.perf.TensorMemory`."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return self.memory.peak_bytes() / 2**20


def load_checkpoint(path) -> dict:
    """A checkpoint's state (``state.pt``, ``Trainer.state_dict`` saved by torch) read by torch's weights-only
    unpickler: tensors and plain data (dicts, lists, tuples, numbers, strings) and nothing else, so a crafted file
    cannot run code; it raises ``pickle.UnpicklingError`` for a file that names any other class or function."""
    return torch.load(path, map_location="cpu", weights_only=True)


def latest_checkpoint(folder, holding: str = C.CHECKPOINT_STATE_FILE) -> Optional[Path]:
    """The state file of a trial folder's latest checkpoint (``checkpoint_<n>/state.pt`` of the highest n, as Ray
    Tune numbers them); None when it holds none. What `rirlab evaluate TRIAL_DIR` and an evaluation-only row read.
    ``holding``: another file a checkpoint must hold (the latest one holding it, that file's path)."""
    every = checkpoints(folder, holding)
    return every[-1] if every else None


def checkpoints(folder, holding: str = C.CHECKPOINT_STATE_FILE) -> list[Path]:
    """The state files of every checkpoint in a trial folder, oldest first (by Ray Tune's number); a sweep keeps
    its ``keep_checkpoints`` latest. ``holding`` as in :func:`latest_checkpoint`."""
    numbered = [(int(m.group(1)), p) for p in Path(folder).glob("checkpoint_*")
                if (m := C.CHECKPOINT_DIR.fullmatch(p.name)) and (p / holding).is_file()]
    return [p / holding for _, p in sorted(numbered)]


def unreadable_checkpoint(path, err: Exception) -> str:
    """Why ``load_checkpoint`` failed, in one line: a file naming code is refused, not run."""
    text = str(err)
    names = re.search(r"GLOBAL (\S+)", text)
    if names:
        return (f"{path} holds more than weights and plain data (it names {names.group(1)}) and was not loaded: a "
                f"rirlab checkpoint never does (torch's weights-only loader); use a checkpoint a sweep wrote")
    why = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)  # not torch's advice to load it unsafely
    line = why.group(1) if why else (text.strip().splitlines() or [""])[0]
    return f"{path} is not a readable rirlab checkpoint ({type(err).__name__}: {line[:200]})"


@contextlib.contextmanager
def dev_inference(model: torch.nn.Module):
    """Within the block, every submodule with a ``dev_inference`` set (the RIR encoders) runs that inference."""
    changed = [(m, m.inference) for m in model.modules() if getattr(m, "dev_inference", None) is not None]
    for m, _ in changed:
        m.inference = m.dev_inference
    try:
        yield
    finally:
        for m, inference in changed:
            m.inference = inference


def run_trial(config: dict, report: Optional[Report] = None, *, state: Optional[dict] = None,
              checkpoint_every: int = 0) -> dict:
    """Train one trial described by a flat ``config`` dict; return the final metrics.

    ``state``: a checkpoint from an earlier ``report(..., checkpoint=...)`` to resume from.
    """
    report = report or (lambda metrics, checkpoint=None: None)
    cfg = resumed_config(config, state)
    reset_peak_rss()  # process_rss_mb: this trial's peak (a reused worker ran others before it)
    trainer = Trainer(cfg)
    if state is not None:
        trainer.load_state_dict(state)
    t = cfg.train
    total = trainer.total_steps
    window: list[dict] = []
    final, final_ckpt = {C.STEP: trainer.step}, None  # stays so when resumed from a finished checkpoint
    # wall and process CPU time of training steps only (no evaluation), since start or resume; the CPU time is
    # this process's alone (every thread of it), so trials sharing the cores do not inflate it as they do the wall
    train_s, cpu_s, steps_timed = 0.0, 0.0, 0
    while trainer.step < total and not trainer.stopped:
        t0, c0 = time.perf_counter(), time.process_time()
        window.append(trainer.train_step())  # ends in a host read of the loss: CUDA work is finished
        train_s += time.perf_counter() - t0
        cpu_s += time.process_time() - c0
        steps_timed += 1
        s = trainer.step
        dev = trainer.selection_point()
        last = s == total or trainer.stopped
        if s % t.log_every == 0 or s % t.eval_every == 0 or last or dev is not None:
            metrics = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
            metrics.update({C.STEP: s, C.TIME_PER_STEP_MS: 1000 * train_s / steps_timed,
                            C.CPU_TIME_PER_STEP_MS: 1000 * cpu_s / steps_timed, C.LR: trainer.lr,
                            C.EPOCH: trainer.epoch})
            window = []
            if dev is None and s % t.eval_every == 0 and not last:
                dev = trainer.evaluate_dev()
            if dev is not None and not last:  # at the end dev is reported with the other splits (and its N)
                metrics.update({C.split_metric("dev", k): dev[k] for k in C.EVAL_METRICS})
            ckpt = trainer.state_dict() if checkpoint_every and (s % checkpoint_every == 0 or last) else None
            if not last:
                report(metrics, checkpoint=ckpt)
            else:
                final = metrics
                final_ckpt = ckpt
                if dev is not None:  # the final dev/* (tested weights) takes this step: keep the last weights' here
                    final.update({C.LAST_PREFIX_METRIC + "dev_" + k: dev[k] for k in C.EVAL_METRICS})
    trainer.use_final_weights()  # every split sees the best-dev weights, unless the recipe selects the last
    if trainer.best:
        final.update({C.BEST_PREFIX_METRIC + k: v for k, v in trainer.best.items() if k != "score"})
        final.update({C.STOPPED_EPOCH: trainer.epoch, C.EARLY_STOPPED_METRIC: int(trainer.stopped)})
    for name, examples in trainer.data.eval_splits.items():
        final.update({C.split_metric(name, k): v for k, v in trainer.evaluate(examples).items()})
    for name, obj in getattr(trainer.model, "artifacts", dict)().items():
        final[C.ARTIFACT_PREFIX + name] = obj  # JSON-able; the tracker stores it as an MLflow artifact
    data_params = tasks.get(cfg.task).trial_params(cfg.task_cfg, list(trainer.data.eval_splits))  # e.g. OOV rates
    final.update({C.PARAM_PREFIX + k: v for k, v in data_params.items()})
    final.update({C.PEAK_MEM_MB: trainer.peak_mem_mb(), C.PROCESS_RSS_MB: rss_mb(),
                  C.NUM_PARAMS: sum(p.numel() for p in trainer.model.parameters()),
                  C.DEVICE: device_name() if trainer.device.type == "cuda" else "cpu", C.FINAL: True})
    report(final, checkpoint=final_ckpt)
    return final


def evaluate_checkpoint(config: dict, state: dict, weights: str = "auto", splits: Optional[list[str]] = None) -> dict:
    """Every eval split (dev and the test splits, or ``splits``) of a trial's checkpoint ``state``: with the
    weights of its best dev evaluation (``best``), those at the checkpoint's step (``last``), or (``auto``) those
    the trial's end uses (:func:`run_trial`: the best dev weights unless its recipe selects ``last``).

    For a trial that did not finish (stopped, killed, out of time): the cells it would have had if it had ended at
    that checkpoint. On a trial's final checkpoint it reproduces the trial's own test metrics. Returns
    ``{"step", "epoch", "weights", "best": {...}, "splits": {split: {"accuracy", "loss"}}}``."""
    return checkpoint_evaluator(config, splits)(state, weights)


def checkpoint_evaluator(config: dict, splits: Optional[list[str]] = None):
    """:func:`evaluate_checkpoint` for several checkpoints of one trial: the data and the model are built once,
    and each call ``(state, weights)`` loads a checkpoint's whole trainer state into them before it evaluates."""
    cfg = resolve(config)
    names = ["dev", *tasks.get(cfg.task).eval_split_names(cfg.task_cfg)]  # what Trainer loads, known before it
    unknown = [s for s in splits or [] if s not in names]
    if unknown:  # refused before the data and the model are built
        raise UserError(f"split {unknown[0]!r} is not one of this trial's splits ({', '.join(names)}); "
                        f"drop it or name one of those")
    trainer = Trainer(cfg)

    def evaluate(state: dict, weights: str = "auto") -> dict:
        try:
            trainer.load_state_dict(state)
        except (RuntimeError, ValueError, KeyError) as err:  # weights of another shape, another optimizer's state
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"the checkpoint does not fit the model and training state this config builds "
                            f"({first[:200]}); evaluate it with the settings of the trial that wrote it") from None
        used = trainer.use_final_weights(weights)
        out = {name: trainer.evaluate(trainer.data.eval_splits[name]) for name in splits or names}
        best = {k: v for k, v in trainer.best.items() if k != "score"}
        return {"step": trainer.step, "epoch": trainer.epoch, "weights": used, "best": best,
                "stopped": trainer.stopped, "total_steps": trainer.total_steps, "splits": out}

    return evaluate


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"
