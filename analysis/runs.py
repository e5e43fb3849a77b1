"""Read a sweep's runs back from MLflow into a pandas DataFrame (one row per child run)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import pandas as pd
from mlflow.tracking import MlflowClient

from sweeps import schema
from sweeps.schema import Spec, UserError, read_spec

__all__ = ["Sweep", "child_runs", "effective_spec", "latest_parent", "load_sweep", "read_spec"]


def latest_parent(client: MlflowClient, experiment: str, parent_id: Optional[str] = None):
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise UserError(f"no experiment '{experiment}' in the tracking store; run `rirlab sweep` on its spec first "
                        f"(or pass the same --tracking-uri)")
    if parent_id:
        return exp, client.get_run(parent_id)
    runs = client.search_runs([exp.experiment_id], filter_string=schema.parent_filter(),
                              order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise UserError(f"experiment '{experiment}' has no sweep parent run; run `rirlab sweep` first")
    return exp, runs[0]


def child_runs(client: MlflowClient, exp_id: str, parent_id: str) -> pd.DataFrame:
    """Columns: run_id, name, status, swept (dict), params.*, metrics (final values) and tags of interest."""
    runs = client.search_runs([exp_id], filter_string=schema.children_filter(parent_id), max_results=50000)
    rows = []
    for r in runs:
        tags = r.data.tags
        row = {"run_id": r.info.run_id, "name": r.info.run_name, "status": r.info.status,
               "swept": schema.swept_of(tags), "early_stopped": tags.get(schema.EARLY_STOPPED) == schema.TRUE,
               "parent_id": tags.get(schema.PARENT_RUN_ID), "failure_reason": tags.get(schema.FAILURE_REASON),
               "start_time": r.info.start_time, "end_time": r.info.end_time}
        row.update({f"param.{k}": v for k, v in r.data.params.items()})
        row.update({f"metric.{k}": v for k, v in r.data.metrics.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def effective_spec(client: MlflowClient, parent_run):
    """The spec a sweep actually ran (after --quick/--set), from the parent's artifact; None if absent."""
    import tempfile

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = client.download_artifacts(parent_run.info.run_id, schema.EFFECTIVE_SPEC_ARTIFACT, tmp)
            with open(path) as f:
                return Spec.model_validate(json.load(f))
    except Exception:  # noqa: BLE001  (no artifact, unreachable artifact store, older schema)
        return None


@dataclasses.dataclass
class Sweep:
    """One sweep read back: its parent run (None when nothing ran yet), its trial runs, its spec, and the
    task's evaluation splits as the sweep recorded them ([] before any run, or for an older parent run)."""

    experiment: str
    parent: object
    runs: pd.DataFrame
    spec: object  # sweeps.schema.Spec or None
    n_expected: int
    splits: list = dataclasses.field(default_factory=list)  # [(split, paper label)] in the papers' order


def load_sweep(client: MlflowClient, experiment: str, parent_id: Optional[str] = None, spec=None,
               allow_empty: bool = False) -> Sweep:
    """The latest (or given) sweep of EXPERIMENT. ``allow_empty``: no experiment/parent yet is not an
    error (tables of a spec print their layout with empty cells)."""
    try:
        exp, parent = latest_parent(client, experiment, parent_id)
    except UserError:
        if not allow_empty:
            raise
        n = len(spec.seed_list) if spec is not None else 0
        return Sweep(experiment, None, pd.DataFrame(), spec, n)
    ran = effective_spec(client, parent)
    df = child_runs(client, exp.experiment_id, parent.info.run_id)
    n = int(parent.data.tags.get(schema.SEEDS, "0") or 0) or (len(spec.seed_list) if spec is not None else 0)
    return Sweep(experiment, parent, df, ran or spec, n, schema.decode_splits(parent.data.tags))
