"""The sweep spec file, torch-free: its YAML schema (pydantic), its expansion into trials, and ``base_config`` (what every
trial shares). How a spec becomes trials is ``rirlab.sweeps.plan``.

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

This module checks the schema only; ``rirlab.sweeps.spec.load.load_spec`` also applies --quick / --set and validates
every trial config against the library's config dataclasses. Torch-free and Ray-free: analysis reads specs
through this module, so a table's layout needs neither torch nor the model registry.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator, model_validator, ValidationInfo

from rirlab.config import EVALUATION_KEYS, closest  # torch-free: the config layer imports no model or task
from rirlab.errors import UserError
from rirlab.sweeps import algorithms
from rirlab.sweeps.spec.lines import load_with_lines

SEARCH_KINDS = ("grid", "choice", "uniform", "loguniform", "randint")
Count = Annotated[int, Strict()]  # counts take integers only: YAML's true is not 1
MAX_TRIALS = 10_000  # default cap on the trials of one sweep; max_trials: in the spec or $RIRLAB_MAX_TRIALS raises it
MAX_TRIALS_ENV = "RIRLAB_MAX_TRIALS"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Axis(_Strict):
    """One searched parameter: exactly one of grid | choice | uniform | loguniform | randint, optional ``when``."""

    grid: Optional[list[Any]] = None
    choice: Optional[list[Any]] = None
    uniform: Optional[tuple[float, float]] = None
    loguniform: Optional[tuple[float, float]] = None
    randint: Optional[tuple[Count, Count]] = None  # inclusive bounds
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


class Variant(_Strict):
    """A row of the table: ``set`` overrides the trial config. With ``evaluates: ROW`` the row trains nothing: it
    evaluates the weights of that row's trials (one per seed, the same weights the row's own cells are measured with)
    with ``set`` changed, and ``set`` may only hold evaluation-time keys (``rirlab.config.EVALUATION_KEYS``: the
    inference mode, a beam width at inference, the evaluation splits, ...). RIR Table 5's "+RIR inference" is such a
    row: RIR-EBT-GRC trained once, tested under RIR inference (RIR App. D)."""

    # a row label and part of run names: printable, one line (a newline broke the dry-run table)
    name: str = Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f]+$")
    set: dict[str, Any] = Field(default_factory=dict)
    evaluates: Optional[str] = Field(None, min_length=1)  # the name of the row whose trained weights this row tests
    # False: a row kept only for the evaluation-only rows that name it (--set variant= chose them, not it): this sweep
    # trains none of its trials; they evaluate its trials trained before, found in the store by their config
    trains: bool = True


class Scheduler(_Strict):
    type: Literal["fifo", "asha"] = "fifo"
    grace_period: Count = Field(100, ge=1)  # in training steps
    reduction_factor: float = Field(2.0, gt=1)


class Resources(_Strict):
    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)


class Budget(_Strict):
    steps: Optional[Count] = Field(None, ge=1)
    epochs: Optional[Count] = Field(None, ge=1)
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
    seeds: Optional[Union[Count, list[Count]]] = None
    variants: Optional[list[str]] = None  # names of the variants to keep
    num_samples: Optional[Count] = Field(None, ge=1)
    budget: Optional[Budget] = None
    max_concurrent: Optional[Count] = Field(None, ge=1)


SECTIONS = {"scheduler": Scheduler, "resources": Resources, "budget": Budget}  # (the algorithms' own: theirs)


class Spec(_Strict):
    # the MLflow experiment and the Ray Tune folder are named after it: a file name, never "." or ".." (which
    # would write artifacts outside the store's folder), at most 100 characters (with the hash and time appended
    # it stays under the file systems' 255)
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,100}$")
    task: Optional[str] = None
    model: Optional[str] = None
    description: str = ""
    fixed: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, Axis] = Field(default_factory=dict)
    variants: list[Variant] = Field(default_factory=list)
    seeds: Union[Count, list[Count]] = 1
    metric: Union[str, list[str]] = "dev/accuracy"
    mode: Union[Literal["max", "min"], list[Literal["max", "min"]]] = "max"
    # one of rirlab.sweeps.algorithms.names(): the annotation is set, with each algorithm's section (e.g. optuna:) as a
    # field of its own, when the algorithms register (_install_algorithm at the end of this module)
    algorithm: str = "grid"
    scheduler: Scheduler = Field(default_factory=Scheduler)
    num_samples: Count = Field(1, ge=1)
    max_concurrent: Optional[Count] = Field(None, ge=1)
    resources: Resources = Field(default_factory=Resources)
    budget: Budget = Field(default_factory=Budget)
    checkpoint_every: Count = Field(0, ge=0)  # steps; 0 = only at the end
    # a trial's latest checkpoints kept on disk (Ray Tune deletes the older ones); 0 keeps every one: weights of
    # several steps for `rirlab evaluate TRIAL --every-checkpoint` (which checkpoint gets tested moves a ListOps
    # run's long-split cells by many points). Where trials keep their files, not what they compute: no part of the
    # spec's hash, and a resumed sweep keeps the value it started with (Ray Tune restores its own run config)
    keep_checkpoints: Count = Field(1, ge=0)
    max_failures: Count = Field(2, ge=0)
    max_trials: Optional[Count] = Field(None, ge=1)  # refuse a sweep of more trials (default MAX_TRIALS)
    # run the next trial in the finished trial's worker process (Ray Tune's reuse_actors): no interpreter start and
    # torch import per trial; how trials run, not what they compute, so it is not part of the spec's hash
    reuse_workers: bool = False
    quick: Optional[Quick] = None

    @field_validator("name")
    @classmethod
    def _not_only_dots(cls, name: str) -> str:
        if set(name) == {"."}:
            raise ValueError(f"{name!r} names a folder, not a sweep: give letters, digits, _ . or -")
        return name

    @model_validator(mode="after")
    def _checks(self, info: ValidationInfo):
        problems = []  # every problem, not only the first (issue 33 item 10); spec_error prints a line each
        if isinstance(self.seeds, int) and self.seeds < 1:
            problems.append("seeds must be >= 1 (a count) or a list of seed values")
        elif isinstance(self.seeds, list) and not self.seeds:
            problems.append("seeds list is empty")
        elif isinstance(self.seeds, list) and len(set(self.seeds)) != len(self.seeds):
            dup = next(s for s in self.seeds if self.seeds.count(s) > 1)
            problems.append(f"seed {dup} is listed twice; every seed must differ (a repeat only reruns a trial)")
        elif isinstance(self.seeds, list) and min(self.seeds) < 0:
            problems.append(f"seeds must be >= 0 (got {min(self.seeds)})")
        where = next((w for w, d in [("fixed", self.fixed), ("search", self.search),
                                     *((f"variant '{v.name}'", v.set) for v in self.variants)] if "seed" in d), None)
        if where:
            problems.append(f"seed in {where} would be ignored: the seeds come from seeds: (e.g. seeds: [3])")
        try:
            count, limit = trial_count(self), trial_limit(self)
        except ValueError as err:  # a malformed $RIRLAB_MAX_TRIALS
            problems.append(str(err))
            count, limit = 0, 0
        if count > limit:
            problems.append(f"{count:,} trials ({count // len_seeds(self):,} configurations x {len_seeds(self):,} seeds) "
                            f"are more than the limit of {limit:,}; shrink the grid, seeds or num_samples, or raise "
                            f"the limit with max_trials: N in the spec (or ${MAX_TRIALS_ENV}=N)")
        metrics = self.metric if isinstance(self.metric, list) else [self.metric]
        modes = self.mode if isinstance(self.mode, list) else [self.mode]
        algorithm = algorithms.get(self.algorithm)
        if len(metrics) != len(modes):
            problems.append(f"metric has {len(metrics)} entries but mode has {len(modes)}; give one mode per metric")
        if len(metrics) > 1 and not algorithm.multi_objective:
            problems.append(f"several metrics (multi-objective) need algorithm: "
                            f"{' or '.join(n for n in algorithms.names() if algorithms.get(n).multi_objective)}")
        if len(metrics) > 1 and self.scheduler.type == "asha":
            problems.append("asha needs a single metric")
        given = set() if (info.context or {}).get("recorded") else self.model_fields_set  # (a record sets all)
        for name in algorithms.names():  # each algorithm's own rules (its section's settings under another one too)
            problems += algorithms.get(name).problems(self, given)
        if self.variants and not algorithm.variants:
            problems.append(f"variants need algorithm: {' or '.join(n for n in algorithms.names() if algorithms.get(n).variants)}")
        by_epochs = [w for w, d in [("fixed", self.fixed), *((f"variant '{v.name}'", v.set) for v in self.variants)]
                     if d.get("epochs") is not None]
        if self.budget.steps is not None and by_epochs:
            problems.append(f"budget.steps would change nothing: {by_epochs[0]} sets epochs, which overrides steps; "
                            f"give budget.epochs instead (or epochs: null there to train by steps)")
        bad = [k for k, a in self.search.items() if a.kind not in algorithm.kinds]
        if bad:
            others = [n for n in algorithms.names() if self.search[bad[0]].kind in algorithms.get(n).kinds]
            problems.append(f"algorithm {self.algorithm} cannot search {bad[0]} by {self.search[bad[0]].kind}; use "
                            f"algorithm: {' or '.join(others)}")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            problems.append("variant names must be unique")
        problems += evaluation_problems(self.variants)
        if problems:
            raise ValueError("\n".join(problems))
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


def evaluation_problems(variants: list[Variant]) -> list[str]:
    """What is wrong with the evaluation-only rows (``evaluates:``): a row they name that the spec lacks or that is
    itself evaluation-only, or a key of ``set`` that would change training."""
    problems, by_name = [], {v.name: v for v in variants}
    for v in variants:
        if v.evaluates is None:
            continue
        source = by_name.get(v.evaluates)
        if source is None:
            problems.append(f"variant '{v.name}' evaluates '{v.evaluates}', which is not a variant of this sweep"
                            f"{closest(v.evaluates, list(by_name))}; name a training row (with --set variant=[...], "
                            f"keep that row too)")
        elif source.evaluates is not None:
            problems.append(f"variant '{v.name}' evaluates '{v.evaluates}', which is evaluation-only itself; name the "
                            f"row that trains (evaluates: {source.evaluates})")
        bad = [k for k in v.set if k not in EVALUATION_KEYS]
        if bad:
            problems.append(f"variant '{v.name}' evaluates '{v.evaluates}' but sets {bad[0]}, which changes training; "
                            f"an evaluation-only row may set only {', '.join(EVALUATION_KEYS)} (make it a training row: "
                            f"drop evaluates:)")
    return problems


def training_variants(spec: Spec) -> list[Variant]:
    """The rows that train (every variant without ``evaluates:``)."""
    return [v for v in spec.variants if v.evaluates is None and v.trains]


def len_seeds(spec: Spec) -> int:
    return spec.seeds if isinstance(spec.seeds, int) else len(spec.seeds)


def trial_count(spec: Spec) -> int:
    """How many trials the spec asks for, counted without expanding anything: variants x grid x seeds (an upper
    bound: a grid value whose ``when:`` fails is run once), or num_samples x seeds for random / optuna."""
    return algorithms.get(spec.algorithm).trial_count(spec)


def trial_limit(spec: Spec) -> int:
    """max_trials from the spec, else $RIRLAB_MAX_TRIALS, else MAX_TRIALS."""
    if spec.max_trials is not None:
        return spec.max_trials
    env = os.environ.get(MAX_TRIALS_ENV, "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"${MAX_TRIALS_ENV}={env!r} is not a positive integer")
        return int(env)
    return MAX_TRIALS


def _union_member(part) -> bool:
    """Parts of a pydantic error location that name a type tried, not a key (``seeds.int``, ``list[int]``)."""
    return isinstance(part, str) and (part in ("function-after", "tagged-union", "int", "float", "str", "bool")
                                      or part.startswith(("list[", "tuple[", "dict[", "constrained-")))


def _branch_key(loc: tuple) -> tuple:
    """An error's location up to the first union branch it names (``seeds.int`` and ``seeds.list[int]`` are one
    problem of ``seeds``: its first branch's message is shown)."""
    for i, part in enumerate(loc):
        if _union_member(part) or (isinstance(part, str) and part.startswith("literal[")):
            return loc[:i]
    return loc


