"""One job per trial (issue 54 item 10): two `rirlab sweep SPEC --trial I --group G` jobs of one grid run at the same
time on one sqlite store, as two tasks of a Slurm job array would, and `rirlab tables SPEC` prints their trials as
one sweep; a requeued job (--resume) continues its own trial, not the other job's."""

from __future__ import annotations

import os
import subprocess

import yaml
from mlflow.tracking import MlflowClient

from rirlab import contract
from tests.helpers.cli import REPO, RIRLAB, run_cli

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


def test_two_trial_jobs_run_together_and_read_back_as_one_sweep(workdir):
    spec = workdir / "jobs.yaml"
    fixed = {**TINY["fixed"], "steps": 10, "eval_every": 10}
    spec.write_text(yaml.safe_dump({**TINY, "name": "jobs", "fixed": fixed, "seeds": 1, "checkpoint_every": 0},
                                   sort_keys=False))  # a grid of two trials: lr 0.003 and 0.001
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "SLURM_ARRAY_JOB_ID")}
    procs = [subprocess.Popen([*RIRLAB, "sweep", str(spec), "--trial", str(i), "--group", "arr7",
                               "--no-checkpoint-artifacts"], cwd=workdir, env=env | {"PYTHONUNBUFFERED": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    outs = [p.communicate(timeout=500) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        assert "done: 1 finished, 0 failed" in out
    assert outs[0][0].startswith("trial 0 of 2 (#1 in --dry-run) alone: lr=0.003,seed=0, group arr7")

    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    exp = client.get_experiment_by_name("jobs")
    parents = client.search_runs([exp.experiment_id], contract.parent_filter(), max_results=100)
    by_index = {p.data.tags[contract.TRIAL_INDEX]: p for p in parents}
    assert sorted(by_index) == ["0", "1"] and {p.data.tags[contract.SWEEP_GROUP] for p in parents} == {"arr7"}
    dry = run_cli(["sweep", spec, "--dry-run"], cwd=workdir, env={"RIRLAB_DRY_RUN_TIMING": "0"}, check=True)
    assert {p.data.tags[contract.SPEC_HASH] for p in parents} == {dry.stdout.split("spec hash ")[1][:12]}
    kids = client.search_runs([exp.experiment_id], "tags.`mlflow.parentRunId` != ''", max_results=100)
    assert sorted(k.info.run_name for k in kids) == ["lr=0.001,seed=0", "lr=0.003,seed=0"]  # the grid's names

    tables = run_cli(["tables", spec], cwd=workdir, check=True)
    rows = [line for line in tables.stdout.splitlines() if line.startswith("| lr 0.00")]
    assert len(rows) == 2 and all("(n=1)" in row for row in rows), tables.stdout  # both trials, measured
    assert "2 finished runs; 0 failed" in tables.stdout
    assert "sweep group arr7 (2 of 2 one-trial jobs" in tables.stdout and "sweeps;" not in tables.stderr
    runs = run_cli(["runs", spec, "--format", "csv"], cwd=workdir, check=True)
    assert len(runs.stdout.strip().splitlines()) == 2 and "group arr7 (2 of 2 one-trial jobs)" in runs.stdout

    again = run_cli(["sweep", spec, "--trial", "1", "--group", "arr7", "--resume", "--no-checkpoint-artifacts"],
                    cwd=workdir, check=True)  # a requeued task of the array: its own job, nothing trained twice
    assert f"parent run {by_index['1'].info.run_id}" in again.stdout, again.stdout
    assert len(client.search_runs([exp.experiment_id], contract.parent_filter(), max_results=100)) == 2
