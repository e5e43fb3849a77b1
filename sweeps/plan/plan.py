"""``SweepPlan``: a validated spec turned, once, into what every later stage reads.

Built by ``SweepPlan.of(load_spec(...))`` right after the spec is loaded; the dry run, the Tuner, the parent run,
``--resume`` and the trial callbacks all read this one object. Nothing after it expands the spec again or
resolves a planned trial's config again on the driver (an Optuna trial, whose values Optuna chooses as the
sweep runs, is resolved when it starts).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Optional

from rirlab.config import TrainConfig
from rirlab.trial import TrialConfig, resolve
from rirlab.contract import TrialRecord
from sweeps.spec.trials import VARIANT_KEY, Evaluation, TrialSpace, grid_points, random_points, swept_keys
from sweeps.spec.load import LoadedSpec
from sweeps.spec.schema import Spec, base_config, training_variants


@dataclasses.dataclass(frozen=True, eq=False)
class SweepPlan:
    """The trials of one sweep, their resolved configs, the Tune search space and the counts."""

    loaded: LoadedSpec
    trials: tuple[TrialRecord, ...]  # grid and random: the trials that run, in order; optuna: a local preview
    resolved: tuple[TrialConfig, ...]  # each trial's resolved config (validated by load_spec)
    points: tuple[dict, ...]  # the Tune configs of the swept keys the searcher hands out (grid and random)
    evaluations: tuple[Evaluation, ...] = ()  # the cells of evaluation-only rows, run once their trials finished
    evaluated: tuple[TrialConfig, ...] = ()  # each one's resolved config

    @classmethod
    def of(cls, loaded: LoadedSpec) -> "SweepPlan":
        spec = loaded.spec
        points = grid_points(spec) if spec.algorithm == "grid" else \
            random_points(spec) if spec.algorithm == "random" else []
        return cls(loaded, tuple(loaded.trials), tuple(loaded.resolved), tuple(points), tuple(loaded.evaluations),
                   tuple(loaded.evaluated))

    # ---- what the spec says
    @property
    def spec(self) -> Spec:
        return self.loaded.spec

    @property
    def hash(self) -> str:
        return self.loaded.hash

    @functools.cached_property
    def space(self) -> TrialSpace:
        """How a Tune config becomes a trial (the driver's callbacks and the workers hold copies of it)."""
        return TrialSpace.of(self.spec)

    @property
    def n_trials(self) -> int:
        """Trials the sweep runs (an optuna sweep: num_samples x seeds, the size of its preview)."""
        return len(self.trials)

    @property
    def num_samples(self) -> int:
        """Tune's num_samples: one per grid trial; configurations (each run once per seed) otherwise."""
        return len(self.points) if self.spec.algorithm == "grid" else self.spec.num_samples

    @property
    def swept_keys(self) -> list[str]:
        return swept_keys(self.spec)

    @functools.cached_property
    def base(self) -> dict:
        return base_config(self.spec)

    def resolved_of(self, record: TrialRecord) -> TrialConfig:
        """A trial's resolved config: the planned one, or (an Optuna trial, whose values Optuna chose) resolved now."""
        return self._planned.get(_config_key(record.config)) or resolve(record.config)

    @functools.cached_property
    def _planned(self) -> dict[str, TrialConfig]:
        """Exact config -> resolved config of the trials that run as planned. Not by run name (which rounds floats),
        and not the preview of an optuna sweep, whose real values differ."""
        if self.spec.algorithm == "optuna":
            return {}
        return {_config_key(t.config): r for t, r in zip(self.trials, self.resolved)}

    @functools.cached_property
    def splits(self) -> Optional[list[tuple[str, str]]]:
        """The evaluation splits (split, paper label) of the sweep's task, recorded on the parent so that analysis
        needs no registry; None when the trials do not share one task."""
        from rirlab.tasks import registry

        tasks = {r.task for r in self.resolved}
        return list(registry.get(tasks.pop()).splits) if len(tasks) == 1 else None

    def param_space(self) -> dict:
        """The Tune search space, as data: a flat dict of real config keys. Constants, a domain per searched
        key, the seeds; a grid names its variants under ``variant`` (their overrides apply in TrialSpace.trial)."""
        from ray import tune

        spec = self.spec
        space = {**self.base, **{key: _domain(axis) for key, axis in spec.search.items()}}
        if spec.algorithm == "grid":  # every trial is one of the points (the searcher): the domains declare the keys
            if spec.variants:  # (an evaluation-only row trains nothing: no trial of it is in the grid)
                space[VARIANT_KEY] = tune.choice([v.name for v in training_variants(spec)])
            space["seed"] = tune.choice(spec.seed_list)
        elif spec.algorithm == "random":  # each drawn configuration runs once per seed
            space["seed"] = tune.grid_search(spec.seed_list)
        else:  # optuna: the Repeater's index picks the seed of each repeat
            space["seed"] = spec.seed_list[0]
        return space


def _config_key(config: dict) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _domain(axis):
    from ray import tune

    v = axis.values
    if axis.kind in ("grid", "choice"):
        return tune.choice(v)
    if axis.kind == "uniform":
        return tune.uniform(*v)
    if axis.kind == "loguniform":
        return tune.loguniform(*v)
    return tune.randint(v[0], v[1] + 1)  # randint bounds are inclusive in specs


def asha_max_t(base: dict, task_cfg=None) -> int:
    """ASHA's step cap: ``steps``, or with ``epochs`` set (which overrides steps) an upper bound of
    epochs x batches per epoch, so ASHA never cuts a trial the recipe would still train."""
    if base.get("epochs") is None:
        return int(base.get("steps", TrainConfig().steps))  # budget.steps is folded in there
    n_train = base.get("n_train")
    if n_train is None:  # the task's default, when the task has a training-set size (from a planned trial's config)
        n_train = getattr(task_cfg if task_cfg is not None else resolve(base).task_cfg, "n_train", None)
    batch = int(base.get("batch_size", TrainConfig().batch_size))
    return int(base["epochs"]) * -(-int(n_train) // batch) if n_train else 10**9
