"""Which rows a table has and what they are called, from the sweep's spec (before any run exists).

Ablation layout (RIR Table 5): one row per swept configuration in spec order; a variant row is
named by the variant's ``name``; other swept values are named by how they differ from the first
(base) row, e.g. ``chunk 20`` or ``beam 5, chunk 20``; the base row of a grid without variants
is named after the model.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from sweeps.schema import expand


@dataclasses.dataclass
class RowKey:
    values: dict[str, Any]  # swept parameter -> value (no seed)
    label: str
    is_base: bool = False

    @property
    def sig(self) -> str:
        return signature(self.values)


def signature(values: dict) -> str:
    return json.dumps({k: v for k, v in values.items() if k != "seed"}, sort_keys=True, default=str)


def describe(key: str, value: Any) -> str:
    """``chunk_size=20`` -> ``chunk 20``; ``use_s4d=False`` -> ``−use s4d``; ``model=gut`` -> ``gut``."""
    if key in ("model", "task"):
        return str(value)
    name = (key[: -len("_size")] if key.endswith("_size") else key).replace("_", " ")
    if isinstance(value, bool):
        return ("+" if value else "\u2212") + name
    return f"{name} {value}"


def label_rows(configs: list[dict], model: Optional[str] = None) -> list[RowKey]:
    """Names for configurations (dicts of swept values, first = base), in the given order."""
    if not configs:
        return []
    base = configs[0]
    rows = []
    for i, cfg in enumerate(configs):
        diffs = [describe(k, v) for k, v in cfg.items() if k != "variant" and base.get(k, object()) != v]
        if "variant" in cfg:
            label = ", ".join([str(cfg["variant"]), *diffs])
        else:
            label = ", ".join(diffs) or (model or "base")
        rows.append(RowKey(cfg, label, is_base=(i == 0)))
    seen: dict[str, int] = {}
    for r in rows:  # two configurations must never share a label
        seen[r.label] = seen.get(r.label, 0) + 1
        if seen[r.label] > 1:
            r.label = ", ".join(describe(k, v) for k, v in r.values.items())
    return rows


def expected_configs(spec) -> list[dict]:
    """The swept configurations (without seed) a grid spec runs, in spec order; [] for random search."""
    if spec.algorithm != "grid":
        return []
    out, seen = [], set()
    for trial in expand(spec):
        cfg = {k: v for k, v in trial.swept.items() if k != "seed"}
        sig = signature(cfg)
        if sig not in seen:
            seen.add(sig)
            out.append(cfg)
    return out


def sort_key(cfg: dict):
    return tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in cfg.values())


def ablation_rows(spec, observed: list[dict]) -> list[RowKey]:
    """Rows: the spec's configurations in spec order, then any observed ones the spec does not list."""
    configs = expected_configs(spec) if spec is not None else []
    known = {signature(c) for c in configs}
    extra = []
    for cfg in observed:
        sig = signature(cfg)
        if sig not in known:
            known.add(sig)
            extra.append({k: v for k, v in cfg.items() if k != "seed"})
    configs = configs + sorted(extra, key=sort_key)
    return label_rows(configs, getattr(spec, "model", None))
