"""Shared by tests/tasks/test_text_*.py (which use the `cache` fixture of tests/conftest.py): writing a file in a
publisher's format."""

from __future__ import annotations


def write(path, data):
    """Write text or bytes to ``path``, making its folders; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    return path
