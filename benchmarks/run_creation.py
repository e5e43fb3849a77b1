"""Does creating a trial's run cost more as the experiment fills? (issue 50 item 1: "no per-trial cost that grows
with the number of runs already in the experiment").

The driver creates each trial's child run with ``Tracker.start_child``: ``runs/create``, a search for other runs of
the same trial key (the idempotence check against a server's lost answer, ``Tracker._one_run``, filtered on two
tags) and the trial's params in one ``log_batch``. This times that call, per child, as N children are created under
one parent of a fresh store, and prints the median per block of 100: flat means no hidden scan of the experiment.

    python benchmarks/run_creation.py --runs 1000                         # a temporary sqlite store
    python benchmarks/run_creation.py --runs 1000 --tracking-uri http://127.0.0.1:5000   # a running mlflow server
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--block", type=int, default=100)
    ap.add_argument("--tracking-uri", default=None, help="default: sqlite in a temporary folder")
    args = ap.parse_args()
    from rirlab import contract
    from rirlab.sweeps.record.tracker import Tracker

    with tempfile.TemporaryDirectory() as tmp:
        uri = args.tracking_uri or f"sqlite:///{Path(tmp) / 'runs.db'}"
        tracker = Tracker(uri)
        exp_id = tracker.experiment_id(f"run-creation-{int(time.time())}")
        parent = tracker.start_parent(exp_id, "parent", {contract.SPEC_HASH: "0123abcd"})
        params = {f"p{i}": i for i in range(12)}  # about a trial's resolved config
        times = []
        print(f"{'children':>10} {'median ms':>10} {'max ms':>8}")
        for k in range(args.runs):
            t0 = time.perf_counter()
            tracker.start_child(exp_id, parent, f"trial_{k:05d}", params, {contract.TRIAL_KEY: f"t{k:05d}"})
            times.append(1000 * (time.perf_counter() - t0))
            if (k + 1) % args.block == 0:
                block = times[-args.block:]
                print(f"{k + 1 - args.block:>5}-{k:<4} {statistics.median(block):>10.1f} {max(block):>8.1f}", flush=True)


if __name__ == "__main__":
    main()
