"""How a spec becomes trials, torch-free and Ray-free: the grid (variants x grid x seeds) or the drawn random
configurations, and the one function (``TrialSpace.trial``) that turns a Ray Tune config into a trial: a
variant's overrides, the ``when:`` conditions and the seeds of repeated Optuna samples are applied there only.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from typing import Optional

from rirlab.contract import TrialRecord
from rirlab.sweeps import algorithms
from rirlab.sweeps.spec.schema import Axis, Spec, base_config, training_variants


def condition_holds(when: Optional[dict], config: dict) -> bool:
    """A ``when:`` block holds if every named key has (one of) the listed value(s) in ``config``."""
    for key, want in (when or {}).items():
        if config.get(key) not in (want if isinstance(want, list) else [want]):
            return False
    return True


VARIANT_KEY = "variant"  # the Tune config key naming a grid trial's variant (its overrides apply in TrialSpace.trial)
REPEATER_INDEX = "__trial_index__"  # ray.tune.search.repeater.TRIAL_INDEX: which repeat (seed) of an Optuna sample


@dataclasses.dataclass(frozen=True)
class TrialSpace:
    """How a flat Tune config of real config keys becomes a trial: the one place where a variant's
    overrides, the ``when:`` conditions and the seeds of repeated Optuna samples are applied.

    Plain data (picklable): the driver's callbacks and the trial workers hold the same one."""

    search: tuple[str, ...] = ()  # the searched keys, in spec order
    when: dict[str, dict] = dataclasses.field(default_factory=dict)  # searched key -> its condition
    variants: dict[str, dict] = dataclasses.field(default_factory=dict)  # variant name -> its overrides
    seeds: tuple[int, ...] = (0,)

    @classmethod
    def of(cls, spec: Spec) -> "TrialSpace":
        sets = {v.name: dict(v.set) for v in spec.variants}
        for v in spec.variants:  # an evaluation-only row: its training row's config, its evaluation keys changed
            if v.evaluates is not None and v.evaluates in sets:
                sets[v.name] = {**sets[v.evaluates], **v.set}
        return cls(tuple(spec.search), {k: a.when for k, a in spec.search.items() if a.when}, sets,
                   tuple(spec.seed_list))

    def trial(self, config: dict) -> TrialRecord:
        """The trial a Tune config stands for (its name, swept values and flat rirlab config)."""
        flat = dict(config)
        variant = flat.pop(VARIANT_KEY, "")
        if REPEATER_INDEX in flat:
            flat["seed"] = self.seeds[flat.pop(REPEATER_INDEX)]
        seed = flat.pop("seed", 0)
        point = {k: flat.pop(k) for k in self.search if k in flat}
        base = {**flat, **self.variants.get(variant, {})}
        merged = {**base, **point, **({VARIANT_KEY: variant} if variant else {})}  # when: may name the variant
        point = {k: v for k, v in point.items() if condition_holds(self.when.get(k), merged)}
        swept = ({"variant": variant} if variant else {}) | point | {"seed": seed}
        return TrialRecord.of(swept, {**base, **point, "seed": seed})


def swept_signature(swept: dict) -> str:
    """A trial's identity within a sweep: its swept values (variant, searched keys, seed) as canonical JSON."""
    return json.dumps(swept, sort_keys=True, default=str)


def grid_points(spec: Spec, names: Optional[list[str]] = None) -> list[dict]:
    """The grid as Tune configs of the swept keys only, ``{variant?, every searched key, seed}``, in
    variants x grid x seeds order, one per distinct trial (a grid value whose ``when`` does not hold
    would only repeat a trial). ``names``: the variants whose points to give (default: the rows that train)."""
    space, base = TrialSpace.of(spec), base_config(spec)
    if names is None:
        names = [v.name for v in training_variants(spec)] if spec.variants else [""]
    keys = list(spec.search)
    points, seen = [], set()
    for name in names:
        for combo in itertools.product(*(spec.search[k].values for k in keys)):
            for s in spec.seed_list:
                point = ({VARIANT_KEY: name} if name else {}) | dict(zip(keys, combo)) | {"seed": s}
                sig = swept_signature(space.trial({**base, **point}).swept)
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


def random_points(spec: Spec, seed: int = 0) -> list[dict]:
    """The ``num_samples`` configurations of a random (or optuna, for previews) search: the searched keys only,
    drawn on the driver from an RNG seeded with ``seed``, so the dry run and the sweep run the same ones and every
    configuration runs once per seed with the same values."""
    rng = random.Random(seed)
    return [{k: _sample_axis(a, rng) for k, a in spec.search.items()} for _ in range(spec.num_samples)]


def expand(spec: Spec, sample_random: bool = False, seed: int = 0) -> list[TrialRecord]:
    """The trials, as the spec's algorithm expands them (``rirlab.sweeps.algorithms``). Grid: variants x grid x seeds.
    Random: the ``random_points`` x seeds (what the sweep runs). Optuna with ``sample_random``: a local preview of
    num_samples x seeds (Optuna chooses the real values); without it, none."""
    return algorithms.get(spec.algorithm).trials(spec, preview=sample_random, seed=seed)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One cell of an evaluation-only row (a variant with ``evaluates:``): ``record`` is the row's trial as a table
    reads it (its name, swept values and the config it is evaluated with), ``source`` the trial whose trained weights
    it evaluates (the same grid point and seed of the row it names)."""

    record: TrialRecord
    source: TrialRecord

    @property
    def key(self) -> str:
        """The child run's trial key: a resumed sweep finds the run of this evaluation by it."""
        return f"eval/{self.record.name}"

    @property
    def changed(self) -> dict:
        """The evaluation's settings that differ from its source trial's."""
        return {k: v for k, v in self.record.config.items() if self.source.config.get(k, object()) != v}


def evaluations(spec: Spec) -> list[Evaluation]:
    """Every evaluation-only cell, in spec order: each evaluation-only row x the grid points and seeds of the row it
    names."""
    space, base = TrialSpace.of(spec), base_config(spec)
    out = []
    for v in spec.variants:
        if v.evaluates is None or not algorithms.get(spec.algorithm).variants:
            continue
        for point in grid_points(spec, [v.evaluates]):  # (its trials: this sweep's, or trained before: trains false)
            source = space.trial({**base, **point})
            out.append(Evaluation(space.trial({**base, **point, VARIANT_KEY: v.name}), source))
    return out


def swept_keys(spec: Spec) -> list[str]:
    """Parameters that differ between trials, without the seed (what tables group by)."""
    return (["variant"] if spec.variants else []) + list(spec.search)
