"""Passwords inside URLs kept out of what rirlab prints and records: ``scheme://user:password@host`` becomes
``scheme://user:***@host`` wherever it stands (an MLflow or Optuna storage URL in a message, a spec's text, a
recorded param or tag).

And, for records meant to be published (`rirlab export --redact`), local paths cut to their last component:
``/home/me/runs/sweep-1`` becomes ``sweep-1``, ``sqlite:////home/me/results.db`` becomes ``sqlite:///results.db``,
a traceback's ``"/home/me/rirlab/train.py"`` becomes ``"train.py"``. Relative paths and network URLs are kept."""

from __future__ import annotations

import re
from typing import Any, Callable

_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/:@\s'\"]*):[^/@\s'\"]*@")
# The folders of an absolute (or ~) POSIX path inside a text; not a slash inside a word, a relative path or a URL
_FOLDERS = re.compile(r"(?:(?<![\w.~:/-])|~)/(?:[^/\s'\"]+/)+(?=[^/\s'\"])")
_LOCAL_URI = re.compile(r"^(sqlite|file):/*(/[^?#]*)(.*)$")


def redact_uri(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` with the password masked (text without one unchanged)."""
    return _CREDENTIALS.sub(r"\1:***@", str.__str__(text))


def _each_string(fn: Callable[[str], str], value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with ``fn`` applied to every string in it."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _each_string(fn, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_each_string(fn, v) for v in value]
    return value


def redact_all(value: Any) -> Any:
    """``value`` (JSON-like) with ``redact_uri`` applied to every string in it."""
    return _each_string(redact_uri, value)


def redact_path(text: str) -> str:
    """``text`` with the folders of every absolute local path cut (module docstring) and its password masked.

    A local store's URI (``sqlite:`` or ``file:``) keeps its scheme and its file's name."""
    text = redact_uri(text)
    local = _LOCAL_URI.match(text)
    if local:
        scheme, path, rest = local.groups()
        return f"{scheme}:///{path.rstrip('/').rsplit('/', 1)[-1]}{rest}"
    return _FOLDERS.sub("", text)


def redact_paths(value: Any) -> Any:
    """``value`` (JSON-like) with ``redact_path`` applied to every string in it."""
    return _each_string(redact_path, value)
