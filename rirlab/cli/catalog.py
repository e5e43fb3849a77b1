"""`rirlab models`, `rirlab tasks`: what the registries hold.

Filling a registry imports every model or task module, and with them torch (4-10 s on a loaded core), to print a
listing that only changes when the library's source does. So the lines each command prints are kept in a cache file
(``$RIRLAB_CACHE``, else ``~/.cache/rirlab``, under ``catalogue/``) named by a hash of every file of the installed
``rirlab`` package: an edited model file, a new task, another version give another hash and the registry is read
again. The registry is read live, never from the cache, when $RIRLAB_PLUGINS names plugins (their code is not
hashed) or when this process has already imported it (a test or a caller that registered entries itself); a cache
that cannot be read or written is ignored (the listing is then the live one, only slower).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Callable

import click

CACHE_VERSION = 1  # bump when what a cache file holds changes shape
KEEP = 8  # cache files kept per listing: this source's and the newest of others


def first_paragraph(doc: str) -> str:
    """A docstring's first paragraph on one line."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def entry_facts(e) -> str:
    """What the trainer and the bench take from a model's registry entry, where it differs from the default."""
    facts = ["selects by dev accuracy"] if e.select_by == "accuracy" else []
    facts += [f"auxiliary loss weighted by {e.aux_loss_key}"] if e.aux_loss_key else []
    facts += [f"RIR Table 1 row {e.table1_row}"] if e.table1_row is not None else []
    facts += [f"Table 1 with {', '.join(f'{k}={v}' for k, v in e.table1_settings.items())}"] if e.table1_settings \
        else []
    return "; ".join(facts)


def source_hash() -> str:
    """A hash of every file of the installed ``rirlab`` package (names and bytes, caches excluded) and of the
    interpreter's version: what the registries' entries and this module's rendering of them depend on."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"{CACHE_VERSION} {sys.version}".encode())
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(folder, name)
            h.update(str(path.relative_to(root)).encode() + b"\0")
            try:
                h.update(path.read_bytes())
            except OSError:
                h.update(b"unreadable")
    return h.hexdigest()[:20]


def cache_folder() -> Path:
    """``$RIRLAB_CACHE/catalogue``, else ``~/.cache/rirlab/catalogue`` (the data cache's root,
    ``rirlab.tasks.cache.cache_root``, spelled here because importing that module imports pyarrow)."""
    root = os.environ.get("RIRLAB_CACHE") or Path.home() / ".cache" / "rirlab"
    return Path(root).expanduser() / "catalogue"


def listing(kind: str, registry_module: str, live: Callable[[], list[str]]) -> list[str]:
    """The lines ``live()`` renders from the registry of ``kind`` ("models", "tasks"), from the cache when the
    package's files are those it was written from (module docstring); ``live()`` otherwise, and the cache
    (re)written with its answer."""
    if os.environ.get("RIRLAB_PLUGINS", "").strip() or registry_module in sys.modules:
        return live()
    folder = cache_folder()
    path = folder / f"{kind}-{source_hash()}.json"
    try:
        lines = json.loads(path.read_text())
        if isinstance(lines, list) and all(isinstance(line, str) for line in lines):
            return lines
    except (OSError, ValueError):
        pass
    lines = live()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(lines))
        os.replace(tmp, path)
        # those of other sources (an earlier version; another checkout or venv sharing the cache): the newest few
        # kept, so that two installs used in turn do not evict each other, the rest removed
        others = sorted((p for p in folder.glob(f"{kind}-*.json") if p != path), key=lambda p: p.stat().st_mtime,
                        reverse=True)
        for old in others[KEEP - 1:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
    return lines


def model_lines() -> list[str]:
    """`rirlab models`' lines, from the live registry (imports every model module, and torch)."""
    from rirlab.models import registry

    lines = []
    for name in registry.names():
        e = registry.get(name)
        lines.append(f"{name:14s} [{','.join(e.kinds)}] {first_paragraph(e.doc)}")
        facts = entry_facts(e)
        if facts:
            lines.append(f"{'':16s}{facts}")
    return lines


def task_lines() -> list[str]:
    """`rirlab tasks`' lines but the last (data_dir now), from the live registry (imports every task module)."""
    from rirlab.tasks import registry
    from rirlab.tasks.text import GLOVE_FILE, TextTask

    lines = []
    for name in registry.names():
        e = registry.get(name)
        lines.append(f"{name:14s} [{e.kind}] {e.doc.splitlines()[0] if e.doc else ''}")
        if isinstance(e, TextTask):
            for key, rel in e.files.items():
                used = [s for s, keys in e.needs.items() if key in keys]
                lines.append(f"{'':16s}{rel}  ({', '.join(used)})")
            if "embeddings" in {f for f in e.config.__dataclass_fields__}:
                lines.append(f"{'':16s}{GLOVE_FILE}  (frozen GloVe 840B-300d; or --set glove_path=FILE, "
                             f"--set embeddings=random)")
    return lines


def data_root_now() -> Path:
    """Where the tasks read the user's files without ``--set data_dir``: ``rirlab.tasks.text.data_root(None)``
    ($RIRLAB_DATA, else ./data), spelled here because importing that module imports torch; a test checks that the
    two agree."""
    return Path(os.environ.get("RIRLAB_DATA") or "data").expanduser().absolute()


@click.command("models")
def list_models():
    """List registered models (the catalogue: every model family's file registers its own), the task kinds they
    support, what each is, and what the trainer and bench take from it (dev metric under `select_by: auto`,
    auxiliary-loss weight, RIR Table 1 row).

    A model's config fields are flat keys of a trial (`--set`, sweep specs); plugins listed in $RIRLAB_PLUGINS
    appear here too.

    \b
    rirlab models
    """
    for line in listing("models", "rirlab.models.registry", model_lines):
        click.echo(line)


@click.command("tasks")
def list_tasks():
    """List registered tasks, their kind (classify, pair, lm) and what each is; for the tasks read from your own
    files, the files each expects under its data_dir (`--set data_dir=DIR`, else $RIRLAB_DATA, else ./data).

    \b
    rirlab tasks
    rirlab data generate listops --split test --out -   # a task's data files
    rirlab train --model ebt_grc --task snli --set data_dir=~/data   # reads ~/data/snli_1.0/...
    """
    for line in listing("tasks", "rirlab.tasks.registry", task_lines):
        click.echo(line)
    click.echo(f"data_dir now: {data_root_now()}  (--set generated=true: a generated stand-in corpus instead)")
