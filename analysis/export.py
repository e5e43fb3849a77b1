"""MLflow runs -> Parquet (pyarrow): one row per trial run, and a long table of metric histories.

Runs table: ``run_id, parent_id, experiment, run_name, status, start_time, end_time, variant,
swept (JSON), early_stopped, failure_reason, device``, then ``param.<name>`` (typed: int64, float64, bool or
string, whichever every value of the column parses as) and ``metric.<name>`` (float64, the last
logged value). History table (``<out stem>.history.parquet``): ``run_id, key, step, timestamp, value``.

The runs file's schema metadata ``rirlab.sweeps`` holds, per sweep (parent run) of the exported trials, what
`rirlab tables` reads from the parent run: its id, times, status, tags and the spec it ran (its
``spec/effective_spec.json``). So the file alone is the sweep's record: ``rirlab tables SPEC --records FILE``
(:mod:`rirlab.analysis.records`) prints the same table as the store did, after the store is gone.

The two files of one export are written whole or not at all: each to a temporary name beside it, then both
renamed into place (the history file first). Both carry the export's random id in their schema metadata
(``rirlab.export_id``) and the runs file the history's row count (``rirlab.history_rows``, ``none`` with
``--no-history``), so a reader refuses a runs file beside the history file of another export (a kill between the two
renames, a copy of one file alone) instead of drawing the wrong curves.

A password in the store's URI is masked in every export. With ``redact=True`` (`rirlab export --redact`, for a
record to publish beside a results page) the files also carry no local path and no user name: the store's URI, the
parents' tags (Ray Tune's experiment folder), the specs, the params and the failure reasons keep the last
component of each absolute path (:func:`rirlab.redact.redact_path`), the ``mlflow.user`` tag is dropped, and the
schema metadata says ``rirlab.redacted: paths``. Nothing `rirlab tables --records` reads changes.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq
from mlflow.tracking import MlflowClient

from rirlab.analysis.runs import effective_spec_json, search_all
from rirlab import contract
from rirlab.errors import UserError
from rirlab.redact import redact_paths, redact_uri

SWEEPS_KEY = b"rirlab.sweeps"  # schema metadata of a runs file: JSON {"version": 1, "sweeps": [parent records]}
REDACTED_KEY = b"rirlab.redacted"  # schema metadata: b"paths" when exported with --redact
PERSONAL_TAGS = ("mlflow.user",)  # dropped by --redact
EXPORT_ID_KEY = b"rirlab.export_id"  # schema metadata of both files of one export: the same random id
HISTORY_ROWS_KEY = b"rirlab.history_rows"  # runs file: the rows of its history file, b"none" without one

BASE_FIELDS = [("run_id", pa.string()), ("parent_id", pa.string()), ("experiment", pa.string()),
               ("run_name", pa.string()), ("status", pa.string()), ("start_time", pa.timestamp("ms")),
               ("end_time", pa.timestamp("ms")), ("variant", pa.string()), ("swept", pa.string()),
               ("early_stopped", pa.bool_()), ("failure_reason", pa.string()), ("device", pa.string())]
HISTORY_SCHEMA = pa.schema([("run_id", pa.string()), ("key", pa.string()), ("step", pa.int64()),
                            ("timestamp", pa.timestamp("ms")), ("value", pa.float64())])


def _parse(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "true": True, "false": False}.get(text, text)


def typed_column(values: list) -> pa.Array:
    """Param strings -> the narrowest arrow type every (non-missing) value parses as."""
    values = [None if v in (None, "None") else v for v in values]  # a default of None is logged as "None"
    parsed = [None if v is None else _parse(v) for v in values]
    present = [p for p in parsed if p is not None]
    num = lambda p: isinstance(p, (int, float)) and not isinstance(p, bool)  # noqa: E731
    if present and all(isinstance(p, bool) for p in present):
        return pa.array(parsed, pa.bool_())
    if present and all(num(p) and isinstance(p, int) for p in present):
        return pa.array(parsed, pa.int64())
    if present and all(num(p) for p in present):
        return pa.array([None if p is None else float(p) for p in parsed], pa.float64())
    return pa.array(values, pa.string())


def trial_runs(client: MlflowClient, experiment: str, parent_id: Optional[str] = None) -> list:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise UserError(f"no experiment '{experiment}' in the tracking store; check the name (`rirlab ui` lists them) "
                        f"or pass the store with --tracking-uri")
    ids = [parent_id]  # (None: every trial run of the experiment)
    if parent_id:  # one job of a group of one-trial jobs (--trial I --group G): the group is the sweep
        from rirlab.analysis.runs import group_parents

        try:
            parent = client.get_run(parent_id)
        except Exception:  # noqa: BLE001  (an unknown id: no runs, said by the caller)
            parent = None
        if parent is not None and parent.info.experiment_id == exp.experiment_id:
            ids = [job.info.run_id for job in group_parents(client, exp.experiment_id, parent)]
    runs = [r for i in ids for r in search_all(client, [exp.experiment_id],
                                              filter_string=contract.children_filter(i) if i else "",
                                              order_by=["attributes.start_time ASC"])]
    # a run a later attempt replaced (--rerun-failed) is not exported: each trial once, as tables count it
    return [r for r in contract.current_runs(runs) if not contract.is_parent(r.data.tags)]


def runs_table(runs: list, experiment: str, redact: bool = False) -> pa.Table:
    """One row per trial run (module docstring); with ``redact``, local paths cut in params and failure reasons."""
    text = redact_paths if redact else (lambda v: v)  # noqa: E731
    params = sorted({k for r in runs for k in r.data.params})
    metrics = sorted({k for r in runs for k in r.data.metrics})
    cols: dict[str, pa.Array] = {
        "run_id": pa.array([r.info.run_id for r in runs], pa.string()),
        "parent_id": pa.array([r.data.tags.get(contract.PARENT_RUN_ID) for r in runs], pa.string()),
        "experiment": pa.array([experiment] * len(runs), pa.string()),
        "run_name": pa.array([r.info.run_name for r in runs], pa.string()),
        "status": pa.array([r.info.status for r in runs], pa.string()),
        "start_time": pa.array([r.info.start_time for r in runs], pa.timestamp("ms")),
        "end_time": pa.array([r.info.end_time for r in runs], pa.timestamp("ms")),
        "variant": pa.array([r.data.tags.get(contract.VARIANT) for r in runs], pa.string()),
        "swept": pa.array([r.data.tags.get(contract.SWEPT) for r in runs], pa.string()),
        "early_stopped": pa.array([r.data.tags.get(contract.EARLY_STOPPED) == contract.TRUE for r in runs], pa.bool_()),
        "failure_reason": pa.array([text(r.data.tags.get(contract.FAILURE_REASON)) for r in runs], pa.string()),
        "device": pa.array([r.data.tags.get(contract.result_tag(contract.DEVICE)) for r in runs], pa.string()),
    }
    for p in params:
        cols[f"param.{p}"] = typed_column([text(r.data.params.get(p)) for r in runs])
    for m in metrics:
        cols[f"metric.{m}"] = pa.array([r.data.metrics.get(m) for r in runs], pa.float64())
    return pa.table(cols)


def history_table(client: MlflowClient, runs: list) -> pa.Table:
    """Every logged point of every metric of ``runs``, run by run and key by key. Read a key at a time for all the
    runs that logged it (``metric_histories``: one query per 500 runs on a database store, one request per 100 on a
    tracking server, several at a time), not a call per run and key: a 1,000-run sweep logging 30 metrics was 30,000
    round trips."""
    from rirlab.analysis.runs import metric_histories_of

    keys = sorted({k for r in runs for k in r.data.metrics})
    points = metric_histories_of(client, {key: [r.info.run_id for r in runs if key in r.data.metrics] for key in keys})
    rows = {"run_id": [], "key": [], "step": [], "timestamp": [], "value": []}
    for r in runs:
        for key in sorted(r.data.metrics):
            for m in points[key][r.info.run_id]:
                rows["run_id"].append(r.info.run_id)
                rows["key"].append(key)
                rows["step"].append(m.step)
                rows["timestamp"].append(m.timestamp)
                rows["value"].append(m.value)
    return pa.table(rows, schema=HISTORY_SCHEMA)


def sweep_records(client: MlflowClient, runs: list, redact: bool = False) -> list[dict]:
    """The parent run of every sweep the trial ``runs`` belong to, as the runs file records it (module docstring):
    ``{run_id, start_time, end_time, status, tags, spec}``, in the order the sweeps first appear; with ``redact``,
    no local path and no user name in the tags and the spec."""
    records = []
    for pid in dict.fromkeys(r.data.tags.get(contract.PARENT_RUN_ID) for r in runs):
        if not pid:
            continue
        try:
            parent = client.get_run(pid)
        except Exception:  # noqa: BLE001  (a deleted parent: its trials are still exported)
            continue
        record = {"run_id": pid, "start_time": parent.info.start_time, "end_time": parent.info.end_time,
                  "status": parent.info.status, "tags": dict(parent.data.tags), "spec": effective_spec_json(client, parent)}
        if redact:
            record["tags"] = {k: v for k, v in redact_paths(record["tags"]).items() if k not in PERSONAL_TAGS}
            record["spec"] = redact_paths(record["spec"])
        records.append(record)
    return records


def history_path(out) -> Path:
    out = Path(out)
    return out.with_name(out.stem + ".history.parquet")


def export_runs(client: MlflowClient, experiment: str, out, parent_id: Optional[str] = None,
                history: bool = True, redact: bool = False) -> dict:
    """Write OUT (runs) and, with ``history``, OUT's stem + .history.parquet; returns {kind: (path, rows)}.
    ``redact``: no local path or user name in the files (module docstring)."""
    runs = trial_runs(client, experiment, parent_id)
    if not runs:
        raise UserError(f"experiment '{experiment}' has no trial runs" + (f" under parent {parent_id}" if parent_id else ""))
    table = runs_table(runs, experiment, redact=redact)
    uri = (redact_paths if redact else redact_uri)(str(client.tracking_uri))
    meta = {b"rirlab.experiment": experiment.encode(), b"rirlab.parent": (parent_id or "").encode(),
            b"rirlab.tracking_uri": uri.encode(),
            SWEEPS_KEY: json.dumps({"version": 1, "sweeps": sweep_records(client, runs, redact=redact)}).encode()}
    if redact:
        meta[REDACTED_KEY] = b"paths"
    h = history_table(client, runs) if history else None
    export_id = secrets.token_hex(8).encode()
    meta.update({EXPORT_ID_KEY: export_id, HISTORY_ROWS_KEY: str(h.num_rows).encode() if h is not None else b"none"})
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    files = [(table, Path(out))]
    written = {"run": (str(out), table.num_rows)}
    if h is not None:
        files.append((h.replace_schema_metadata({EXPORT_ID_KEY: export_id}), history_path(out)))
        written["history"] = (str(history_path(out)), h.num_rows)
    write_together(files)
    return written


def write_together(files: list) -> None:
    """Each ``(table, path)`` to a temporary file beside its path, then all renamed into place, the last first: a
    full disk, Ctrl-C or a kill while writing leaves the files there were; a kill between the renames leaves a pair
    of two exports, which :class:`rirlab.analysis.records.Records` refuses (their export ids differ)."""
    temps = []
    try:
        for table, path in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            temps.append(path.with_name(f".{path.name}.tmp-{os.getpid()}"))
            pq.write_table(table, temps[-1])
        for temp, (_, path) in reversed(list(zip(temps, files))):
            os.replace(temp, path)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
