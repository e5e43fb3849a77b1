"""Loading a sweep spec for a run: the file's schema (``rirlab.sweeps.spec.schema``), then --quick and --set, then
the trials expanded (``rirlab.sweeps.spec.trials``) and every trial config validated against the library's config
dataclasses. This is the one expansion and the one resolution of the trials on the driver: the result
(``LoadedSpec.trials`` / ``.resolved``) is what ``rirlab.sweeps.plan.SweepPlan`` hands to every later stage.

Everything is validated before Ray or MLflow is touched: unknown keys name file:line and the closest
valid key, values out of range name the rule.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from rirlab import contract
from rirlab.trial import TrialConfig, resolve
from rirlab.errors import UserError, command
from rirlab.redact import mask_url, redact_all, redact_uri
from rirlab.sweeps import algorithms
from rirlab.sweeps.spec.trials import VARIANT_KEY, evaluations, expand
from rirlab.sweeps.spec.schema import (SECTIONS, Spec, _union_member, base_config, closest, distinct_errors, parse_spec)


class LoadedSpec:
    """A validated spec plus where it came from (for file:line errors, the artifact and the hash)."""

    def __init__(self, spec: Spec, path: Path, text: str, lines: dict, quick: bool, overrides: dict):
        self.spec, self.path, self.text, self.lines = spec, path, text, lines
        self.quick, self.overrides = quick, overrides
        self.imported: dict[str, str] = {}  # path -> content digest of each imported split the trials read
        # the trials (grid: what runs; random: the drawn configurations x seeds; optuna: a local preview) and
        # each one's resolved config, filled by validate_params
        self.trials: list = []
        self.resolved: list[TrialConfig] = []
        # the cells of evaluation-only rows (``evaluates:``: rirlab.sweeps.spec.trials.Evaluation), each one's config resolved
        self.evaluations: list = []
        self.evaluated: list[TrialConfig] = []

    @property
    def hash(self) -> str:
        """Hash of the effective spec (file content + --quick + --set) and of the content of every imported split
        its trials read (re-importing a changed file makes another sweep), 12 hex digits."""
        dump = self.spec.model_dump(mode="json")
        # newer fields, an algorithm's section among them (optuna:, any registered later): left unset they keep the
        # hash of earlier sweeps
        for field in ("max_trials", *algorithms.sections()):
            if field not in self.spec.model_fields_set:
                dump.pop(field)
        # how trials run, not what they compute: in the spec or by --set, set or not, the same sweep (--resume)
        for field in HOW_TRIALS_RUN:
            dump.pop(field)
        overrides = {k: v for k, v in self.overrides.items() if k not in HOW_TRIALS_RUN}
        for variant in dump["variants"]:  # likewise a training row's evaluates: (None) and trains: (True)
            if variant.get("evaluates") is None:
                variant.pop("evaluates", None)
            if variant.get("trains", True):
                variant.pop("trains", None)
        blob = json.dumps({"spec": dump, "quick": self.quick,
                           "overrides": overrides, **({"imported": self.imported} if self.imported else {})},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def where(self, *keypath) -> str:
        for n in range(len(keypath), 0, -1):
            if keypath[:n] in self.lines:
                return f"{self.path}:{self.lines[keypath[:n]]}"
        return str(self.path)


SPEC_FIELDS = ("seeds", "num_samples", "max_concurrent", "algorithm", "metric", "mode", "checkpoint_every",
               "max_failures", "max_trials", "reuse_workers", "keep_checkpoints",
               "description")  # spec-level fields --set may replace
HOW_TRIALS_RUN = ("reuse_workers", "keep_checkpoints")  # not what they compute: no part of the spec's hash


def spec_sections() -> dict:
    """Spec sections --set may change a field of (--set resources.cpu=2 or --set resources={cpu: 2}): the fixed
    ones and every registered algorithm's (--set optuna.sampler=random)."""
    return {**SECTIONS, **algorithms.sections()}

NOT_OVERRIDABLE = ("name", "fixed", "search", "variants", "quick")  # structure: edit the spec file


