"""What logging every training step to MLflow costs a trial (issue 50 item 3).

A trial reports through ``tune.report``; Ray Tune's controller runs the driver's callbacks on each result before it
lets the trial continue (``TuneController._process_trial_result`` calls ``callbacks.on_trial_result``, then schedules
the next ``train``), so the MLflow write of a result is on the trial's step path, not beside it. This script times the
same tiny trial (rirlab.train.run_trial: rir_grc, hidden size 8, batch 16, generated ListOps) for ``--steps`` steps,
its reports handed in process to the driver's own ``MLflowTrialCallback.on_trial_result`` (the real write path: the
step bookkeeping, ``split_result``, one ``log_batch`` per result), in these modes:

- ``off``: one report at the end (``log_every`` = steps) into a callback that writes nothing: the step time alone;
- ``noop-1``: a report every step into a callback that writes nothing (the trainer's own cost of reporting);
- ``sqlite-1`` / ``sqlite-K``: every step / every K steps (``--every``) written to a fresh SQLite store, each result
  as it arrives (``RIRLAB_LOG_FLUSH_S=0``);
- ``sqlite-1-flush``: every step, written as a sweep's driver writes them: together, at most ``RIRLAB_LOG_FLUSH_S``
  (2 s) after the oldest waiting one, in one round trip;
- ``server-1`` / ``server-K`` (with ``--server``): the same through a local ``mlflow server`` on a SQLite file;
- ``sqlite-async-1`` (with ``--async``): every step through MLflow's asynchronous ``log_batch(synchronous=False)``,
  waited for at the end (what async logging would save; rirlab does not use it: ``sweeps/record/callback.py``).

Ray's own round trip per report (worker -> controller -> next ``train`` call) comes on top in a real sweep and is not
measured here. Per mode: the trainer's own milliseconds per training step (``time_per_step_ms``: the steps alone,
no evaluation), what the reports' writes add per step, the logging's share of their sum, and ms per report.

    taskset -c 1 .venv/bin/python benchmarks/logging_cost.py --steps 2000 [--every 10] [--server] [--async]
        [--modes off,sqlite-1,...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import types
import urllib.request
from pathlib import Path

TRIAL = {"task": "listops", "model": "rir_grc", "hidden_size": 8, "chunk_size": 5, "batch_size": 16,
         "n_train": 200, "n_dev": 20, "n_test": 20, "eval_splits": ["test"], "num_threads": 1, "lr": 0.003,
         "epochs": None}


class Writes:
    """The driver's write path for one trial's results: MLflowTrialCallback.on_trial_result on a run of a fresh
    store (``uri``), or nothing (``uri`` None). Counts the results written and the time spent writing."""

    def __init__(self, uri, asynchronous=False, flush_every_s=0.0):
        self.n, self.seconds, self.pending = 0, 0.0, []
        self.cb = None
        if uri is None:
            return
        from rirlab.sweeps.record.callback import MLflowTrialCallback
        from rirlab.sweeps.record.tracker import Tracker

        tracker = Tracker(uri)
        exp = tracker.experiment_id("logging-cost")
        parent = tracker.start_parent(exp, "p", {})
        run = tracker.start_child(exp, parent, "t", {"lr": 0.003}, {"rirlab.trial_key": "t0"})
        self.cb = MLflowTrialCallback(tracker, exp, parent, plan=None, flush_every_s=flush_every_s)
        self.cb.runs["t0"] = run
        if asynchronous:  # MLflow's async queue instead of the synchronous call (what --async measures)
            client = tracker.client

            def log_batch(run_id, metrics=(), params=(), tags=()):
                from rirlab.sweeps.record.tracker import batches

                for m, p, t in batches(metrics, params, tags):
                    self.pending.append(client.log_batch(run_id, metrics=m, params=p, tags=t, synchronous=False))

            tracker.log_batch = log_batch
        self.trial = types.SimpleNamespace(trial_id="t0", config={})

    def __call__(self, metrics, checkpoint=None):
        if self.cb is None:
            return
        t0 = time.perf_counter()
        self.cb.on_trial_result(0, [], self.trial, {**metrics, "training_iteration": self.n + 1})
        self.seconds += time.perf_counter() - t0
        self.n += 1

    def flush(self) -> float:
        t0 = time.perf_counter()
        if self.cb is not None:
            self.cb.flush()  # (the trial's end)
        for op in self.pending:
            op.wait()
        self.seconds += time.perf_counter() - t0
        return time.perf_counter() - t0


def one(steps: int, every: int, uri, asynchronous=False, flush_every_s=0.0) -> dict:
    from rirlab import contract
    from rirlab.train import run_trial

    writes = Writes(uri, asynchronous, flush_every_s)
    config = {**TRIAL, "steps": steps, "log_every": every, "eval_every": steps + 1}
    t0 = time.perf_counter()
    final = run_trial(config, writes)
    flushed = writes.flush()
    wall = time.perf_counter() - t0
    step_ms = final[contract.TIME_PER_STEP_MS]  # the training steps alone (the trainer's own timer)
    return {"steps": steps, "every": every, "reports": writes.n, "wall_s": round(wall, 2),
            "train_step_ms": round(step_ms, 3), "ms_per_report": round(1000 * writes.seconds / max(writes.n, 1), 3),
            "flush_s": round(flushed, 2),
            # per training step: the step itself and what writing its share of the reports cost
            "ms_per_step": round(step_ms + 1000 * writes.seconds / steps, 3)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folder: Path, db: Path | None = None):
    """A local `mlflow server` on the SQLite file ``db`` (default ``folder/server.db``): (process, url)."""
    port = free_port()
    db = db or folder / "server.db"
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
                             "--default-artifact-root", str(folder / "artifacts"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    end = time.time() + 180
    while time.time() < end:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            time.sleep(1)
    proc.terminate()
    raise SystemExit("mlflow server did not answer in 180 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--every", type=int, default=10, help="the K of the every-K-steps modes")
    ap.add_argument("--server", action="store_true", help="also through a local `mlflow server`")
    ap.add_argument("--async", dest="asynchronous", action="store_true", help="also MLflow's async logging")
    ap.add_argument("--modes", help="only these modes, comma-separated (off always runs: the baseline)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    os.environ.setdefault("RIRLAB_CACHE", tempfile.mkdtemp(prefix="rirlab-cache-"))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        modes = [("off", args.steps, None), ("noop-1", 1, None),
                 ("sqlite-1", 1, f"sqlite:///{folder / 'a.db'}"),
                 (f"sqlite-{args.every}", args.every, f"sqlite:///{folder / 'b.db'}"),
                 ("sqlite-1-flush", 1, f"sqlite:///{folder / 'd.db'}")]
        server = None
        if args.server:
            server, url = start_server(folder)
            modes += [("server-1", 1, url), (f"server-{args.every}", args.every, url), ("server-1-flush", 1, url)]
        if args.asynchronous:
            modes += [("sqlite-async-1", 1, f"sqlite:///{folder / 'c.db'}")]
        try:
            from rirlab.sweeps.record.callback import log_flush_s

            for name, every, uri in modes:
                if args.modes and name not in args.modes.split(",") and name != "off":
                    continue
                row = {"mode": name, **one(args.steps, every, uri, asynchronous="async" in name,
                                           flush_every_s=log_flush_s() if name.endswith("-flush") else 0.0)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)
    print(f"\n{'mode':<16} {'step ms':>9} {'+ logging':>10} {'share':>7} {'ms/report':>10} {'reports':>7}")
    for r in rows:
        # against the same trial's own step time: the load of a shared machine moves step times from one mode to
        # the next more than the logging does
        share = (r["ms_per_step"] - r["train_step_ms"]) / r["ms_per_step"] if r["ms_per_step"] else 0.0
        r["logging_share"] = round(share, 3)
        print(f"{r['mode']:<16} {r['train_step_ms']:>9.2f} {r['ms_per_step'] - r['train_step_ms']:>10.2f} "
              f"{100 * share:>6.1f}% {r['ms_per_report']:>10.2f} {r['reports']:>7}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
