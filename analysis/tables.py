"""Tables from a sweep's runs: one row per swept configuration, one column per evaluation split.

Cells aggregate the final accuracy over seeds: ``mean ± std`` (or median with
``stat="median"``) and the number of seeds n.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from typing import Optional

import pandas as pd

SKIP_SPLITS = ("train", "dev")


@dataclasses.dataclass
class Table:
    row_keys: list[str]  # swept parameters that name a row
    columns: list[str]  # evaluation splits
    rows: list[dict]  # {"label": {..}, "cells": {split: (center, std, n)}}
    stat: str
    n_expected: int
    failed: int

    def label(self, row: dict) -> str:
        return ",".join(f"{k}={row['label'][k]}" for k in self.row_keys) or "all"


def split_columns(df: pd.DataFrame, metric: str = "accuracy") -> list[str]:
    """Evaluation splits in the order their metrics appear (train/dev excluded)."""
    cols = []
    for c in df.columns:
        if c.startswith("metric.") and c.endswith(f"/{metric}"):
            split = c[len("metric."):-len(metric) - 1]
            if split not in SKIP_SPLITS and split not in cols:
                cols.append(split)
    return cols


def aggregate(values: list[float], stat: str) -> tuple[float, float, int]:
    s = pd.Series(values, dtype=float)
    center = s.median() if stat == "median" else s.mean()
    std = s.std(ddof=0) if len(s) > 1 else 0.0
    return float(center), float(std), len(s)


def build_table(df: pd.DataFrame, stat: str = "mean", metric: str = "accuracy", n_expected: int = 0,
                split_order: Optional[list[str]] = None) -> Table:
    done = df[(df["status"] == "FINISHED") & ~df["early_stopped"]] if len(df) else df
    failed = int((df["status"] == "FAILED").sum()) if len(df) else 0
    columns = split_order or split_columns(done, metric)
    row_keys: list[str] = []
    for sw in done["swept"] if len(done) else []:
        for k in sw:
            if k != "seed" and k not in row_keys:
                row_keys.append(k)
    groups: dict[str, dict] = {}
    for _, r in done.iterrows():
        label = {k: r["swept"].get(k) for k in row_keys}
        key = json.dumps(label, sort_keys=True, default=str)
        g = groups.setdefault(key, {"label": label, "values": {c: [] for c in columns}})
        for c in columns:
            v = r.get(f"metric.{c}/{metric}")
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                g["values"][c].append(v)
    rows = [{"label": g["label"], "cells": {c: aggregate(v, stat) if v else None for c, v in g["values"].items()}}
            for g in groups.values()]
    rows.sort(key=lambda r: tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))
                                  for v in r["label"].values()))
    return Table(row_keys, columns, rows, stat, n_expected, failed)


def fmt_cell(cell, n_expected: int) -> str:
    if cell is None:
        return "—"
    center, std, n = cell
    text = f"{center:.2f} ± {std:.2f}"
    return f"{text} (n={n})" if n_expected and n != n_expected else f"{text}"


def render(table: Table, fmt: str = "markdown") -> str:
    header = ["config", *table.columns, "n"]
    body = []
    for row in table.rows:
        ns = [c[2] for c in row["cells"].values() if c]
        body.append([table.label(row), *(fmt_cell(row["cells"][c], table.n_expected) for c in table.columns),
                     str(max(ns) if ns else 0)])
    foot = f"{table.stat} ± std over seeds; {len(table.rows)} configurations; {table.failed} failed runs"
    if fmt == "csv":
        buf = io.StringIO()
        pd.DataFrame(body, columns=header).to_csv(buf, index=False)
        return buf.getvalue()
    if fmt == "latex":
        esc = lambda s: s.replace("_", r"\_").replace("±", r"$\pm$").replace("—", "--")  # noqa: E731
        lines = [r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}", r"\toprule",
                 " & ".join(esc(h) for h in header) + r" \\", r"\midrule"]
        lines += [" & ".join(esc(c) for c in r) + r" \\" for r in body]
        lines += [r"\bottomrule", r"\end{tabular}", f"% {foot}"]
        return "\n".join(lines) + "\n"
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + f"\n\n{foot}\n"
