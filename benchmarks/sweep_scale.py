"""`rirlab sweep` at N trials against a bare Ray Tune `Tuner.fit` and a bare Optuna study of the same trial
function, on an sqlite store and on an MLflow server (issue 50 item 1).

Both sides run N of the smallest real trials (rir_grc, hidden size 8, a few training steps on a few generated
ListOps rows, one evaluation split) on a local Ray, one trial at a time by default (--max-concurrent), each as a
fresh process: wall time includes interpreter start, imports, Ray start and shutdown. rirlab adds the spec's
validation, the sqlite MLflow store (a parent run and N nested runs, every result logged from the driver) and a
final checkpoint per trial copied into MLflow. Per side: wall time, trials per minute, the driver's peak RSS
(its own ``ru_maxrss``, Ray's processes excluded), the size of the store and of the Tune folder; then the time of
`rirlab runs`, `tables` and `export` on the store the sweep left. A per-trial cost that grows with the runs already
in the experiment shows as a larger gap between one trial's end and the next one's start late in the sweep than
early (``gap first/last``, from the MLflow runs' start and end times, max concurrency 1 only).

    taskset -c 1 .venv/bin/python benchmarks/sweep_scale.py --trials 10 [--steps 5] [--max-concurrent 1]
        [--sides bare,bare-mlflow,rirlab,rirlab-lean,optuna,rirlab-optuna,rirlab-server] [--reuse] [--keep DIR]
        [--json FILE]
        [--before DIR] [--rounds R] [--alternate] [--skip-reads]

--before DIR runs every rirlab side a second time, just before this tree's run of it, with DIR first on
PYTHONPATH: a tree of the package at an earlier commit (its rirlab/ with analysis/ and sweeps/ moved inside, as
they install), so that before and after share the core's load; --rounds R repeats every side R times (bare, before,
after, bare, before, after, ...; with --alternate: bare, before, after, bare, after, before, ...; --alternate
without --before runs the sides in reverse order in every second round):

    git archive BASE rirlab analysis sweeps | tar -x -C DIR && mv DIR/analysis DIR/sweeps DIR/rirlab/

Sides (``--sides``, default ``bare,rirlab``):
- ``bare``: a bare ``Tuner.fit`` of ``run_trial`` over N seeds (grid), Tune's folder only;
- ``bare-mlflow``: the same bare ``Tuner.fit`` with Ray's own MLflow integration (``MLflowLoggerCallback``,
  ``save_artifact=False``: a run per trial, its config as params, every result as metrics) on an sqlite store in
  its folder: what recording each trial in MLflow costs at all, the floor under rirlab's recording;
- ``rirlab``: ``rirlab sweep`` of the same N seeds, sqlite MLflow store;
- ``rirlab-lean``: the same with ``--no-checkpoint-artifacts`` (no checkpoint or model copied into MLflow): the
  artifacts' share;
- ``rirlab-server``: the same against a local ``mlflow server`` (on its own sqlite file), the read-only commands
  timed against the server too;
- ``optuna``: a bare Optuna study (TPE, in-memory storage) calling ``run_trial`` in its own process for N trials,
  lr log-uniform in [1e-4, 1e-2]: no Ray, no per-trial process;
- ``rirlab-optuna``: ``rirlab sweep`` of the same search (``algorithm: optuna``, ``num_samples: N``), which runs
  Optuna's sampler in the driver through Ray Tune's OptunaSearch and each trial in a Ray worker, sqlite store (and
  the study in ``optuna.db`` beside it).

--trials is a flag because 1,000 trials take hours on one shared core (about 10-25 s a trial here); the issue's
figures at 10 and 100 are in benchmarks/README.md ("Sweeps at scale").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from readonly_commands import wall  # (this folder: the scripts run as benchmarks/NAME.py)

import yaml

FIXED = {"hidden_size": 8, "chunk_size": 5, "batch_size": 16, "log_every": 5, "eval_every": 5, "n_train": 100,
         "n_dev": 20, "n_test": 20, "eval_splits": ["test"], "num_threads": 1, "lr": 0.003}

# the driver's own peak RSS and CPU seconds (all its threads), written at exit (Ray's node processes and workers are
# other processes)
PEAK = ("import atexit, resource, sys\n"
        "_peak = sys.argv.pop(1)\n"
        "def _write(u=resource.getrusage):\n"
        "    r = u(resource.RUSAGE_SELF)\n"
        "    open(_peak, 'w').write(f'{r.ru_maxrss} {r.ru_utime + r.ru_stime}')\n"
        "atexit.register(_write)\n")


def driver_figures(peak: Path) -> dict:
    """The driver's peak RSS (MB) and CPU seconds from its ``PEAK`` file."""
    rss, cpu = peak.read_text().split()
    out = {"driver_peak_rss_mb": int(rss) / 1024, "driver_cpu_s": float(cpu)}
    spent = Path(f"{peak}.callbacks.json")
    if spent.is_file():  # (rirlab's sides: CALLBACK_CPU)
        by = json.loads(spent.read_text())
        out["callback_cpu_s"] = sum(v for k, v in by.items() if not k.startswith("_"))
        out["callback_cpu_by"] = {k: round(v, 3) for k, v in sorted(by.items())}
    return out