def distinct_errors(err: ValidationError) -> list[dict]:
    """Every problem pydantic found (issue 33 item 10: not only the first), a union's failed branches once."""
    seen, out = set(), []
    for e in err.errors():
        if _branch_key(tuple(e["loc"])) not in seen:
            seen.add(_branch_key(tuple(e["loc"])))
            out.append(e)
    return out


def spec_error(err: ValidationError, path: Path, lines: dict) -> UserError:
    """Every problem, one line each: ``file:line: key: what is wrong`` (unknown keys name the closest valid one)."""
    return UserError("\n".join(line for e in distinct_errors(err) for line in _error_lines(e, path, lines)))


def _error_lines(e: dict, path: Path, lines: dict) -> list[str]:
    loc = tuple(p for p in e["loc"] if not _union_member(p))
    key = ".".join(str(p) for p in loc) or "spec"
    line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
    where = f"{path}:{line}" if line else str(path)
    if e["type"] == "extra_forbidden":
        sections = {**SECTIONS, "quick": Quick, **algorithms.sections()}
        valid: list = []
        if len(loc) == 1:
            valid = list(Spec.model_fields)
        elif len(loc) == 2 and loc[0] in sections:
            valid = list(sections[loc[0]].model_fields)
        elif len(loc) == 3 and loc[0] == "search":
            valid = [*SEARCH_KINDS, "when"]
        return [f"{where}: unknown key '{loc[-1]}' in the spec{closest(str(loc[-1]), valid)}"]
    got = e.get("input")
    shown = f" (got {got!r})" if not isinstance(got, (dict, list)) else ""
    # the spec-wide checks (Spec._checks) report all their problems in one error, a line each
    return [f"{where}: {key}: {msg}{shown}" for msg in e["msg"].removeprefix("Value error, ").split("\n")]


