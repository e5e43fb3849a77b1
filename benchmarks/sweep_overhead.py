"""Overhead of `rirlab sweep` over a bare Ray Tune `Tuner(...).fit()` of the same trial function.

Both sides run the same 8 tiny trials (a few seconds each) as fresh processes on this machine, with
1 CPU per trial; wall time includes interpreter start, imports, Ray start and shutdown. rirlab adds
spec validation, the MLflow store (parent + 8 nested runs, every result logged from the driver) and a
final checkpoint per trial (copied into MLflow). The bar (issue 5): ratio <= 1.25.

    .venv/bin/python benchmarks/sweep_overhead.py [--repeats 2] [--steps 150] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

FIXED = {"task": "listops", "model": "rir_grc", "hidden_size": 16, "chunk_size": 5, "batch_size": 16, "log_every": 10,
         "eval_every": 50, "n_train": 500, "n_dev": 100, "n_test": 100, "eval_splits": ["test"], "num_threads": 1}

BARE = """
import os, sys, json, ray
from ray import tune
from rirlab.train import run_trial

configs = json.loads(sys.argv[1])

def fn(config):
    run_trial(config["trial"], lambda metrics, checkpoint=None: tune.report(metrics))

# trials at the driver's niceness, as `rirlab sweep` runs them (Ray would start its workers 15 steps nicer,
# and on a shared core any other process would starve the bare side: minutes per tiny trial here)
os.environ.setdefault("RAY_worker_niceness", "0")
ray.init(address="local", include_dashboard=False, log_to_driver=False)
tuner = tune.Tuner(tune.with_resources(fn, {"cpu": 1}), param_space={"trial": tune.grid_search(configs)},
                   run_config=tune.RunConfig(storage_path=sys.argv[2], verbose=0))
grid = tuner.fit()
assert not grid.errors
"""


def trial_configs(steps: int) -> list[dict]:
    return [{**FIXED, "steps": steps, "lr": lr, "seed": seed} for lr in (0.003, 0.001) for seed in range(4)]


def time_rirlab(steps: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        spec = {"name": "overhead", "task": "listops", "model": "rir_grc",
                "fixed": {k: v for k, v in FIXED.items() if k not in ("task", "model")} | {"steps": steps},
                "search": {"lr": {"grid": [0.003, 0.001]}}, "seeds": 4}
        (Path(d) / "spec.yaml").write_text(yaml.safe_dump(spec))
        t0 = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "rirlab"), "sweep", "spec.yaml"], cwd=d, check=True,
                       capture_output=True)
        return time.perf_counter() - t0


def time_bare(steps: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", BARE, json.dumps(trial_configs(steps)), d], cwd=d, check=True,
                       capture_output=True)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150, help="training steps per trial")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    bare, ours = [], []
    for _ in range(args.repeats):  # interleaved so a change in machine load hits both sides
        bare.append(time_bare(args.steps))
        ours.append(time_rirlab(args.steps))
    result = {"bare_tuner_s": bare, "rirlab_sweep_s": ours, "bare_median_s": statistics.median(bare),
              "rirlab_median_s": statistics.median(ours),
              "ratio": statistics.median(ours) / statistics.median(bare), "trials": 8, "steps": args.steps}
    print(f"bare Tuner.fit: {result['bare_median_s']:.1f} s   rirlab sweep: {result['rirlab_median_s']:.1f} s   "
          f"ratio {result['ratio']:.2f} (bar: <= 1.25)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
