"""Model registry: name -> (config dataclass, builder). The sweep layer only sees names and dicts."""

from __future__ import annotations

import dataclasses
from typing import Callable

from rirlab.config import closest
from rirlab.plugins import load_plugins
from rirlab.errors import UserError


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    name: str
    config: type
    build: Callable  # build(model_cfg, task_info) -> nn.Module
    kinds: tuple[str, ...]  # task kinds it supports: "classify", "pair", "lm"
    doc: str = ""


_REGISTRY: dict[str, ModelEntry] = {}


def register(name: str, config: type, kinds=("classify", "pair"), doc: str = ""):
    """Decorator registering ``build(model_cfg, task_info)`` under ``name``."""

    def deco(fn):
        if name in _REGISTRY:
            raise ValueError(f"model {name!r} registered twice")
        _REGISTRY[name] = ModelEntry(name, config, fn, tuple(kinds), doc or (fn.__doc__ or "").strip())
        return fn

    return deco


def _load():
    load_plugins()
    import rirlab.models.zoo  # noqa: F401  (registers every model)


def names() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def get(name: str) -> ModelEntry:
    _load()
    if name not in _REGISTRY:
        raise UserError(f"unknown model '{name}'{closest(name, _REGISTRY)}; known models: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]
