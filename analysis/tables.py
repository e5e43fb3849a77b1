"""Tables from a sweep's runs, in the papers' style: ``99.72 ± 0.10`` per cell, one column per split.

* ablation layout (RIR Table 5): one row per swept configuration (``analysis.layouts``), one
  column per evaluation split in the papers' order (as the sweep recorded them on its parent run;
  by name for an older sweep), optional "paper" rows with the published numbers and our difference
  (``analysis.references``);
* pivot layout: two swept axes (rows x columns) for one split's metric.

Each cell aggregates the final ``<split>/<metric>`` of FINISHED, not early-stopped trial runs over
seeds: centre = median or mean, std = population std (numpy's ``np.std``, ddof=0), n = seeds.
A cell with fewer seeds than the sweep asked for shows ``(n=2)``; failed runs are counted in the footer.
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Optional

import pandas as pd

from analysis import references as refs
from analysis.layouts import RowKey, ablation_rows, describe, signature
from analysis.stats import DEFAULT_STAT, centre as stat_centre
from rirlab import contract
from rirlab.errors import UserError

MINUS = "\u2212"


@dataclasses.dataclass
class Cell:
    centre: float
    std: float
    n: int


EMPTY = "—"  # a cell with no value


@dataclasses.dataclass
class Grid:
    """A rendered-ready table: header, body rows of strings, footer lines."""

    header: list[str]
    body: list[list[str]]
    footer: list[str]
    kinds: list[str] = dataclasses.field(default_factory=list)  # per body row: "ours" | "paper"


def aggregate(values: list[float], stat: str = DEFAULT_STAT) -> Optional[Cell]:
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return None
    s = pd.Series(vals, dtype=float)
    return Cell(float(stat_centre(s, stat)), float(s.std(ddof=0)) if len(s) > 1 else 0.0, len(s))


def fmt_num(x: float) -> str:
    return f"{x:.2f}"


def fmt_std(x: float) -> str:
    """Two decimals, as the centre beside it: 0.10, 0.04, 2.60, 14.00 (issue 33 item 10: ``57.23 ± 14`` read as a
    rounded or an integer std)."""
    return f"{x:.2f}"


def fmt_cell(cell: Optional[Cell], n_expected: int) -> str:
    """``centre ± std``; one run has no spread: ``centre (n=1)``."""
    if cell is None:
        return EMPTY
    if cell.n == 1:
        return f"{fmt_num(cell.centre)} (n=1)"
    text = f"{fmt_num(cell.centre)} ± {fmt_std(cell.std)}"
    return f"{text} (n={cell.n})" if n_expected and cell.n < n_expected else text


def fmt_diff(d: float) -> str:
    return ("+" if d >= 0 else MINUS) + f"{abs(d):.2f}"


def usable(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    return df[(df["status"] == "FINISHED") & ~df["early_stopped"].astype(bool)]


def metric_column(split: str, metric: str = "accuracy") -> str:
    return "metric." + contract.split_metric(split, metric)


def split_columns(df: pd.DataFrame, metric: str = "accuracy") -> list[str]:
    """Evaluation splits that have metrics, sorted by name (train/dev excluded); used when the sweep did
    not record its task's splits."""
    splits = {contract.split_of(c[len("metric."):], metric) for c in df.columns if c.startswith("metric.")}
    return sorted(s for s in splits if s and s not in contract.NON_EVAL_SPLITS)


def run_footer(df: pd.DataFrame, stat: str, n_expected: int) -> list[str]:
    if n_expected == 1:
        lines = ["one seed per configuration: no std (n=1)"]
    else:
        # n_expected is what the spec plans, not what ran: a cell with fewer runs carries its own (n=k)
        lines = [f"{stat} ± std over seeds" + (f" (the spec runs {n_expected} per configuration; a cell of fewer says n=)"
                                                if n_expected else "")]
    if df.empty:
        return lines + ["no runs recorded yet: cells stay empty until the sweep runs"]
    failed = df[df["status"] == "FAILED"]
    early = df[df["early_stopped"].astype(bool) & (df["status"] == "FINISHED")]
    other = df[~df["status"].isin(["FINISHED", "FAILED"])]
    lines.append(f"{len(usable(df))} finished runs; {len(failed)} failed; {len(early)} stopped early (not counted)"
                 + (f"; {len(other)} running/killed" if len(other) else ""))
    for _, r in failed.head(5).iterrows():
        reason = (r.get("failure_reason") or "no reason recorded").strip().splitlines()[-1][:120]
        lines.append(f"failed: {r['name']}: {reason}")
    return lines


def row_cells(done: pd.DataFrame, rows: list[RowKey], columns: list[str], stat: str, metric: str):
    """[(row, {split: Cell or None})]: each row's runs aggregated over seeds, split by split."""
    values: dict[str, dict[str, list]] = {r.sig: {c: [] for c in columns} for r in rows}
    for _, r in done.iterrows():
        bucket = values.get(signature(r["swept"]))
        for c in columns if bucket is not None else ():
            bucket[c].append(r.get(metric_column(c, metric)))
    return [(row, {c: aggregate(values[row.sig][c], stat) for c in columns}) for row in rows]


