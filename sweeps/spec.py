"""Sweep specs: the YAML schema (pydantic), validation against the config dataclasses, and expansion.

A spec is data, not code::

    name: chunk_beam
    task: listops
    model: rir_ebt_grc
    fixed: {hidden_size: 128}
    search:
      chunk_size: {grid: [10, 20, 30]}
      beam_size: {grid: [5, 7]}
    seeds: 3
    metric: dev/accuracy
    mode: max
    quick: {fixed: {hidden_size: 16, steps: 200}, search: {chunk_size: {grid: [10, 30]}}, seeds: 1}

Everything is validated before Ray or MLflow is touched: unknown keys name
file:line and the closest valid key, values out of range name the rule.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rirlab.config import closest, resolve
from rirlab.errors import UserError

SEARCH_KINDS = ("grid", "choice", "uniform", "loguniform", "randint")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Axis(_Strict):
    """One searched parameter: exactly one of grid | choice | uniform | loguniform | randint, optional ``when``."""

    grid: Optional[list[Any]] = None
    choice: Optional[list[Any]] = None
    uniform: Optional[tuple[float, float]] = None
    loguniform: Optional[tuple[float, float]] = None
    randint: Optional[tuple[int, int]] = None  # inclusive bounds
    when: Optional[dict[str, Union[Any, list[Any]]]] = None  # e.g. {model: [ut, gut]}

    @model_validator(mode="after")
    def _one_kind(self):
        kinds = [k for k in SEARCH_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"give exactly one of {', '.join(SEARCH_KINDS)} (got {kinds or 'none'})")
        values = getattr(self, kinds[0])
        if kinds[0] in ("grid", "choice") and len(values) == 0:
            raise ValueError(f"empty {kinds[0]}: list at least one value")
        if kinds[0] in ("uniform", "loguniform", "randint") and not values[0] < values[1]:
            raise ValueError(f"{kinds[0]} bounds must satisfy low < high (got {list(values)})")
        if kinds[0] == "loguniform" and values[0] <= 0:
            raise ValueError(f"loguniform bounds must be > 0 (got {list(values)})")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in SEARCH_KINDS if getattr(self, k) is not None)

    @property
    def values(self):
        return getattr(self, self.kind)

    def applies(self, config: dict) -> bool:
        return condition_holds(self.when, config)


def condition_holds(when: Optional[dict], config: dict) -> bool:
    """A ``when:`` block holds if every named key has (one of) the listed value(s) in ``config``."""
    for key, want in (when or {}).items():
        if config.get(key) not in (want if isinstance(want, list) else [want]):
            return False
    return True


class Variant(_Strict):
    name: str = Field(min_length=1)
    set: dict[str, Any] = Field(default_factory=dict)


class Scheduler(_Strict):
    type: Literal["fifo", "asha"] = "fifo"
    grace_period: int = Field(100, ge=1)  # in training steps
    reduction_factor: float = Field(2.0, gt=1)


class Resources(_Strict):
    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)


class Budget(_Strict):
    steps: Optional[int] = Field(None, ge=1)
    epochs: Optional[int] = Field(None, ge=1)
    time_limit_s: Optional[float] = Field(None, gt=0)  # per trial

    @model_validator(mode="after")
    def _steps_or_epochs(self):
        if self.steps is not None and self.epochs is not None:
            raise ValueError("give budget.steps or budget.epochs, not both")
        return self


class Quick(_Strict):
    """Overrides applied by --quick: merged into fixed, replacing search / seeds / budget when given."""

    fixed: dict[str, Any] = Field(default_factory=dict)
    search: Optional[dict[str, Axis]] = None
    seeds: Optional[Union[int, list[int]]] = None
    variants: Optional[list[str]] = None  # names of the variants to keep
    num_samples: Optional[int] = Field(None, ge=1)
    budget: Optional[Budget] = None
    max_concurrent: Optional[int] = Field(None, ge=1)


class Spec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    task: Optional[str] = None
    model: Optional[str] = None
    description: str = ""
    fixed: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, Axis] = Field(default_factory=dict)
    variants: list[Variant] = Field(default_factory=list)
    seeds: Union[int, list[int]] = 1
    metric: Union[str, list[str]] = "dev/accuracy"
    mode: Union[Literal["max", "min"], list[Literal["max", "min"]]] = "max"
    algorithm: Literal["grid", "random", "optuna"] = "grid"
    scheduler: Scheduler = Field(default_factory=Scheduler)
    num_samples: int = Field(1, ge=1)
    max_concurrent: Optional[int] = Field(None, ge=1)
    resources: Resources = Field(default_factory=Resources)
    budget: Budget = Field(default_factory=Budget)
    checkpoint_every: int = Field(0, ge=0)  # steps; 0 = only at the end
    max_failures: int = Field(2, ge=0)
    quick: Optional[Quick] = None

    @model_validator(mode="after")
    def _checks(self):
        if isinstance(self.seeds, int) and self.seeds < 1:
            raise ValueError("seeds must be >= 1 (a count) or a list of seed values")
        if isinstance(self.seeds, list) and not self.seeds:
            raise ValueError("seeds list is empty")
        metrics = self.metric if isinstance(self.metric, list) else [self.metric]
        modes = self.mode if isinstance(self.mode, list) else [self.mode]
        if len(metrics) != len(modes):
            raise ValueError(f"metric has {len(metrics)} entries but mode has {len(modes)}; give one mode per metric")
        if len(metrics) > 1 and self.algorithm != "optuna":
            raise ValueError("several metrics (multi-objective) need algorithm: optuna")
        if len(metrics) > 1 and self.scheduler.type == "asha":
            raise ValueError("asha needs a single metric")
        if self.variants and self.algorithm != "grid":
            raise ValueError("variants need algorithm: grid")
        if self.algorithm == "grid":
            bad = [k for k, a in self.search.items() if a.kind not in ("grid", "choice")]
            if bad:
                raise ValueError(f"algorithm grid cannot search {bad[0]} by {self.search[bad[0]].kind}; use algorithm: random or optuna")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError("variant names must be unique")
        return self

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def metrics(self) -> list[str]:
        return self.metric if isinstance(self.metric, list) else [self.metric]

    @property
    def modes(self) -> list[str]:
        return self.mode if isinstance(self.mode, list) else [self.mode]


class LoadedSpec:
    """A validated spec plus where it came from (for file:line errors, the artifact and the hash)."""

    def __init__(self, spec: Spec, path: Path, text: str, lines: dict, quick: bool, overrides: dict):
        self.spec, self.path, self.text, self.lines = spec, path, text, lines
        self.quick, self.overrides = quick, overrides

    @property
    def hash(self) -> str:
        """Hash of the effective spec (file content + --quick + --set), 12 hex digits."""
        blob = json.dumps({"spec": self.spec.model_dump(mode="json"), "quick": self.quick,
                           "overrides": self.overrides}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def where(self, *keypath) -> str:
        for n in range(len(keypath), 0, -1):
            if keypath[:n] in self.lines:
                return f"{self.path}:{self.lines[keypath[:n]]}"
        return str(self.path)


def _pydantic_error(err: ValidationError, loaded_path: Path, lines: dict) -> UserError:
    e = err.errors()[0]
    loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p in ("function-after", "tagged-union")))
    key = ".".join(str(p) for p in loc) or "spec"
    line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
    where = f"{loaded_path}:{line}" if line else str(loaded_path)
    if e["type"] == "extra_forbidden":
        sections = {"scheduler": Scheduler, "resources": Resources, "budget": Budget, "quick": Quick}
        valid: list = []
        if len(loc) == 1:
            valid = list(Spec.model_fields)
        elif len(loc) == 2 and loc[0] in sections:
            valid = list(sections[loc[0]].model_fields)
        elif len(loc) == 3 and loc[0] == "search":
            valid = [*SEARCH_KINDS, "when"]
        return UserError(f"{where}: unknown key '{loc[-1]}' in the spec{closest(str(loc[-1]), valid)}")
    msg = e["msg"].removeprefix("Value error, ")
    got = e.get("input")
    shown = f" (got {got!r})" if not isinstance(got, (dict, list)) else ""
    return UserError(f"{where}: {key}: {msg}{shown}")


def load_spec(path, quick: bool = False, overrides: Optional[dict] = None) -> LoadedSpec:
    """Read, apply --quick and --set, validate the schema AND every trial config. Raises UserError."""
    from sweeps.yaml_lines import load_with_lines

    path = Path(path)
    data, lines = load_with_lines(path)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        raise _pydantic_error(err, path, lines) from None
    overrides = dict(overrides or {})
    if quick and spec.quick is not None:
        q = spec.quick
        upd: dict[str, Any] = {"fixed": {**spec.fixed, **q.fixed}}
        if q.search is not None:
            upd["search"] = q.search
        if q.seeds is not None:
            upd["seeds"] = q.seeds
        if q.num_samples is not None:
            upd["num_samples"] = q.num_samples
        if q.budget is not None:
            upd["budget"] = q.budget
        if q.max_concurrent is not None:
            upd["max_concurrent"] = q.max_concurrent
        if q.variants is not None:
            known = {v.name for v in spec.variants}
            missing = [n for n in q.variants if n not in known]
            if missing:
                raise UserError(f"{path}:{lines.get(('quick', 'variants'), '?')}: quick.variants names unknown variant '{missing[0]}'"
                                f"{closest(missing[0], known)}")
            upd["variants"] = [v for v in spec.variants if v.name in q.variants]
        spec = spec.model_copy(update=upd)
    if overrides:
        # --set fixes a value: it replaces any search axis of the same name
        spec = spec.model_copy(update={"fixed": {**spec.fixed, **overrides},
                                       "search": {k: a for k, a in spec.search.items() if k not in overrides}})
    loaded = LoadedSpec(spec, path, path.read_text(), lines, quick, overrides)
    validate_params(loaded)
    return loaded


def base_config(spec: Spec) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    if spec.task is not None:
        cfg["task"] = spec.task
    if spec.model is not None:
        cfg["model"] = spec.model
    cfg.update(spec.fixed)
    if spec.budget.steps is not None:
        cfg["steps"] = spec.budget.steps
    if spec.budget.epochs is not None:
        cfg["epochs"] = spec.budget.epochs
    return cfg


def _key_location(loaded: LoadedSpec, key: str) -> str:
    for section in (("fixed",), ("search",), ("quick", "fixed"), ("quick", "search")):
        if (*section, key) in loaded.lines:
            return loaded.where(*section, key)
    for i, _ in enumerate(loaded.spec.variants):
        if ("variants", i, "set", key) in loaded.lines:
            return loaded.where("variants", i, "set", key)
    if key in loaded.overrides:
        return f"--set {key}"
    return str(loaded.path)


def validate_params(loaded: LoadedSpec) -> None:
    """Resolve every trial config (grid) or the bounds of every axis (random/optuna) against the dataclasses."""
    spec = loaded.spec
    for trial in expand(spec, sample_random=True):
        try:
            resolve(trial["config"], where="spec")
        except UserError as err:
            msg = str(err)
            m = re.search(r"unknown parameter '([^']+)'|: ([A-Za-z_0-9]+)=", msg)
            key = next((g for g in (m.groups() if m else ()) if g), None)
            where = _key_location(loaded, key) if key else str(loaded.path)
            raise UserError(msg.replace("spec:", f"{where}:", 1)) from None


def _grid_points(search: dict[str, Axis], base: dict) -> list[dict]:
    """Cartesian product of the grid axes; an axis whose ``when`` does not hold is left out (deduplicated)."""
    keys = list(search)
    points, seen = [], set()
    for combo in itertools.product(*(search[k].values for k in keys)):
        point = dict(zip(keys, combo))
        merged = {**base, **point}
        point = {k: v for k, v in point.items() if search[k].applies(merged)}
        sig = json.dumps(point, sort_keys=True, default=str)
        if sig not in seen:
            seen.add(sig)
            points.append(point)
    return points


def _sample_axis(axis: Axis, rng: random.Random):
    kind, v = axis.kind, axis.values
    if kind in ("grid", "choice"):
        return rng.choice(v)
    if kind == "uniform":
        return rng.uniform(*v)
    if kind == "loguniform":
        return math.exp(rng.uniform(math.log(v[0]), math.log(v[1])))
    return rng.randint(*v)


def trial_name(swept: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in swept.items())


def expand(spec: Spec, sample_random: bool = False, seed: int = 0) -> list[dict]:
    """Trials as dicts {name, swept, config}. Grid: variants x grid x seeds. Random/optuna with
    ``sample_random``: ``num_samples`` draws x seeds from a local RNG (for --dry-run and validation);
    the real sweep samples inside Ray Tune."""
    base = base_config(spec)
    variants = spec.variants or [Variant.model_construct(name="", set={})]
    trials = []
    if spec.algorithm == "grid":
        for var in variants:
            vbase = {**base, **var.set}
            for point in _grid_points(spec.search, vbase):
                for s in spec.seed_list:
                    swept = ({"variant": var.name} if var.name else {}) | point | {"seed": s}
                    trials.append({"name": trial_name(swept), "swept": swept,
                                   "variant": var.name, "config": {**vbase, **point, "seed": s}})
        return trials
    if not sample_random:
        return []
    rng = random.Random(seed)
    for i in range(spec.num_samples):
        point = {k: _sample_axis(a, rng) for k, a in spec.search.items()}
        point = {k: v for k, v in point.items() if spec.search[k].applies({**base, **point})}
        for s in spec.seed_list:
            swept = point | {"seed": s}
            trials.append({"name": trial_name(swept), "swept": swept, "variant": "", "config": {**base, **point, "seed": s}})
    return trials


def swept_keys(spec: Spec) -> list[str]:
    """Parameters that differ between trials, without the seed (what tables group by)."""
    return (["variant"] if spec.variants else []) + list(spec.search)
