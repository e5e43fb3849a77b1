"""``algorithm: grid`` (the default): every combination of the grid's values, per variant (row) and seed, in spec
order. The only algorithm with variants and evaluation-only rows: its trials are all known before the sweep, so a
table lists its configurations as rows before any has run."""

from __future__ import annotations

import math
from typing import Optional

from rirlab.sweeps.algorithms import register
from rirlab.sweeps.algorithms.base import Algorithm


@register
class Grid(Algorithm):
    name = "grid"
    variants = True
    uses_num_samples = False
    kinds = ("grid", "choice")
    spec_rows = True
    one_trial_jobs = True

    def problems(self, spec, given: set[str]) -> list[str]:
        if spec.algorithm == self.name and "num_samples" in given:
            return ["num_samples has no effect under algorithm: grid (every grid point runs once per seed); drop it "
                    "or use algorithm: random or optuna"]
        return []

    def trial_count(self, spec) -> int:
        """variants x grid x seeds: an upper bound (a grid value whose ``when:`` fails is run once)."""
        from rirlab.sweeps.spec.schema import len_seeds, training_variants

        return max(len(training_variants(spec)), 1) * math.prod(len(a.values) for a in spec.search.values()) * \
            len_seeds(spec)

    def points(self, spec) -> list[dict]:
        from rirlab.sweeps.spec.trials import grid_points

        return grid_points(spec)

    def trials(self, spec, preview: bool = False, seed: int = 0) -> list:
        from rirlab.sweeps.spec.schema import base_config
        from rirlab.sweeps.spec.trials import TrialSpace, grid_points

        space, base = TrialSpace.of(spec), base_config(spec)
        return [space.trial({**base, **point}) for point in grid_points(spec)]

    def check_trials(self, loaded) -> None:
        """A ``when:`` that holds in no trial would drop its axis silently."""
        from rirlab.errors import UserError

        for key, axis in loaded.spec.search.items():
            if axis.when and not any(key in t.swept for t in loaded.trials):
                raise UserError(f"{loaded.where('search', key, 'when')}: search.{key}.when: {axis.when} holds in no "
                                f"trial, so {key} would never be searched; fix the condition or drop the axis")

    def tune_num_samples(self, spec, points: list) -> int:
        return len(points)  # one per grid trial

    def tune_space(self, spec) -> dict:
        """Every trial is one of the points (the searcher): the domains only declare the keys."""
        from ray import tune

        from rirlab.sweeps.spec.schema import training_variants
        from rirlab.sweeps.spec.trials import VARIANT_KEY

        space = {}
        if spec.variants:  # (an evaluation-only row trains nothing: no trial of it is in the grid)
            space[VARIANT_KEY] = tune.choice([v.name for v in training_variants(spec)])
        space["seed"] = tune.choice(spec.seed_list)
        return space

    def tune_max_concurrent(self, spec) -> Optional[int]:
        return None  # the BasicVariantGenerator of the points limits it (search_alg)
