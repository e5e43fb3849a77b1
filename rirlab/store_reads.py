"""Reads of an MLflow store below MLflow's public client, for the analysis side (``rirlab.analysis``), which imports
nothing of the project but the contract and a few torch-free helpers (tests/analysis/test_analysis.py): not
``rirlab.compat``, where every other use of MLflow internals lives. This module is listed there
(``rirlab/compat/mlflow.py``'s docstring and ``PRIVATE``), imports nothing at module level, and reaches below the
public API in one place, :func:`metric_history_bulk` (the HTTP request itself is ``rirlab.compat.mlflow``'s
``server_history_bulk``, imported when a server is read)."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional

SQL_RUNS = 500  # run ids per bulk history query of a database store: under SQLite's oldest limit of 999 variables
# bulk history requests a tracking server gets at once: they are independent, `mlflow server` serves several at a
# time (its workers, and threads in each), and one after another each waited out its round trip and the server's
# reply in turn; MLflow's client keeps up to 10 connections to a host (MLFLOW_HTTP_POOL_MAXSIZE), so each of these
# reuses its own
SERVER_IN_FLIGHT = 4


def metric_history_bulk(client) -> Optional[Callable]:
    """A read of several metrics' histories of many runs at once for ``client``'s store, ``{key: run ids}`` ->
    ``({key: {run id: [Metric, ...]}}, {key: [run ids left unread]})``, each run's points in
    ``client.get_metric_history``'s order (timestamp, step, value) and a run without the metric read as []; the
    caller reads the unread runs one at a time through the public client. None where the store has no such read (a
    file store, Databricks) or ``client`` is no MlflowClient (e.g. ``rirlab.analysis.records.Records``).

    - a database store (``MlflowClient._tracking_client.store`` a ``SqlAlchemyStore``): its
      ``get_metric_history_bulk``, one query per metric and 500 runs;
    - a tracking server (an http(s) URI): the bulk read MLflow's UI draws its charts with
      (``rirlab.compat.mlflow.server_history_bulk``), one request per metric and up to 100 runs,
      ``SERVER_IN_FLIGHT`` of them at a time; a response that comes back full (25,000 points) is asked again in
      halves, and a run alone over that is left to the caller (the public per-run call pages); a server without
      that read (an older or a proxied one: its first request says so) leaves every run to the caller."""
    tracking = getattr(client, "_tracking_client", None)
    sql = getattr(getattr(tracking, "store", None), "get_metric_history_bulk", None)
    if sql is not None:
        return lambda wanted: _sql_histories(sql, wanted)
    uri = getattr(tracking, "tracking_uri", None)
    if isinstance(uri, str) and uri.startswith(("http://", "https://")):
        return lambda wanted: _server_histories(uri, wanted)
    return None


def _sql_histories(bulk, wanted: dict) -> tuple[dict, dict]:
    out: dict = {}
    for key, run_ids in wanted.items():
        read = out[key] = {rid: [] for rid in run_ids}
        for i in range(0, len(run_ids), SQL_RUNS):
            for point in bulk(run_ids[i:i + SQL_RUNS], key, max_results=2 ** 62):  # (no limit: every point)
                read[point.run_id].append(getattr(point, "metric", point))  # (a Metric with a run_id in MLflow 3)
    return out, {key: [] for key in wanted}


def _server_histories(uri: str, wanted: dict, in_flight: Optional[int] = None) -> tuple[dict, dict]:
    from rirlab.compat.mlflow import history_bulk_chunks, history_metric, server_history_bulk

    out: dict = {key: {} for key in wanted}
    unread: dict = {key: [] for key in wanted}
    jobs = [(key, ids) for key, run_ids in wanted.items() for ids in history_bulk_chunks(run_ids, key)]
    if not jobs:
        return out, unread
    # the first request alone: a server without the read answers it so, and is asked nothing more of the kind
    first = server_history_bulk(uri, jobs[0][1], jobs[0][0])
    if first is None:
        return out, {key: list(run_ids) for key, run_ids in wanted.items()}
    results = concurrently(lambda key, ids: server_history_bulk(uri, ids, key), jobs[1:],
                           SERVER_IN_FLIGHT if in_flight is None else in_flight, first=(jobs[0], first))
    for (key, ids), points in results:
        if points is None:  # refused this once (e.g. 401/403): the caller's per-run read says why
            unread[key] += ids
        elif points.full:  # the server cut the response: ask again in halves (a single run: the caller pages it)
            if len(ids) == 1:
                unread[key] += ids
            else:
                results.add([(key, ids[:len(ids) // 2]), (key, ids[len(ids) // 2:])])
        else:
            read = {rid: [] for rid in ids}
            for p in points:
                read[p["run_id"]].append(history_metric(p))
            out[key].update(read)
    return out, unread


class concurrently:
    """``(job, call(*job))`` of every job, ``width`` calls at a time on daemon threads, in the order they finish
    (``first``: a result already had, yielded first); ``add(jobs)`` adds jobs while iterating. A call's exception is
    raised here at once; no call starts after it, nor after the iteration is left (Ctrl-C, a caller's error): the
    calls in flight end on their threads, their results dropped, and no thread keeps the process from ending."""

    def __init__(self, call: Callable, jobs: Iterable[tuple], width: int, first=None):
        import queue
        import threading

        self._call, self._todo, self._done = call, queue.SimpleQueue(), queue.SimpleQueue()
        self._stop, self._pending, self._first, self._thread = threading.Event(), 0, first, threading.Thread
        self._threads: list = []
        self._width = max(1, width)
        self.add(list(jobs))

    def add(self, jobs: list) -> None:
        for job in jobs:
            self._todo.put(job)
            self._pending += 1
        while len(self._threads) < min(self._width, self._pending):
            self._threads.append(self._thread(target=self._work, daemon=True, name="rirlab-store-read"))
            self._threads[-1].start()

    def _work(self) -> None:
        while True:
            job = self._todo.get()
            if job is None or self._stop.is_set():
                return
            try:
                self._done.put((job, self._call(*job), None))
            except BaseException as err:  # noqa: BLE001  (raised in the reading thread)
                self._done.put((job, None, err))

    def __iter__(self) -> Iterator[tuple]:
        try:
            if self._first is not None:
                yield self._first
            while self._pending:
                job, result, err = self._done.get()
                self._pending -= 1
                if err is not None:
                    raise err
                yield job, result
        finally:
            self._stop.set()
            for _ in self._threads:
                self._todo.put(None)
