"""Specs derived from tests/specs/tiny.yaml (a sweep of tiny, fast trials) and the MLflow runs a sweep leaves."""

from __future__ import annotations

from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from tests.helpers.cli import TINY_SPEC

TINY = yaml.safe_load(TINY_SPEC.read_text())


def write_spec(path: Path, **changes) -> Path:
    """tiny.yaml with CHANGES (top-level keys replaced) written to PATH."""
    spec = {**TINY, **changes}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def runs_of(db: Path, name: str):
    """(client, parent runs, child runs) of experiment NAME in the sqlite store DB."""
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("rirlab.sweep") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children
