"""Sweeps read back from `rirlab export` files instead of an MLflow store.

A runs file (:mod:`rirlab.analysis.export`) holds every exported trial run and, in its schema metadata, the parent run of
each sweep they belong to; its ``.history.parquet`` twin holds the logged metric histories. :class:`Records` reads
one or more such files (refusing a runs file beside the history file of another export) and gives what the commands
read from a store: :meth:`Records.load` the :class:`~rirlab.analysis.runs.Sweep` (the same DataFrame columns as
:func:`~rirlab.analysis.runs.child_runs`) and :meth:`Records.get_metric_history` the curves, so `rirlab tables`, `plot` and
`importance` print from a committed file what they printed from the store it was exported from (``--records FILE``).
"""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rirlab.analysis.export import EXPORT_ID_KEY, HISTORY_ROWS_KEY, SWEEPS_KEY, history_path
from rirlab.analysis.runs import Sweep, combine, group_of, latest_jobs, n_sweeps, recorded_sweep, spec_of, sweep_key
from rirlab import contract
from rirlab.errors import UserError

RUN_COLUMNS = ("run_id", "run_name", "status", "swept", "early_stopped", "parent_id", "failure_reason", "start_time",
               "end_time")


def _param_text(value) -> Optional[str]:
    """An exported (typed) param back to the string MLflow holds: 128 -> '128', 0.001 -> '0.001', True -> 'True'."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return str(value)


def _ms(value) -> Optional[int]:
    """A timestamp column's value as MLflow's epoch milliseconds."""
    return None if value is None or pd.isna(value) else int(pd.Timestamp(value).value // 1_000_000)


def _parent(record: dict):
    """A parent record of a runs file as the run object :func:`rirlab.analysis.runs.describe_parent` and the tables read."""
    info = types.SimpleNamespace(run_id=record["run_id"], start_time=record.get("start_time"),
                                 end_time=record.get("end_time"), status=record.get("status"))
    return types.SimpleNamespace(info=info, data=types.SimpleNamespace(tags=dict(record.get("tags") or {})))


def _point(step: int, value: float):
    return types.SimpleNamespace(step=int(step), value=float(value))


class Records:
    """The trial runs, sweeps and metric histories of one or more `rirlab export` runs files."""

    def __init__(self, paths):
        frames, self.sweeps, histories = [], {}, []
        self.experiments, self.no_history = set(), {}  # run id -> why its records file has no history
        for path in map(Path, paths):
            table = self._read(path)
            meta = table.schema.metadata or {}
            try:
                sweeps = json.loads(meta[SWEEPS_KEY])["sweeps"]
                experiment = meta[b"rirlab.experiment"].decode()
                assert all(isinstance(s["run_id"], str) for s in sweeps)
            except (KeyError, ValueError, TypeError, AssertionError):
                raise UserError(f"{path} has no record of its sweeps (a file from an older `rirlab export`, or not "
                                f"an export): export the sweep again with `rirlab export --experiment NAME --run "
                                f"RUN_ID --out FILE`") from None
            self.experiments.add(experiment)
            for s in sweeps:
                self.sweeps.setdefault(s["run_id"], {**s, "experiment": experiment})
            frames.append(self._runs(table, path))
            hist = history_path(path)
            if meta.get(HISTORY_ROWS_KEY) == b"none":  # exported with --no-history: a file there is another export's
                self.no_history.update(dict.fromkeys(frames[-1]["run_id"], f"{path} was exported with --no-history"))
            elif hist.is_file():
                histories.append(self._history(path, meta, hist))
            else:
                self.no_history.update(dict.fromkeys(frames[-1]["run_id"], f"no history file {hist} beside {path}"))
        self.runs = pd.concat(frames, ignore_index=True).drop_duplicates("run_id") if frames else pd.DataFrame()
        self.history = pd.concat(histories, ignore_index=True).drop_duplicates(["run_id", "key", "step"]) \
            if histories else pd.DataFrame(columns=["run_id", "key", "step", "value"])

    @staticmethod
    def _read(path: Path) -> pa.Table:
        try:
            return pq.read_table(path)
        except FileNotFoundError:
            raise UserError(f"no records file {path}: give a file `rirlab export --out` wrote") from None
        except (OSError, pa.ArrowException) as err:
            raise UserError(f"{path} is not a readable Parquet file ({str(err).splitlines()[0][:120]}): give a file "
                            f"`rirlab export --out` wrote") from None

    def _history(self, path: Path, meta: dict, hist: Path) -> pd.DataFrame:
        """The history file of the runs file PATH, refused when it is another export's (their ids or its row count
        differ): a kill between the two renames of an export, or one file of a pair copied over another's."""
        table = self._read(hist)
        rows = meta.get(HISTORY_ROWS_KEY)
        if (table.schema.metadata or {}).get(EXPORT_ID_KEY) != meta.get(EXPORT_ID_KEY) or \
                (rows is not None and rows != str(table.num_rows).encode()):
            raise UserError(f"{hist} is not the history of {path} (the two files come from different exports: one "
                            f"was stopped half-way or copied over); export the sweep again to write both")
        return table.to_pandas()

    @staticmethod
    def _runs(table: pa.Table, path: Path) -> pd.DataFrame:
        """The file's runs in :func:`rirlab.analysis.runs.child_runs`' columns (a column it cannot hold: one line)."""
        df = table.to_pandas()
        missing = [c for c in RUN_COLUMNS if c not in df.columns]
        if missing:
            raise UserError(f"the records file lacks the column(s) {', '.join(missing)}: export the sweep again with "
                            f"`rirlab export`")
        again = "export the sweep again with `rirlab export`"
        text = [c for c in df.columns if c.startswith("metric.") and not pd.api.types.is_numeric_dtype(df[c])]
        if text:
            raise UserError(f"{path}: column {text[0]} holds values that are not numbers: {again}")
        infinite = [c for c in df.columns if c.startswith("metric.") and np.isinf(df[c].to_numpy(float)).any()]
        if infinite:  # MLflow never stores one (nor does the tracker log one): an edited or foreign file
            run = df["run_id"][np.isinf(df[infinite[0]].to_numpy(float))].iloc[0]
            raise UserError(f"{path}: column {infinite[0]} holds an infinite value (run {run}), which no recorded "
                            f"metric can be: {again}")
        try:
            swept = [contract.swept_of({contract.SWEPT: s}) for s in df["swept"]]
            assert all(isinstance(v, dict) for v in swept)
        except (ValueError, TypeError, AssertionError):
            raise UserError(f"{path}: column swept holds a value that is not a JSON object: {again}") from None
        out = pd.DataFrame({
            "run_id": df["run_id"], "name": df["run_name"], "status": df["status"], "swept": swept,
            "early_stopped": df["early_stopped"].fillna(False).astype(bool), "parent_id": df["parent_id"],
            "failure_reason": [v if isinstance(v, str) else None for v in df["failure_reason"]],
            "start_time": [_ms(v) for v in df["start_time"]], "end_time": [_ms(v) for v in df["end_time"]],
            "device": [v if isinstance(v, str) else None for v in df["device"]] if "device" in df.columns else None})
        for col in df.columns:
            if col.startswith("param."):
                out[col] = [_param_text(v) for v in df[col]]
            elif col.startswith("metric."):
                out[col] = df[col]
        return out

    def load(self, experiment: str, parent_ids=(), spec=None) -> Sweep:
        """The sweep(s) of EXPERIMENT in the files: those of ``parent_ids``, else every one, read as one
        (:func:`rirlab.analysis.runs.combine`; one sweep alone is returned as itself)."""
        if experiment not in self.experiments:
            raise UserError(f"the records file(s) hold the experiment(s) {', '.join(sorted(self.experiments))}, not "
                            f"'{experiment}': give the spec those sweeps ran, or --experiment NAME")
        mine = [i for i, s in self.sweeps.items() if s["experiment"] == experiment]
        ids = list(dict.fromkeys(parent_ids or ()))
        unknown = [i for i in ids if i not in mine]
        if unknown:
            raise UserError(f"run {unknown[0]} is not a sweep of '{experiment}' in the records file(s); they hold "
                            f"{', '.join(mine) or 'none'}")
        ids = ids or mine
        if not ids:
            raise UserError(f"the records file(s) hold no sweep of '{experiment}': export a sweep that has trial runs")
        # one job of a group of one-trial jobs (--trial I --group G) stands for its group, as in a store
        jobs = {i: _parent(self.sweeps[i]) for i in mine}
        keys = {sweep_key(jobs[i]) for i in ids}
        grouped = [job for job in jobs.values() if group_of(job) is not None and sweep_key(job) in keys]
        if grouped:
            ids = list(dict.fromkeys([*(i for i in ids if group_of(jobs[i]) is None),
                                      *(job.info.run_id for job in latest_jobs(grouped))]))
        count = n_sweeps(list(jobs.values()))
        sweeps = [self._sweep(experiment, i, spec, count) for i in ids]
        if len(sweeps) == 1:
            return sweeps[0]
        one = {group_of(s.parent) for s in sweeps}
        return dataclasses.replace(combine(sweeps, spec), group=one.pop() if len(keys) == 1 and None not in one
                                   else None)

    def _sweep(self, experiment: str, parent_id: str, spec, n_sweeps: int) -> Sweep:
        record = self.sweeps[parent_id]
        runs = self.runs[self.runs["parent_id"] == parent_id].reset_index(drop=True) if len(self.runs) else self.runs
        return recorded_sweep(experiment, _parent(record), runs, spec_of(record.get("spec")), spec, n_sweeps)

    def get_metric_history(self, run_id: str, key: str) -> list:
        """What ``MlflowClient.get_metric_history`` returns, from the history file (step and value of each point)."""
        h = self.history
        rows = h[(h["run_id"] == run_id) & (h["key"] == key)].sort_values("step")
        if rows.empty and run_id in self.no_history:
            raise UserError(f"{self.no_history[run_id]}: export the sweep again without --no-history for curves")
        return [_point(s, v) for s, v in zip(rows["step"], rows["value"])]
