"""Parquet cache of generated and imported splits.

Layout under the cache root (``cache_dir`` config field, else ``$RIRLAB_CACHE``,
else ``~/.cache/rirlab``)::

    <root>/<task>/<split>-<key>.parquet      generated; <key> hashes every generator parameter
    <root>/<task>/imported/<split>.parquet   written by `rirlab data import TASK FILE... --split NAME`

A generated split is built once and read back afterwards; the generator
parameters travel in the Parquet schema metadata. Its key also holds the
content digest of every imported split the task config lists (``imported``):
generated dev/test splits are de-duplicated against the splits before them, so a
split built beside an imported train is a different split from the one built
beside the generated train and must never be read back in its place.

An imported split carries its import record in the Parquet schema metadata
(``rirlab.import``: source files with their SHA-256 and line counts, the protocol
applied, rows, and the content digest of the stored rows).

Writes go to a temporary file in the same directory and are renamed into place
(``os.replace`` is atomic), so Ray trials that build the same split concurrently
never see a half-written file: each writes its own temporary file and the last
rename wins with equal bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import uuid
from pathlib import Path
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from rirlab.errors import UserError, command


def cache_root(override: Optional[str] = None) -> Path:
    """The cache directory: ``override``, else ``$RIRLAB_CACHE``, else ``~/.cache/rirlab``."""
    return Path(override or os.environ.get("RIRLAB_CACHE") or Path.home() / ".cache" / "rirlab").expanduser()


def param_key(params: dict) -> str:
    """A short stable hash of generator parameters (JSON with sorted keys)."""
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# 2: keys hold the imported splits' digests. Files of format 1 may be dev/test splits built beside an imported
# train under the key of the generated one, so no key of format 1 is ever read again.
KEY_FORMAT = 2


def split_path(task: str, split: str, params: dict, root: Optional[str] = None) -> Path:
    """Where a generated split with key ``params`` is cached."""
    return cache_root(root) / task / f"{split}-{param_key({**params, 'key_format': KEY_FORMAT})}.parquet"


def imported_path(task: str, split: str, root: Optional[str] = None) -> Path:
    return cache_root(root) / task / "imported" / f"{split}.parquet"


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` through a unique temporary file and an atomic rename; a cache folder that cannot
    be written (inside a file, read-only, a full disk) is one line naming it and the fix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except OSError as err:
        raise UserError(_unwritable(path.parent, err.strerror or str(err).splitlines()[0])) from None
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                tmp.unlink()


def _unwritable(folder: Path, why: str) -> str:
    return (f"cannot write the data cache {folder} ({why}); point $RIRLAB_CACHE (or the cache_dir setting) at a "
            f"writable folder with free space")


LOW_SPACE_BYTES = 2 * 2**20  # a cache disk with less free space than this counts as full


def check_writable(root: Optional[str] = None) -> None:
    """The cache folder takes a file and has free space: checked before the first trial (a trial finding out
    fails only after Ray started, and its retries too); UserError in one line naming the folder otherwise."""
    import shutil

    folder = cache_root(root)
    probe = folder / f".probe.{os.getpid()}.{uuid.uuid4().hex}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"rirlab")
        free = shutil.disk_usage(folder).free
    except OSError as err:
        raise UserError(_unwritable(folder, err.strerror or str(err).splitlines()[0])) from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    if free < LOW_SPACE_BYTES:
        raise UserError(_unwritable(folder, f"its disk is full: {free / 2**20:.1f} MB free"))


IMPORT_META = b"rirlab.import"


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` without names a Parquet round trip changes (a list's child is "item" written, "element" read)."""
    if pa.types.is_list(t):
        return pa.list_(_plain_type(t.value_type))
    if pa.types.is_large_list(t):
        return pa.large_list(_plain_type(t.value_type))
    return t


