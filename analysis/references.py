"""The papers' published numbers (``analysis/references/<name>.yaml``), to print beside ours.

A reference file holds tables; each table has ``columns`` (our split name -> paper label) and rows. A
published row says which configuration it describes: ``model`` (our registry name) and ``config`` (the
values that differ from that model's defaults, as the paper states them); ``defaults`` (per file, or per
table to override) holds the paper's settings of the keys the rows vary, per model, so every row's full
configuration is ``defaults[model] | config``. A row of ours is paired with a published row when it runs
the same model with every one of those values (read from the trial runs' logged params, the resolved
config), never by position or display name. ``--reference rir`` picks the tables of ``rir.yaml`` for our
task; ``--reference rir:table5`` one table.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Optional

import yaml

from rirlab.config import closest
from rirlab.errors import UserError

REF_DIR = Path(__file__).parent / "references"
MISSING = object()


@dataclasses.dataclass
class RefRow:
    name: str  # the paper's row label
    model: Optional[str]  # our registry name of the model (None: no model of ours runs it)
    config: dict[str, Any]  # the configuration it describes: the model's defaults updated with the row's values
    cells: dict[str, tuple[float, Optional[float]]]  # split -> (centre, std or None)
    table: str
    stated: int = 0  # how many values the row itself gives (beyond the defaults): the more specific row wins


@dataclasses.dataclass
class RefTable:
    id: str
    title: str
    task: Optional[str]
    stat: str
    columns: dict[str, str]  # split -> paper label
    rows: list[RefRow]
    defaults: dict[str, dict] = dataclasses.field(default_factory=dict)  # model -> its defaults (the file's)
    seeds: Optional[int] = None  # runs behind each published cell (None: not stated; its cells are not tested)


def norm(name: str) -> str:
    """Loose key for column labels: dashes unified, case, parentheses and extra spaces ignored."""
    s = re.sub(r"[\u2010-\u2015\u2212]", "-", str(name)).casefold()
    s = re.sub(r"[()*]", " ", s)
    return " ".join(s.split())


def available() -> list[str]:
    return sorted(p.stem for p in REF_DIR.glob("*.yaml"))


def _mapping(value, what: str, path: Path) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{path.name}: {what} must be a mapping (key: value), got {value!r}")
    return value


def load(name: str) -> list[RefTable]:
    """All tables of reference file NAME (``rir``, ``ebt``, ``halt``); ``NAME:TABLE`` keeps one."""
    base, _, only = name.partition(":")
    path = REF_DIR / f"{base}.yaml"
    if not path.is_file():
        raise UserError(f"unknown reference '{base}'{closest(base, available())}; known: {', '.join(available())}")
    data = yaml.safe_load(path.read_text()) or {}
    file_defaults = _mapping(data.get("defaults"), "defaults", path)
    tables = []
    for tid, t in (data.get("tables") or {}).items():
        cols = {str(k): str(v) for k, v in t["columns"].items()}
        defaults = {**file_defaults, **_mapping(t.get("defaults"), f"{tid}.defaults", path)}
        rows = []
        for r in t.get("rows", []):
            vals = r.get("values") or []
            if len(vals) != len(cols):
                raise UserError(f"{path.name}: {tid} row {r['name']!r} has {len(vals)} values for {len(cols)} "
                                f"columns; give one per column (null where the paper has none)")
            if "match" in r:
                raise UserError(f"{path.name}: {tid} row {r['name']!r} uses 'match:' (names); rows are paired by "
                                f"'model:' and 'config:' now")
            cells = {}
            for split, v in zip(cols, vals):
                if v is None:
                    continue
                centre, std = (v[0], v[1]) if isinstance(v, list) else (v, None)
                cells[split] = (float(centre), None if std is None else float(std))
            model = r.get("model")
            own = _mapping(r.get("config"), f"{tid} row {r['name']!r} config", path)
            config = {**_mapping(defaults.get(model), f"defaults.{model}", path), **own}
            rows.append(RefRow(str(r["name"]), None if model is None else str(model), config, cells, tid, len(own)))
        tables.append(RefTable(tid, t.get("title", tid), t.get("task"), t.get("stat", "median"), cols, rows,
                               {str(m): dict(v or {}) for m, v in file_defaults.items()}, t.get("seeds")))
    if only:
        keep = [t for t in tables if t.id == only]
        if not keep:
            ids = [t.id for t in tables]
            raise UserError(f"reference '{base}' has no table '{only}'{closest(only, ids)}; tables: {', '.join(ids)}")
        return keep
    return tables


def defaults_of(tables: list[RefTable], model: Optional[str]) -> dict:
    """The file's ``defaults`` of MODEL (equal to our model's defaults: a test holds them equal). They stand in
    for our resolved config where no trial run logged one yet (a table before its sweep)."""
    return next((dict(t.defaults[str(model)]) for t in tables if str(model) in t.defaults), {})


def for_task(tables: list[RefTable], task: Optional[str], splits: list[str], labels: dict[str, str]) -> list[RefTable]:
    """Tables of our task (or, when none says so, whose columns overlap our splits)."""
    picked = [t for t in tables if task and t.task == task]
    if not picked:
        ours = set(splits) | {norm(v) for v in labels.values()}
        picked = [t for t in tables if any(s in ours or norm(lbl) in ours for s, lbl in t.columns.items())]
    if not picked:
        raise UserError(f"no table of this reference covers task '{task}'; tables: "
                        + ", ".join(f"{t.id} ({t.task})" for t in tables))
    return picked


# ---------------------------------------------------------------- pairing by configuration

def same_value(ours, theirs) -> bool:
    """Our value (a logged param string or a spec value) equals the paper row's value."""
    if ours is MISSING:
        return False
    if theirs is None or ours is None:
        return str(ours) in ("None", "null", "") if theirs is None else False
    if isinstance(theirs, bool):
        return str(ours).casefold() == str(theirs).casefold()
    if isinstance(theirs, (int, float)):
        try:
            return math.isclose(float(ours), float(theirs), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return str(ours) == str(theirs)


def fits(row: RefRow, config: dict) -> bool:
    """Our configuration (flat, with ``model``) runs the published row's model with all its values."""
    if row.model is None or str(config.get("model")) != row.model:
        return False
    return all(same_value(config.get(k, MISSING), v) for k, v in row.config.items())


@dataclasses.dataclass
class Pairing:
    """Which published row each of our rows gets, and what stays unpaired on either side."""

    paper: dict[int, RefRow]  # index of our row -> its published row
    ours_unpaired: list[int]  # our rows no published row describes
    paper_unpaired: list[RefRow]  # published rows no row of ours runs
    shared: list[tuple[RefRow, list[int]]]  # a published row several of ours fit (it does not state what differs)


def pair(tables: list[RefTable], configs: list[dict]) -> Pairing:
    """Pair each of our configurations with the most specific published row it fits (the first table's on a
    tie). A published row is covered when any of ours fits it, even if an earlier table's row is shown."""
    paper: dict[int, RefRow] = {}
    covered: set[int] = set()
    for i, cfg in enumerate(configs):
        best = None
        for t in tables:
            for r in t.rows:
                if fits(r, cfg):
                    covered.add(id(r))
                    if best is None or r.stated > best.stated:
                        best = r
        if best is not None:
            paper[i] = best
    users: dict[int, list[int]] = {}
    for i, r in paper.items():
        users.setdefault(id(r), []).append(i)
    shared = [(paper[ix[0]], ix) for ix in users.values() if len(ix) > 1]
    return Pairing(paper, [i for i in range(len(configs)) if i not in paper],
                   [r for t in tables for r in t.rows if id(r) not in covered], shared)


def cell_for(row: RefRow, split: str, paper_label: Optional[str], tables: list[RefTable]):
    """The paper's (centre, std) for our split; a reference column matches by split name or label."""
    if split in row.cells:
        return row.cells[split]
    table = next(t for t in tables if t.id == row.table)
    for s, lbl in table.columns.items():
        if paper_label and norm(lbl) == norm(paper_label) and s in row.cells:
            return row.cells[s]
    return None
