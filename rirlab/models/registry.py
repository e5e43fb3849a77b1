"""Model registry: name -> (config dataclass, builder). The sweep layer only sees names and dicts."""

from __future__ import annotations

import dataclasses
from typing import Callable

from rirlab.registry import Registry


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    name: str
    config: type
    build: Callable  # build(model_cfg, task_info) -> nn.Module
    kinds: tuple[str, ...]  # task kinds it supports: "classify", "pair", "lm"
    doc: str = ""


_REGISTRY = Registry("model", "rirlab.models")
names = _REGISTRY.names
get = _REGISTRY.get


def register(name: str, config: type, kinds=("classify", "pair"), doc: str = ""):
    """Decorator registering ``build(model_cfg, task_info)`` under ``name``."""

    def deco(fn):
        _REGISTRY.add(name, ModelEntry(name, config, fn, tuple(kinds), doc or (fn.__doc__ or "").strip()))
        return fn

    return deco