def load_spec(path, quick: bool = False, overrides: Optional[dict] = None) -> LoadedSpec:
    """Read, apply --quick and --set, validate the schema AND every trial config. Raises UserError."""
    path = Path(path)
    spec, lines = parse_spec(path)
    overrides = dict(overrides or {})
    if quick:
        if spec.quick is None:
            raise UserError(f"{path} has no quick: block, so --quick would run the full protocol; add a quick: block "
                            f"(e.g. quick: {{fixed: {{steps: 200}}, seeds: 1}}) or drop --quick")
        spec = _revalidate(spec, _quick_update(spec, path, lines), f"{path}: quick:")
    if overrides:
        spec = _revalidate(spec, _override_update(spec, overrides), "--set")
    loaded = LoadedSpec(spec, path, path.read_text(encoding="utf-8"), lines, quick, overrides)
    _check_lengths(loaded)
    validate_params(loaded)
    return loaded


def _check_lengths(loaded: LoadedSpec) -> None:
    """Texts the sweep's parent run records as MLflow tags (the description as its note, the --set values) within
    MLflow's limit, checked before anything starts: MLflow would cut or refuse them once the parent exists."""
    limit = contract.MAX_TAG_VALUE
    description = loaded.spec.description.strip()
    if len(description) > limit:
        where = "--set description" if "description" in loaded.overrides else loaded.where("description")
        raise UserError(f"{where}: {len(description):,} characters, more than the {limit:,} MLflow keeps in a run's "
                        f"note; shorten it (a longer text belongs in a file beside the spec)")
    recorded = json.dumps(redact_all(loaded.overrides), default=str)  # as the parent run's tag records them
    if len(recorded) > limit:
        raise UserError(f"--set: the values take {len(recorded):,} characters, more than the {limit:,} MLflow keeps "
                        f"in the tag that records them; put the long ones in the spec")


def _revalidate(spec: Spec, update: dict, where: str) -> Spec:
    """The spec with ``update`` applied, validated again as a whole (counts, limits, algorithm rules)."""
    data = spec.model_dump(exclude_unset=True)
    data.update(update)
    try:
        return Spec.model_validate(data)
    except ValidationError as err:
        raise UserError("\n".join(line for e in distinct_errors(err) for line in _revalidate_lines(e, where))) from None


def _revalidate_lines(e: dict, where: str) -> list[str]:
    """One pydantic error of a --quick/--set update as lines (the spec-wide checks give several, a line each)."""
    loc = [str(p) for p in e["loc"] if not _union_member(p)]
    key = ".".join(loc) or "spec"
    if e["type"] == "extra_forbidden":
        section = spec_sections().get(loc[0])
        valid = list(section.model_fields) if section else []
        return [f"{where} {key}: unknown key '{loc[-1]}'{closest(loc[-1], valid)}"
                f"{'; ' + loc[0] + ' has ' + ', '.join(valid) if valid else ''}"]
    got = e.get("input")
    return [f"{where} {key}: {msg}{'' if isinstance(got, (dict, list)) else f' (got {got!r})'}"
            for msg in e["msg"].removeprefix("Value error, ").split("\n")]


def _quick_update(spec: Spec, path: Path, lines: dict) -> dict:
    q = spec.quick
    upd: dict[str, Any] = {"fixed": {**spec.fixed, **q.fixed}}
    for field in ("search", "seeds", "num_samples", "budget", "max_concurrent"):
        if getattr(q, field) is not None:
            upd[field] = getattr(q, field)
    if q.variants is not None:
        known = {v.name for v in spec.variants}
        missing = [n for n in q.variants if n not in known]
        if missing:
            raise UserError(f"{path}:{lines.get(('quick', 'variants'), '?')}: quick.variants names unknown variant "
                            f"'{missing[0]}'{closest(missing[0], known)}")
        upd["variants"] = [v for v in spec.variants if v.name in q.variants]
    return {k: (v.model_dump(exclude_unset=True) if hasattr(v, "model_dump") else
                {a: x.model_dump(exclude_unset=True) for a, x in v.items()} if k == "search" else
                [x.model_dump(exclude_unset=True) for x in v] if k == "variants" else v) for k, v in upd.items()}