# the driver's CPU seconds inside rirlab's Ray Tune callback (its thread's, by method; ``_log_model``: the trial's
# MLflow model, within ``on_trial_complete``), written at exit beside the PEAK file: the work that blocks Tune's loop
CALLBACK_CPU = """
import json, time
from rirlab.sweeps.record import callback as _cb
_spent = {}
def _timed(name, real):
    def timed(*a, **kw):
        c = time.thread_time()
        try:
            return real(*a, **kw)
        finally:
            _spent[name] = _spent.get(name, 0.0) + time.thread_time() - c
    return timed
for _n in ("on_trial_start", "on_trial_recover", "on_trial_result", "on_trial_complete", "on_trial_error",
           "on_checkpoint", "on_step_begin", "on_step_end", "on_experiment_end", "_log_model"):
    if hasattr(_cb.MLflowTrialCallback, _n):
        setattr(_cb.MLflowTrialCallback, _n, _timed(_n, getattr(_cb.MLflowTrialCallback, _n)))
atexit.register(lambda: open(_peak + ".callbacks.json", "w").write(json.dumps(_spent)))
"""

RIRLAB = PEAK + CALLBACK_CPU + "sys.argv[0] = 'rirlab'\nfrom rirlab.cli import main\nmain()\n"

BARE = PEAK + """
import json, os, ray
from ray import tune
from rirlab.train import run_trial

configs = json.loads(open(sys.argv[1]).read())  # a file: 1,000 configs are too long for a command line
storage, concurrent, reuse = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
tracking = sys.argv[5] if len(sys.argv) > 5 else None  # bare-mlflow: Ray's own MLflow callback to this store

def fn(config):
    run_trial(config["trial"], lambda metrics, checkpoint=None: tune.report(metrics))

# trials at the driver's niceness, as `rirlab sweep` runs them (Ray would start its workers 15 steps nicer,
# and on a shared core any other process would starve the bare side: minutes per tiny trial here)
os.environ.setdefault("RAY_worker_niceness", "0")
callbacks = []
if tracking:  # (a run per trial with its flattened config as params, every result as metrics; no artifact)
    from ray.air.integrations.mlflow import MLflowLoggerCallback
    callbacks.append(MLflowLoggerCallback(tracking_uri=tracking, experiment_name=sys.argv[6], save_artifact=False))
ray.init(address="local", include_dashboard=False, log_to_driver=False)
tuner = tune.Tuner(tune.with_resources(fn, {"cpu": 1}), param_space={"trial": tune.grid_search(configs)},
                   tune_config=tune.TuneConfig(max_concurrent_trials=concurrent, reuse_actors=reuse),
                   run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=callbacks))
grid = tuner.fit()
assert not grid.errors and len(grid) == len(configs), 'the bare sweep did not run every trial'
"""

