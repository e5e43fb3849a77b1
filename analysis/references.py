"""The papers' published numbers (``analysis/references/<name>.yaml``), to print beside ours.

A reference file holds tables; each table has ``columns`` (our split name -> paper label) and rows
with ``values`` (one per column: number, [centre, std] or null). ``--reference rir`` picks the
tables of ``rir.yaml`` for our task; ``--reference rir:table5`` one table.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Optional

import yaml

from sweeps.schema import UserError, closest

REF_DIR = Path(__file__).parent / "references"


@dataclasses.dataclass
class RefRow:
    name: str  # the paper's row label
    model: Optional[str]
    match: list[str]
    cells: dict[str, tuple[float, Optional[float]]]  # split -> (centre, std or None)
    table: str


@dataclasses.dataclass
class RefTable:
    id: str
    title: str
    task: Optional[str]
    stat: str
    columns: dict[str, str]  # split -> paper label
    rows: list[RefRow]


def norm(name: str) -> str:
    """Loose key for matching row names: dashes unified, case, parentheses and extra spaces ignored."""
    s = re.sub(r"[\u2010-\u2015\u2212]", "-", str(name)).casefold()
    s = re.sub(r"[()*]", " ", s)
    return " ".join(s.split())


def available() -> list[str]:
    return sorted(p.stem for p in REF_DIR.glob("*.yaml"))


def load(name: str) -> list[RefTable]:
    """All tables of reference file NAME (``rir``, ``ebt``, ``halt``); ``NAME:TABLE`` keeps one."""
    base, _, only = name.partition(":")
    path = REF_DIR / f"{base}.yaml"
    if not path.is_file():
        raise UserError(f"unknown reference '{base}'{closest(base, available())}; known: {', '.join(available())}")
    data = yaml.safe_load(path.read_text())
    tables = []
    for tid, t in (data.get("tables") or {}).items():
        cols = {str(k): str(v) for k, v in t["columns"].items()}
        rows = []
        for r in t.get("rows", []):
            vals = r.get("values") or []
            if len(vals) != len(cols):
                raise ValueError(f"{path}: {tid} row {r['name']!r} has {len(vals)} values for {len(cols)} columns")
            cells = {}
            for split, v in zip(cols, vals):
                if v is None:
                    continue
                centre, std = (v[0], v[1]) if isinstance(v, list) else (v, None)
                cells[split] = (float(centre), None if std is None else float(std))
            rows.append(RefRow(str(r["name"]), r.get("model"), [str(m) for m in r.get("match", [])], cells, tid))
        tables.append(RefTable(tid, t.get("title", tid), t.get("task"), t.get("stat", "median"), cols, rows))
    if only:
        keep = [t for t in tables if t.id == only]
        if not keep:
            ids = [t.id for t in tables]
            raise UserError(f"reference '{base}' has no table '{only}'{closest(only, ids)}; tables: {', '.join(ids)}")
        return keep
    return tables


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


def find_row(tables: list[RefTable], label: str, model: Optional[str], is_base: bool) -> Optional[RefRow]:
    """The paper row for one of our rows: by its name (or a ``match`` alias), else the base row by model."""
    key = norm(label)
    for t in tables:
        for r in t.rows:
            if key == norm(r.name) or key in (norm(m) for m in r.match):
                return r
    if is_base and model:
        for t in tables:
            for r in t.rows:
                if r.model == model:
                    return r
    return None


def cell_for(row: RefRow, split: str, paper_label: Optional[str], tables: list[RefTable]):
    """The paper's (centre, std) for our split; a reference column matches by split name or label."""
    if split in row.cells:
        return row.cells[split]
    table = next(t for t in tables if t.id == row.table)
    for s, lbl in table.columns.items():
        if paper_label and norm(lbl) == norm(paper_label) and s in row.cells:
            return row.cells[s]
    return None
