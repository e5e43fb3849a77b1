"""A profiler pass over training steps on CUDA (the GPU issue, item 3): the top kernels, kernel launches and host
synchronisations per step, where in the Python code each synchronisation comes from, and the GPU's busy share of
the step's wall time (the union of kernel intervals over the steps' span).

    python benchmarks/gpu_profile.py --model rir_ebt_grc --batch 128 --length 100 --out prof_rir.json
    python benchmarks/gpu_profile.py --trainer --out prof_trainer.json   # rirlab.train.Trainer.train_step, ListOps

``--trainer`` profiles the trainer's own step (data to the device, loss, backward, clipping, Ranger) at the learn
protocol's settings instead of a bare model step on random tokens.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rirlab.bench.ops import SYNC_CALLS, busy_share, kernel_events, profile_steps  # noqa: E402


def sync_sites(step) -> dict:
    """Where the synchronising calls of one ``step()`` come from: torch's sync debug mode warns at each one; the
    innermost rirlab frame of the warning's stack names the site."""
    import torch

    sites = collections.Counter()
    old = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack()[:-1] if "/rirlab/" in f.filename or "benchmarks" in f.filename]
        where = f"{frames[-1].filename.split('/rirlab/')[-1]}:{frames[-1].lineno} {frames[-1].line}" if frames \
            else f"{filename}:{lineno}"
        sites[where] += 1

    warnings.showwarning = show
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            step()
            torch.cuda.synchronize()
    finally:
        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = old
    return dict(sites.most_common())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="rir_ebt_grc")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--length", type=int, default=100)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--trainer", action="store_true", help="profile rirlab.train.Trainer.train_step on ListOps")
    ap.add_argument("--set", action="append", default=[], help="trainer: KEY=VALUE trial overrides")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import torch

    from rirlab.bench.base import BenchOptions, build_model, device_name, one_step, random_batch

    if args.trainer:
        from rirlab.config import parse_overrides
        from rirlab.train import Trainer
        from rirlab.trial import resolve

        cfg = resolve({"model": args.model, "task": "listops", "recipe": "paper", "device": "cuda", "seed": 0,
                       "epochs": 100, "precision": args.precision, **parse_overrides(args.set)}, where="gpu_profile")
        trainer = Trainer(cfg)
        step = trainer.train_step
        what = f"Trainer.train_step, {args.model} on listops, batch {cfg.train.batch_size}, {args.precision}"
    else:
        opts = BenchOptions(model=args.model, batch=args.batch, length=args.length, device="cuda",
                            precision=args.precision)
        model = build_model(args.model, opts).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = random_batch(args.batch, args.length, "cuda")

        def step():
            one_step(model, opt, data, True, args.precision)

        what = f"{args.model} train step {args.batch}x{args.length} {args.precision}"
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    sites = sync_sites(step)
    events, wall = profile_steps(step, args.steps)
    kernels = kernel_events(events)
    runtime = collections.Counter(e.name for e in events if e.name.startswith("cuda"))
    by_kernel = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        by_kernel[e.name][0] += e.time_range.end - e.time_range.start
        by_kernel[e.name][1] += 1
    total_kernel_us = sum(v[0] for v in by_kernel.values())
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:15]
    n = args.steps
    result = {
        "what": what, "device": device_name("cuda"), "torch": torch.__version__, "steps": n,
        "step_ms_profiled": 1000 * wall / n,
        "gpu_busy_share": busy_share(kernels, wall * 1e6),
        "kernel_ms_per_step": total_kernel_us / 1000 / n,
        "kernels_per_step": len(kernels) / n,
        "syncs_per_step": {k: runtime[k] / n for k in SYNC_CALLS if runtime[k]},
        "memcpy_per_step": {k: v / n for k, v in runtime.items() if "Memcpy" in k},
        "sync_sites_one_step": sites,
        "top_kernels": [{"kernel": k[:120], "ms_per_step": v[0] / 1000 / n, "calls_per_step": v[1] / n,
                         "share": v[0] / total_kernel_us} for k, v in top],
    }
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"{what} on {result['device']}: {result['step_ms_profiled']:.1f} ms/step under the profiler, GPU busy "
          f"{100 * result['gpu_busy_share']:.1f}%, {result['kernel_ms_per_step']:.1f} ms of kernels and "
          f"{result['kernels_per_step']:.0f} launches per step; syncs/step {result['syncs_per_step']}; "
          f"memcpy/step {result['memcpy_per_step']}")
    for site, count in sites.items():
        print(f"  sync x{count}: {site}")
    for t in result["top_kernels"][:10]:
        print(f"  {100 * t['share']:5.1f}%  {t['ms_per_step']:7.3f} ms  x{t['calls_per_step']:6.0f}  {t['kernel'][:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
