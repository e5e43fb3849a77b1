"""Dynamic-halt paper §7 / Table 5: training runtime of GUT vs "GUT upper bound" vs "GUT no halt".

- GUT: dynamic halting with early exit once every sequence of the batch has halted (Algorithm 3).
- GUT upper bound: the same model without the break: every layer up to the bound runs (same output).
- GUT no halt: no halting unit, no marginalisation; H after exactly ``upper bound`` layers.

For each upper bound (10, 20, 30, 40) the three start from the same initialisation and train on the
same ListOps batches (AdamW, beta = halt_loss_weight); we report the median wall time per training
step after warm-up, the median CPU time of this process per step (steadier than wall time on a shared
machine when torch runs one thread; meaningless on GPU), the mean number of layers run per step and the
wall time relative to "no halt". The paper
times whole epochs for five epochs; a short run measures GUT near its initial halting depth.

    rirlab bench --protocol gut_halt [--set bounds=10,20 hidden_size=64 num_heads=4 halt_loss_weight=0.1]
    .venv/bin/python benchmarks/gut_halting.py [--bounds 10,20,30,40] [--steps 8] [--hidden-size 32] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from rirlab.bench.base import BenchOptions, protocol

MODES = (("GUT", "dynamic"), ("GUT upper bound", "upper_bound"), ("GUT no halt", "none"))


def listops_batches(n: int, batch: int, seed: int, device: str) -> list[dict]:
    from rirlab.tasks import registry as tasks

    entry = tasks.get("listops")
    cfg = entry.config(**{**dict(entry.quick), "n_train": n * batch, "eval_splits": ["test"], "data_seed": seed})
    data = entry.load(cfg)
    out = []
    for i in range(n):
        b = data.collate(data.train[i * batch : (i + 1) * batch])
        out.append({k: v.to(device) for k, v in b.items()})
    return out


def time_mode(mode: str, bound: int, batches: list[dict], *, hidden_size: int, num_heads: int, beta: float,
              warmup: int, device: str, seed: int) -> dict:
    from rirlab.models import registry
    from rirlab.tasks.base import TaskInfo

    torch.manual_seed(seed)
    entry = registry.get("gut")
    cfg = entry.config(hidden_size=hidden_size, num_heads=num_heads, max_layers=bound, halt_mode=mode,
                       halt_loss_weight=beta)
    model = entry.build(cfg, TaskInfo(16, 10, "classify")).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times, cpu, layers = [], [], []
    for i, b in enumerate(batches):
        if device == "cuda":
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        out = model(b)
        loss = F.cross_entropy(out.logits, b["labels"])
        if out.aux_loss is not None:
            loss = loss + beta * out.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            layers.append(out.stats["max_layers_used"])
    return {"median_ms": 1000 * statistics.median(times), "cpu_ms": 1000 * statistics.median(cpu),
            "total_s": sum(times), "steps": len(times),
            "mean_layers_run": statistics.mean(layers)}


def run_comparison(bounds=(10, 20, 30, 40), steps: int = 8, warmup: int = 1, batch: int = 32, hidden_size: int = 32,
                   num_heads: int = 4, beta: float = 0.1, device: str = "cpu", seed: int = 0) -> dict:
    """Rows {bound, model, median_ms, total_s, mean_layers_run, vs_no_halt} for every bound x model."""
    batches = listops_batches(steps + warmup, batch, seed, device)
    rows = []
    for bound in bounds:
        res = {name: time_mode(mode, bound, batches, hidden_size=hidden_size, num_heads=num_heads, beta=beta,
                               warmup=warmup, device=device, seed=seed) for name, mode in MODES}
        base = res["GUT no halt"]["median_ms"]
        for name, r in res.items():
            rows.append({"bound": bound, "model": name, **r, "vs_no_halt": r["median_ms"] / base})
    return {"rows": rows, "settings": {"steps": steps, "warmup": warmup, "batch": batch, "hidden_size": hidden_size,
                                       "num_heads": num_heads, "beta": beta, "device": device, "seed": seed,
                                       "threads": torch.get_num_threads()}}


def format_table(result: dict) -> str:
    head = f"{'upper bound':>11s}  {'model':16s} {'ms/step':>9s} {'cpu ms':>8s} {'layers run':>10s} {'vs no halt':>10s}"
    lines = [head]
    for r in result["rows"]:
        lines.append(f"{r['bound']:>11d}  {r['model']:16s} {r['median_ms']:9.1f} {r['cpu_ms']:8.1f} "
                     f"{r['mean_layers_run']:10.1f} {r['vs_no_halt']:10.2f}")
    return "\n".join(lines)


@protocol("gut_halt")
def gut_halt(opts: BenchOptions) -> dict:
    """GUT vs "GUT upper bound" vs "GUT no halt" at upper bounds 10-40 (ms per train step): ``--repeats`` timed
    steps after ``--warmup``, ``--batch``; ``--set bounds=10,20 hidden_size=64 num_heads=4 halt_loss_weight=0.1``.
    """
    o = opts.overrides
    bounds = tuple(int(b) for b in str(o.get("bounds", "10,20,30,40")).split(","))
    result = run_comparison(bounds, steps=opts.repeats, warmup=opts.warmup, batch=opts.batch,
                                hidden_size=int(o.get("hidden_size", 32)), num_heads=int(o.get("num_heads", 4)),
                                beta=float(o.get("halt_loss_weight", 0.1)), device=opts.device, seed=opts.seed)
    return {**result, "table": format_table(result)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bounds", default="10,20,30,40")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden-size", type=int, default=32)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    result = run_comparison(tuple(int(x) for x in a.bounds.split(",")), a.steps, a.warmup, a.batch, a.hidden_size,
                            a.num_heads, a.beta, a.device)
    print(format_table(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":  # python -m rirlab.bench.gut_halt
    sys.exit(main())
