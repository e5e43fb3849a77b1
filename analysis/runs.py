"""Read a sweep's runs back from MLflow into a pandas DataFrame (one row per child run)."""

from __future__ import annotations

import json
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
               "early_stopped": r.data.tags.get("rirlab.early_stopped") == "true"}
        row.update({f"param.{k}": v for k, v in r.data.params.items()})
        row.update({f"metric.{k}": v for k, v in r.data.metrics.items()})
        rows.append(row)
    return pd.DataFrame(rows)
