"""A sweep reads its data where the driver put it: an imported split through a relative $RIRLAB_CACHE reaches the
trials, the generated splits are built in the driver's cache, and each child run records its datasets."""

from __future__ import annotations

import json

import yaml
from mlflow.tracking import MlflowClient

from rirlab.tasks import cache
from tests.helpers.cli import run_cli
from tests.helpers.sweep_runs import TINY


def test_sweep_trials_read_the_import_through_a_relative_cache_and_record_their_datasets(workdir, new_store):
    """$RIRLAB_CACHE relative to the driver's directory: trials (in their own directories) must find the imported
    split there and build the generated ones there; each child run lists its datasets."""
    env = {"RIRLAB_CACHE": "datacache"}
    new_store(workdir / "mlruns.db")
    src = workdir / "mine.tsv"
    src.write_text("9\t( ( ( [MAX 2 ) 9 ) ] )\n2\t( ( ( [MIN 2 ) 9 ) ] )\n5\t( ( ( [SM 2 ) 3 ) ] )\n")
    run_cli(["data", "import", "listops", src, "--split", "test"], cwd=workdir, env=env, check=True)
    spec = workdir / "s.yaml"
    fixed = {**TINY["fixed"], "steps": 10, "eval_every": 10, "imported": ["test"], "eval_splits": ["test"]}
    spec.write_text(yaml.safe_dump({**TINY, "name": "prov", "fixed": fixed, "search": {"lr": {"grid": [0.003]}},
                                    "seeds": 1}, sort_keys=False))
    run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, env=env, check=True)
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    exp = client.get_experiment_by_name("prov")
    (child,) = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert child.info.status == "FINISHED" and child.data.metrics["test/accuracy"] >= 0
    inputs = {i.dataset.name: i.dataset for i in child.inputs.dataset_inputs}
    assert set(inputs) == {"listops/train", "listops/dev", "listops/test"}
    record = cache.imported_record("listops", "test", str(workdir / "datacache"))
    assert inputs["listops/test"].digest == record["digest"] and json.loads(inputs["listops/test"].profile)["rows"] == 3
    generated = sorted(p.name.split("-")[0] for p in (workdir / "datacache" / "listops").glob("*.parquet"))
    assert generated == ["dev", "train"]  # built by the trial's worker in the driver's cache
    assert not any(p.name == "datacache" for p in (workdir / "rirlab_runs").rglob("*"))
