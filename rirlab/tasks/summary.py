"""Summaries of data files for the tasks' ``stats`` (`rirlab data stats`): distributions, histograms, shares."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

import numpy as np


def distribution(values: Iterable) -> dict:
    """Mean (2 decimals) and quantiles min, q25, median, q75, q90, q99, max; zeros when empty."""
    v = np.asarray(list(values), dtype=float)
    q = np.quantile(v, [0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0]) if len(v) else [0] * 7
    return {"mean": round(float(v.mean()), 2) if len(v) else 0,
            **{k: float(x) for k, x in zip(("min", "q25", "median", "q75", "q90", "q99", "max"), q)}}


def histogram(values: Iterable) -> dict:
    """Count of each value, in sorted order, keys as strings."""
    c = Counter(values)
    return {str(k): c[k] for k in sorted(c)}


def shares(counter: Counter) -> dict:
    """Each key's share of the total (4 decimals), in sorted order, keys as strings."""
    total = sum(counter.values()) or 1
    return {str(k): round(v / total, 4) for k, v in sorted(counter.items())}
