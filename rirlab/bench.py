"""Speed and memory benchmarks (``rirlab bench``): one protocol = one function in ``PROTOCOLS``.

A protocol is ``fn(opts: BenchOptions) -> dict`` (JSON-able). Add one with ``@protocol("name")``.

- ``step``: median wall time of one step (train: forward + backward + AdamW; eval: forward
  under no_grad) after warm-up, and peak memory, for one model at batch x length.
- ``table1``: RIR paper Table 1 -- 100 ListOps samples per length bin, batch 1, training-mode
  forward + backward, the ListOps hyperparameters; minutes and peak memory per bin per model; OOM / TIMEOUT
  (under ``mem_cap_gb`` / ``time_cap_s``) reported in the cell.
- ``learn``: time to learn -- trains one model on a task under a recipe (rirlab.train.Trainer, no Ray or
  MLflow) for a budget of training minutes and reports the training seconds, steps and samples at which dev
  accuracy first reaches each threshold, and the curve (dev accuracy vs seconds).

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
TABLE1_ROWS = 11  # rows of RIR Table 1; each model's entry names its own (``table1_row``)
LISTOPS_VOCAB, LISTOPS_CLASSES = 16, 10


@dataclasses.dataclass
class BenchOptions:
    model: str = "rir_ebt_grc"
    models: tuple = ()  # table1: empty = the registered models of RIR Table 1 (their entries' ``table1_row``)
    batch: int = 16
    length: int = 100
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
    progress: Optional[Callable[[str], None]] = None  # learn: called with one line per curve point


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
            one_step(model, opt, batch, opts.mode == "train", opts.precision)
        for _ in range(opts.repeats):
            sync(opts.device)
            t0 = time.perf_counter()
            one_step(model, opt, batch, opts.mode == "train", opts.precision)
            sync(opts.device)
            times.append(1000 * (time.perf_counter() - t0))
    return {"model": opts.model, "batch": opts.batch, "length": opts.length, "mode": opts.mode,
            "inference": opts.inference, "precision": opts.precision, "overrides": opts.overrides,
            "median_ms": statistics.median(times),
            "times_ms": times, "peak_mem_mb": mem.mb}


def listops_bin(lo: int, hi: int, n: int, seed: int) -> list[list[int]]:
    """n ListOps token-id sequences with lo <= length <= hi (the tasks' length-steered generator)."""
    from rirlab.tasks import listops

    examples = listops.generate(n, seed, max_args=5, max_depth=20, min_len=lo, max_len=hi, steered=True)
    return [[listops.TOKEN_ID[t] for t in listops.tokenize(text)] for text, _ in examples]


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


def table1_models(opts: BenchOptions) -> tuple[list[str], list[str]]:
    """The models to run (``--models``, else the registered rows of RIR Table 1 in its order: the entries with a
    ``table1_row``) and notes on the rows skipped (a row that no registered model has)."""
    from rirlab.models import registry

    if opts.models:
        return list(opts.models), []
    rows = registry.table1_rows()
    have = {e.table1_row for e in rows}
    return [e.name for e in rows], [f"row {r}: no registered model, skipped" for r in range(1, TABLE1_ROWS + 1)
                                    if r not in have]


@protocol("table1")
def table1(opts: BenchOptions) -> dict:
    """RIR Table 1: minutes and peak memory per length bin per model (batch 1, train forward + backward).

    Default models: the rows of RIR Table 1 that are registered (``notes`` names the others). A cell that runs
    out of memory (CUDA OOM, a CPU allocation failure, or the ``mem_cap_gb`` cap) is reported with ``status``
    "OOM" and null figures instead of failing the table; one that passes ``time_cap_s`` seconds stops after the
    sample that crossed it with ``status`` "TIMEOUT" (a bin whose samples all finished is "ok"). A model's larger
    bins after an OOM or TIMEOUT are not run and carry the same status (``skipped``: true), as the paper's table marks them.
    """
    from rirlab.models import registry
    from rirlab.models.base import autocast

    names, notes = table1_models(opts)
    rows = []
    for name in names:
        settings = registry.get(name).table1_settings  # the model's Table 1 settings; a --set of the same key wins
        model = build_model(name, opts, {k: v for k, v in settings.items() if k not in opts.overrides})
        model.train()
        failed = None
        for lo, hi in opts.bins:
            row = {"model": name, "bin": f"{lo}-{hi}", "minutes": None, "peak_mem_gb": None, "samples": 0,
                   "status": "ok"}
            if failed:
                rows.append({**row, "status": failed, "skipped": True})
                continue
            seqs = listops_bin(lo, hi, opts.samples, opts.seed)
            try:
                with MemoryCap(opts.mem_cap_gb, opts.device):
                    one_step(model, None, as_batch(seqs[0], opts.device), False)  # warm-up (allocator, kernels)
                    with PeakMemory(opts.device) as mem:
                        sync(opts.device)
                        t0 = time.perf_counter()
                        for s in seqs:
                            with autocast(opts.precision, opts.device):
                                loss = model(as_batch(s, opts.device)).logits.float().sum()
                            loss.backward()
                            model.zero_grad(set_to_none=True)
                            loss = None
                            row["samples"] += 1
                            if (opts.time_cap_s and row["samples"] < len(seqs)
                                    and time.perf_counter() - t0 > opts.time_cap_s):
                                row["status"] = "TIMEOUT"
                                break
                        sync(opts.device)
                        minutes = (time.perf_counter() - t0) / 60
                row.update(minutes=minutes, peak_mem_gb=mem.mb / 1024)
            except Exception as err:  # noqa: BLE001 -- only out-of-memory is a cell result; the rest re-raises
                if not is_oom(err):
                    raise
                loss = None
                model.zero_grad(set_to_none=True)
                if opts.device == "cuda":
                    torch.cuda.empty_cache()
                row.update(status="OOM", error=str(err).splitlines()[0][:200])
            if row["status"] != "ok":
                failed = row["status"]
            rows.append(row)
    return {"rows": rows, "notes": notes, "samples_per_bin": opts.samples, "mem_cap_gb": opts.mem_cap_gb,
            "time_cap_s": opts.time_cap_s}


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


@protocol("learn")
def learn(opts: BenchOptions) -> dict:
    """Time to learn: train ``opts.model`` on ``opts.task`` under ``opts.recipe`` for ``opts.minutes`` of training.

    Every ``eval_every`` steps (and at step 0 and the last step) dev accuracy on the first ``dev_examples`` dev
    examples is one curve point. ``train_seconds`` counts only training steps (data, forward, backward,
    optimiser; synchronised on CUDA); dev evaluations, the curve's and the recipe's own per-epoch ones, go to
    ``eval_seconds``; ``wall_seconds`` is both (setup excluded, reported as ``setup_seconds``). The budget is
    on ``train_seconds``; training also ends at the config's steps / epochs or by the recipe's early stopping.
    ``--set`` overrides any trial key: model, task (n_train, ...) or training (batch_size, lr, ...).
    """
    from rirlab.trial import resolve
    from rirlab.train import Trainer

    if not opts.thresholds or any(not 0 < t <= 100 for t in opts.thresholds):
        raise UserError(f"bench learn: thresholds {list(opts.thresholds)} must be dev accuracies in (0, 100]")
    config = {"model": opts.model, "task": opts.task, "recipe": opts.recipe, "device": opts.device,
              "seed": opts.seed, "num_threads": opts.threads, **opts.overrides}
    if "steps" not in opts.overrides and "epochs" not in opts.overrides:
        config["epochs"] = 100  # the papers' cap; the time budget usually ends training first
    cfg = resolve(config, where="bench learn")
    say = opts.progress or (lambda line: None)
    t_setup = time.perf_counter()
    trainer = Trainer(cfg)
    setup_s = time.perf_counter() - t_setup
    dev = list(trainer.dev_split())[: opts.dev_examples]
    budget = 60.0 * opts.minutes
    clock = {"train": 0.0, "eval": 0.0, "samples": 0}
    curve: list[dict] = []
    reached: dict[float, Optional[dict]] = {float(t): None for t in sorted(opts.thresholds)}
    losses: list[float] = []
    say(f"learn: {opts.model} on {opts.task}, recipe {cfg.train.recipe}, batch {cfg.train.batch_size}, "
        f"{len(trainer.data.train)} train / {len(dev)} dev examples, budget {opts.minutes:g} min of training, "
        f"{device_name(opts.device)}; setup {setup_s:.1f} s")

    def timed(fn, key: str):
        sync(opts.device)
        t0 = time.perf_counter()
        out = fn()
        sync(opts.device)
        clock[key] += time.perf_counter() - t0
        return out

    def point() -> None:
        m = timed(lambda: trainer.evaluate(dev), "eval")
        p = {"step": trainer.step, "samples": clock["samples"], "epoch": trainer.epoch,
             "train_seconds": clock["train"], "wall_seconds": clock["train"] + clock["eval"],
             "dev_accuracy": m["accuracy"], "dev_loss": m["loss"],
             "train_loss": sum(losses) / len(losses) if losses else None, "lr": trainer.lr}
        losses.clear()
        curve.append(p)
        for thr, hit in reached.items():
            if hit is None and p["dev_accuracy"] >= thr:
                reached[thr] = p
        got = [f"{t:g}%@{h['train_seconds']:.0f}s" for t, h in reached.items() if h is not None]
        say(f"step {p['step']:6d}  epoch {p['epoch']:6.2f}  train {p['train_seconds']:8.1f} s  eval "
            f"{clock['eval']:6.1f} s  dev acc {p['dev_accuracy']:6.2f}  loss {p['dev_loss']:.4f}  lr {p['lr']:.2g}"
            f"  reached {' '.join(got) or '-'}")

    point()
    while clock["train"] < budget and trainer.step < trainer.total_steps and not trainer.stopped:
        clock["samples"] += len(trainer.plan.indices(trainer.step))
        losses.append(timed(trainer.train_step, "train")["train/loss"])
        timed(trainer.selection_point, "eval")  # the recipe's per-epoch dev evaluation (plateau, stopping)
        if trainer.step % opts.eval_every == 0:
            point()
    if curve[-1]["step"] != trainer.step:
        point()
    stopped = ("early stopping" if trainer.stopped else "time budget" if clock["train"] >= budget
               else "steps")
    return {"model": opts.model, "task": opts.task, "recipe": cfg.train.recipe, "config": cfg.flat(),
            "budget_minutes": opts.minutes, "eval_every": opts.eval_every, "dev_examples": len(dev),
            "thresholds": [{"threshold": t, "reached": h is not None,
                            **{k: (h or {}).get(k) for k in ("step", "samples", "epoch", "train_seconds",
                                                             "wall_seconds", "dev_accuracy")}}
                           for t, h in reached.items()],
            "curve": curve, "steps": trainer.step, "samples": clock["samples"], "train_seconds": clock["train"],
            "eval_seconds": clock["eval"], "wall_seconds": clock["train"] + clock["eval"], "setup_seconds": setup_s,
            "stopped_by": stopped, "best_dev_accuracy": max(p["dev_accuracy"] for p in curve),
            "peak_mem_mb": trainer.peak_mem_mb()}


def plot_learn(result: dict, path) -> None:
    """The learn curve as a PNG: dev accuracy vs training seconds, each threshold and where it was reached."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [p["train_seconds"] for p in result["curve"]]
    ax.plot(xs, [p["dev_accuracy"] for p in result["curve"]], marker=".", label="dev accuracy")
    for t in result["thresholds"]:
        ax.axhline(t["threshold"], color="grey", lw=0.6, ls=":")
        if t["reached"]:
            ax.plot([t["train_seconds"]], [t["dev_accuracy"]], "o", color="C3")
            ax.annotate(f"{t['threshold']:g}% @ {t['train_seconds']:.0f} s", (t["train_seconds"], t["dev_accuracy"]),
                        textcoords="offset points", xytext=(5, -12), fontsize=8)
    ax.set_xlabel("training seconds (evaluation excluded)")
    ax.set_ylabel(f"dev accuracy (%), first {result['dev_examples']} dev examples")
    ax.set_ylim(0, 100)
    ax.set_title(f"{result['model']} on {result['task']}, recipe {result['recipe']} ({result['device']})", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
