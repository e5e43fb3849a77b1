"""The one statistic over seeds: every table, Pareto point and training curve of a sweep uses the same centre
(``--stat``; default the median, as the papers report ListOps), so a curve and a table cell of one configuration
agree. Import-light: the CLI reads the default before it imports pandas."""

from __future__ import annotations

STATS = ("median", "mean")
DEFAULT_STAT = "median"


def centre(values, stat: str = DEFAULT_STAT, axis=None):
    """``stat`` of a pandas Series (a number) or, with ``axis=1``, of each row of a DataFrame (a Series)."""
    if stat not in STATS:
        raise ValueError(f"stat {stat!r}: one of {', '.join(STATS)}")
    kwargs = {} if axis is None else {"axis": axis}
    return values.median(**kwargs) if stat == "median" else values.mean(**kwargs)
