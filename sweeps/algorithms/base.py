"""The interface of a search algorithm (``rirlab.sweeps.algorithms``): what the spec schema, the plan, the dry run, the
Tuner, the driver and the table layout ask of it. Its own module, apart from the registry: its defaults read the
spec's trial expansion (``rirlab.sweeps.spec.trials``), which the schema, and so the registry, sits below."""

from __future__ import annotations

from typing import Callable, Optional


class Algorithm:
    """What a search algorithm supplies. Subclass it in a module of this package and decorate with ``@register``.

    The defaults describe a search that samples ``num_samples`` configurations and runs each once per seed;
    an algorithm overrides what differs. ``spec`` arguments are ``rirlab.sweeps.spec.schema.Spec``, ``plan`` ones
    ``rirlab.sweeps.plan.plan.SweepPlan``, ``loaded`` ones ``rirlab.sweeps.spec.load.LoadedSpec`` (duck-typed here: this module
    is below all of them)."""

    name: str = ""  # the spec's ``algorithm:`` value
    section: Optional[type] = None  # a pydantic model: the spec's ``<name>:`` section of settings (None: no section)
    variants: bool = False  # whether the spec may have variants (rows of the table)
    multi_objective: bool = False  # whether several metrics may be searched at once
    uses_num_samples: bool = True  # whether ``num_samples`` means something (a grid runs every point instead)
    kinds: tuple[str, ...] = ("grid", "choice", "uniform", "loguniform", "randint")  # the axis kinds it can search
    planned: bool = True  # whether the trials are known before the sweep (False: the searcher chooses as it runs)
    warm_starts: bool = False  # whether --warm-start can seed it with earlier finished configurations
    spec_rows: bool = False  # whether a table lists the spec's configurations as rows (in spec order) before any ran
    # whether ``rirlab sweep --trial I`` can run one trial of it alone (one job per trial): its trials and points
    # are known before the sweep and are the same list, one point per trial (a grid; random runs each point once per
    # seed, Optuna chooses as it runs)
    one_trial_jobs: bool = False

    # ---- the spec (torch-free, Ray-free: rirlab.sweeps.spec)
    def problems(self, spec, given: set[str]) -> list[str]:
        """Spec-wide problems of this algorithm's own rules, one line each; called for every registered algorithm
        (``spec.algorithm`` may be another one: a section's settings may only be given under its own algorithm).
        ``given``: the spec fields the file or --set gave (empty for a recorded spec, which sets them all)."""
        if spec.algorithm == self.name:
            return []
        section = self.section_name
        if section and section in given and getattr(spec, section).model_fields_set:
            return [f"{section}: settings have no effect under algorithm: {spec.algorithm}; drop them or use "
                    f"algorithm: {self.name}"]
        return []

    @property
    def section_name(self) -> Optional[str]:
        """The spec key of this algorithm's section (its name), or None without a section."""
        return self.name if self.section is not None else None

    def trial_count(self, spec) -> int:
        """How many trials the spec asks for, counted without expanding anything (the max_trials check)."""
        return spec.num_samples * len(spec.seed_list)

    def points(self, spec) -> list[dict]:
        """The Tune configs of the swept keys the searcher hands out, decided on the driver ([]: the searcher
        chooses them as the sweep runs)."""
        return []

    def warm_points(self, spec, points: list[dict], warm) -> list[dict]:
        """The points (``points``) once --warm-start gave earlier finished configurations (``warm``:
        ``rirlab.sweeps.record.warm.WarmStart``, best first); an algorithm whose searcher takes them itself (Optuna's
        study) keeps its points."""
        return points

    def trials(self, spec, preview: bool = False, seed: int = 0) -> list:
        """The trials (``rirlab.contract.TrialRecord``) the sweep runs, in order; an unplanned search gives []
        unless ``preview`` (a local draw of the same size, what the dry run shows)."""
        from rirlab.sweeps.spec.schema import base_config
        from rirlab.sweeps.spec.trials import TrialSpace, random_points

        if not self.planned and not preview:
            return []
        space, base = TrialSpace.of(spec), base_config(spec)
        return [space.trial({**base, **p, "seed": s}) for p in random_points(spec, seed) for s in spec.seed_list]

    def describe(self, spec) -> str:
        """How the dry run's first line names the search: ``<n> trials ... by <this>``."""
        return self.name

    def check_loaded(self, loaded) -> None:
        """Checks of a loaded spec (after --quick / --set) before its trials are expanded: raise UserError, one line
        naming where (``loaded.where(...)``) and the fix."""

    def check_trials(self, loaded) -> None:
        """Checks once the trials are expanded and resolved (``loaded.trials``): raise UserError, one line."""

    # ---- the Tune side (rirlab.sweeps.plan, rirlab.sweeps.tune): imports of Ray / Optuna inside these methods only
    def tune_num_samples(self, spec, points: list) -> int:
        """Tune's ``num_samples``."""
        return spec.num_samples

    def tune_space(self, spec) -> dict:
        """This algorithm's entries of the Tune search space besides the searched keys' domains (the seed: how each
        trial gets its seed)."""
        from ray import tune

        return {"seed": tune.grid_search(spec.seed_list)}  # each configuration once per seed

    def tune_metric(self, spec) -> tuple[Optional[str], Optional[str]]:
        """(metric, mode) for Tune's TuneConfig (None, None: the searcher is given them itself)."""
        single = len(spec.metrics) == 1
        return (spec.metrics[0], spec.modes[0]) if single else (None, None)

    def tune_max_concurrent(self, spec) -> Optional[int]:
        """TuneConfig's max_concurrent_trials (None where the search algorithm limits the concurrency itself)."""
        return spec.max_concurrent

    def search_alg(self, plan, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None):
        """The Tune search algorithm: by default Tune's BasicVariantGenerator handing out ``plan.points``."""
        from ray.tune.search import BasicVariantGenerator

        return BasicVariantGenerator(points_to_evaluate=[dict(p) for p in plan.points],
                                     max_concurrent=plan.spec.max_concurrent or 0)

    def scheduler(self, search_alg):
        """A Tune scheduler the searcher needs (e.g. one that carries out its pruning), or None."""
        return None

    # ---- the driver
    def preflight(self, plan, tracking_uri: str, tune_path: str) -> None:
        """Checks before the parent run exists (e.g. a study storage that cannot serve): raise UserError."""

    def continued(self, spec, tracking_uri: Optional[str] = None) -> str:
        """A line saying what this sweep continues (e.g. ``study 'st' already holds 4 trials``), or ""."""
        return ""

    def dry_run_note(self, spec, store: Callable[[], str]) -> str:
        """A line the dry run prints after its table about what the sweep would continue or start (e.g. a named
        Optuna study), or "". ``store()`` gives the tracking URI (resolved on demand: it imports MLflow)."""
        return ""

    def run_linker(self) -> Optional[Callable[[str, str], dict]]:
        """A function (Tune trial id, MLflow run id) -> tags for the run, linking it with the searcher's own
        record of the trial; None when there is nothing to link."""
        return None
