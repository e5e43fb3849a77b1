"""Fixtures of the analysis tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions close (kept for inspection)."""
    from rirlab.analysis import plots

    kept = []
    real = plots.plt.close
    monkeypatch.setattr(plots.plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    for fig in kept:
        real(fig)