BARE_OPTUNA = PEAK + """
import json, optuna
from rirlab.train import run_trial

base, n, (low, high) = json.loads(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
optuna.logging.set_verbosity(optuna.logging.WARNING)

def objective(trial):
    return run_trial({**base, "lr": trial.suggest_float("lr", low, high, log=True)})["dev/accuracy"]

study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
study.optimize(objective, n_trials=n)
assert len(study.trials) == n and all(t.state.name == "COMPLETE" for t in study.trials), 'a bare Optuna trial failed'
"""

LR_RANGE = [1e-4, 1e-2]  # the Optuna sides' search of lr (log-uniform)
FIXED_SEARCHED = {k: v for k, v in FIXED.items() if k != "lr"}  # FIXED less what the Optuna sides search


def size_mb(*paths: Path) -> float:
    total = 0
    for p in paths:
        if p.is_file():
            total += p.stat().st_size
        elif p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return total / 2**20


def timed_run(cmd, cwd, env=None) -> float:
    """Seconds ``cmd`` took (it must succeed)."""
    return wall([str(c) for c in cmd], env, cwd)


def tree_env(tree: str | None) -> dict | None:
    """The environment that runs the package at ``tree`` (first on PYTHONPATH; None: this one)."""
    if tree is None:
        return None
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tree).resolve()),
                                                          *filter(None, [os.environ.get("PYTHONPATH")])])}


def gaps(uri: str, name: str, nested: bool = True) -> tuple[float, float, float, float]:
    """Mean seconds between a trial run's end and the next one's start, and mean seconds a trial run lasted (its
    start to its end in MLflow: the trial and the driver's recording of it), over the first and the last tenth (at
    least 3) of the sweep's trial runs in start order: equal when the driver's per-trial cost does not grow.
    ``nested``: the trial runs are the parent run's children (rirlab's); else every run of the experiment
    (bare-mlflow's)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    runs = [r for r in client.search_runs([exp.experiment_id], max_results=50_000)
            if r.data.tags.get("mlflow.parentRunId") or not nested]
    runs.sort(key=lambda r: r.info.start_time)
    between = [(b.info.start_time - a.info.end_time) / 1000 for a, b in zip(runs, runs[1:]) if a.info.end_time]
    lasted = [(r.info.end_time - r.info.start_time) / 1000 for r in runs if r.info.end_time]
    if len(between) < 2:
        return (float("nan"),) * 4

    def ends(xs):
        k = max(3, len(xs) // 10)
        return sum(xs[:k]) / len(xs[:k]), sum(xs[-k:]) / len(xs[-k:])

    return (*ends(between), *ends(lasted))


def run_rirlab(work: Path, n: int, steps: int, concurrent: int, side: str = "rirlab", reuse: bool = False,
               env: dict | None = None, label: str | None = None, reads: bool = True) -> dict:
    """``rirlab sweep`` of n tiny trials: a grid over n seeds (``rirlab``, ``rirlab-server``) or an Optuna search of
    n configurations, one seed (``rirlab-optuna``); then the read-only commands on the store it wrote. ``env``: the
    package's environment (``tree_env``), ``label`` the folder of this run under ``work``."""
    name = f"scale{n}{side.removeprefix('rirlab')}".replace("-", "_")
    folder = work / (label or side)
    folder.mkdir(parents=True, exist_ok=True)
    extra = ["--no-checkpoint-artifacts"] if side == "rirlab-lean" else []
    spec = {"name": name, "task": "listops", "model": "rir_grc", "fixed": {**FIXED, "steps": steps}, "seeds": n,
            "max_concurrent": concurrent, "max_trials": max(n, 1000)}
    if side == "rirlab-optuna":
        spec.update(fixed={**FIXED_SEARCHED, "steps": steps}, seeds=1, algorithm="optuna", num_samples=n,
                    search={"lr": {"loguniform": LR_RANGE}})
    if reuse:
        spec["reuse_workers"] = True
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec))
    server = None
    if side == "rirlab-server":
        from logging_cost import start_server  # (this folder) a local `mlflow server` on its own sqlite file

        server, uri = start_server(folder)
    else:
        uri = f"sqlite:///{folder / 'mlruns.db'}"
    try:
        peak = folder / "peak.txt"
        wall = timed_run([sys.executable, "-c", RIRLAB, str(peak), "sweep", "spec.yaml", "--tracking-uri", uri,
                          *extra],
                         folder, env)
        out = {"wall_s": wall, "trials_per_min": n / wall * 60, **driver_figures(peak),
               "store_mb": size_mb(*(folder / f for f in ("mlruns.db", "server.db", "optuna.db", "mlartifacts",
                                                          "artifacts"))),
               "tune_folder_mb": size_mb(folder / "rirlab_runs")}
        if concurrent == 1:
            out["gap_first_s"], out["gap_last_s"], out["run_first_s"], out["run_last_s"] = gaps(uri, name)
        if not reads:
            return out
        script = Path(sys.executable).parent / "rirlab"
        cli = [str(script)] if script.exists() else [sys.executable, "-m", "rirlab.cli"]
        out["runs_s"] = timed_run([*cli, "runs", "spec.yaml", "--tracking-uri", uri], folder, env)
        out["tables_s"] = timed_run([*cli, "tables", "spec.yaml", "--tracking-uri", uri], folder, env)
        out["export_s"] = timed_run([*cli, "export", "--experiment", name, "--tracking-uri", uri,
                                     "--out", str(folder / "export.parquet")], folder, env)
        return out
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)


