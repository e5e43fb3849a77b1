"""Reads of an MLflow store below MLflow's public client, for the analysis side (``rirlab.analysis``), which imports
nothing of the project but the contract and a few torch-free helpers (tests/analysis/test_analysis.py): not
``rirlab.compat``, where every other use of MLflow internals lives. This module is listed there
(``rirlab/compat/mlflow.py``'s docstring and ``PRIVATE``), imports nothing at module level, and reaches below the
public API in one place, :func:`metric_history_bulk`."""

from __future__ import annotations

from typing import Callable, Optional


def metric_history_bulk(client) -> Optional[Callable]:
    """``SqlAlchemyStore.get_metric_history_bulk`` of ``client``'s store (``MlflowClient._tracking_client.store``):
    one metric's history of many runs in one query, ``(run_ids, key, max_results)`` -> points with a ``run_id``;
    None where the store has none (a tracking server, a file store) or ``client`` is no MlflowClient (e.g.
    ``rirlab.analysis.records.Records``): the caller reads a run at a time through the public client then."""
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    return getattr(store, "get_metric_history_bulk", None)
