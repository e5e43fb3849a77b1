"""``step``: median wall time of one step (train: forward + backward + AdamW; eval: forward under no_grad) after
warm-up, peak memory, and what one more step dispatches (:func:`rirlab.bench.ops.count_step`: ATen ops on any
device, kernel launches and host syncs on CUDA), for one model at batch x length (``--lengths padded``: rows of
mixed lengths, the longest ``length``)."""

from __future__ import annotations

import statistics
import time

import torch

from rirlab.bench.base import (BenchOptions, PeakMemory, bench_optimizer, build_model, one_step, protocol, random_batch,
                               sync)
from rirlab.bench.ops import count_step
from rirlab.errors import UserError

@protocol("step")
def step(opts: BenchOptions) -> dict:
    """Median time (ms) of one train or eval step at batch x length, after warm-up; ops dispatched by one more."""
    if opts.mode not in ("train", "eval"):
        raise UserError(f"bench: --mode must be train or eval, not {opts.mode!r}")
    extra = {"inference": opts.inference} if opts.inference else {}
    model = build_model(opts.model, opts, extra)
    model.train(opts.mode == "train")
    opt = bench_optimizer(model)
    batch = random_batch(opts.batch, opts.length, opts.device, opts.lengths)
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
    counts = count_step(lambda: one_step(model, opt, batch, opts.mode == "train", opts.precision), opts.device)
    return {"model": opts.model, "batch": opts.batch, "length": opts.length, "lengths": opts.lengths,
            "row_lengths": batch["mask"].sum(1).tolist(), "mode": opts.mode,
            "inference": opts.inference, "precision": opts.precision, "overrides": opts.overrides,
            "median_ms": statistics.median(times),
            "times_ms": times, "peak_mem_mb": mem.mb, **counts}
