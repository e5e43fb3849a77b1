"""Passwords inside URLs kept out of what rirlab prints and records: ``scheme://user:password@host`` becomes
``scheme://user:***@host`` wherever it stands (an MLflow or Optuna storage URL in a message, a spec's text, a
recorded param or tag).

A URL is parsed, not matched by a regular expression: its user info runs from after ``scheme://`` to the last
``@`` (a password may hold ``/`` as SQLAlchemy URLs allow, ``@``, quotes or spaces), the user name being what
precedes the first ``:`` when that holds no ``/`` (``s3://bucket/a:b@c`` is a path). A whole URL
(``mask_url``) is masked wherever its password ends; inside free text (``redact_uri``) a URL ends at a space or a
quote, so every password a whole URL showed this process is also replaced wherever it occurs later (an error
line of a driver quoting the URL it could not parse). Both run in linear time, whatever the text.

And, for records meant to be published (`rirlab export --redact`), local paths cut to their last component:
``/home/me/runs/sweep-1`` becomes ``sweep-1``, ``sqlite:////home/me/results.db`` becomes ``sqlite:///results.db``,
a traceback's ``"/home/me/rirlab/train.py"`` becomes ``"train.py"``. Relative paths and network URLs are kept."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Callable, Optional

MASK = "***"
SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
MAX_SCHEME = 40
MIN_SECRET = 4  # shorter passwords are masked inside URLs only (replacing them everywhere would mangle text)
_SEEN: set[str] = set()  # passwords whole URLs showed this process (and their percent-decoded forms)
_URL_END = re.compile(r"[\s'\"<>`]")
# The folders of an absolute (or ~) POSIX path inside a text; not a slash inside a word, a relative path or a URL
_FOLDERS = re.compile(r"(?:(?<![\w.~:/-])|~)/(?:[^/\s'\"]+/)+(?=[^/\s'\"])")
_LOCAL_URI = re.compile(r"^(sqlite|file):/*(/[^?#]*)(.*)$")


def split_url(url: str) -> Optional[tuple[str, str, Optional[str], str]]:
    """``scheme://user:password@rest`` as (``scheme://``, user, password or None, rest); None when ``url`` has
    no user info (no ``scheme://`` start, no ``@``, or a ``/`` before the user name's end)."""
    head, sep, tail = url.partition("://")
    if not sep or not head or len(head) > MAX_SCHEME or not head[0].isalpha() or not SCHEME_CHARS.issuperset(head):
        return None
    info, at, rest = tail.rpartition("@")
    if not at:
        return None
    user, colon, password = info.partition(":")
    if "/" in user:
        return None
    return head + sep, user, password if colon else None, rest


def mask_url(url: str) -> str:
    """``url`` (one whole URL) with its password masked; the password is remembered for ``redact_uri``."""
    url = str.__str__(url)
    parts = split_url(url)
    if parts is None or parts[2] is None:
        return url
    start, user, password, rest = parts
    _remember(password)
    return f"{start}{user}:{MASK}@{rest}"


def strip_credentials(url: str) -> str:
    """``url`` without its user info at all (user name and password): what may travel to another process."""
    url = str.__str__(url)
    parts = split_url(url)
    return url if parts is None else parts[0] + parts[3]


def _remember(password: str) -> None:
    for form in (password, urllib.parse.unquote(password)):
        if len(form) >= MIN_SECRET and form != MASK:
            _SEEN.add(form)


def redact_uri(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` with the password masked (text without one unchanged), and
    every password a whole URL showed before replaced too (module docstring). Linear in ``len(text)``."""
    text = str.__str__(text)
    out, done, i = [], 0, text.find("://")
    while i != -1:
        start = _scheme_start(text, i, done)
        nxt = text.find("://", i + 3)  # the next URL; one inside this one's query stands on its own
        end_match = _URL_END.search(text, i + 3, len(text) if nxt == -1 else nxt)
        if end_match:
            end = end_match.start()
        else:
            end = len(text) if nxt == -1 else _scheme_start(text, nxt, i + 3)
        out += [text[done:start], mask_url(text[start:end])]
        done, i = end, nxt
    out.append(text[done:])
    text = "".join(out)
    for secret in _SEEN:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _scheme_start(text: str, i: int, floor: int) -> int:
    """Where the scheme of the ``://`` at ``i`` starts (at most MAX_SCHEME characters back, not before ``floor``)."""
    start = i
    while start > floor and i - start < MAX_SCHEME and text[start - 1] in SCHEME_CHARS:
        start -= 1
    while start < i and not text[start].isalpha():
        start += 1
    return start


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
