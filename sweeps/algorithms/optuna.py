"""``algorithm: optuna``: each configuration comes from a persistent Optuna study (``optuna:`` section) as the
sweep runs, and runs once per seed; Optuna is told the seed mean of each metric. The only multi-objective
algorithm, and the only one with a pruner. The searcher itself (Optuna's public ask/tell behind one Ray Tune
Searcher) and the study's storage are in ``rirlab.sweeps.tune.optuna``; this module says what the rest of the sweep needs
of them."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from rirlab.sweeps.algorithms import register
from rirlab.sweeps.algorithms.base import Algorithm

SAMPLERS = ("tpe", "random", "qmc", "gp", "nsgaii")  # Optuna samplers a spec may name (optuna.sampler)
PRUNERS = ("none", "median", "hyperband", "successive_halving")  # Optuna pruners (optuna.pruner)


class OptunaSection(BaseModel):
    """The Optuna study of ``algorithm: optuna``: persistent, so optuna-dashboard and Optuna's parameter
    importances read it. ``storage`` is an Optuna storage URL (default: a SQLite file beside the MLflow store
    when that is SQLite, else in the sweep's output directory); ``study_name`` defaults to the sweep's folder
    name ``<spec>-<hash>-<time>``. ``pruner``: Optuna's pruner judges the metric each evaluation reports (of a
    configuration's first seed) and a pruned configuration stops on every seed (rirlab.sweeps.tune.optuna.OptunaPruning);
    single-metric only, instead of ``scheduler: asha``."""

    model_config = ConfigDict(extra="forbid")

    study_name: Optional[str] = Field(None, min_length=1)
    storage: Optional[str] = Field(None, min_length=1)
    sampler: Literal[SAMPLERS] = "tpe"
    pruner: Literal[PRUNERS] = "none"


@register
class Optuna(Algorithm):
    name = "optuna"
    section = OptunaSection
    multi_objective = True
    planned = False  # Optuna chooses each configuration as the sweep runs: the dry run shows a local preview
    warm_starts = True  # --warm-start: the study is told earlier finished results (rirlab.sweeps.tune.optuna)

    def problems(self, spec, given: set[str]) -> list[str]:
        problems = []
        if spec.optuna.pruner != "none" and (spec.algorithm != self.name or len(spec.metrics) > 1
                                             or spec.scheduler.type != "fifo"):
            problems.append("optuna.pruner needs algorithm: optuna, a single metric and scheduler fifo (it stops the "
                            "trials itself)")
        return problems + super().problems(spec, given)  # (its settings under another algorithm)

    def describe(self, spec) -> str:
        return (f"Optuna ({spec.num_samples} suggestions, each run per seed; the values below are a preview, "
                f"Optuna chooses the real ones)")

    def check_loaded(self, loaded) -> None:
        """optuna.storage must be a database URL SQLAlchemy can load a driver for (checked without connecting)."""
        url = loaded.spec.optuna.storage
        if not url:
            return
        from sqlalchemy.engine import make_url

        from rirlab.errors import UserError
        from rirlab.redact import mask_url, redact_uri

        shown = mask_url(url)  # and its password known from now on: masked in the spec's recorded text as well
        try:
            make_url(url).get_dialect()
        except Exception as err:
            where = "--set optuna.storage" if "optuna.storage" in loaded.overrides or "optuna" in loaded.overrides \
                else loaded.where("optuna", "storage")
            raise UserError(f"{where}: {shown!r} is not a database URL Optuna can use "
                            f"({redact_uri(str(err).splitlines()[0])}); "
                            f"e.g. sqlite:///optuna.db or postgresql://user@host/db") from None

    # ---- Tune
    def tune_num_samples(self, spec, points: list) -> int:
        return spec.num_samples * len(spec.seed_list)  # each suggestion once per seed (the searcher groups them)

    def tune_space(self, spec) -> dict:
        return {"seed": spec.seed_list[0]}  # the searcher's repeat index picks the seed of each repeat

    def tune_metric(self, spec):
        return None, None  # the searcher is given the metrics and modes itself

    def search_alg(self, plan, tracking_uri: Optional[str] = None, tune_path: Optional[str] = None):
        from rirlab.sweeps.tune.optuna import search_alg

        return search_alg(plan, tracking_uri, tune_path)

    def scheduler(self, search_alg):
        from rirlab.sweeps.tune.optuna import pruning_scheduler

        return pruning_scheduler(search_alg)

    # ---- the driver
    def preflight(self, plan, tracking_uri: str, tune_path: str) -> None:
        from rirlab.sweeps.tune.optuna import check_storage

        check_storage(plan.spec, tracking_uri, tune_path)

    def continued(self, spec, tracking_uri: Optional[str] = None) -> str:
        from rirlab.sweeps.tune.optuna import study_before

        return study_before(spec, tracking_uri)

    def dry_run_note(self, spec, store) -> str:
        if not spec.optuna.study_name:
            return ""
        before = self.continued(spec, store())
        return (f"continues the Optuna study: its {before}; these trials add to them (`rirlab tables` reads every "
                f"sweep of the study as one)" if before else
                f"a new Optuna study '{spec.optuna.study_name}' (later sweeps naming it continue it)")

    def run_linker(self):
        from rirlab.sweeps.tune.optuna import link_run

        return link_run
