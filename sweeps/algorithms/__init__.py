"""Search algorithms as a registry: name -> ``Algorithm`` (``rirlab.sweeps.algorithms.base``), one module per algorithm in
this package.

Why a registry: the algorithm used to be branched on in nine files, and a new spec section had to be added by
hand to the hash-exclusion tuple or every earlier sweep's hash changed. Now an algorithm is one module here
(``grid.py``, ``random.py``, ``optuna.py``) with an ``@register`` class that supplies everything the other
layers ask of it: its spec section (a pydantic model under a key named after the algorithm, e.g. ``optuna:``),
its spec-wide validation (one line per problem), its points and trials, its part of the Tune search space, its
searcher and what the driver needs of it. The spec schema, the plan, the dry run, the Tuner, the driver and the
table layout ask ``get(spec.algorithm)`` instead of comparing names.

Like the model and task registries (``rirlab.registry``), every module of this package is imported on first
use, by name: nothing lists the algorithms, and nothing here imports them (nor the spec schema: the schema
imports this module and ``watch``-es it, so a registered section becomes a field of ``Spec``).

Torch-free, Ray-free and Optuna-free at import: the spec schema, which analysis reads, loads these modules.
Whatever an algorithm needs of Ray or Optuna it imports inside the method that needs it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any, Callable

from rirlab.config import closest
from rirlab.errors import UserError


_ENTRIES: dict[str, Any] = {}  # name -> its rirlab.sweeps.algorithms.base.Algorithm
_WATCHERS: list[Callable[[str, Any], None]] = []  # (name, the algorithm or None when removed): the spec schema's
_imported = False
HOME = __name__  # the package whose modules register the built-in algorithms


def register(cls):
    """Class decorator: register one instance of a ``rirlab.sweeps.algorithms.base.Algorithm`` subclass under ``cls.name``."""
    if not isinstance(cls, type) or not all(hasattr(cls, a) for a in ("name", "section", "trials", "search_alg")):
        raise TypeError(f"@register takes a subclass of rirlab.sweeps.algorithms.base.Algorithm, got {cls!r}")
    add(cls())
    return cls


def add(algorithm) -> None:
    name = algorithm.name
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        raise ValueError(f"algorithm name {name!r}: give lower-case letters, digits or _ (it is a spec value and, "
                         f"with a section, a spec key)")
    if name in _ENTRIES:
        raise ValueError(f"algorithm {name!r} registered twice")
    _ENTRIES[name] = algorithm
    for watch_fn in _WATCHERS:
        watch_fn(name, algorithm)


def remove(name: str) -> None:
    """Drop an algorithm (one registered by a test); its section leaves the spec schema too."""
    _ENTRIES.pop(name)
    for watch_fn in _WATCHERS:
        watch_fn(name, None)


def watch(fn: Callable[[str, Any], None]) -> None:
    """Call ``fn(name, algorithm)`` for every algorithm registered, now and later (``fn(name, None)`` on removal)."""
    _WATCHERS.append(fn)
    for name, algorithm in list(_ENTRIES.items()):
        fn(name, algorithm)


def load() -> None:
    """Import every module of this package (each registers its algorithm), once."""
    global _imported
    if _imported:
        return
    _imported = True
    package = importlib.import_module(HOME)
    for mod in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{HOME}.{mod.name}")


def names() -> list[str]:
    """The registered algorithms, the built-in ones first in their order (grid, random, optuna), then the rest."""
    load()
    return sorted(_ENTRIES, key=lambda n: (BUILT_IN.index(n) if n in BUILT_IN else len(BUILT_IN), n))


BUILT_IN = ("grid", "random", "optuna")  # (the order pydantic's message lists them in, as before the registry)


def get(name: str):
    load()
    if name not in _ENTRIES:
        raise UserError(f"unknown algorithm '{name}'{closest(name, list(_ENTRIES))}; known algorithms: "
                        f"{', '.join(names())}")
    return _ENTRIES[name]


def sections() -> dict[str, type]:
    """Spec key -> section model of every registered algorithm that has a section."""
    load()
    return {a.section_name: a.section for a in _ENTRIES.values() if a.section is not None}