def run_configs(df: pd.DataFrame, rows: list[RowKey]) -> dict[str, dict]:
    """Each row's resolved config as its trial runs logged it (params), by row signature; rows without runs are
    absent. Params are the trial's whole flat config, so a key the model lacks is absent too."""
    if df.empty:
        return {}
    pcols = [c for c in df.columns if c.startswith("param.")]
    want = {r.sig for r in rows}
    out: dict[str, dict] = {}
    for _, r in df.iterrows():
        sig = signature(r["swept"])
        if sig in want and sig not in out:
            params = {c[len("param."):]: r[c] for c in pcols if isinstance(r[c], str)}
            if params:
                out[sig] = params
    return out


def our_configs(df: pd.DataFrame, rows: list[RowKey], tables: list, spec_model: Optional[str]) -> list[dict]:
    """What each row runs, to pair it with a published row: the resolved config its trial runs logged (params),
    over the spec's values, over the reference's defaults of its model (which stand in before any run)."""
    logged = run_configs(df, rows)
    out = []
    for row in rows:
        params = logged.get(row.sig, {})
        model = params.get("model") or row.config.get("model") or row.values.get("model") or spec_model
        out.append({**refs.defaults_of(tables, model), **row.config, **row.values, **params, "model": model})
    return out


def ablation(df: pd.DataFrame, spec=None, task: Optional[str] = None, stat: Optional[str] = None,
             metric: str = "accuracy", n_expected: int = 0, reference: Optional[str] = None,
             splits: Optional[list[tuple[str, str]]] = None, about: Optional[str] = None) -> Grid:
    """RIR-Table-5 layout: rows = configurations (spec order), columns = ``splits`` ((split, paper label)
    in the papers' order, as the sweep recorded them), else the splits the runs report, by name. With
    ``reference``, each row is followed by the published row that describes its configuration."""
    task = task or getattr(spec, "task", None)
    done = usable(df)
    labelled = list(splits or [])
    columns = [s for s, _ in labelled] or split_columns(done, metric)
    labels = dict(labelled)
    observed = list(df["swept"]) if len(df) else []
    rows = ablation_rows(spec, observed)
    ref_tables = refs.for_task(refs.load(reference), task, columns, labels) if reference else []
    if stat is None:  # compare like with like: the statistic the reference table reports (else the default)
        stats = {t.stat for t in ref_tables}
        stat = stats.pop() if len(stats) == 1 else DEFAULT_STAT
    for t in ref_tables:  # the paper's columns we do not evaluate (yet) still show
        for s, lbl in t.columns.items():
            if s not in columns and refs.norm(lbl) not in {refs.norm(v) for v in labels.values()}:
                columns.append(s)
                labels[s] = lbl
    pairing = refs.pair(ref_tables, our_configs(df, rows, ref_tables, getattr(spec, "model", None))) \
        if reference else None
    grid = Grid(["configuration", *(labels.get(c, c) for c in columns)], [], [])
    used = []
    for i, (row, cells) in enumerate(row_cells(done, rows, columns, stat, metric)):
        grid.body.append([row.label, *(fmt_cell(cells[c], n_expected) for c in columns)])
        grid.kinds.append("ours")
        paper = pairing.paper.get(i) if pairing else None
        if paper is None:
            continue
        used.append(paper.table)
        line = [f"paper: {paper.name}"]
        for c in columns:
            p = refs.cell_for(paper, c, labels.get(c), ref_tables)
            if p is None:
                line.append(EMPTY)
                continue
            text = fmt_num(p[0]) + (f" ± {fmt_std(p[1])}" if p[1] is not None else "")
            if cells[c] is not None:
                text += f" (Δ {fmt_diff(cells[c].centre - p[0])})"
            line.append(text)
        grid.body.append(line)
        grid.kinds.append("paper")
    if len(done):  # once runs exist, a split that no row of ours and no published row fills is not a column
        empty = [j for j in range(1, len(grid.header)) if all(row[j] == EMPTY for row in grid.body)]
        if empty:
            keep = [j for j in range(len(grid.header)) if j not in empty]
            grid.header = [grid.header[j] for j in keep]
            grid.body = [[row[j] for j in keep] for row in grid.body]
    grid.footer = (about.splitlines() if about else []) + run_footer(df, stat, n_expected)
    if pairing is not None:
        titles = [t.title for t in ref_tables if t.id in used] or [t.title for t in ref_tables]
        paper_stats = sorted({t.stat for t in ref_tables if t.id in used} or {t.stat for t in ref_tables})
        grid.footer.append("paper: " + "; ".join(titles) + f"; its cells are {' / '.join(paper_stats)}s over seeds, "
                           f"ours {stat}s; Δ = ours − paper; a row of ours is paired with the published row whose "
                           "model and configuration it runs")
        if pairing.ours_unpaired:
            grid.footer.append("rows of ours no published row describes: "
                               + "; ".join(rows[i].label for i in pairing.ours_unpaired))
        by_table: dict[str, list[str]] = {}
        for r in pairing.paper_unpaired:
            by_table.setdefault(r.table, []).append(r.name)
        for t in ref_tables:
            if t.id in by_table:
                grid.footer.append(f"published rows ({t.id}) with no row of ours: " + "; ".join(by_table[t.id]))
        for r, ix in pairing.shared:
            grid.footer.append(f"published row {r.name} fits several rows of ours ({'; '.join(rows[i].label for i in ix)}):"
                               f" they differ in a value it does not state")
    return grid


