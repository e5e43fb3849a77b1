"""Two sweeps of the same spec started together on a fresh store (issue 18, item 4): before, the second
crashed in MLflow's migration (`duplicate column name`), and two started in the same second shared one Ray Tune
folder, so only one could be resumed; two optuna sweeps on one SQLite store hit sqlite3's lock wait (issue 50 item
4). Both must complete, each with its own parent run, its own Tune state and its own Optuna study."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from tests.helpers.cli import REPO, RIRLAB

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


def test_two_optuna_sweeps_of_one_spec_started_together_complete_each_with_its_own_state_and_study(workdir):
    """Two sweeps of one spec started together on a fresh store (issue 18 item 4: the second crashed in MLflow's
    migration, `duplicate column name`, and two started in the same second shared one Ray Tune folder, so only one
    could be resumed), optuna sweeps writing one MLflow store and the optuna.db beside it at once (issue 50 item 4: a
    study's ask and tell gave up after sqlite3's 5 s on a loaded machine): both finish, each with its own parent
    run, its own Tune state and its own study (named after its Tune folder). One test for both: the same two
    drivers at once showed each fault (they were two tests of two sweeps each)."""
    import optuna

    spec = workdir / "twin.yaml"
    fixed = {**TINY["fixed"], "steps": 10, "eval_every": 10}
    spec.write_text(yaml.safe_dump({**TINY, "name": "twin", "fixed": fixed, "algorithm": "optuna", "num_samples": 2,
                                    "seeds": 1, "search": {"lr": {"loguniform": [1e-4, 1e-2]}},
                                    "optuna": {"sampler": "random"}, "checkpoint_every": 0}, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {"PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([*RIRLAB, "sweep", str(spec), "--no-checkpoint-artifacts"], cwd=workdir, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=500) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        assert "done: 2 finished, 0 failed" in out, out
        assert "database is locked" not in out + err and "Traceback" not in err, err
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    exp = client.get_experiment_by_name("twin")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("rirlab.sweep") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 2 and all(r.info.status == "FINISHED" for r in parents)
    assert sorted(c.data.tags["mlflow.parentRunId"] for c in children) == sorted([r.info.run_id for r in parents] * 2)
    tune_paths = {r.data.tags["rirlab.tune_path"] for r in parents}
    assert len(tune_paths) == 2 and all(Path(p).is_dir() for p in tune_paths), tune_paths
    (db,) = workdir.glob("optuna.db")
    studies = optuna.get_all_study_summaries(f"sqlite:///{db}")
    assert sorted(s.study_name for s in studies) == sorted(Path(p).name for p in tune_paths), studies
    assert all(s.n_trials == 2 for s in studies)