def _override_update(spec: Spec, overrides: dict) -> dict:
    """--set: a spec-level field (seeds, num_samples, algorithm, resources.cpu, ...) replaces it; ``seed=N`` runs
    seed N only; ``variant=NAME`` (or ``variant=[A,B]``) runs those variants (rows) only; any other key fixes a config value and replaces a searched axis of that name. An override that
    could not take effect is refused."""
    upd: dict[str, Any] = {}
    fixed = dict(spec.fixed)
    search = dict(spec.search)
    for key, value in overrides.items():
        head, _, sub = key.partition(".")
        if key in NOT_OVERRIDABLE or head in NOT_OVERRIDABLE:
            raise UserError(f"--set {key}: the spec's {head} cannot be replaced from the command line; edit the spec "
                            f"(or --set one of its config keys, e.g. --set hidden_size=64)")
        if key == "seed":
            if "seeds" in overrides:
                raise UserError("--set seed and --set seeds both given; keep one (seed=N runs seed N only)")
            upd["seeds"] = [value] if not isinstance(value, list) else value
        elif key == VARIANT_KEY:  # variant=NAME (or a list): run those rows of the spec only
            names = [str(v) for v in (value if isinstance(value, list) else [value])]
            known = [v.name for v in spec.variants]
            if not known:
                raise UserError(f"--set {key}: the spec has no variants: to choose from; drop --set {key}")
            missing = [n for n in names if n not in known]
            if missing:
                raise UserError(f"--set {key}: no variant named '{missing[0]}'{closest(missing[0], known)}; the spec's "
                                f"variants are {', '.join(known)}")
            # the row an evaluation-only row evaluates stays in the spec (its config), but trains only when named too:
            # --set variant='+RIR inference' tests the weights of trials trained before (rirlab.sweeps.driver.evaluations)
            sources = {v.evaluates for v in spec.variants if v.name in names and v.evaluates}
            upd["variants"] = [v.model_dump(exclude_unset=True) | ({} if v.name in names else {"trains": False})
                               for v in spec.variants if v.name in names or v.name in sources]
        elif key in SPEC_FIELDS:
            upd[key] = value
        elif head in spec_sections():
            current = getattr(spec, head).model_dump(exclude_unset=True)
            if not sub:
                if not isinstance(value, dict):
                    raise UserError(f"--set {key}: give a mapping, e.g. --set '{head}={{...}}', or one field: "
                                    f"--set {head}.FIELD=VALUE")
                upd[head] = {**current, **value}
            else:
                upd[head] = {**upd.get(head, current), sub: value}
        elif key in ("steps", "epochs") and getattr(spec.budget, key) is not None:
            upd["budget"] = {**upd.get("budget", spec.budget.model_dump(exclude_unset=True)), key: value}
        else:
            setters = [v.name for v in spec.variants if key in v.set]
            if setters:
                raise UserError(f"--set {key}: variant '{setters[0]}' sets {key} itself, so the override would not reach "
                                f"its trials; edit the variant in the spec instead")
            fixed[key] = value
            search.pop(key, None)
    epochs = spec.budget.epochs if spec.budget.epochs is not None else spec.fixed.get("epochs")
    if "steps" in overrides and "epochs" not in overrides and epochs is not None:
        raise UserError(f"--set steps: the spec sets epochs: {epochs}, which overrides steps; --set epochs=N "
                        f"instead (or add --set epochs=null to train by steps)")
    if fixed != spec.fixed:
        upd["fixed"] = fixed
        upd["search"] = {k: a.model_dump(exclude_unset=True) for k, a in search.items()}
    return upd


