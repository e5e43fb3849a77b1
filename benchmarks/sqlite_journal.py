"""What SQLite's write-ahead log would save the driver (issue 50): a trial's bookkeeping on an MLflow SQLite store in
its default rollback-journal mode (``journal_mode=DELETE``) against ``journal_mode=WAL`` (``synchronous=FULL``: each
commit still reaches the disk before it returns), and whether a reader meets a lock while the driver writes.

In process, no Ray: each trial goes through the driver's own ``MLflowTrialCallback`` as a sweep drives it (its run
created, ``--results`` results, the final one, its end with a checkpoint and the model logged, as
``tests/sweeps/test_trial_round_trips.py`` does), on a fresh store per mode and round, the modes interleaved
round by round so that both share the core's load. Per mode: wall and CPU milliseconds per trial (median of
every trial of every round), SQLite commits per trial (counted on MLflow's engine), the milliseconds of one
commit alone (``set_tag``, median of 50), and, with ``--reader``, a second process reading the store in a loop
(``search_runs`` of the experiment, as `rirlab runs` reads it) while the trials are written: its reads, and how
many met a lock at once (SQLite's busy timeout 0 for that count; MLflow's own sessions wait up to 20 s).

    taskset -c 1 .venv/bin/python benchmarks/sqlite_journal.py [--trials 7] [--rounds 3] [--results 3] [--reader]
        [--dir DIR] [--json FILE]

--dir: where the stores are made (default: a temporary folder under the current directory, so on its filesystem).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("delete", "wal")


def set_mode(db: Path, mode: str) -> str:
    con = sqlite3.connect(db)
    try:
        return con.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
    finally:
        con.close()


def reader(uri: str, exp_name: str, stop, out) -> None:
    """Read the store in a loop until ``stop``; count the reads and those SQLite refused at once (locked)."""
    path = uri[len("sqlite:///"):]
    reads = locked = 0
    while not stop.is_set():
        con = sqlite3.connect(path, timeout=0)
        try:
            con.execute("SELECT r.run_uuid, r.status, t.key, t.value FROM runs r JOIN tags t ON t.run_uuid = "
                        "r.run_uuid JOIN experiments e ON e.experiment_id = r.experiment_id WHERE e.name = ?",
                        (exp_name,)).fetchall()
            con.execute("SELECT run_uuid, key, value FROM latest_metrics").fetchall()
            reads += 1
        except sqlite3.OperationalError as err:
            if "locked" not in str(err):
                raise
            locked += 1
        finally:
            con.close()
        time.sleep(0.005)
    out.put((reads, locked))


def one_round(folder: Path, mode: str, trials: int, results: int, with_reader: bool) -> dict:
    sys.path.insert(0, str(REPO))
    from sqlalchemy import event

    from rirlab.sweeps.record.callback import MLflowTrialCallback
    from rirlab.sweeps.record.tracker import Tracker
    from tests.helpers.analysis_store import copy_empty_store
    from tests.sweeps.test_trial_round_trips import FINAL, PLAN, _checkpoint, _trial

    db = folder / f"{mode}.db"
    db.unlink(missing_ok=True)
    uri = copy_empty_store(db)
    got = set_mode(db, mode)
    tracker = Tracker(uri)
    engine = tracker.client._tracking_client.store.engine
    commits = [0]
    event.listen(engine, "commit", lambda conn: commits.__setitem__(0, commits[0] + 1))
    sync = engine.connect().exec_driver_sql("PRAGMA synchronous").scalar()
    exp_id = tracker.experiment_id("journal")
    parent = tracker.start_parent(exp_id, "journal", {})
    cb = MLflowTrialCallback(tracker, exp_id, parent, PLAN, checkpoint_artifacts=True)
    ckpt_dir = folder / f"ckpt_{mode}"
    ckpt_dir.mkdir(exist_ok=True)
    checkpoint, _ = _checkpoint(ckpt_dir) if not (ckpt_dir / "checkpoint_000000").exists() else \
        (types.SimpleNamespace(path=str(ckpt_dir / "checkpoint_000000")), None)
    stop = out = proc = None
    if with_reader:
        ctx = multiprocessing.get_context("spawn")
        stop, out = ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=reader, args=(uri, "journal", stop, out))
        proc.start()
    wall, cpu, per_commits = [], [], []
    for i in range(trials):
        t = _trial(f"j{mode}_{i:05d}", checkpoint)
        c0, w0, p0 = commits[0], time.perf_counter(), time.process_time()
        cb.on_trial_start(i, [], t)
        for s in range(results):
            cb.on_trial_result(i, [], t, {"step": 10 * (s + 1), "train/loss": 2.0 / (s + 1)})
        cb.on_trial_result(i, [], t, FINAL)
        t.last_result = FINAL
        cb.on_trial_complete(i, [], t)
        wall.append(1000 * (time.perf_counter() - w0))
        cpu.append(1000 * (time.process_time() - p0))
        per_commits.append(commits[0] - c0)
    reads = locked = None
    if proc is not None:
        stop.set()
        reads, locked = out.get(timeout=60)
        proc.join(60)
    one = []
    for k in range(50):
        w0 = time.perf_counter()
        tracker.client.set_tag(parent, "bench", str(k))
        one.append(1000 * (time.perf_counter() - w0))
    return {"mode": got, "synchronous": sync, "trial_ms": wall, "trial_cpu_ms": cpu, "commits": per_commits,
            "commit_ms": statistics.median(one), "reads": reads, "locked": locked}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", type=int, default=3, help="results before the final one, per trial")
    ap.add_argument("--reader", action="store_true", help="a second process reading the store meanwhile")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import torch

    torch.set_num_threads(1)
    rows = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(dir=args.dir or os.getcwd(), prefix=".sqlite_journal_") as d:
        for r in range(args.rounds):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):  # alternate which goes first
                folder = Path(d) / f"r{r}"
                folder.mkdir(exist_ok=True)
                row = one_round(folder, mode, args.trials, args.results, args.reader)
                rows[mode].append(row)
                print(f"round {r} {mode}: trial ms {statistics.median(row['trial_ms']):.0f}, cpu ms "
                      f"{statistics.median(row['trial_cpu_ms']):.0f}, commits {statistics.median(row['commits'])}, "
                      f"one commit {row['commit_ms']:.1f} ms, synchronous {row['synchronous']}"
                      + (f", reader {row['reads']} reads, {row['locked']} locked" if args.reader else ""),
                      file=sys.stderr, flush=True)
    print("| journal | trial ms (median) | driver CPU ms | commits / trial | one commit ms | reader: reads, locked |")
    print("|---|---:|---:|---:|---:|---|")
    summary = {}
    for mode, rs in rows.items():
        wall = statistics.median(x for r in rs for x in r["trial_ms"])
        cpu = statistics.median(x for r in rs for x in r["trial_cpu_ms"])
        commits = statistics.median(x for r in rs for x in r["commits"])
        commit = statistics.median(r["commit_ms"] for r in rs)
        lock = (f"{sum(r['reads'] for r in rs)}, {sum(r['locked'] for r in rs)}" if args.reader else "")
        summary[mode] = {"trial_ms": wall, "trial_cpu_ms": cpu, "commits": commits, "commit_ms": commit}
        print(f"| {mode} | {wall:.0f} | {cpu:.0f} | {commits:g} | {commit:.1f} | {lock} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