def content_digest(table: pa.Table) -> str:
    """SHA-256 (16 hex digits) of a table's rows: column names, types and values; not its metadata, chunking or
    a list's child name, so a table and its Parquet file read back have the same digest."""
    sink = pa.BufferOutputStream()
    schema = pa.schema([pa.field(f.name, _plain_type(f.type)) for f in table.schema])
    plain = table.replace_schema_metadata(None).cast(schema).combine_chunks()
    with pa.ipc.new_stream(sink, plain.schema) as writer:
        writer.write_table(plain)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_imported(task: str, split: str, table: pa.Table, record: dict, root: Optional[str] = None) -> Path:
    """Store an imported split with its import record (``record`` plus rows and content digest); returns the path."""
    record = {**record, "task": task, "split": split, "rows": table.num_rows, "digest": content_digest(table)}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           IMPORT_META: json.dumps(record, sort_keys=True).encode()})
    path = imported_path(task, split, root)
    write_atomic(table, path)
    return path


def existing_import(task: str, split: str, root: Optional[str] = None) -> Path:
    """The file of an imported split; UserError naming the import command when the split was never imported."""
    path = imported_path(task, split, root)
    if not path.exists():
        raise UserError(f"{task}: no imported split '{split}' in {path.parent}; "
                        f"run `{command('rirlab', 'data', 'import', task)} FILE... --split {shlex.quote(split)}` first")
    return path


def imported_record(task: str, split: str, root: Optional[str] = None) -> dict:
    """The import record of an imported split, read from the Parquet footer only (no rows are loaded).

    A file imported before records existed gets its rows from the footer and the SHA-256 of its bytes as digest.
    UserError when the split was never imported."""
    path = existing_import(task, split, root)
    meta = pq.read_metadata(path)
    raw = (meta.schema.to_arrow_schema().metadata or {}).get(IMPORT_META)
    record = json.loads(raw) if raw else {"rows": meta.num_rows, "digest": file_sha256(path)[:16]}
    return {**record, "path": str(path)}


def key_params(task: str, params: dict, imported, root: Optional[str] = None) -> dict:
    """The cache key of a generated split: its generator parameters, the key format and the content digest of
    every imported split the same config lists."""
    digests = {s: imported_record(task, s, root)["digest"] for s in sorted(imported or ())}
    return {**params, "imported": digests} if digests else params


def cached(task: str, split: str, params: dict, build: Callable[[], pa.Table], root: Optional[str] = None) -> pa.Table:
    """The split's table from the cache, building and storing it first when absent (``params``: its key)."""
    path = split_path(task, split, params, root)
    if path.exists():
        return pq.read_table(path)
    table = build()
    meta = {b"rirlab.params": json.dumps(params, sort_keys=True, default=str).encode()}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    write_atomic(table, path)
    return table


def read_imported(task: str, split: str, root: Optional[str] = None) -> pa.Table:
    return pq.read_table(existing_import(task, split, root))


def list_imported(task: str, root: Optional[str] = None) -> list[str]:
    d = cache_root(root) / task / "imported"
    return sorted(p.stem for p in d.glob("*.parquet")) if d.exists() else []


def load_split(task: str, split: str, params: dict, build: Callable[[], pa.Table], imported: list,
               root: Optional[str] = None) -> pa.Table:
    """An imported split when ``split`` is listed in ``imported``, else the generated (cached) one, keyed by
    :func:`key_params` (a generated split may be de-duplicated against imported ones)."""
    if split in imported:
        return read_imported(task, split, root)
    return cached(task, split, key_params(task, params, imported, root), build, root)


def one_of_pair(task: str, split: str, tables: dict[str, pa.Table], params_of: Callable[[str], dict], imported: list,
                root: Optional[str] = None) -> pa.Table:
    """``split``'s table of splits one generation makes together (train and dev cut from one file); the others are
    stored under the keys :func:`load_split` looks them up by (``params_of(name)``), except an imported one."""
    for other, table in tables.items():
        if other != split and other not in imported:
            cached(task, other, key_params(task, params_of(other), imported, root), lambda t=table: t, root)
    return tables[split]


def id_lists(column: pa.ChunkedArray | pa.Array) -> list:
    """A list<int> column as a list of numpy arrays (views into one buffer, stored dtype: fast to load)."""
    import numpy as np

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = arr.offsets.to_numpy()
    values = np.array(arr.flatten().to_numpy(zero_copy_only=False))  # (total tokens,) writable copy
    return np.split(values, offsets[1:-1] - offsets[0])
