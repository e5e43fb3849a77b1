"""Loading a sweep spec for a run: the file's schema (``sweeps.specfile``), then --quick and --set, then
every trial config validated against the library's config dataclasses.

Everything is validated before Ray or MLflow is touched: unknown keys name file:line and the closest
valid key, values out of range name the rule.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Optional

from rirlab.config import resolve
from rirlab.errors import UserError
from sweeps.specfile import Spec, closest, expand, parse_spec


class LoadedSpec:
    """A validated spec plus where it came from (for file:line errors, the artifact and the hash)."""

    def __init__(self, spec: Spec, path: Path, text: str, lines: dict, quick: bool, overrides: dict):
        self.spec, self.path, self.text, self.lines = spec, path, text, lines
        self.quick, self.overrides = quick, overrides
        self.imported: dict[str, str] = {}  # path -> content digest of each imported split the trials read

    @property
    def hash(self) -> str:
        """Hash of the effective spec (file content + --quick + --set) and of the content of every imported split
        its trials read (re-importing a changed file makes another sweep), 12 hex digits."""
        blob = json.dumps({"spec": self.spec.model_dump(mode="json"), "quick": self.quick,
                           "overrides": self.overrides, **({"imported": self.imported} if self.imported else {})},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def where(self, *keypath) -> str:
        for n in range(len(keypath), 0, -1):
            if keypath[:n] in self.lines:
                return f"{self.path}:{self.lines[keypath[:n]]}"
        return str(self.path)


def load_spec(path, quick: bool = False, overrides: Optional[dict] = None) -> LoadedSpec:
    """Read, apply --quick and --set, validate the schema AND every trial config. Raises UserError."""
    path = Path(path)
    spec, lines = parse_spec(path)
    overrides = dict(overrides or {})
    if quick and spec.quick is not None:
        q = spec.quick
        upd: dict[str, Any] = {"fixed": {**spec.fixed, **q.fixed}}
        if q.search is not None:
            upd["search"] = q.search
        if q.seeds is not None:
            upd["seeds"] = q.seeds
        if q.num_samples is not None:
            upd["num_samples"] = q.num_samples
        if q.budget is not None:
            upd["budget"] = q.budget
        if q.max_concurrent is not None:
            upd["max_concurrent"] = q.max_concurrent
        if q.variants is not None:
            known = {v.name for v in spec.variants}
            missing = [n for n in q.variants if n not in known]
            if missing:
                raise UserError(f"{path}:{lines.get(('quick', 'variants'), '?')}: quick.variants names unknown variant '{missing[0]}'"
                                f"{closest(missing[0], known)}")
            upd["variants"] = [v for v in spec.variants if v.name in q.variants]
        spec = spec.model_copy(update=upd)
    if overrides:
        # --set fixes a value: it replaces any search axis of the same name
        spec = spec.model_copy(update={"fixed": {**spec.fixed, **overrides},
                                       "search": {k: a for k, a in spec.search.items() if k not in overrides}})
    loaded = LoadedSpec(spec, path, path.read_text(), lines, quick, overrides)
    validate_params(loaded)
    return loaded


def _key_location(loaded: LoadedSpec, key: str) -> str:
    for section in (("fixed",), ("search",), ("quick", "fixed"), ("quick", "search")):
        if (*section, key) in loaded.lines:
            return loaded.where(*section, key)
    for i, _ in enumerate(loaded.spec.variants):
        if ("variants", i, "set", key) in loaded.lines:
            return loaded.where("variants", i, "set", key)
    if key in loaded.overrides:
        return f"--set {key}"
    return str(loaded.path)


def validate_params(loaded: LoadedSpec) -> None:
    """Resolve every trial config (grid) or the bounds of every axis (random/optuna) against the dataclasses."""
    spec = loaded.spec
    for trial in expand(spec, sample_random=True):
        try:
            resolved = resolve(trial.config, where="spec")
            loaded.imported.update(imported_digests(resolved))
        except UserError as err:
            msg = str(err)
            m = re.search(r"unknown parameter '([^']+)'|: ([A-Za-z_0-9]+)=", msg)
            key = next((g for g in (m.groups() if m else ()) if g), None)
            where = _key_location(loaded, key) if key else str(loaded.path)
            raise UserError(msg.replace("spec:", f"{where}:", 1)) from None


def imported_digests(resolved) -> dict[str, str]:
    """Path -> content digest of each imported split a resolved trial config reads (from its Parquet footer
    only); UserError naming the import command when one was never imported."""
    from rirlab.tasks import cache

    cfg = resolved.task_cfg
    records = [cache.imported_record(resolved.task, split, getattr(cfg, "cache_dir", None))
               for split in getattr(cfg, "imported", None) or ()]
    return {r["path"]: r["digest"] for r in records}
