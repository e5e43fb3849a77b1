"""Builds real MLflow stores (sqlite) shaped like `rirlab sweep`'s runs, for the analysis tests."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from analysis.runs import read_spec


def make_sweep(root: Path, spec: dict, runs: list[dict]) -> tuple[str, Path]:
    """Write SPEC to root/<name>.yaml and record a parent run plus one child per entry of RUNS.

    A run entry: {swept: {...incl. seed}, metrics: {name: value} (final), status: FINISHED|FAILED,
    history: {name: [(step, value), ...]}, params: {...}, reason: str, early_stopped: bool}.
    Returns (tracking uri, spec path)."""
    uri = f"sqlite:///{root / 'mlruns.db'}"
    spec_path = root / f"{spec['name']}.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    parsed = read_spec(spec_path)
    client = MlflowClient(uri)
    exp_id = client.create_experiment(spec["name"], artifact_location=str(root / "mlartifacts" / spec["name"]))
    swept_keys = (["variant"] if spec.get("variants") else []) + list(spec.get("search", {}))
    parent = client.create_run(exp_id, run_name=f"{spec['name']} test", tags={
        "rirlab.sweep": "parent", "rirlab.spec_hash": "0" * 12, "rirlab.swept": ",".join(swept_keys),
        "rirlab.seeds": str(len(parsed.seed_list)), "rirlab.metric": "dev/accuracy", "rirlab.quick": "False"})
    pid = parent.info.run_id
    client.log_text(pid, json.dumps(parsed.model_dump(mode="json")), "spec/effective_spec.json")
    now = int(time.time() * 1000)
    for i, r in enumerate(runs):
        sw = r["swept"]
        tags = {MLFLOW_PARENT_RUN_ID: pid, "rirlab.swept": json.dumps(sw), "rirlab.trial_key": f"t{i}"}
        if sw.get("variant"):
            tags["rirlab.variant"] = sw["variant"]
        if r.get("early_stopped"):
            tags["rirlab.early_stopped"] = "true"
        run = client.create_run(exp_id, run_name=",".join(f"{k}={v}" for k, v in sw.items()), tags=tags)
        rid = run.info.run_id
        params = {"model": spec.get("model", "m"), "task": spec.get("task", "t"), "lr": 0.001, "batch_size": 32,
                  "use_flag": True, **{k: v for k, v in sw.items() if k != "variant"}, **r.get("params", {})}
        for k, v in params.items():
            client.log_param(rid, k, v)
        metrics = [Metric(k, float(v), now + j, s) for k, pts in r.get("history", {}).items()
                   for j, (s, v) in enumerate(pts)]
        metrics += [Metric(k, float(v), now + 10_000, 1000) for k, v in r.get("metrics", {}).items()]
        client.log_batch(rid, metrics=metrics)
        if r.get("reason"):
            client.set_tag(rid, "rirlab.failure_reason", r["reason"])
        client.set_terminated(rid, r.get("status", "FINISHED"))
    client.set_terminated(pid, "FINISHED")
    return uri, spec_path
