"""The read-only commands on a sweep of 1,000 trial runs (issue 50 item 1: each within 5 s), without training them.

Training 1,000 tiny trials takes most of a day on this machine (benchmarks/sweep_scale.py); what `runs`, `tables`,
`importance`, `export` and `plot` cost depends only on what the store holds. So this script records one sweep of
N trial runs shaped like a real one (the chunk_beam spec's model and fixed settings, a random search over chunk
size, beam width, learning rate and dropout, 3 seeds) the way `rirlab sweep` leaves it: a parent run with the sweep's
tags and effective spec, children with the trial's params and tags, a short history of the logged metrics (10
evaluations) and the final metrics of every test split of ListOps, through the analysis tests' store builder
(tests/helpers/analysis_store.make_sweep: the same MLflow calls and names as the driver, rirlab.contract). Then it
times each command as a user runs it, a fresh process of the venv's `rirlab`, and prints the minimum of REPEATS
runs per command and store size. The small store's row is the floor the imports set (benchmarks/readonly_commands.py
measures those alone); what grows from there with N is the commands' own cost.

    taskset -c 1 .venv/bin/python benchmarks/readonly_at_scale.py [--sizes 10,100,1000] [--repeats 3] [--keep DIR]
        [--server] [--commands export,curves] [--before DIR]

--server also serves each store with a local `mlflow server` (on the same SQLite file, pinned where this script
is) and times the commands through it: the sqlite and the server rows of the same runs. --commands NAMES times only
those (the first word after `rirlab`, or `pareto` / `curves`), e.g. ``--commands export,curves``; --server-only
leaves out the SQLite file's rows.

Each command's CPU seconds are printed too (stderr, and a second table): the command's own (user + system, as
`/usr/bin/time` counts them) and, through a server, the server's in the same interval (its processes' CPU time from
/proc): on one shared core their sum, not the wall clock, is what the command costs.

--keep DIR keeps the stores (DIR/n<N>/mlruns.db) and reuses them on the next run. --before DIR times each command a
second time, interleaved run for run, with DIR first on PYTHONPATH: a tree of the package at an earlier commit (its
rirlab/ with analysis/ and sweeps/ moved inside, as they install), so that before and after share the core's load:

    git archive BASE rirlab analysis sweeps | tar -x -C DIR && mv DIR/analysis DIR/sweeps DIR/rirlab/
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "rirlab"
RIRLAB = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "rirlab.cli"]

FIXED = {"hidden_size": 128, "d_s": 64, "s4d": True, "alignment": "beam", "inference": "non_rir", "recipe": "paper",
         "batch_size": 128, "bucket_factor": 5, "grad_clip": 1.0, "epochs": 100, "eval_every": 100000}
SPLITS = ["test", "len_200_300", "len_500_600", "len_900_1000", "args_10", "args_15", "lra"]
HISTORY_KEYS = ["dev/accuracy", "train/loss", "train/accuracy", "time_per_step_ms"]
EVALS = 10  # evaluations per trial in the history (one per epoch of a short run)


def spec_of(name: str, n: int) -> dict:
    return {"name": name, "description": "random search around chunk_beam (benchmark)", "task": "listops",
            "model": "rir_ebt_grc", "fixed": FIXED, "algorithm": "random", "num_samples": max(1, math.ceil(n / 3)),
            "search": {"chunk_size": {"choice": [10, 20, 30]}, "beam_size": {"choice": [5, 7]},
                       "lr": {"loguniform": [1e-4, 3e-3]}, "dropout": {"uniform": [0.0, 0.3]}},
            "seeds": 3, "metric": "dev/accuracy", "mode": "max", "resources": {"cpu": 1, "gpu": 0}}


def trial_runs(n: int, seed: int = 0) -> list[dict]:
    """N runs: ceil(N/3) sampled configurations x 3 seeds (the last configuration cut short), as make_sweep takes them;
    about one in 20 failed, one in 10 stopped early, like a real search."""
    rng = random.Random(seed)
    runs = []
    for c in range(math.ceil(n / 3)):
        cfg = {"chunk_size": rng.choice([10, 20, 30]), "beam_size": rng.choice([5, 7]),
               "lr": round(math.exp(rng.uniform(math.log(1e-4), math.log(3e-3))), 7),
               "dropout": round(rng.uniform(0.0, 0.3), 4)}
        for s in range(3):
            if len(runs) == n:
                break
            if rng.random() < 0.05:
                runs.append({"swept": {**cfg, "seed": s}, "status": "FAILED", "params": FIXED,
                             "reason": "Traceback (most recent call last):\nRuntimeError: CUDA out of memory"})
                continue
            acc = 50 + 40 * rng.random()
            hist = {"dev/accuracy": [(100 * (e + 1), acc * (e + 1) / EVALS) for e in range(EVALS)],
                    "train/loss": [(100 * (e + 1), 2.0 / (e + 1)) for e in range(EVALS)],
                    "train/accuracy": [(100 * (e + 1), acc * (e + 1) / EVALS + 2) for e in range(EVALS)],
                    "time_per_step_ms": [(100 * (e + 1), 200 + rng.random()) for e in range(EVALS)]}
            metrics = {"dev/accuracy": acc, "train/loss": 0.2, "train/accuracy": acc + 2,
                       "time_per_step_ms": 10.0 * cfg["chunk_size"] / cfg["beam_size"],
                       "cpu_time_per_step_ms": 12.0 * cfg["chunk_size"] / cfg["beam_size"],
                       "peak_mem_mb": 100.0 + cfg["chunk_size"] * cfg["beam_size"], "process_rss_mb": 700.0,
                       "num_params": 250000, "best/dev_accuracy": acc, "best/step": 100 * EVALS, "best/epoch": EVALS,
                       "epoch": EVALS}
            for i, split in enumerate(SPLITS):
                metrics[f"{split}/accuracy"] = acc - 3 * i
                metrics[f"{split}/loss"] = 0.3 + 0.1 * i
                metrics[f"{split}/examples"] = 2000
            runs.append({"swept": {**cfg, "seed": s}, "metrics": metrics, "history": hist, "params": FIXED,
                         "early_stopped": rng.random() < 0.1})
    return runs


def build(root: Path, n: int) -> tuple[str, Path, str]:
    """The store of one N-run sweep under ROOT (reused when ROOT already holds it); (uri, spec path, experiment)."""
    name = f"scale_{n}"
    spec = root / f"{name}.yaml"
    if (root / "mlruns.db").exists() and spec.exists():
        return f"sqlite:///{root / 'mlruns.db'}", spec, name
    sys.path.insert(0, str(REPO))
    from tests.helpers.analysis_store import make_sweep

    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    uri, spec = make_sweep(root, spec_of(name, n), trial_runs(n))
    print(f"built {n} runs in {time.perf_counter() - t0:.0f} s ({root})", file=sys.stderr, flush=True)
    return uri, spec, name


def commands(uri: str, spec: Path, name: str, work: Path) -> list[tuple[str, list[str]]]:
    u = ["--tracking-uri", uri]
    return [("runs SPEC", ["runs", str(spec), *u]),
            ("tables SPEC", ["tables", str(spec), *u]),
            ("importance SPEC", ["importance", str(spec), *u]),
            ("export --out x.parquet", ["export", "--experiment", name, *u, "--out", str(work / "x.parquet")]),
            ("plot pareto SPEC --out x.png", ["plot", "pareto", str(spec), *u, "--out", str(work / "x.png")]),
            ("plot curves SPEC --metric dev/accuracy", ["plot", "curves", str(spec), *u, "--metric", "dev/accuracy",
                                                        "--out", str(work / "y.png")])]


def wall(cmd: list[str], env: dict, cwd: Path, timeout: float) -> tuple[float, float]:
    """(wall seconds, the command's user + system CPU seconds) of one run of ``cmd``; a run that failed (e.g. a
    request to the server timed out) takes inf seconds, its last line of stderr printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return math.inf, math.inf
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if proc.returncode != 0:  # counted as never done (inf), its error shown; the other commands still timed
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        print(f"FAILED after {took:.1f} s ({cpu:.2f} CPU s): {' '.join(cmd[-8:])} exited {proc.returncode}: "
              f"{last[-600:]}", file=sys.stderr, flush=True)
        return math.inf, cpu
    return took, cpu


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its children so far (Linux /proc; 0 elsewhere)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    for p in [pid, *map(int, children)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000", help="trial runs per store, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one command may take (inf past it)")
    ap.add_argument("--keep", default=None, help="folder to keep (and reuse) the stores in")
    ap.add_argument("--before", default=None, help="package tree of an earlier commit, timed interleaved (docstring)")
    ap.add_argument("--server", action="store_true", help="also through a local `mlflow server` on each store")
    ap.add_argument("--server-only", action="store_true", help="with --server, only the server's rows")
    ap.add_argument("--commands", default=None, help="only these commands, comma-separated (export,curves,...)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    only = set(args.commands.split(",")) if args.commands else None
    with tempfile.TemporaryDirectory() as d:
        base = Path(args.keep).resolve() if args.keep else Path(d)
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RIRLAB_PLUGINS")}
        env["RIRLAB_CACHE"] = str(Path(d) / "cache")
        stores = {n: build(base / f"n{n}", n) for n in sizes}
        servers = {}
        if args.server:
            # the server's background job runners (MLflow 3's huey consumers, 7 processes) off: they poll on the
            # benchmark's core and do nothing for these commands (tests/helpers/mlflow_server.py does the same)
            os.environ["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
            sys.path.insert(0, str(REPO / "benchmarks"))
            from logging_cost import start_server  # (this folder) a local `mlflow server`

            for n in sizes:
                uri, spec, name = stores[n]
                servers[n] = start_server(base / f"n{n}", db=Path(uri[len("sqlite:///"):]))
        envs = {"": env}
        if args.before:
            envs["before"] = {**env, "PYTHONPATH": os.pathsep.join([str(Path(args.before).resolve()),
                                                                    *filter(None, [env.get("PYTHONPATH")])])}
        table: dict[str, dict[tuple, float]] = {}
        cpu_table: dict[str, dict[tuple, tuple]] = {}
        try:
            for n in sizes:
                work = Path(d) / f"out{n}"
                work.mkdir()
                runs = ([] if args.server_only else [("", stores[n], None)]) + \
                    ([(" (server)", (servers[n][1], *stores[n][1:]), servers[n][0].pid)] if args.server else [])
                for where, store, server in runs:
                    for label, cmd in commands(*store, work):
                        if only and not only & set(label.split()[:2]):
                            continue
                        time_one(f"{label}{where}", cmd, n, envs, work, args, table, cpu_table, server)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
        cols = [(n, k) for n in sizes for k in envs]
        print("| command | " + " | ".join(f"{n} runs{' ' + k if k else ''}: s" for n, k in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for label, row in table.items():
            print(f"| `rirlab {label}` | " + " | ".join(f"{row[c]:.2f}" for c in cols) + " |")
        print("\nCPU seconds, minimum of the runs: the command's own, + the server's where it read one")
        print("| command | " + " | ".join(f"{n} runs{' ' + k if k else ''}: CPU s" for n, k in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for label, row in cpu_table.items():
            print(f"| `rirlab {label}` | " + " | ".join(
                f"{row[c][0]:.2f}" + (f" + {row[c][1]:.2f}" if row[c][1] is not None else "") for c in cols) + " |")


def time_one(label: str, cmd: list, n: int, envs: dict, work: Path, args, table: dict, cpu_table: dict,
             server=None) -> None:
    """Time one command REPEATS times per environment, interleaved; the minimum of each into ``table`` (wall) and
    ``cpu_table`` (its CPU, and the server process's CPU over the same run where ``server`` is its pid)."""
    times: dict[str, list] = {k: [] for k in envs}
    cpus: dict[str, list] = {k: [] for k in envs}
    served: dict[str, list] = {k: [] for k in envs}
    for _ in range(args.repeats):  # after, before, after, before...: the same load for both
        for k, e in envs.items():
            s0 = tree_cpu(server) if server else 0.0
            took, cpu = wall([*RIRLAB, *cmd], e, work, args.timeout)
            times[k].append(took)
            cpus[k].append(cpu)
            served[k].append(tree_cpu(server) - s0 if server else None)
    for k, ts in times.items():
        table.setdefault(label, {})[(n, k)] = min(ts)
        cpu_table.setdefault(label, {})[(n, k)] = (min(cpus[k]), min(served[k]) if server else None)
        print(f"N={n} {label}{' (' + k + ')' if k else ''}: {' '.join(f'{t:.2f}' for t in ts)} s; CPU "
              + " ".join(f"{c:.2f}" + (f"+{v:.2f}" if v is not None else "") for c, v in zip(cpus[k], served[k])),
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
