"""Task registry: name -> (config dataclass, loader)."""

from __future__ import annotations

import dataclasses
from typing import Callable

from rirlab.registry import Registry


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


_REGISTRY = Registry("task", "rirlab.tasks")
names = _REGISTRY.names
get = _REGISTRY.get


def register(name: str, config: type, kind: str, doc: str = "", quick: dict | None = None,
             splits: tuple = ()):
    """Decorator registering ``load(task_cfg) -> TaskData`` under ``name``."""

    def deco(fn):
        _REGISTRY.add(name, TaskEntry(name, config, fn, kind, doc or (fn.__doc__ or "").strip(),
                                      tuple((quick or {}).items()), tuple(splits)))
        return fn

    return deco
