"""Which rows a table has and what they are called, from the sweep's spec (before any run exists).

Ablation layout (RIR Table 5): one row per swept configuration in spec order, named by the
variant's ``name`` and every searched value it sets, rounded to 4 significant digits
(``chunk 20, beam 5``, ``GUT, halt loss weight 0.1``). Each row also carries the configuration it
runs (the spec's values; the trial runs' logged resolved config replaces it in ``rirlab.analysis.tables``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from rirlab.sweeps import algorithms
from rirlab.sweeps.spec.trials import evaluations, expand


@dataclasses.dataclass
class RowKey:
    values: dict[str, Any]  # swept parameter -> value (no seed)
    label: str
    is_base: bool = False
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # the flat config the spec gives it (no seed)

    @property
    def sig(self) -> str:
        return signature(self.values)


def signature(values: dict) -> str:
    return json.dumps({k: v for k, v in values.items() if k != "seed"}, sort_keys=True, default=str)


def rounded(value: Any, digits: int = 4) -> str:
    """A swept value for a label: floats to ``digits`` significant digits (0.000123456 -> 0.0001235)."""
    if isinstance(value, float) and not isinstance(value, bool):
        return f"{value:.{digits}g}"
    return str(value)


def describe(key: str, value: Any, digits: int = 4) -> str:
    """``chunk_size=20`` -> ``chunk 20``; ``use_s4d=False`` -> ``−use s4d``; ``model=gut`` -> ``gut``."""
    if key in ("model", "task", "variant"):
        return str(value)
    name = (key[: -len("_size")] if key.endswith("_size") else key).replace("_", " ")
    if isinstance(value, bool):
        return ("+" if value else "\u2212") + name
    return f"{name} {rounded(value, digits)}"


def label_rows(configs: list[dict], model: Optional[str] = None, flat: Optional[list[dict]] = None) -> list[RowKey]:
    """Names for configurations (dicts of swept values), in the given order: the variant's name and every
    searched value, rounded; ``flat``: each one's whole config (for pairing with published rows)."""
    rows = []
    for i, cfg in enumerate(configs):
        label = ", ".join(describe(k, v) for k, v in cfg.items()) or (model or "base")
        rows.append(RowKey(cfg, label, is_base=(i == 0), config=dict(flat[i]) if flat else {}))
    for digits in (8, 17):  # two configurations must never share a label: more digits where rounding merged them
        seen: dict[str, int] = {}
        for r in rows:
            seen[r.label] = seen.get(r.label, 0) + 1
        for r in rows:
            if seen[r.label] > 1:
                r.label = ", ".join(describe(k, v, digits) for k, v in r.values.items())
    return rows


def expected_configs(spec, with_config: bool = False):
    """The swept configurations (without seed) a grid spec runs, in spec order; [] for a search whose rows are only
    the configurations that ran (random, optuna: ``Algorithm.spec_rows``). ``with_config``: (swept values, the
    trial's flat config without seed) pairs."""
    if not algorithms.get(spec.algorithm).spec_rows:
        return []
    out, seen = [], set()
    order = {v.name: i for i, v in enumerate(spec.variants)}  # evaluation-only rows in their place among the others
    trials = sorted([*expand(spec), *(ev.record for ev in evaluations(spec))], key=lambda t: order.get(t.variant, 0))
    for trial in trials:
        cfg = {k: v for k, v in trial.swept.items() if k != "seed"}
        sig = signature(cfg)
        if sig not in seen:
            seen.add(sig)
            out.append((cfg, {k: v for k, v in trial.config.items() if k != "seed"}) if with_config else cfg)
    return out


def sort_key(cfg: dict):
    return tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in cfg.values())


def ablation_rows(spec, observed: list[dict]) -> list[RowKey]:
    """Rows: the spec's configurations in spec order, then any observed ones the spec does not list."""
    pairs = expected_configs(spec, with_config=True) if spec is not None else []
    known = {signature(c) for c, _ in pairs}
    extra = []
    for cfg in observed:
        sig = signature(cfg)
        if sig not in known:
            known.add(sig)
            extra.append({k: v for k, v in cfg.items() if k != "seed"})
    configs = [c for c, _ in pairs] + sorted(extra, key=sort_key)
    flat = [f for _, f in pairs] + [{} for _ in extra]
    return label_rows(configs, getattr(spec, "model", None), flat)
