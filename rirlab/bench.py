"""Speed and memory benchmarks (``rirlab bench``): one protocol = one function in ``PROTOCOLS``.

A protocol is ``fn(opts: BenchOptions) -> dict`` (JSON-able). Add one with ``@protocol("name")``.

- ``step``: median wall time of one step (train: forward + backward + AdamW; eval: forward
  under no_grad) after warm-up, and peak memory, for one model at batch x length.
- ``table1``: RIR paper Table 1 -- 100 ListOps samples per length bin, batch 1, training-mode
  forward + backward, the ListOps hyperparameters; minutes and peak memory per bin per model.

Peak memory: ``torch.cuda.max_memory_allocated`` on GPU; on CPU the increase of the process's
peak RSS over its baseline before the measured work (a lower bound when an earlier phase
peaked higher).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from typing import Callable, Optional

import torch

from rirlab.errors import UserError

PROTOCOLS: dict[str, Callable] = {}
TABLE1_BINS = ((200, 250), (500, 600), (900, 1000), (1500, 2000))
LISTOPS_VOCAB, LISTOPS_CLASSES = 16, 10


@dataclasses.dataclass
class BenchOptions:
    model: str = "rir_ebt_grc"
    models: tuple = ("rir_ebt_grc",)
    batch: int = 16
    length: int = 100
    mode: str = "train"  # train | eval
    inference: Optional[str] = None  # rir | non_rir (models with an ``inference`` field)
    device: str = "cpu"
    repeats: int = 5
    warmup: int = 2
    samples: int = 100  # table1: samples per bin
    bins: tuple = TABLE1_BINS
    overrides: dict = dataclasses.field(default_factory=dict)  # extra model config fields
    threads: int = 0
    seed: int = 0


def protocol(name: str):
    def deco(fn):
        PROTOCOLS[name] = fn
        return fn

    return deco


def run(name: str, opts: BenchOptions) -> dict:
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


def random_batch(batch: int, length: int, device: str) -> dict:
    tokens = torch.randint(1, LISTOPS_VOCAB, (batch, length), device=device)  # (N, S)
    return {"tokens": tokens, "mask": torch.ones(batch, length, dtype=torch.bool, device=device),
            "labels": torch.randint(0, LISTOPS_CLASSES, (batch,), device=device)}


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


def one_step(model, opt, batch: dict, train: bool) -> None:
    import torch.nn.functional as F

    if train:
        loss = F.cross_entropy(model(batch).logits, batch["labels"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    else:
        with torch.no_grad():
            model(batch)


@protocol("step")
def step(opts: BenchOptions) -> dict:
    """Median time (ms) of one train or eval step at batch x length, after warm-up."""
    if opts.mode not in ("train", "eval"):
        raise UserError(f"bench: --mode must be train or eval, not {opts.mode!r}")
    extra = {"inference": opts.inference} if opts.inference else {}
    model = build_model(opts.model, opts, extra)
    model.train(opts.mode == "train")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = random_batch(opts.batch, opts.length, opts.device)
    times = []
    with PeakMemory(opts.device) as mem:  # warm-up inside: on CPU the RSS high-water mark is set by the first step
        for _ in range(opts.warmup):
            one_step(model, opt, batch, opts.mode == "train")
        for _ in range(opts.repeats):
            sync(opts.device)
            t0 = time.perf_counter()
            one_step(model, opt, batch, opts.mode == "train")
            sync(opts.device)
            times.append(1000 * (time.perf_counter() - t0))
    return {"model": opts.model, "batch": opts.batch, "length": opts.length, "mode": opts.mode,
            "inference": opts.inference, "overrides": opts.overrides, "median_ms": statistics.median(times),
            "times_ms": times, "peak_mem_mb": mem.mb}


def listops_bin(lo: int, hi: int, n: int, seed: int) -> list[list[int]]:
    """n ListOps token-id sequences with lo <= length <= hi (the tasks' length-steered generator)."""
    from rirlab.tasks import listops

    examples = listops.generate(n, seed, max_args=5, max_depth=20, min_len=lo, max_len=hi, steered=True)
    return [[listops.TOKEN_ID[t] for t in listops.tokenize(text)] for text, _ in examples]


@protocol("table1")
def table1(opts: BenchOptions) -> dict:
    """RIR Table 1: minutes and peak memory per length bin per model (batch 1, train forward + backward)."""
    rows = []
    for name in opts.models:
        model = build_model(name, opts)
        model.train()
        for lo, hi in opts.bins:
            seqs = listops_bin(lo, hi, opts.samples, opts.seed)
            one_step(model, None, as_batch(seqs[0], opts.device), False)  # warm-up (allocator, kernels)
            with PeakMemory(opts.device) as mem:
                sync(opts.device)
                t0 = time.perf_counter()
                for s in seqs:
                    loss = model(as_batch(s, opts.device)).logits.sum()
                    loss.backward()
                    model.zero_grad(set_to_none=True)
                sync(opts.device)
                minutes = (time.perf_counter() - t0) / 60
            rows.append({"model": name, "bin": f"{lo}-{hi}", "minutes": minutes, "peak_mem_gb": mem.mb / 1024,
                         "samples": len(seqs)})
    return {"rows": rows}


def as_batch(ids: list[int], device: str) -> dict:
    tokens = torch.tensor([ids], device=device)  # (1, S)
    return {"tokens": tokens, "mask": torch.ones_like(tokens, dtype=torch.bool)}


@protocol("gut_halt")
def gut_halt(opts: BenchOptions) -> dict:
    """Dynamic-halt paper §7: GUT vs "GUT upper bound" vs "GUT no halt" at upper bounds 10-40 (ms per train step).

    Runs ``benchmarks/gut_halting.py`` of the repository checkout: ``--repeats`` timed steps after
    ``--warmup``, ``--batch``; ``--set bounds=10,20 hidden_size=64 num_heads=4 halt_loss_weight=0.1``.
    """
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gut_halting.py"
    if not path.exists():
        raise UserError(f"bench gut_halt needs the repository checkout ({path} is missing); run it from a git clone")
    spec = importlib.util.spec_from_file_location("gut_halting", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    o = opts.overrides
    bounds = tuple(int(b) for b in str(o.get("bounds", "10,20,30,40")).split(","))
    result = mod.run_comparison(bounds, steps=opts.repeats, warmup=opts.warmup, batch=opts.batch,
                                hidden_size=int(o.get("hidden_size", 32)), num_heads=int(o.get("num_heads", 4)),
                                beta=float(o.get("halt_loss_weight", 0.1)), device=opts.device, seed=opts.seed)
    return {**result, "table": mod.format_table(result)}
