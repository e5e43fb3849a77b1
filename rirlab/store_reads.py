"""Reads of an MLflow store below MLflow's public client, for the analysis side (``rirlab.analysis``), which imports
nothing of the project but the contract and a few torch-free helpers (tests/analysis/test_analysis.py): not
``rirlab.compat``, where every other use of MLflow internals lives. This module is listed there
(``rirlab/compat/mlflow.py``'s docstring and ``PRIVATE``), imports nothing at module level, and reaches below the
public API in one place, :func:`metric_history_bulk` (the HTTP request itself is ``rirlab.compat.mlflow``'s
``server_history_bulk``, imported when a server is read)."""

from __future__ import annotations

from typing import Callable, Optional

SQL_RUNS = 500  # run ids per bulk history query of a database store: under SQLite's oldest limit of 999 variables


def metric_history_bulk(client) -> Optional[Callable]:
    """A read of one metric's history of many runs at once for ``client``'s store, ``(run_ids, key)`` ->
    ``({run id: [Metric, ...]}, [run ids left unread])``, each run's points in ``client.get_metric_history``'s order
    (timestamp, step, value) and a run without the metric read as []; the caller reads the unread runs one at a time
    through the public client. None where the store has no such read (a file store, Databricks) or ``client`` is no
    MlflowClient (e.g. ``rirlab.analysis.records.Records``).

    - a database store (``MlflowClient._tracking_client.store`` a ``SqlAlchemyStore``): its
      ``get_metric_history_bulk``, one query per 500 runs;
    - a tracking server (an http(s) URI): the bulk read MLflow's UI draws its charts with
      (``rirlab.compat.mlflow.server_history_bulk``), one request per up to 100 runs; a response that comes back
      full (25,000 points) is asked again in halves, and a run alone over that is left to the caller (the public
      per-run call pages); a server without that read (an older or a proxied one) leaves every run to the caller."""
    tracking = getattr(client, "_tracking_client", None)
    sql = getattr(getattr(tracking, "store", None), "get_metric_history_bulk", None)
    if sql is not None:
        return lambda run_ids, key: _sql_histories(sql, run_ids, key)
    uri = getattr(tracking, "tracking_uri", None)
    if isinstance(uri, str) and uri.startswith(("http://", "https://")):
        return lambda run_ids, key: _server_histories(uri, run_ids, key)
    return None


def _sql_histories(bulk, run_ids: list, key: str) -> tuple[dict, list]:
    out: dict = {rid: [] for rid in run_ids}
    for i in range(0, len(run_ids), SQL_RUNS):
        for point in bulk(run_ids[i:i + SQL_RUNS], key, max_results=2 ** 62):  # (no limit: every point)
            out[point.run_id].append(getattr(point, "metric", point))  # (a Metric with a run_id in MLflow 3)
    return out, []


def _server_histories(uri: str, run_ids: list, key: str) -> tuple[dict, list]:
    from rirlab.compat.mlflow import history_bulk_chunks, history_metric, server_history_bulk

    out: dict = {}
    pending = list(reversed(history_bulk_chunks(run_ids, key)))
    while pending:
        ids = pending.pop()
        points = server_history_bulk(uri, ids, key)
        if points is None:  # no such read on this server: every run not read yet goes to the caller
            return out, [rid for rid in run_ids if rid not in out]
        if points.full:  # the server cut the response: ask again in halves (a single run: the caller pages it)
            if len(ids) == 1:
                continue
            pending += [ids[len(ids) // 2:], ids[:len(ids) // 2]]
            continue
        read: dict = {rid: [] for rid in ids}
        for p in points:
            read[p["run_id"]].append(history_metric(p))
        out.update(read)
    return out, [rid for rid in run_ids if rid not in out]
