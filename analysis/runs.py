"""Read a sweep's runs back from MLflow into a pandas DataFrame (one row per child run)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import pandas as pd
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rirlab.errors import UserError

PARENT_TAG = "rirlab.sweep"


def latest_parent(client: MlflowClient, experiment: str, parent_id: Optional[str] = None):
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise UserError(f"no experiment '{experiment}' in the tracking store; run `rirlab sweep` on its spec first "
                        f"(or pass the same --tracking-uri)")
    if parent_id:
        return exp, client.get_run(parent_id)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = 'parent'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise UserError(f"experiment '{experiment}' has no sweep parent run; run `rirlab sweep` first")
    return exp, runs[0]


def child_runs(client: MlflowClient, exp_id: str, parent_id: str) -> pd.DataFrame:
    """Columns: run_id, name, status, swept (dict), params.*, metrics (final values) and tags of interest."""
    runs = client.search_runs([exp_id], filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}'",
                              max_results=50000)
    rows = []
    for r in runs:
        row = {"run_id": r.info.run_id, "name": r.info.run_name, "status": r.info.status,
               "swept": json.loads(r.data.tags.get("rirlab.swept", "{}")),
               "early_stopped": r.data.tags.get("rirlab.early_stopped") == "true",
               "parent_id": r.data.tags.get(MLFLOW_PARENT_RUN_ID),
               "failure_reason": r.data.tags.get("rirlab.failure_reason"),
               "start_time": r.info.start_time, "end_time": r.info.end_time}
        row.update({f"param.{k}": v for k, v in r.data.params.items()})
        row.update({f"metric.{k}": v for k, v in r.data.metrics.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def read_spec(path):
    """The spec file's schema only (not every trial config: tables of a spec whose models are not
    registered yet still print). Raises UserError with file:line like ``rirlab sweep``."""
    from pathlib import Path

    from pydantic import ValidationError

    from sweeps.spec import Spec, _pydantic_error
    from sweeps.yaml_lines import load_with_lines

    data, lines = load_with_lines(Path(path))
    try:
        return Spec.model_validate(data)
    except ValidationError as err:
        raise _pydantic_error(err, Path(path), lines) from None


def effective_spec(client: MlflowClient, parent_run):
    """The spec a sweep actually ran (after --quick/--set), from the parent's artifact; None if absent."""
    import tempfile

    from sweeps.spec import Spec

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = client.download_artifacts(parent_run.info.run_id, "spec/effective_spec.json", tmp)
            with open(path) as f:
                return Spec.model_validate(json.load(f))
    except Exception:  # noqa: BLE001  (no artifact, unreachable artifact store, older schema)
        return None


@dataclasses.dataclass
class Sweep:
    """One sweep read back: its parent run (None when nothing ran yet), its trial runs, its spec."""

    experiment: str
    parent: object
    runs: pd.DataFrame
    spec: object  # sweeps.spec.Spec or None
    n_expected: int


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
    n = int(parent.data.tags.get("rirlab.seeds", "0") or 0) or (len(spec.seed_list) if spec is not None else 0)
    return Sweep(experiment, parent, df, ran or spec, n)
