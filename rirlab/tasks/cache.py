"""Parquet cache of generated and imported splits.

Layout under the cache root (``cache_dir`` config field, else ``$RIRLAB_CACHE``,
else ``~/.cache/rirlab``)::

    <root>/<task>/<split>-<key>.parquet      generated; <key> hashes every generator parameter
    <root>/<task>/imported/<split>.parquet   written by `rirlab data import TASK FILE... --split NAME`

A generated split is built once and read back afterwards; the generator
parameters travel in the Parquet schema metadata. Writes go to a temporary file
in the same directory and are renamed into place (``os.replace`` is atomic), so
Ray trials that build the same split concurrently never see a half-written file:
each writes its own temporary file and the last rename wins with equal bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from rirlab.errors import UserError


def cache_root(override: Optional[str] = None) -> Path:
    """The cache directory: ``override``, else ``$RIRLAB_CACHE``, else ``~/.cache/rirlab``."""
    return Path(override or os.environ.get("RIRLAB_CACHE") or Path.home() / ".cache" / "rirlab").expanduser()


def param_key(params: dict) -> str:
    """A short stable hash of generator parameters (JSON with sorted keys)."""
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def split_path(task: str, split: str, params: dict, root: Optional[str] = None) -> Path:
    return cache_root(root) / task / f"{split}-{param_key(params)}.parquet"


def imported_path(task: str, split: str, root: Optional[str] = None) -> Path:
    return cache_root(root) / task / "imported" / f"{split}.parquet"


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` through a unique temporary file and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def cached(task: str, split: str, params: dict, build: Callable[[], pa.Table], root: Optional[str] = None) -> pa.Table:
    """The split's table from the cache, building and storing it first when absent."""
    path = split_path(task, split, params, root)
    if path.exists():
        return pq.read_table(path)
    table = build()
    meta = {b"rirlab.params": json.dumps(params, sort_keys=True, default=str).encode()}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    write_atomic(table, path)
    return table


def read_imported(task: str, split: str, root: Optional[str] = None) -> pa.Table:
    path = imported_path(task, split, root)
    if not path.exists():
        raise UserError(f"{task}: no imported split '{split}' in {path.parent}; "
                        f"run `rirlab data import {task} FILE... --split {split}` first")
    return pq.read_table(path)


def list_imported(task: str, root: Optional[str] = None) -> list[str]:
    d = cache_root(root) / task / "imported"
    return sorted(p.stem for p in d.glob("*.parquet")) if d.exists() else []


def load_split(task: str, split: str, params: dict, build: Callable[[], pa.Table], imported: list,
               root: Optional[str] = None) -> pa.Table:
    """An imported split when ``split`` is listed in ``imported``, else the generated (cached) one."""
    if split in imported:
        return read_imported(task, split, root)
    return cached(task, split, params, build, root)


def id_lists(column: pa.ChunkedArray | pa.Array) -> list:
    """A list<int> column as a list of numpy arrays (views into one buffer, stored dtype: fast to load)."""
    import numpy as np

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = arr.offsets.to_numpy()
    values = np.array(arr.flatten().to_numpy(zero_copy_only=False))  # (total tokens,) writable copy
    return np.split(values, offsets[1:-1] - offsets[0])
