"""Which swept parameters the metric depends on: ``optuna.importance`` over a sweep's finished trial runs, for any
algorithm (grid and random sweeps too). The runs become an in-memory Optuna study, one trial per run
(``optuna.trial.create_trial`` + ``study.add_trial``): its swept values (seed left out: repeated seeds are repeated
trials of one configuration) under the spec's distributions, its final metric as the value.

Evaluators: Optuna's default, PED-ANOVA (conditional ``when:`` parameters included), fANOVA, or mean decrease
impurity (those two score only the parameters every trial has).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Optional

import pandas as pd

from rirlab import contract
from rirlab.errors import UserError
from rirlab.sweeps.spec.trials import VARIANT_KEY  # the swept key naming a grid trial's variant

EVALUATORS = ("ped-anova", "fanova", "mdi")
SEED = 0  # the tree-based evaluators' forests are seeded: the same runs give the same importances
FEW_CONFIGS = 20  # fewer distinct configurations than this: the footer says the ranking is a small sample's


@dataclasses.dataclass
class Importance:
    """Importances (normalised to sum 1, descending), and what they were computed over."""

    importances: dict[str, float]
    metric: str
    mode: str
    n_trials: int
    evaluator: str
    constant: list[str]  # swept parameters with one value among the finished runs: nothing to attribute
    n_configs: int = 0  # distinct configurations among those runs (seeds of one configuration are one)


def _categorical(value):
    """A value Optuna's CategoricalDistribution accepts (None, bool, int, float, str); anything else as text."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def distributions(spec, observed: dict[str, list]):
    """An Optuna distribution per swept parameter: the spec's axis (grid and choice: categorical over the listed
    values; uniform, loguniform, randint: their range), variants as a categorical over the variant names; a key
    the spec does not describe (an older run), categorical over the values observed."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out = {}
    axes = dict(spec.search) if spec is not None else {}
    for key, seen in observed.items():
        axis = axes.get(key)
        if key == VARIANT_KEY and spec is not None and spec.variants:
            out[key] = CategoricalDistribution([v.name for v in spec.variants])
        elif axis is not None and axis.kind in ("uniform", "loguniform"):
            lo, hi = axis.values
            out[key] = FloatDistribution(min(lo, *seen), max(hi, *seen), log=axis.kind == "loguniform")
        elif axis is not None and axis.kind == "randint":
            lo, hi = axis.values
            out[key] = IntDistribution(min(int(lo), *map(int, seen)), max(int(hi), *map(int, seen)))
        else:
            choices = list(axis.values) if axis is not None else []
            choices += [v for v in seen if v not in choices]
            out[key] = CategoricalDistribution([_categorical(c) for c in choices])
    return out


def study_of(runs: pd.DataFrame, spec, metric: str, mode: str):
    """(in-memory Optuna study of the finished, not early-stopped runs that report ``metric``, constant params)."""
    import optuna

    col = f"metric.{metric}"
    done = runs[(runs["status"] == "FINISHED") & ~runs["early_stopped"].astype(bool)] if len(runs) else runs
    if len(done) and col in done.columns:
        done = done[done[col].notna()]
    if len(done) == 0 or col not in done.columns:
        raise UserError(f"no finished trial run reports {metric}; pick another --metric (e.g. dev/accuracy) or run "
                        f"`rirlab sweep` to the end first")
    # one order whatever read the runs (a store's search order, an export file's): the seeded forests of fANOVA
    # and MDI depend on the order of their rows
    done = done.sort_values([c for c in ("start_time", "run_id") if c in done.columns], kind="stable")
    params = [{k: _categorical(v) for k, v in sw.items() if k != "seed"} for sw in done["swept"]]
    observed: dict[str, list] = {}
    for p in params:
        for k, v in p.items():
            if v not in observed.setdefault(k, []):
                observed[k].append(v)
    constant = [k for k, vals in observed.items() if len(vals) < 2]
    varied = {k: vals for k, vals in observed.items() if k not in constant}
    if not varied:
        raise UserError(f"the {len(done)} finished trial runs share one configuration (only the seed differs); an "
                        f"importance needs at least two values of a swept parameter")
    dists = distributions(spec, varied)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize" if mode == "max" else "minimize")
    for p, value in zip(params, done[col]):
        kept = {k: v for k, v in p.items() if k in dists}
        study.add_trial(optuna.trial.create_trial(params=kept, distributions={k: dists[k] for k in kept},
                                                  value=float(value)))
    return study, sorted(constant)


def evaluator_of(name: str):
    from optuna import importance

    if name == "fanova":
        return importance.FanovaImportanceEvaluator(seed=SEED)
    if name == "mdi":
        return importance.MeanDecreaseImpurityImportanceEvaluator(seed=SEED)
    return importance.PedAnovaImportanceEvaluator()


def param_importances(runs: pd.DataFrame, spec, metric: str, mode: str, evaluator: str = "ped-anova") -> Importance:
    """``optuna.importance.get_param_importances`` of the sweep's runs (see the module docstring)."""
    import optuna

    study, constant = study_of(runs, spec, metric, mode)
    try:
        imp = optuna.importance.get_param_importances(study, evaluator=evaluator_of(evaluator))
    except (ValueError, RuntimeError) as err:  # e.g. too few trials for the evaluator
        raise UserError(f"optuna.importance ({evaluator}) cannot rank {len(study.trials)} trials: {err}; run more "
                        f"trials, or try --evaluator fanova") from None
    configs = len({json.dumps(t.params, sort_keys=True, default=str) for t in study.trials})
    return Importance({k: float(v) for k, v in imp.items()}, metric, mode, len(study.trials), evaluator, constant,
                      configs)


def render(result: Importance, about: Optional[str] = None, fmt: str = "markdown") -> str:
    rows = [(k, v) for k, v in result.importances.items()]
    if fmt == "csv":
        return pd.DataFrame(rows, columns=["parameter", "importance"]).to_csv(index=False)
    lines = ["| parameter | importance |", "|:---|---:|"]
    lines += [f"| {k} | {v:.3f} |" if not math.isnan(v) else f"| {k} | — |" for k, v in rows]
    foot = about.splitlines() if about else []
    foot.append(f"optuna.importance ({result.evaluator}) of {contract.metric_named(result.metric)} ({result.mode}) "
                f"over {result.n_trials} finished trial runs (each seed a trial); importances sum to 1")
    if result.constant:
        foot.append("one value in every run (not ranked): " + ", ".join(result.constant))
    if result.n_configs < FEW_CONFIGS:
        foot.append(f"a small sample: {result.n_configs} distinct configuration{'s' * (result.n_configs != 1)}; "
                    f"importances from under {FEW_CONFIGS} change a lot with a few more trials: read the ranking as "
                    f"a hint, and rank again when the search has run longer")
    return "\n".join(lines) + "\n\n" + "\n".join(foot) + "\n"
