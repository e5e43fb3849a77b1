"""``reuse_workers: true``: a sweep's trials run one after another in one Ray worker process (Ray Tune's
reuse_actors), each recording what it records when run alone in a fresh process."""

from __future__ import annotations

import json
import math

from rirlab.train import run_trial
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import run_cli
from tests.helpers.sweep_runs import TINY, runs_of, write_spec


def test_trials_share_one_worker_process_and_record_what_a_fresh_process_does(workdir, new_store):
    new_store(workdir / "mlruns.db")
    spec = write_spec(workdir / "r.yaml", name="reuse", search={"lr": {"grid": [0.003]}}, seeds=2,
                      max_concurrent=1, reuse_workers=True, checkpoint_every=0,
                      fixed={**TINY["fixed"], "steps": 20, "eval_every": 10})
    run_cli(["sweep", spec, "--no-checkpoint-artifacts", "--output-dir", "runs"], cwd=workdir, check=True)
    _, parents, children = runs_of(workdir / "mlruns.db", "reuse")
    assert len(parents) == 1 and len(children) == 2 and {r.info.status for r in children} == {"FINISHED"}

    pids = {json.loads(line)["pid"] for f in (workdir / "runs").glob("*/trial_*/result.json")
            for line in f.read_text().splitlines() if line.strip()}
    assert len(pids) == 1, f"the two trials ran in {len(pids)} worker processes, not one reused: {pids}"

    by_seed = {int(r.data.params["seed"]): r for r in children}
    for trial in expand(load_spec(spec).spec):
        reference = run_trial(trial["config"])  # the same trial alone, in this process
        run = by_seed[trial["config"]["seed"]]
        for key in ("dev/accuracy", "dev/loss", "test/accuracy", "test/loss", "train/loss"):
            assert math.isclose(run.data.metrics[key], reference[key], rel_tol=1e-6, abs_tol=1e-9), (key, trial)
