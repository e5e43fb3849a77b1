"""Wall time of the read-only commands (issue 50 item 2: each under 3 s on a quiet core), as a user runs them.

Each command runs REPEATS times as a fresh process (the console script beside this interpreter); the table gives
the minimum and maximum (on a shared core the minimum is the figure: the others include other processes' time).
`models` and `tasks` run twice over: cold, with an empty listing cache (what every run cost before the cache, issue
50: the registry imports torch and every model), and warm (the cache of this source read). For scale, two floors:
the interpreter alone, and the imports of MLflow's sqlite client and pandas that `runs` and `tables` need.

    taskset -c 1 .venv/bin/python benchmarks/readonly_commands.py [--repeats 3] [--spec S --tracking-uri URI]

Without --spec it reads a synthetic 10-trial sweep it records in a temporary folder (tests/helpers/analysis_store).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "rirlab"
RIRLAB = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "rirlab.cli"]


def wall(cmd: list[str], env: dict, cwd) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return took


def synthetic_store(root: Path) -> tuple[str, Path]:
    """A 10-trial sweep (5 configurations x 2 seeds) of a ListOps spec, recorded as `rirlab sweep` records one."""
    sys.path.insert(0, str(REPO))
    from tests.helpers.analysis_store import make_sweep

    spec = {"name": "readonly_bench", "task": "listops", "model": "rir_grc",
            "search": {"lr": {"grid": [1e-3, 2e-3, 3e-3, 4e-3, 5e-3]}}, "seeds": 2}
    runs = [{"swept": {"lr": lr, "seed": s}, "metrics": {"dev/accuracy": 50 + 10 * lr + s, "test/accuracy": 40 + s}}
            for lr in spec["search"]["lr"]["grid"] for s in range(2)]
    return make_sweep(root, spec, runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--spec", default=None, help="a spec whose sweep --tracking-uri holds (default: a synthetic one)")
    ap.add_argument("--tracking-uri", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        if args.spec:
            uri, spec = args.tracking_uri, Path(args.spec).resolve()
        else:
            uri, spec = synthetic_store(work)
        base = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RIRLAB_PLUGINS")}
        warm_env = {**base, "RIRLAB_CACHE": str(work / "cache")}
        rows = [("python -c pass (interpreter)", [sys.executable, "-c", "pass"], None),
                ("import mlflow client + pandas (floor of runs/tables)",
                 [sys.executable, "-c", "import mlflow.tracking, pandas, mlflow.store.tracking.sqlalchemy_store"], None),
                ("rirlab --help", [*RIRLAB, "--help"], None),
                ("rirlab models, cold (no cache)", [*RIRLAB, "models"], "cold"),
                ("rirlab models", [*RIRLAB, "models"], None),
                ("rirlab tasks, cold (no cache)", [*RIRLAB, "tasks"], "cold"),
                ("rirlab tasks", [*RIRLAB, "tasks"], None),
                ("rirlab runs SPEC", [*RIRLAB, "runs", str(spec), "--tracking-uri", uri], None),
                ("rirlab tables SPEC", [*RIRLAB, "tables", str(spec), "--tracking-uri", uri], None)]
        for listing in ("models", "tasks"):  # the warm rows read a cache written once, untimed
            wall([*RIRLAB, listing], warm_env, work)
        print(f"| command | min s | max s | runs |\n|---|---:|---:|---:|")
        for label, cmd, kind in rows:
            times = []
            for i in range(args.repeats):
                env = {**base, "RIRLAB_CACHE": str(work / f"cold-{label[7:13]}-{i}")} if kind == "cold" else warm_env
                times.append(wall(cmd, env, work))
            print(f"| {label} | {min(times):.2f} | {max(times):.2f} | {len(times)} |", flush=True)


if __name__ == "__main__":
    main()
