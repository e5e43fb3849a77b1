"""``table1``: RIR paper Table 1 -- 100 ListOps samples per length bin, batch 1, training-mode forward + backward,
the ListOps hyperparameters; minutes and peak memory per bin per model; OOM / TIMEOUT (under ``mem_cap_gb`` /
``time_cap_s``) reported in the cell."""

from __future__ import annotations

import time

import torch

from rirlab.bench.base import (TABLE1_ROWS, BenchOptions, MemoryCap, PeakMemory, as_batch, build_model, is_oom,
                               listops_bin, one_step, protocol, sync)

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
    Each cell is also said (``opts.progress``) as it ends.
    """
    from rirlab.models import registry
    from rirlab.models.base import autocast

    names, notes = table1_models(opts)
    say = opts.progress or (lambda line: None)  # a line per cell as it ends: a long table shows its progress
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
            say(f"{name} {row['bin']}: " + (f"{row['minutes']:.3f} min, {row['peak_mem_gb']:.3f} GB, "
                                             f"{row['samples']} samples" if row["minutes"] is not None else "")
                + ("" if row["status"] == "ok" else f" {row['status']}"))
    return {"rows": rows, "notes": notes, "samples_per_bin": opts.samples, "mem_cap_gb": opts.mem_cap_gb,
            "time_cap_s": opts.time_cap_s}
