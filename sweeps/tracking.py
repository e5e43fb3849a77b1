"""MLflow bookkeeping, always from the driver: one parent run per sweep, one child run per trial.

Only the driver writes (safe with a sqlite store and concurrent trials; the
same code talks to a tracking server across machines). Child runs carry the
tag ``schema.TRIAL_KEY`` so a resumed sweep finds and continues its own runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient

import rirlab
from sweeps import schema

DEFAULT_URI_FILE = "mlruns.db"
RAY_KEYS = {"time_this_iter_s", "timestamp", "training_iteration", "time_total_s", "time_since_restore",
            "iterations_since_restore", "pid", "done", schema.STEP, "checkpoint_dir_name", "should_checkpoint"}
SECRET_MARKERS = ("PASSWORD", "SECRET", "TOKEN", "KEY", "CREDENTIAL")
# forwarded to Ray workers (when set): MLflow server auth/TLS, S3/MinIO artifact store, plugins, the data cache
WORKER_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
              "MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH", "MLFLOW_S3_ENDPOINT_URL",
              "MLFLOW_S3_IGNORE_TLS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
              "AWS_DEFAULT_REGION", "AWS_REGION", "RIRLAB_PLUGINS", "RIRLAB_CACHE")


def resolve_tracking_uri(cli_value: Optional[str] = None) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlruns.db."""
    uri = cli_value or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / DEFAULT_URI_FILE}"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        rel = uri[len("sqlite:///"):]
        uri = f"sqlite:///{Path(rel).resolve()}"
    return uri


def artifact_root(uri: str) -> Optional[str]:
    """For a sqlite store, keep artifacts next to the database file (mlartifacts/)."""
    if uri.startswith("sqlite:///"):
        return str(Path(uri[len("sqlite:///"):]).parent / "mlartifacts")
    return None


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(rirlab.__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def split_result(result: dict) -> tuple[dict[str, float], dict[str, str]]:
    """Numeric, finite values -> metrics; strings -> tags; Ray's bookkeeping keys dropped."""
    metrics, tags = {}, {}
    for k, v in result.items():
        if k in RAY_KEYS or k.startswith(("config", "artifact:")) or k in ("trial_id", "experiment_tag", "date", "hostname", "node_ip"):
            continue
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            metrics[k] = float(v)
        elif isinstance(v, str):
            tags[schema.result_tag(k)] = v[:5000]
    return metrics, tags


class Tracker:
    def __init__(self, uri: str):
        for noisy in ("mlflow.store.db.utils", "alembic"):  # schema-creation chatter on a new store
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)

    def experiment_id(self, name: str, create: bool = True) -> Optional[str]:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        if not create:
            return None
        root = artifact_root(self.uri)
        return self.client.create_experiment(name, artifact_location=f"{root}/{name}" if root else None)

    def start_parent(self, exp_id: str, name: str, tags: dict[str, str]) -> str:
        run = self.client.create_run(exp_id, run_name=name, tags={schema.SWEEP_TAG: schema.PARENT, **tags,
                                                                  schema.VERSION: rirlab.__version__,
                                                                  schema.GIT_COMMIT: git_commit()})
        return run.info.run_id

    def find_parent(self, exp_id: str, spec_hash: str):
        runs = self.client.search_runs([exp_id], filter_string=schema.parent_filter(spec_hash),
                                       order_by=["attributes.start_time DESC"], max_results=1)
        return runs[0] if runs else None

    def children(self, exp_id: str, parent_id: str) -> list:
        return self.client.search_runs([exp_id], filter_string=schema.children_filter(parent_id), max_results=50000)

    def start_child(self, exp_id: str, parent_id: str, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        run = self.client.create_run(exp_id, run_name=name, tags={schema.PARENT_RUN_ID: parent_id, **tags})
        self.log_params(run.info.run_id, params)
        return run.info.run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        items = [Param(k, str(v)[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i : i + 100], synchronous=True)

    def log_result(self, run_id: str, result: dict, step: int) -> None:
        for key, obj in result.items():
            if key.startswith("artifact:"):
                self.client.log_dict(run_id, obj, key[len("artifact:"):])
        metrics, tags = split_result(result)
        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()],
                              tags=[RunTag(k, v) for k, v in tags.items()], synchronous=True)

    def log_datasets(self, run_id: str, datasets: list[dict]) -> None:
        """Record a trial's splits as MLflow dataset inputs (``Task.datasets`` as dicts; see schema.DATASET_*)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        inputs = []
        for d in datasets:
            generated = d["source"] == schema.DATASET_GENERATED
            source = {"params": d["params"]} if generated else {"uri": d["source"], **d["params"]}
            dataset = Dataset(name=d["name"], digest=d["digest"],
                              source_type=schema.DATASET_GENERATED if generated else "local",
                              source=json.dumps(source, sort_keys=True, default=str),
                              profile=json.dumps({"rows": d["rows"], "rows_from": d["rows_from"]}))
            inputs.append(DatasetInput(dataset, tags=[InputTag(schema.DATASET_CONTEXT, d["split"])]))
        if inputs:
            self.client.log_inputs(run_id, datasets=inputs)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()], synchronous=True)

    def finish(self, run_id: str, status: str = "FINISHED", reason: Optional[str] = None) -> None:
        if reason:
            self.set_tags(run_id, {schema.FAILURE_REASON: reason[:5000]})
        self.client.set_terminated(run_id, status=status)

    def reopen(self, run_id: str) -> None:
        self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))


def redact_uri(uri: str) -> str:
    """``scheme://user:password@host/...`` -> ``scheme://user:***@host/...`` (URIs without a password unchanged)."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/:@]*):[^/@]*@", r"\1:***@", uri)


def redact_env(env: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Environment variables safe to record: none whose name looks like a secret, no password inside a URI."""
    env = os.environ if env is None else env
    return {k: redact_uri(v) for k, v in env.items() if not any(m in k.upper() for m in SECRET_MARKERS)}


def worker_env(tracking_uri: Optional[str] = None) -> dict[str, str]:
    """What Ray workers need from the driver's environment: the tracking URI, MLflow's credentials, the plugins
    and $RIRLAB_CACHE (trials read imported splits and share generated ones there; a task config's cache_dir
    travels in the trial config itself). Sent through Ray's runtime_env, never logged."""
    env = {k: os.environ[k] for k in WORKER_ENV if os.environ.get(k)}
    if "RIRLAB_CACHE" in env:  # a relative path would resolve against each worker's own directory (a trial's)
        env["RIRLAB_CACHE"] = str(Path(env["RIRLAB_CACHE"]).expanduser().resolve())
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    return env
