"""Task registry: name -> (config dataclass, loader)."""

from __future__ import annotations

import dataclasses
from typing import Callable

from rirlab.config import closest
from rirlab.plugins import load_plugins
from rirlab.errors import UserError


@dataclasses.dataclass(frozen=True)
class TaskEntry:
    name: str
    config: type
    load: Callable  # load(task_cfg) -> rirlab.tasks.base.TaskData
    kind: str  # "classify" | "pair" | "lm"
    doc: str = ""
    quick: tuple = ()  # (key, value) pairs of a small, fast setting used by `rirlab train --quick`
    splits: tuple = ()  # (split name, paper column label) of the test splits, in the papers' column order

    def models_ok(self, model_entry) -> set[str]:
        return {model_entry.name} if self.kind in model_entry.kinds else set()


_REGISTRY: dict[str, TaskEntry] = {}


def register(name: str, config: type, kind: str, doc: str = "", quick: dict | None = None,
             splits: tuple = ()):
    def deco(fn):
        if name in _REGISTRY:
            raise ValueError(f"task {name!r} registered twice")
        _REGISTRY[name] = TaskEntry(name, config, fn, kind, doc or (fn.__doc__ or "").strip(),
                                    tuple((quick or {}).items()), tuple(splits))
        return fn

    return deco


def _load():
    load_plugins()
    import rirlab.tasks.all  # noqa: F401  (registers every task)


def names() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def get(name: str) -> TaskEntry:
    _load()
    if name not in _REGISTRY:
        raise UserError(f"unknown task '{name}'{closest(name, _REGISTRY)}; known tasks: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]