def pivot(df: pd.DataFrame, rows_key: str, cols_key: str, split: str, stat: str = DEFAULT_STAT,
          metric: str = "accuracy", n_expected: int = 0, where: Optional[dict] = None,
          about: Optional[str] = None) -> Grid:
    """Two swept axes for one split's metric, e.g. chunk size x beam width of ``test/accuracy``."""
    done = usable(df)
    where = where or {}
    groups: dict[tuple, dict[str, list]] = {}
    for _, r in done.iterrows():
        sw = r["swept"]
        if any(str(sw.get(k)) != str(v) for k, v in where.items()):
            continue
        if rows_key not in sw or cols_key not in sw:
            raise UserError(f"pivot axes must be swept parameters; this sweep swept {', '.join(k for k in sw if k != 'seed')}")
        key = (sw[rows_key], sw[cols_key])
        others = signature({k: v for k, v in sw.items() if k not in (rows_key, cols_key)})
        g = groups.setdefault(key, {})
        g.setdefault(others, []).append(r.get(metric_column(split, metric)))
    for key, g in groups.items():
        if len(g) > 1:
            raise UserError(f"the pivot cell {rows_key}={key[0]}, {cols_key}={key[1]} mixes configurations that differ "
                            f"in other swept parameters; fix them with --where KEY=VALUE")
    order = lambda vals: sorted(set(vals), key=lambda v: (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)))  # noqa: E731
    row_vals, col_vals = order(k[0] for k in groups), order(k[1] for k in groups)
    grid = Grid([f"{rows_key} / {cols_key}", *(describe(cols_key, c) for c in col_vals)], [], [])
    for rv in row_vals:
        cells = [aggregate(next(iter(groups[(rv, cv)].values())), stat) if (rv, cv) in groups else None for cv in col_vals]
        grid.body.append([describe(rows_key, rv), *(fmt_cell(c, n_expected) for c in cells)])
        grid.kinds.append("ours")
    grid.footer = (about.splitlines() if about else []) + [contract.split_metric(split, metric)] + run_footer(df, stat, n_expected)
    return grid


def render(grid: Grid, fmt: str = "markdown") -> str:
    if fmt == "csv":
        buf = io.StringIO()
        pd.DataFrame(grid.body, columns=grid.header).to_csv(buf, index=False)
        return buf.getvalue()
    if fmt == "latex":
        return render_latex(grid)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in grid.header) + " |",
             "|" + "|".join([":---", *("---:" for _ in grid.header[1:])]) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in grid.body]
    return "\n".join(lines) + "\n\n" + "\n".join(grid.footer) + "\n"


LATEX_SUBS = [("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
              ("±", r"$\pm$"), ("Δ", r"$\Delta$"), (MINUS, "$-$"), ("–", "--"), ("—", "---")]


def latex_escape(s: str) -> str:
    for a, b in LATEX_SUBS:
        s = s.replace(a, b)
    return s


def render_latex(grid: Grid) -> str:
    """booktabs tabular; paper rows in grey italics after ours."""
    lines = [r"\begin{tabular}{l" + "r" * (len(grid.header) - 1) + "}", r"\toprule",
             " & ".join(latex_escape(h) for h in grid.header) + r" \\", r"\midrule"]
    for row, kind in zip(grid.body, grid.kinds or ["ours"] * len(grid.body)):
        cells = [latex_escape(c) for c in row]
        if kind == "paper":
            cells = [r"\textit{" + c + "}" for c in cells]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"] + [f"% {latex_escape(f)}" for f in grid.footer]
    return "\n".join(lines) + "\n"


# Kept for callers of the walking skeleton's API.
def build_table(df: pd.DataFrame, stat: str = "mean", metric: str = "accuracy", n_expected: int = 0,
                split_order: Optional[list[str]] = None, spec=None) -> Grid:
    return ablation(df, spec=spec, stat=stat, metric=metric, n_expected=n_expected,
                    splits=[(s, s) for s in split_order or ()])


__all__ = ["Cell", "Grid", "RowKey", "aggregate", "ablation", "pivot", "render", "build_table"]
