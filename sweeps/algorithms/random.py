"""``algorithm: random``: ``num_samples`` configurations drawn on the driver from an RNG seeded with 0 (so the dry run
shows exactly what runs), each run once per seed with identical values. Everything is the ``Algorithm`` defaults
but the points: Tune's BasicVariantGenerator hands out the drawn configurations, and the seed is a grid_search. ``--warm-start``
puts earlier sweeps' best finished configurations first (``warm_points``)."""

from __future__ import annotations

from rirlab.sweeps.algorithms import register
from rirlab.sweeps.algorithms.base import Algorithm


@register
class Random(Algorithm):
    name = "random"
    warm_starts = True

    def points(self, spec) -> list[dict]:
        from rirlab.sweeps.spec.trials import random_points

        return random_points(spec)

    def describe(self, spec) -> str:
        return f"random search ({spec.num_samples} configurations drawn here, each run per seed)"

    def warm_points(self, spec, points: list[dict], warm) -> list[dict]:
        """--warm-start: the earlier best configurations first (re-run under this spec, each per seed), then the
        random draws, ``num_samples`` in all: a search that starts from what worked instead of blind."""
        return [*(dict(p) for p in warm.points), *points][:spec.num_samples]