def _key_location(loaded: LoadedSpec, key: str) -> str:
    if key in loaded.overrides:
        return f"--set {key}"
    for section in (("fixed",), ("search",), ("quick", "fixed"), ("quick", "search")):
        if (*section, key) in loaded.lines:
            return loaded.where(*section, key)
    for i, _ in enumerate(loaded.spec.variants):
        if ("variants", i, "set", key) in loaded.lines:
            return loaded.where("variants", i, "set", key)
    return str(loaded.path)


def validate_params(loaded: LoadedSpec) -> None:
    """Resolve every trial config (grid) or the bounds of every axis (random/optuna) against the dataclasses;
    then the checks a dataclass cannot make: ``when:`` keys, counts given as true/false, the metric."""
    from rirlab.tasks import registry as tasks

    spec = loaded.spec
    _check_when_keys(loaded)
    algorithm = algorithms.get(spec.algorithm)
    algorithm.check_loaded(loaded)  # (optuna: a storage URL no database driver takes, before any trial is resolved)
    trials = loaded.trials = expand(spec, sample_random=True)
    loaded.resolved = []
    reported: Optional[set] = None
    for trial in trials:
        resolved = _resolved(loaded, trial.config)
        loaded.resolved.append(resolved)
        flat = resolved.flat()
        for key, value in trial.config.items():  # pydantic takes true as 1 for an int field: not in a spec
            if isinstance(value, bool) and key in flat and not isinstance(flat[key], bool):
                raise UserError(f"{_key_location(loaded, key)}: {key}: {value!r} is not a number; give an integer")
        mine = set(contract.reported_metrics(tasks.get(resolved.task).eval_split_names(resolved.task_cfg)))
        reported = mine if reported is None else reported & mine
    loaded.evaluations = evaluations(spec)  # an evaluation-only row's settings (e.g. an inference mode) checked too
    loaded.evaluated = [_resolved(loaded, ev.record.config) for ev in loaded.evaluations]
    check_memory(loaded, _one_per_model(loaded.resolved))
    for metric in spec.metrics if reported is not None else ():
        if metric not in reported and not metric.startswith(contract.TRAIN_PREFIX):
            near = closest(metric, reported)
            raise UserError(f"{loaded.where('metric')}: metric '{metric}' is not reported by every trial, so the "
                            f"search and the scheduler would never see it{near}; trials report "
                            f"{', '.join(sorted(m for m in reported if '/' in m))}")
    algorithm.check_trials(loaded)


def _resolved(loaded: LoadedSpec, config: dict) -> TrialConfig:
    """A trial config resolved (and its imported splits' digests noted); a bad key or value: one line at its place."""
    try:
        resolved = resolve(config, where="spec")
        loaded.imported.update(imported_digests(resolved))
    except UserError as err:
        where = _key_location(loaded, err.key) if err.key else str(loaded.path)
        raise UserError(str(err).replace("spec:", f"{where}:", 1), key=err.key) from None
    return resolved


MEMORY_ENV = "RIRLAB_MEMORY_GB"  # memory of one trial's device where it is not this machine's (a cluster's nodes)
BYTES_PER_PARAM = 16  # fp32 weights, their gradients and two Adam moments


def _one_per_model(resolved: list) -> list:
    """One resolved config per distinct model/task/train config (the seeds aside)."""
    seen: dict = {}
    for r in resolved:
        key = json.dumps({k: v for k, v in r.flat().items() if k != "seed"}, sort_keys=True, default=str)
        seen.setdefault(key, r)
    return list(seen.values())


def memory_estimate_gb(resolved) -> float:
    """A lower bound on one trial's memory (GB): its parameters with gradients and Adam state (the model built on
    the meta device: nothing allocated), plus one fp32 state (and its gradient) per sequence x token x the entry's
    memory_width (hidden x beam) for a training batch of the task's longest training sequences. Real use is higher."""
    import torch

    from rirlab.models import registry as models
    from rirlab.tasks import registry as tasks
    from rirlab.tasks.base import TaskInfo

    cfg = resolved.model_cfg
    try:
        with torch.device("meta"):
            model = models.get(resolved.model).build(cfg, TaskInfo(16, 10, tasks.get(resolved.task).kind))
        params = sum(p.numel() for p in model.parameters())
    except Exception:  # a builder that needs a real device: count the states only
        params = 0
    width = models.get(resolved.model).memory_width(cfg)  # fp32 values per token: the model entry's hook
    length = tasks.get(resolved.task).max_train_len(resolved.task_cfg)
    states = resolved.train.batch_size * length * width * 4 * 2
    return (params * BYTES_PER_PARAM + states) / 2**30


