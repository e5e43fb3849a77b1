"""What every ``rirlab bench`` protocol shares: the options, the protocol table, a model built at its defaults,
random and ListOps batches, one timed step, peak memory and a memory cap.

A protocol is ``fn(opts: BenchOptions) -> dict`` (JSON-able) in a module of this package, added with
``@protocol("name")``; ``run`` imports the package's modules on first use, so a new protocol is one new file.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import random
from typing import Callable, Optional

import torch

from rirlab.errors import UserError

PROTOCOLS: dict[str, Callable] = {}
TABLE1_BINS = ((200, 250), (500, 600), (900, 1000), (1500, 2000))
TABLE1_ROWS = 11  # rows of RIR Table 1; each model's entry names its own (``table1_row``)
LISTOPS_VOCAB, LISTOPS_CLASSES = 16, 10


@dataclasses.dataclass
class BenchOptions:
    model: str = "rir_ebt_grc"
    models: tuple = ()  # table1: empty = the registered models of RIR Table 1 (their entries' ``table1_row``)
    batch: int = 16
    length: int = 100
    lengths: str = "full"  # step: full (every row `length` long) | padded (one row `length`, the others shorter)
    mode: str = "train"  # train | eval
    inference: Optional[str] = None  # rir | non_rir (models with an ``inference`` field)
    device: str = "cpu"
    precision: str = "fp32"  # step, table1: fp32 | bf16 (autocast of the forward, as the trainer's precision)
    repeats: int = 5
    warmup: int = 2
    samples: int = 100  # table1: samples per bin
    bins: tuple = TABLE1_BINS
    mem_cap_gb: float = 0.0  # table1: memory cap per cell (0: none); exceeding it is reported as OOM
    time_cap_s: float = 0.0  # table1: time cap per cell (0: none); exceeding it is reported as TIMEOUT
    overrides: dict = dataclasses.field(default_factory=dict)  # extra model config fields
    threads: int = 0
    seed: int = 0
    task: str = "listops"  # learn: the task
    recipe: str = "paper"  # learn: rirlab.config.RECIPES
    minutes: float = 20.0  # learn: budget of training time (evaluation excluded)
    thresholds: tuple = (50.0, 80.0, 95.0, 99.0)  # learn: dev accuracies (%) to time
    eval_every: int = 100  # learn: steps between dev-subset evaluations (curve points)
    dev_examples: int = 1000  # learn: dev examples per curve point (the first of the dev split)
    checkpoint: Optional[str] = None  # learn: resume from this file if it exists; the state is written there at the end
    splits: str = "all"  # learn: splits evaluated with the best-dev weights at the end: all | none | comma-separated
    progress: Optional[Callable[[str], None]] = None  # learn: called with one line per curve point


def protocol(name: str):
    def deco(fn):
        PROTOCOLS[name] = fn
        return fn

    return deco


def run(name: str, opts: BenchOptions) -> dict:
    import rirlab.bench as package

    for mod in pkgutil.iter_modules(package.__path__):  # every protocol module registers itself
        importlib.import_module(f"{package.__name__}.{mod.name}")
    if name not in PROTOCOLS:
        raise UserError(f"unknown bench protocol '{name}'; known: {', '.join(sorted(PROTOCOLS))}")
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for but torch sees no CUDA device; use --device cpu")
    if opts.threads:
        torch.set_num_threads(opts.threads)
    from rirlab.perf import tune_allocator

    tune_allocator()
    torch.manual_seed(opts.seed)
    random.seed(opts.seed)
    if name != "learn" and (opts.task != BenchOptions.task or opts.recipe != BenchOptions.recipe):
        raise UserError(f"bench: --task / --recipe belong to --protocol learn, not {name}")
    return {"protocol": name, "device": device_name(opts.device), **PROTOCOLS[name](opts)}


def device_name(device: str) -> str:
    import os

    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} threads)"


def build_model(name: str, opts: BenchOptions, extra: Optional[dict] = None):
    """The registered model at its config defaults (the papers' ListOps settings) plus overrides."""
    from rirlab.config import build, field_names
    from rirlab.models import registry
    from rirlab.tasks.base import TaskInfo

    entry = registry.get(name)
    values = {k: v for k, v in {**opts.overrides, **(extra or {})}.items() if k in field_names(entry.config)}
    unknown = set(opts.overrides) - set(field_names(entry.config))
    if unknown and name == opts.model:
        raise UserError(f"bench: model '{name}' has no field(s) {sorted(unknown)}")
    cfg = build(entry.config, values, "bench")
    return entry.build(cfg, TaskInfo(LISTOPS_VOCAB, LISTOPS_CLASSES, "classify")).to(opts.device)


LENGTHS = ("full", "padded")


def random_batch(batch: int, length: int, device: str, lengths: str = "full") -> dict:
    """Random ListOps-vocabulary tokens (N, S). ``lengths``: ``full``, every row ``length`` long; ``padded``, the
    first row ``length`` long and the others uniform in [length // 5, length] (at least 1), right-padded: a
    bucket of mixed lengths as training sees it (issue 31's zoo benchmark: 16 x 100, rows of 20-100)."""
    if lengths not in LENGTHS:
        raise UserError(f"bench: --lengths must be one of {', '.join(LENGTHS)}, not {lengths!r}")
    tokens = torch.randint(1, LISTOPS_VOCAB, (batch, length), device=device)  # (N, S)
    mask = torch.ones(batch, length, dtype=torch.bool, device=device)
    if lengths == "padded":
        rows = torch.randint(max(1, length // 5), length + 1, (batch,))  # (N,)
        rows[0] = length
        mask = (torch.arange(length) < rows[:, None]).to(device)  # (N, S)
        tokens = tokens * mask
    return {"tokens": tokens, "mask": mask, "labels": torch.randint(0, LISTOPS_CLASSES, (batch,), device=device)}


class PeakMemory:
    """Peak memory (MB) of the work inside the ``with`` block."""

    def __init__(self, device: str):
        self.device = device

    def __enter__(self):
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            from rirlab.train import rss_mb

            self.base = rss_mb()
        return self

    def __exit__(self, *exc):
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.mb = (torch.cuda.max_memory_allocated() - self.base) / 2**20
        else:
            from rirlab.train import rss_mb

            self.mb = rss_mb() - self.base


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def bench_optimizer(model) -> torch.optim.Optimizer:
    """AdamW as the trainer steps it on a GPU, on every device: the fused kernel (rirlab.optim.adamw_kernel), one
    launch for all parameters with no host read of their step counts; torch has it on the CPU too, so a CPU count
    of a step's ops is the GPU's. (Until 2026-12-05 the multi-tensor step, torch's CUDA default, which the trainer then
    used: 8 + 2 per parameter more ops per step, in benchmarks/HISTORY.md's earlier op counts.)"""
    return torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)


def one_step(model, opt, batch: dict, train: bool, precision: str = "fp32") -> None:
    import torch.nn.functional as F

    from rirlab.models.base import autocast

    if train:
        with autocast(precision, batch["tokens"].device):
            logits = model(batch).logits
        loss = F.cross_entropy(logits.float(), batch["labels"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    else:
        with torch.no_grad(), autocast(precision, batch["tokens"].device):
            model(batch)


@functools.lru_cache(maxsize=8)
def listops_bin(lo: int, hi: int, n: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """n ListOps token-id sequences with lo <= length <= hi (the tasks' length-steered generator); cached, as every
    model of a table reads the same bins (seconds of generation each)."""
    from rirlab.tasks import listops

    examples = listops.generate(n, seed, max_args=5, max_depth=20, min_len=lo, max_len=hi, steered=True)
    return tuple(tuple(listops.TOKEN_ID[t] for t in listops.tokenize(text)) for text, _ in examples)


def is_oom(err: BaseException) -> bool:
    """Out of memory on any device: torch.OutOfMemoryError (CUDA) or a CPU allocator failure (RuntimeError)."""
    if isinstance(err, getattr(torch, "OutOfMemoryError", ())) or isinstance(err, MemoryError):
        return True
    msg = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg
                                               or "cannot allocate memory" in msg)


class MemoryCap:
    """Cap the memory of the work inside the ``with`` block at ``gb`` GB (0: no cap), so that exceeding it raises
    an out-of-memory error that :func:`is_oom` recognises. CUDA: the per-process memory fraction of the device;
    CPU: the address-space limit (RLIMIT_AS) of this process, set to its current size + ``gb`` and restored after."""

    def __init__(self, gb: float, device: str):
        self.gb, self.device = gb, device

    def __enter__(self):
        if not self.gb:
            return self
        if self.device == "cuda":
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, (torch.cuda.memory_allocated() + self.gb * 2**30)
                                                           / total))
        else:
            import resource

            self.old = resource.getrlimit(resource.RLIMIT_AS)
            with open("/proc/self/statm") as f:
                size = int(f.read().split()[0]) * resource.getpagesize()
            cap = size + int(self.gb * 2**30)
            if self.old[1] != resource.RLIM_INFINITY:
                cap = min(cap, self.old[1])
            resource.setrlimit(resource.RLIMIT_AS, (cap, self.old[1]))
        return self

    def __exit__(self, *exc):
        if not self.gb:
            return
        if self.device == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0)
            torch.cuda.empty_cache()
        else:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, self.old)


def as_batch(ids: list[int], device: str) -> dict:
    tokens = torch.tensor([ids], device=device)  # (1, S)
    return {"tokens": tokens, "mask": torch.ones_like(tokens, dtype=torch.bool)}