def run_bare(work: Path, n: int, steps: int, concurrent: int, reuse: bool = False, mlflow: bool = False) -> dict:
    """A bare ``Tuner.fit`` of the n trials; ``mlflow`` (the bare-mlflow side): with Ray's own
    ``MLflowLoggerCallback`` recording each trial in an sqlite store in the side's folder (no artifact)."""
    configs = [{"task": "listops", "model": "rir_grc", **FIXED, "steps": steps, "seed": s} for s in range(n)]
    folder = work / "bare_mlflow" if mlflow else work
    folder.mkdir(parents=True, exist_ok=True)
    peak, storage, listed = folder / "peak_bare.txt", folder / "bare_tune", folder / "bare_configs.json"
    listed.write_text(json.dumps(configs))
    uri, name = f"sqlite:///{folder / 'mlruns.db'}", f"bare{n}"
    wall = timed_run([sys.executable, "-c", BARE, str(peak), str(listed), str(storage), str(concurrent),
                      str(int(reuse)), *([uri, name] if mlflow else [])], folder)
    out = {"wall_s": wall, "trials_per_min": n / wall * 60, **driver_figures(peak),
           "tune_folder_mb": size_mb(storage)}
    if mlflow:
        out["store_mb"] = size_mb(folder / "mlruns.db", folder / "mlruns")
        if concurrent == 1:
            out["gap_first_s"], out["gap_last_s"], out["run_first_s"], out["run_last_s"] = gaps(uri, name, False)
    return out


def run_bare_optuna(work: Path, n: int, steps: int) -> dict:
    base = {"task": "listops", "model": "rir_grc", **FIXED_SEARCHED, "steps": steps, "seed": 0}
    peak = work / "peak_optuna.txt"
    wall = timed_run([sys.executable, "-c", BARE_OPTUNA, str(peak), json.dumps(base), str(n), json.dumps(LR_RANGE)],
                     work)
    return {"wall_s": wall, "trials_per_min": n / wall * 60, **driver_figures(peak)}


