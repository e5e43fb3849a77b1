"""Passwords inside URLs kept out of what rirlab prints and records: ``scheme://user:password@host`` becomes
``scheme://user:***@host`` wherever it stands (an MLflow or Optuna storage URL in a message, a spec's text, a
recorded param or tag)."""

from __future__ import annotations

import re
from typing import Any

_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/:@\s'\"]*):[^/@\s'\"]*@")


def redact_uri(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` with the password masked (text without one unchanged)."""
    return _CREDENTIALS.sub(r"\1:***@", str.__str__(text))


def redact_all(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with ``redact_uri`` applied to every string in it."""
    if isinstance(value, str):
        return redact_uri(value)
    if isinstance(value, dict):
        return {k: redact_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_all(v) for v in value]
    return value
