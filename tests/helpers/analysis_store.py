"""Builds real MLflow stores (sqlite) shaped like `rirlab sweep`'s runs, for the analysis tests."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import time
from pathlib import Path

import yaml
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from rirlab import contract
from rirlab.sweeps.spec.schema import read_spec

REGISTRY = object()


@functools.lru_cache(maxsize=None)
def empty_store() -> Path:
    """An MLflow sqlite store with every schema migration applied, made once per process: a copy opens at once
    where a new store runs the migrations (seconds) in each test."""
    path = Path(tempfile.mkdtemp(prefix="rirlab-empty-store-")) / "mlruns.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def copy_empty_store(path: Path) -> str:
    """An empty, migrated store copied to PATH (see ``empty_store``); its sqlite URI."""
    shutil.copyfile(empty_store(), path)
    return f"sqlite:///{path}"


def registry_splits(task):
    """(split, paper label) of TASK from the task registry, as `rirlab sweep` records them; None if unknown."""
    from rirlab.errors import UserError
    from rirlab.tasks import registry

    try:
        return list(registry.get(task).splits)
    except UserError:
        return None


def make_sweep(root: Path, spec: dict, runs: list[dict], splits=REGISTRY) -> tuple[str, Path]:
    """Write SPEC to root/<name>.yaml and record a parent run plus one child per entry of RUNS.

    A run entry: {swept: {...incl. seed}, metrics: {name: value} (final), status: FINISHED|FAILED,
    history: {name: [(step, value), ...]}, params: {...}, tags: {...}, reason: str, early_stopped: bool}.
    ``splits``: the (split, label) list the parent records; by default the task registry's, like
    `rirlab sweep`; None records none (a parent run from before the record existed).
    Returns (tracking uri, spec path)."""
    uri = f"sqlite:///{root / 'mlruns.db'}"
    if not (root / "mlruns.db").exists():
        copy_empty_store(root / "mlruns.db")
    spec_path = root / f"{spec['name']}.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    parsed = read_spec(spec_path)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(spec["name"])  # a second sweep of the spec: the same experiment
    exp_id = exp.experiment_id if exp else \
        client.create_experiment(spec["name"], artifact_location=str(root / "mlartifacts" / spec["name"]))
    swept_keys = (["variant"] if spec.get("variants") else []) + list(spec.get("search", {}))
    tags = {contract.SWEEP_TAG: contract.PARENT, contract.SPEC_HASH: "0" * 12, contract.SWEPT_KEYS: json.dumps(swept_keys),
            contract.SEEDS: str(len(parsed.seed_list)), contract.METRIC: "dev/accuracy", contract.QUICK: "False"}
    splits = registry_splits(spec.get("task")) if splits is REGISTRY else splits
    if splits is not None:
        tags[contract.SPLITS] = contract.encode_splits(splits)
    parent = client.create_run(exp_id, run_name=f"{spec['name']} test", tags=tags)
    pid = parent.info.run_id
    client.log_text(pid, json.dumps(parsed.model_dump(mode="json")), contract.EFFECTIVE_SPEC_ARTIFACT)
    now = int(time.time() * 1000)
    for i, r in enumerate(runs):
        sw = r["swept"]
        trial = contract.TrialRecord.of(sw, {})
        tags = {contract.PARENT_RUN_ID: pid, **trial.tags(f"t{i}")}
        if r.get("early_stopped"):
            tags[contract.EARLY_STOPPED] = contract.TRUE
        tags.update(r.get("tags", {}))
        run = client.create_run(exp_id, run_name=trial.name, tags=tags)
        rid = run.info.run_id
        params = {"model": spec.get("model", "m"), "task": spec.get("task", "t"), "lr": 0.001, "batch_size": 32,
                  "use_flag": True, **{k: v for k, v in sw.items() if k != "variant"}, **r.get("params", {})}
        metrics = [Metric(k, float(v), now + j, s) for k, pts in r.get("history", {}).items()
                   for j, (s, v) in enumerate(pts)]
        metrics += [Metric(k, float(v), now + 10_000, 1000) for k, v in r.get("metrics", {}).items()]
        params = [Param(k, str(v)) for k, v in params.items()]  # one transaction per 100, not one per param
        for i in range(0, max(len(params), len(metrics), 1), 100):
            client.log_batch(rid, metrics=metrics[i:i + 100], params=params[i:i + 100])
        if r.get("reason"):
            client.set_tag(rid, contract.FAILURE_REASON, r["reason"])
        client.set_terminated(rid, r.get("status", "FINISHED"))
    client.set_terminated(pid, "FINISHED")
    return uri, spec_path