def parse_spec(path: Path) -> tuple[Spec, dict]:
    """(validated Spec, {key path: line}) of a spec file; any problem is a one-line UserError with file:line."""
    data, lines = load_with_lines(path)
    try:
        return Spec.model_validate(data), lines
    except ValidationError as err:
        raise spec_error(err, path, lines) from None


def read_spec(path) -> Spec:
    """The spec file's schema only (not every trial config: tables of a spec whose models are not
    registered yet still print). Raises UserError with file:line like ``rirlab sweep``."""
    return parse_spec(Path(path))[0]


def base_config(spec: Spec) -> dict[str, Any]:
    """What every trial shares: task, model, fixed values and the budget's steps/epochs."""
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


def _install_algorithm(name: str, algorithm) -> None:
    """A registered algorithm (``rirlab.sweeps.algorithms``) in the schema: its name among ``algorithm:``'s values and its
    section, if any, as a field ``<name>:`` of Spec (defaults: left out of the spec hash, see LoadedSpec.hash).
    ``algorithm`` None: it was removed (a test's throwaway). Pydantic rebuilds the validator from the fields."""
    from pydantic.fields import FieldInfo

    fields = Spec.model_fields
    section = getattr(algorithm, "section", None)
    if algorithm is None or section is None:
        if name in fields and name not in _CORE_FIELDS:
            del fields[name]
    else:
        if name in _CORE_FIELDS:
            raise ValueError(f"algorithm {name!r} names a section that is a spec field already")
        fields[name] = FieldInfo.from_annotated_attribute(section, Field(default_factory=section))
    fields["quick"] = fields.pop("quick")  # (the --quick overrides stay the last field)
    known = tuple(algorithms.names())
    fields["algorithm"] = FieldInfo.from_annotated_attribute(Literal[known], "grid")
    Spec.model_rebuild(force=True)


_CORE_FIELDS = frozenset(Spec.model_fields)
algorithms.watch(_install_algorithm)
algorithms.load()
