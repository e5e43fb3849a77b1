"""Model registry: name -> :class:`ModelEntry`, filled by ``@register(...)`` in each model family's file.

An entry carries everything the trainer, the bench and the sweep's dry run need to know about a model, so a new
family is its file (plus its spec and its test) and nothing else: ``rirlab models`` lists the registry. The sweep
layer only sees names and dicts.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Callable, Literal, Mapping, Optional

from rirlab.config import field_names
from rirlab.registry import Registry


def hidden_width(cfg) -> int:
    """fp32 values one token of a training sequence holds at least: one hidden state (0 for a config without
    ``hidden_size``). The default :attr:`ModelEntry.memory_width`."""
    return int(getattr(cfg, "hidden_size", 0) or 0)


def beam_width(cfg) -> int:
    """:func:`hidden_width` per beam: the beam-search models keep one hidden state per token and beam."""
    return hidden_width(cfg) * int(cfg.beam_size or 1)


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
    table1_row: Optional[int] = None  # its row (1-based) in RIR Table 1 (rirlab.bench ``table1`` protocol)
    table1_settings: Mapping = dataclasses.field(default_factory=dict)  # config values ``table1`` runs it with
    memory_width: Callable = hidden_width  # cfg -> fp32 values per token of a training sequence (the sweep's
    # pre-flight memory lower bound: batch x length x this, and its gradient)


_REGISTRY = Registry("model", "rirlab.models")
names = _REGISTRY.names
get = _REGISTRY.get


def register(name: str, config: type, kinds=("classify", "pair"), doc: str = "", *,
             select_by: Literal["accuracy", "loss"] = "loss", aux_loss_key: Optional[str] = None,
             table1_row: Optional[int] = None, table1_settings: Optional[dict] = None,
             memory_width: Callable = hidden_width):
    """Decorator registering ``build(model_cfg, task_info)`` under ``name``; the keywords are :class:`ModelEntry`'s."""
    if select_by not in ("accuracy", "loss"):
        raise ValueError(f"model {name!r}: select_by must be 'accuracy' or 'loss', not {select_by!r}")
    for key in ([aux_loss_key] if aux_loss_key else []) + list(table1_settings or {}):
        if key not in field_names(config):
            raise ValueError(f"model {name!r}: {key!r} is not a field of {config.__name__}")

    def deco(fn):
        _REGISTRY.add(name, ModelEntry(name, config, fn, tuple(kinds), doc or (fn.__doc__ or "").strip(), select_by,
                                       aux_loss_key, table1_row, types.MappingProxyType(dict(table1_settings or {})),
                                       memory_width))
        return fn

    return deco


def table1_rows() -> list[ModelEntry]:
    """The registered models of RIR Table 1, in the table's row order."""
    return sorted((get(n) for n in names() if get(n).table1_row is not None), key=lambda e: e.table1_row)
