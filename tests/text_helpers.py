"""Shared by tests/test_text_*.py: a cache and data dir of the test's own, and writing a fixture file."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Imported by a test module, this applies to each of its tests: cache under tmp_path, no $RIRLAB_DATA."""
    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RIRLAB_DATA", raising=False)


def write(path, data):
    """Write text or bytes to ``path``, making its folders; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    return path