def check_memory(loaded: LoadedSpec, resolved: list) -> None:
    """Refuse a trial whose memory lower bound exceeds one device (this machine's RAM, its GPU memory for a spec
    that asks for GPUs, or $RIRLAB_MEMORY_GB); warn on stderr above half of it."""
    import os
    import sys

    if not resolved:
        return
    env = os.environ.get(MEMORY_ENV, "").strip()
    if env:
        try:
            limit, what = float(env), f"${MEMORY_ENV}"
        except ValueError:
            raise UserError(f"${MEMORY_ENV}={env!r} is not a number of GB") from None
    else:
        from rirlab.limits import memory_limit_gb

        limit, what = memory_limit_gb(gpu=loaded.spec.resources.gpu > 0)  # a container's cgroup limit counts
    worst = max(resolved, key=memory_estimate_gb)
    need = memory_estimate_gb(worst)
    sizes = ", ".join(f"{k}={getattr(worst.model_cfg, k)}" for k in ("hidden_size", "beam_size")
                      if hasattr(worst.model_cfg, k))
    if need > limit:
        cfg = worst.model_cfg  # name the size that is furthest above its usual value (beam ~5, hidden ~128)
        key = max((k for k in ("beam_size", "hidden_size") if hasattr(cfg, k)),
                  key=lambda k: (k in loaded.overrides, getattr(cfg, k) / (5 if k == "beam_size" else 128)),
                  default="hidden_size")
        raise UserError(f"{_key_location(loaded, key)}: a trial of {worst.model} ({sizes}, batch_size="
                        f"{worst.train.batch_size}) needs at least {need:,.1f} GB, more than {what} ({limit:,.1f} GB); "
                        f"lower {key} or batch_size (on bigger nodes set ${MEMORY_ENV})")
    if need > limit / 2:
        print(f"warning: a trial of {worst.model} ({sizes}) needs at least {need:,.1f} GB of the {limit:,.1f} GB of "
              f"{what}", file=sys.stderr)


def _check_when_keys(loaded: LoadedSpec) -> None:
    """A ``when:`` key that no trial sets never holds: the axis would be dropped silently."""
    spec = loaded.spec
    known = set(base_config(spec)) | set(spec.search) | {k for v in spec.variants for k in v.set}
    known |= {VARIANT_KEY} if spec.variants else set()
    for key, axis in spec.search.items():
        for name in (axis.when or {}):
            if name not in known:
                raise UserError(f"{loaded.where('search', key, 'when', name)}: search.{key}.when names '{name}', "
                                f"which no trial sets{closest(name, known)}; its condition could never hold and "
                                f"{key} would never be searched: set {name} in fixed/search/variants or fix the name")


def imported_digests(resolved) -> dict[str, str]:
    """Path -> content digest of each imported split a resolved trial config reads (from its Parquet footer
    only); UserError naming the import command when one was never imported."""
    from rirlab.tasks import cache
    from rirlab.tasks import registry as tasks

    task, cfg = tasks.get(resolved.task), resolved.task_cfg
    records = [cache.imported_record(resolved.task, split, task.cache_dir(cfg)) for split in task.imported_splits(cfg)]
    empty = next((r for r in records if not r.get("rows")), None)
    if empty is not None:  # imported before `data import` refused empty files
        raise UserError(f"the imported {resolved.task} split '{empty.get('split', '?')}' ({empty['path']}) has no "
                        f"examples; import a file with examples ({command('rirlab', 'data', 'import', resolved.task)} "
                        f"FILE --split {shlex.quote(empty.get('split', 'SPLIT'))})")
    return {r["path"]: r["digest"] for r in records}
