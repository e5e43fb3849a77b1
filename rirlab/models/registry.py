"""Model registry: name -> :class:`ModelEntry`, filled by ``@register(...)`` in each model family's file.

An entry carries what the trainer needs to know about a model beyond its config and builder, so that knowledge
lives in the model's file. The sweep layer only sees names and dicts.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal, Optional

from rirlab.config import field_names
from rirlab.registry import Registry


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    name: str
    config: type
    build: Callable  # build(model_cfg, task_info) -> nn.Module
    kinds: tuple[str, ...]  # task kinds it supports: "classify", "pair", "lm"
    doc: str = ""
    # the dev metric the authors' code selects the weights, steps the plateau scheduler and stops early by (its
    # ``save_by``, RIR code configs/listopsc_configs.py; ``select_by: auto``, rirlab.train.selection_metric)
    select_by: Literal["accuracy", "loss"] = "loss"
    aux_loss_key: Optional[str] = None  # config field weighting the model's auxiliary loss (the trainer's
    # L = L_main + weight * aux); None: the model returns none


_REGISTRY = Registry("model", "rirlab.models")
names = _REGISTRY.names
get = _REGISTRY.get


def register(name: str, config: type, kinds=("classify", "pair"), doc: str = "", *,
             select_by: Literal["accuracy", "loss"] = "loss", aux_loss_key: Optional[str] = None):
    """Decorator registering ``build(model_cfg, task_info)`` under ``name``; the keywords are :class:`ModelEntry`'s."""
    if select_by not in ("accuracy", "loss"):
        raise ValueError(f"model {name!r}: select_by must be 'accuracy' or 'loss', not {select_by!r}")
    if aux_loss_key and aux_loss_key not in field_names(config):
        raise ValueError(f"model {name!r}: {aux_loss_key!r} is not a field of {config.__name__}")

    def deco(fn):
        _REGISTRY.add(name, ModelEntry(name, config, fn, tuple(kinds), doc or (fn.__doc__ or "").strip(), select_by,
                                       aux_loss_key))
        return fn

    return deco

