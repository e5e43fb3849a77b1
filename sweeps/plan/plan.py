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
from rirlab.sweeps import algorithms
from rirlab.sweeps.spec.trials import Evaluation, TrialSpace, swept_keys, swept_signature
from rirlab.sweeps.spec.load import LoadedSpec
from rirlab.sweeps.spec.schema import Spec, base_config


@dataclasses.dataclass(frozen=True, eq=False)
class SweepPlan:
    """The trials of one sweep, their resolved configs, the Tune search space and the counts."""

    loaded: LoadedSpec
    trials: tuple[TrialRecord, ...]  # grid and random: the trials that run, in order; optuna: a local preview
    resolved: tuple[TrialConfig, ...]  # each trial's resolved config (validated by load_spec)
    points: tuple[dict, ...]  # the Tune configs of the swept keys the searcher hands out (grid and random)
    evaluations: tuple[Evaluation, ...] = ()  # the cells of evaluation-only rows, run once their trials finished
    evaluated: tuple[TrialConfig, ...] = ()  # each one's resolved config
    warm: Optional[object] = None  # --warm-start: rirlab.sweeps.record.warm.WarmStart (earlier finished configurations)
    trial_index: Optional[int] = None  # --trial I: the index in the whole grid of the one trial this plan runs
    grid_trials: Optional[int] = None  # ... and the whole grid's number of trials

    @classmethod
    def of(cls, loaded: LoadedSpec) -> "SweepPlan":
        points = algorithms.get(loaded.spec.algorithm).points(loaded.spec)
        return cls(loaded, tuple(loaded.trials), tuple(loaded.resolved), tuple(points), tuple(loaded.evaluations),
                   tuple(loaded.evaluated))

    def check_warm_start(self) -> None:
        """A UserError where the algorithm takes no warm start (before any store is read for one)."""
        from rirlab.errors import UserError

        if not self.algorithm.warm_starts:
            raise UserError(f"--warm-start: algorithm: {self.spec.algorithm} runs the points its spec lists; a warm "
                            f"start seeds a search (algorithm: random or optuna)")

    def warm_started(self, warm) -> "SweepPlan":
        """This plan seeded with earlier finished configurations (``--warm-start``): a random search runs them first
        (its trials, re-planned and resolved here), an Optuna search tells its study their results. A UserError for
        an algorithm that takes none (a grid runs every point of its grid anyway)."""
        self.check_warm_start()
        algorithm = self.algorithm
        points = algorithm.warm_points(self.spec, list(self.points), warm)
        if not algorithm.planned or points == list(self.points):
            return dataclasses.replace(self, warm=warm)
        base, seeds = self.base, self.spec.seed_list
        trials = [self.space.trial({**base, **p, "seed": s}) for p in points for s in seeds]
        known = {_config_key(t.config): r for t, r in zip(self.trials, self.resolved)}
        resolved = [known.get(_config_key(t.config)) or resolve(t.config) for t in trials]
        return dataclasses.replace(self, trials=tuple(trials), resolved=tuple(resolved), points=tuple(points),
                                   warm=warm)

    def jobs(self, flag: str = "--count") -> int:
        """How many one-trial jobs the sweep splits into (``--trial 0`` to ``--trial N-1``): its trials; a UserError
        naming ``flag`` for a search, whose trials are chosen as one sweep runs."""
        from rirlab.errors import UserError

        if not self.algorithm.one_trial_jobs:
            raise UserError(f"{flag}: {self.loaded.path} is a search (algorithm: {self.spec.algorithm}), whose trials "
                            f"are chosen as one sweep runs, so one of them cannot run alone in a job; run it as one "
                            f"sweep (without --trial; on Slurm: cluster/slurm/rirlab-sweep.sbatch)")
        return len(self.trials)

    def one_trial(self, index: int) -> "SweepPlan":
        """This plan cut to trial ``index`` of the grid (``rirlab sweep SPEC --trial I``: one job per trial, e.g. a
        Slurm job array, where a job of many nodes waits long in the queue). Nothing is expanded again or overridden:
        the spec, its hash, every swept axis and the trial's name, config and Tune point are exactly those of the
        same trial in the whole sweep (a ``--set`` on a grid key would fix that key instead: another spec hash and
        trial name, so the jobs would not read back as one sweep).

        Evaluation-only rows are not trials and take no index: the cells that evaluate this trial's weights run in
        this job once the trial finished (they read its weights from this job's own run); cells of a row that trains
        nothing in this grid (``trains: false``: weights trained before) run in the job of trial 0. The jobs of
        one grid together evaluate every cell once. A search (random, optuna) is refused: its trials are chosen
        and ranked as one sweep."""
        from rirlab.errors import UserError

        path, n = self.loaded.path, self.jobs("--trial")
        if not 0 <= index < n:
            if n == 0:
                raise UserError(f"--trial {index}: {path} trains no trial (its rows only evaluate weights trained "
                                f"before); run it as one sweep, without --trial")
            raise UserError(f"--trial {index}: {path} has {n} trials, indices 0 to {n - 1} (the order of "
                            f"--dry-run; a Slurm array of them is --array=0-{n - 1})")
        trial = self.trials[index]
        trained = {swept_signature(t.swept) for t in self.trials}

        def mine(ev) -> bool:
            source = swept_signature(ev.source.swept)
            return source == swept_signature(trial.swept) or (index == 0 and source not in trained)

        keep = [i for i, ev in enumerate(self.evaluations) if mine(ev)]
        return dataclasses.replace(self, trials=(trial,), resolved=(self.resolved[index],),
                                   points=(self.points[index],),
                                   evaluations=tuple(self.evaluations[i] for i in keep),
                                   evaluated=tuple(self.evaluated[i] for i in keep), trial_index=index,
                                   grid_trials=n)

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
    def algorithm(self):
        """The spec's search algorithm (``rirlab.sweeps.algorithms``): what every later stage asks instead of its name."""
        return algorithms.get(self.spec.algorithm)

    @property
    def num_samples(self) -> int:
        """Tune's num_samples: one per grid trial; configurations (each run once per seed) for random; Optuna's
        suggestions x seeds for optuna (its searcher runs each suggestion once per seed)."""
        return self.algorithm.tune_num_samples(self.spec, list(self.points))

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
        if not self.algorithm.planned:
            return {}
        return {_config_key(t.config): r for t, r in zip(self.trials, self.resolved)}

    @functools.cached_property
    def splits(self) -> Optional[list[tuple[str, str]]]:
        """The evaluation splits (split, paper label) of the sweep's task, recorded on the parent so that analysis
        needs no registry; None when the trials do not share one task."""
        from rirlab.tasks import registry

        tasks = {r.task for r in (*self.resolved, *self.evaluated)}  # (a sweep of evaluation-only rows trains none)
        return list(registry.get(tasks.pop()).splits) if len(tasks) == 1 else None

    def param_space(self) -> dict:
        """The Tune search space, as data: a flat dict of real config keys. Constants, a domain per searched
        key, the seeds; a grid names its variants under ``variant`` (their overrides apply in TrialSpace.trial)."""
        spec = self.spec
        space = {**self.base, **{key: _domain(axis) for key, axis in spec.search.items()}}
        return {**space, **self.algorithm.tune_space(spec)}  # how each trial gets its seed (and a grid its variant)


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


def asha_max_t(base: dict, resolved=None) -> int:
    """ASHA's step cap: ``steps``, or with ``epochs`` set (which overrides steps) an upper bound of
    epochs x batches per epoch, so ASHA never cuts a trial the recipe would still train. ``resolved``: a planned
    trial's resolved config, whose task gives the training-set size (else ``base`` is resolved for it)."""
    if base.get("epochs") is None:
        return int(base.get("steps", TrainConfig().steps))  # budget.steps is folded in there
    n_train = base.get("n_train")
    if n_train is None:  # the task's default, when the task has a training-set size (from a planned trial's config)
        from rirlab.tasks import registry as tasks

        resolved = resolved if resolved is not None else resolve(base)  # (a planned trial's, when the caller has one)
        n_train = tasks.get(resolved.task).split_rows(resolved.task_cfg, "train")
    batch = int(base.get("batch_size", TrainConfig().batch_size))
    return int(base["epochs"]) * -(-int(n_train) // batch) if n_train else 10**9
