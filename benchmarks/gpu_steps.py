"""Step times of the GPU issue's models (item 3): one training step (forward, backward, AdamW) at batch x length,
fp32 and bf16, every case in one process (one CUDA start, not one per case), each written as a JSON line as soon as
it is measured, so a run stopped by its time limit keeps what it measured.

    python benchmarks/gpu_steps.py --device cuda --out steps.jsonl
    python benchmarks/gpu_steps.py --device cpu --models rir_ebt_grc --shapes 4x50 --precisions fp32 --out s.jsonl

Each case is ``rirlab bench --protocol step`` (rirlab.bench.step) run in this process: one cold step first; a case
whose cold step took longer than ``--slow-s`` is then timed on one warm step (after one warm-up) rather than
``--repeats`` after ``--warmup``; out of memory is a row with status OOM. Cases run cheapest first (short shapes, then
long; within a shape the models cheap first, as the H100 measured them), so the time limit cuts the slowest.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = "rir_ebt_grc,transformer,ut,gut,crvnn,ebt_grc,bt_grc,gt_grc,om"  # cheap first: a time limit cuts the slow ones


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--shapes", default="128x100,128x1000", help="comma-separated BATCHxLENGTH")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--slow-s", type=float, default=3.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import torch

    from rirlab.bench.base import BenchOptions, device_name, is_oom, run

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    out = open(args.out, "a")
    print(f"step times on {device_name(args.device)}, torch {torch.__version__}", flush=True)
    for batch, length in shapes:
        for name in args.models.split(","):
            for precision in args.precisions.split(","):
                row = {"model": name, "batch": batch, "length": length, "precision": precision, "status": "ok"}

                def step(warmup: int, repeats: int) -> dict:  # `rirlab bench --protocol step`, in this process
                    return run("step", BenchOptions(model=name, batch=batch, length=length, device=args.device,
                                                    precision=precision, warmup=warmup, repeats=repeats))

                try:
                    first = step(0, 1)["median_ms"]  # a cold step (allocator, kernels): decides how many to time
                    # slow: one warm step (each call builds the model afresh, so its first step is cold again)
                    r = step(1, 1) if first > 1000 * args.slow_s else step(args.warmup, args.repeats)
                    row.update(first_ms=first, median_ms=r["median_ms"], times_ms=r["times_ms"],
                               peak_mem_mb=r["peak_mem_mb"])
                except Exception as err:  # noqa: BLE001 -- out of memory is a result; anything else is reported
                    row.update(status="OOM" if is_oom(err) else "ERROR", error=str(err).splitlines()[0][:300])
                if args.device == "cuda":
                    torch.cuda.empty_cache()
                out.write(json.dumps(row) + "\n")
                out.flush()
                figure = (f"{row['median_ms']:10.1f} ms  peak {row['peak_mem_mb']:9.1f} MB  (n={len(row['times_ms'])})"
                          if row["status"] == "ok" else f"{row['status']:>10s}  {row['error'][:80]}")
                print(f"{name:12s} {batch:4d}x{length:<5d} {precision:5s} {figure}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