SIDES = ("bare", "bare-mlflow", "rirlab", "rirlab-lean", "rirlab-server", "optuna", "rirlab-optuna")
# (side, its counterpart, the ratio's key suffix): each side against its bare counterpart (bare-mlflow: what
# recording each trial in MLflow at all costs), and rirlab's recording on top of that bare MLflow recording
RATIOS = (("rirlab", "bare", ""), ("rirlab-lean", "bare", ""), ("rirlab-server", "bare", ""),
          ("bare-mlflow", "bare", ""), ("rirlab-optuna", "optuna", ""),
          ("rirlab", "bare-mlflow", "_mlflow"), ("rirlab-lean", "bare-mlflow", "_mlflow"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--steps", type=int, default=5, help="training steps per trial")
    ap.add_argument("--max-concurrent", type=int, default=1)
    ap.add_argument("--sides", default="bare,rirlab", help=f"comma-separated, of {', '.join(SIDES)}")
    ap.add_argument("--reuse", action="store_true",
                    help="trials reuse their worker process: reuse_actors on the bare Tune side, reuse_workers: true "
                         "on rirlab's (the bare Optuna side runs every trial in its one process anyway)")
    ap.add_argument("--skip-bare", action="store_true", help="only the rirlab side (= --sides rirlab)")
    ap.add_argument("--before", default=None,
                    help="package tree of an earlier commit: each rirlab side run with it too, just before (docstring)")
    ap.add_argument("--rounds", type=int, default=1, help="run every side this many times, in turn")
    ap.add_argument("--alternate", action="store_true",
                    help="with --before: run this tree first in every second round (before first in the others); "
                         "without: the sides in reverse order in every second round")
    ap.add_argument("--skip-reads", action="store_true",
                    help="time the sweeps only, not `rirlab runs`, `tables` and `export` on their stores")
    ap.add_argument("--keep", default=None, help="keep the stores and Tune folders in this folder")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sides = ["rirlab"] if args.skip_bare else [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        ap.error(f"unknown side {', '.join(unknown)}: choose from {', '.join(SIDES)}")
    if args.before and not (Path(args.before) / "rirlab" / "sweeps").is_dir():
        ap.error(f"--before {args.before}: no rirlab/sweeps/ inside; make the tree as the docstring says")
    work = Path(args.keep or tempfile.mkdtemp(prefix="rirlab-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    result = {"trials": args.trials, "steps": args.steps, "max_concurrent": args.max_concurrent, "reuse": args.reuse,
              "rounds": []}
    try:
        for r in range(args.rounds):
            here = work / f"round{r}" if args.rounds > 1 else work
            here.mkdir(parents=True, exist_ok=True)
            one = {}
            # (--alternate without --before: the sides in reverse order in every second round, so that a load rising
            # or falling through the measurement weighs on each side alike)
            for side in (sides[::-1] if args.alternate and not args.before and r % 2 else sides):
                if side in ("bare", "bare-mlflow"):
                    one[side] = run_bare(here, args.trials, args.steps, args.max_concurrent, args.reuse,
                                         side == "bare-mlflow")
                elif side == "optuna":
                    one[side] = run_bare_optuna(here, args.trials, args.steps)
                else:
                    trees = [(side, None)]
                    if args.before:  # (--alternate: after first in every second round, so that a load rising or
                        # falling through a round weighs on each side alike)
                        trees.insert(1 if args.alternate and r % 2 else 0, (f"{side}@before", args.before))
                    for label, tree in trees:
                        one[label] = run_rirlab(here, args.trials, args.steps, args.max_concurrent, side, args.reuse,
                                                tree_env(tree), label if tree else None, not args.skip_reads)
                        print(f"{label:>21}: {json.dumps(one[label])}", flush=True)  # (in the order run)
                    continue
                print(f"{side:>21}: {json.dumps(one[side])}", flush=True)
            for side, base, suffix in RATIOS:
                for label in (side, f"{side}@before"):
                    if label in one and base in one:
                        key = f"ratio_{label}{suffix}"
                        one[key] = one[label]["wall_s"] / one[base]["wall_s"]
                        print(f"ratio {label} / {base} wall time: {one[key]:.2f}", flush=True)
            result["rounds"].append(one)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.rounds == 1:  # (one round: the sides at the top level, as before --rounds)
        result.update(result.pop("rounds")[0])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
