"""``rirlab sweep SPEC --warm-start EXPERIMENT``: a random or Optuna search that starts from the finished trials of
earlier sweeps recorded in MLflow instead of blind (Optuna's ``add_trial``/``enqueue_trial``, Ray Tune's
``points_to_evaluate``).

What is read: every finished trial run of the named experiments (all their sweeps; not stopped early, not failed,
not replaced by a later attempt), as a configuration of the current spec's searched keys (a key the earlier sweep
swept is read from its swept values, one it fixed from its params) and the seed mean of the spec's metrics over
the runs of that configuration. A configuration outside the current search space (a key missing, a value off its
choices or outside its bounds) is skipped and counted. The configurations are ordered best first by the first
metric, which is what a random search runs first (``rirlab.sweeps.algorithms.random``) and what an Optuna study is
told (``rirlab.sweeps.tune.optuna.warm_start``).

Why a command-line option and not a spec field: it names runs of one store, not a property of the experiment; the
spec hash (what --resume matches) stays that of the spec, and the parent run records the source in its
``rirlab.warm_start`` tag. Torch-free and Ray-free: the CLI reads it before the plan is used.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Optional

from rirlab import contract
from rirlab.errors import UserError, command
from rirlab.sweeps.spec.trials import swept_signature


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """Earlier finished configurations, best first: ``points[i]`` (searched key -> value), ``values[i]`` (the seed
    mean of each of the spec's metrics; None where a metric is missing) and ``runs[i]`` (their run ids)."""

    sources: tuple[str, ...]
    points: tuple[dict, ...] = ()
    values: tuple[Optional[tuple[float, ...]], ...] = ()
    runs: tuple[tuple[str, ...], ...] = ()
    skipped: int = 0  # configurations outside the current search space

    def line(self) -> str:
        """What the CLI prints before the sweep."""
        names = ", ".join(repr(s) for s in self.sources)
        skipped = f"; {self.skipped} outside this spec's search space skipped" if self.skipped else ""
        return f"warm start from {names}: {len(self.points)} finished configuration(s), best first{skipped}"

    def tag(self) -> str:
        """The parent run's ``rirlab.warm_start`` tag."""
        return json.dumps({"experiments": list(self.sources), "configurations": len(self.points),
                           "skipped": self.skipped})


def experiment_name(source: str) -> str:
    """An experiment name, or the ``name:`` of the spec file it names (a path ending in .yaml/.yml)."""
    if source.endswith((".yaml", ".yml")):
        import yaml

        path = Path(source)
        if not path.is_file():
            raise UserError(f"--warm-start {source}: no such spec file; give an earlier spec's file or its "
                            f"experiment name (`rirlab runs --experiment NAME` lists one)")
        name = (yaml.safe_load(path.read_text()) or {}).get("name")
        if not name:
            raise UserError(f"--warm-start {source}: the spec has no name: (its experiment's name); give the "
                            f"experiment's name instead")
        return str(name)
    return source


def in_space(axis, value) -> bool:
    """Whether ``value`` is a point of the spec's axis (its choices, or within its bounds)."""
    v = axis.values
    if axis.kind in ("grid", "choice"):  # (True == 1 in Python: a flag is no number here)
        return any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in v)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if axis.kind == "randint":
        return float(value).is_integer() and v[0] <= value <= v[1]
    return v[0] <= value <= v[1]


def _value(key: str, swept: dict, params: dict):
    if key in swept:
        return True, swept[key]
    if key in params:  # a param is the value's str(): 0.001, 1e-05, 8, True, rir_grc
        import yaml

        text = params[key]
        try:
            return True, json.loads(text)  # (numbers: YAML reads 1e-05 as a string)
        except ValueError:
            pass
        try:
            return True, yaml.safe_load(text)
        except yaml.YAMLError:
            return True, text
    return False, None


def read_warm_start(client, sources: list[str], spec) -> WarmStart:
    """The finished configurations of the experiments ``sources`` within ``spec``'s search space (module doc).
    An experiment not in the store is a one-line UserError."""
    names = tuple(dict.fromkeys(experiment_name(s) for s in sources))
    runs = []
    for name in names:
        exp = client.get_experiment_by_name(name)
        if exp is None or exp.lifecycle_stage == "deleted":
            raise UserError(f"--warm-start {name}: no experiment '{name}' in the tracking store; give the name of an "
                            f"earlier sweep's spec (`{command('rirlab', 'runs', '--experiment', name)}` lists its "
                            f"sweeps) or pass its store with --tracking-uri")
        found = client.search_runs([exp.experiment_id], filter_string="attributes.status = 'FINISHED'",
                                   max_results=50000, order_by=["attributes.start_time ASC"])
        runs += [r for r in contract.current_runs(found)
                 if r.data.tags.get(contract.PARENT_RUN_ID) and not contract.is_parent(r.data.tags)
                 and not r.data.tags.get(contract.EVALUATES) and r.data.tags.get(contract.EARLY_STOPPED) != contract.TRUE]
    groups: dict[str, dict] = {}
    outside: set[str] = set()
    for run in runs:
        swept, point = contract.swept_of(run.data.tags), {}
        for key, axis in spec.search.items():
            known, value = _value(key, swept, run.data.params)
            if not known or not in_space(axis, value):
                break
            point[key] = value
        else:
            group = groups.setdefault(swept_signature(point), {"point": point, "runs": [], "values": []})
            group["runs"].append(run.info.run_id)
            group["values"].append([run.data.metrics.get(m) for m in spec.metrics])
            continue
        outside.add(swept_signature({k: v for k, v in swept.items() if k not in ("seed", "variant")}))
    ordered = []
    for group in groups.values():
        means = []
        for i in range(len(spec.metrics)):
            seen = [v[i] for v in group["values"] if v[i] is not None and math.isfinite(v[i])]
            means.append(sum(seen) / len(seen) if seen else None)
        ordered.append((group, None if any(m is None for m in means) else tuple(means)))
    sign = -1.0 if spec.modes[0] == "max" else 1.0
    ordered.sort(key=lambda gv: (gv[1] is None, sign * gv[1][0] if gv[1] is not None else 0.0))
    return WarmStart(names, tuple(g["point"] for g, _ in ordered), tuple(v for _, v in ordered),
                     tuple(tuple(g["runs"]) for g, _ in ordered), len(outside))
