"""Tables from a sweep's runs, in the papers' style: ``99.72 ± 0.10`` per cell, one column per split.

* ablation layout (RIR Table 5): one row per swept configuration (``rirlab.analysis.layouts``), one
  column per evaluation split in the papers' order (as the sweep recorded them on its parent run;
  by name for an older sweep), optional "paper" rows with the published numbers and our difference
  (``rirlab.analysis.references``);
* pivot layout: two swept axes (rows x columns) for one split's metric.

Each cell aggregates the final ``<split>/<metric>`` of FINISHED, not early-stopped trial runs over
seeds (``rirlab.analysis.stats``): centre = median or mean, ± the sample std (ddof 1), and a 95% interval that counts
the seeds and the test split's sampling error (N = ``<split>/examples``), ``81.67 ± 9.06 [58.74, 104.60]``.
A cell with fewer seeds than the sweep asked for shows ``(n=2)``; failed runs are counted in the footer. With a
reference, each published cell carries its test (``Δ +5.88; p 0.42, consistent``); ``compare_to`` adds each
row's difference from a base row of ours. CSV: one line per cell, one column per quantity.
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from typing import Optional

import pandas as pd

from rirlab.analysis import references as refs
from rirlab.analysis import stats as S
from rirlab.analysis.layouts import RowKey, ablation_rows, describe, signature
from rirlab.analysis.stats import DEFAULT_CI, DEFAULT_STAT, Summary
from rirlab import contract
from rirlab.errors import UserError

MINUS = "\u2212"
Cell = Summary  # a table cell (the walking skeleton's name)
EMPTY = "—"  # a cell with no value


@dataclasses.dataclass
class Grid:
    """A rendered-ready table: header, body rows of strings, footer lines; ``records``: every cell's quantities
    (one dict a cell: the CSV's lines)."""

    header: list[str]
    body: list[list[str]]
    footer: list[str]
    kinds: list[str] = dataclasses.field(default_factory=list)  # per body row: "ours" | "paper" | "difference"
    records: list[dict] = dataclasses.field(default_factory=list)
    # (row label, column header) -> {seed: value}: the values a cell of ours aggregates (`rirlab plot splits`)
    seeds: dict = dataclasses.field(default_factory=dict)
    stat: str = ""  # the statistic over seeds of the cells of ours (ablation: the reference table's, by default)


def present(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def aggregate(values: list[float], stat: str = DEFAULT_STAT, examples: Optional[int] = None,
              ci: str = DEFAULT_CI) -> Optional[Summary]:
    return S.summarise([float(v) for v in values if present(v)], stat, examples, ci)


def fmt_num(x: float) -> str:
    return f"{x:.2f}"


def fmt_std(x: float) -> str:
    """Two decimals, as the centre beside it: 0.10, 0.04, 2.60, 14.00 (issue 33 item 10: ``57.23 ± 14`` read as a
    rounded or an integer std)."""
    return f"{x:.2f}"


def fmt_signed(x: float) -> str:
    return (MINUS if x < 0 else "") + fmt_num(abs(x))


def fmt_interval(low: Optional[float], high: Optional[float]) -> str:
    return "" if low is None else f" [{fmt_signed(low)}, {fmt_signed(high)}]"


def fmt_cell(cell: Optional[Summary], n_expected: int) -> str:
    """``centre ± sd [low, high]``; one run has no spread: ``centre [low, high] (n=1)`` (the split's interval)."""
    if cell is None:
        return EMPTY
    interval = fmt_interval(cell.low, cell.high)
    if cell.n == 1:
        return f"{fmt_num(cell.centre)}{interval} (n=1)"
    text = f"{fmt_num(cell.centre)} ± {fmt_std(cell.sd)}{interval}"
    return f"{text} (n={cell.n})" if n_expected and cell.n < n_expected else text


def fmt_diff(d: float) -> str:
    return ("+" if d >= 0 else MINUS) + f"{abs(d):.2f}"


def fmt_p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p {p:.3f}" if p < 0.01 else f"p {p:.2f}"


def usable(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    return df[(df["status"] == "FINISHED") & ~df["early_stopped"].astype(bool)]


def records(df: pd.DataFrame) -> list[dict]:
    """The runs of ``df`` as one dict each (column -> value, NaN where a run lacks a column): what the tables read run
    by run, without a pandas Series built per run (``iterrows``: most of `rirlab tables` at 1,000 runs)."""
    return df.to_dict("records") if len(df) else []


def metric_column(split: str, metric: str = "accuracy") -> str:
    return "metric." + contract.split_metric(split, metric)


def split_columns(df: pd.DataFrame, metric: str = "accuracy") -> list[str]:
    """Evaluation splits that have metrics, sorted by name (train/dev excluded); used when the sweep did
    not record its task's splits."""
    splits = {contract.split_of(c[len("metric."):], metric) for c in df.columns if c.startswith("metric.")}
    return sorted(s for s in splits if s and s not in contract.NON_EVAL_SPLITS)


INTERVALS = {
    "t": "95% interval of the mean: Student t over the n seeds (n − 1 df) of √(sd²/n + se²)",
    "bootstrap": f"95% interval: percentile bootstrap of the {{stat}} over the seeds ({S.RESAMPLES:,} resamples, "
                 f"a fixed seed), each resample shifted by a normal draw of se",
}


def interval_footer(stat: str, ci: str, cells: list[tuple[str, Summary]], derived: set, labels: dict,
                    metric: str = "accuracy") -> list[str]:
    """What a cell's ± and [interval] are, and each column's N (the test examples behind se)."""
    head = f"{stat} ± sample std (ddof 1) over seeds [{INTERVALS[ci].format(stat=stat)}"
    if metric != "accuracy":  # a binomial error is an accuracy's
        return [head.replace(" of √(sd²/n + se²)", " of √(sd²/n)").replace(
            ", each resample shifted by a normal draw of se", "") + "; one seed: none]"]
    lines = [head + "; se = the test split's binomial standard error √(p(1 − p)/N) at the mean, the same examples "
             "for every seed; one seed: mean ± 1.96 se]"]
    sizes: dict[str, set] = {}
    for col, cell in cells:
        sizes.setdefault(col, set()).add(cell.examples)
    known = [f"{labels.get(c, c)}: " + " / ".join(f"{n:,}" for n in sorted(v - {None})) for c, v in sizes.items()
             if v - {None}]
    if known:
        lines.append("N, test examples a cell's accuracy is computed on: " + "; ".join(known)
                     + (" (derived from the trial config, runs recorded before `<split>/examples`)" if derived else ""))
    unknown = [labels.get(c, c) for c, v in sizes.items() if None in v]
    if unknown:
        lines.append("N not recorded (" + ", ".join(unknown) + "): those intervals count the seeds alone")
    return lines


def run_footer(df: pd.DataFrame, stat: str, n_expected: int) -> list[str]:
    lines = [f"the spec runs {n_expected} seed{'s' if n_expected > 1 else ''} per configuration; a cell of fewer "
             "says n="] if n_expected else []
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


def run_seed(r) -> str:
    """A run's seed (its swept value, else its logged config's), to pair rows by seed."""
    swept = r["swept"] if isinstance(r["swept"], dict) else {}
    seed = swept.get("seed", r.get("param.seed"))
    return str(r["run_id"]) if seed is None else str(seed)


def run_examples(r, split: str, derived: set) -> Optional[int]:
    """N of a run's split: its logged ``<split>/examples``, else derived from its logged config (noted in
    ``derived``), else None."""
    v = r.get(metric_column(split, contract.EXAMPLES))
    if present(v):
        return int(v)
    params = {k[len("param."):]: x for k, x in r.items() if k.startswith("param.") and isinstance(x, str)}
    n = S.derived_examples(params, split)
    if n is not None:
        derived.add(split)
    return n


@dataclasses.dataclass
class RowCells:
    """One row of ours: a Summary per column, and its values per seed (to pair it with another row)."""

    row: RowKey
    cells: dict[str, Optional[Summary]]
    by_seed: dict[str, dict[str, float]]


def row_cells(done: pd.DataFrame, rows: list[RowKey], columns: list[str], stat: str, metric: str,
              ci: str = DEFAULT_CI, derived: Optional[set] = None) -> list[RowCells]:
    """Each row's runs aggregated over seeds, split by split (N read or derived per run: ``derived`` collects the
    splits whose N came from the config)."""
    derived = set() if derived is None else derived
    values: dict[str, dict[str, dict]] = {r.sig: {c: {} for c in columns} for r in rows}
    sizes: dict[str, dict[str, list]] = {r.sig: {c: [] for c in columns} for r in rows}
    for r in records(done):
        sig = signature(r["swept"])
        for c in columns if sig in values else ():
            v = r.get(metric_column(c, metric))
            if present(v):
                seed = run_seed(r)
                values[sig][c][seed if seed not in values[sig][c] else f"{seed}/{r['run_id']}"] = float(v)  # a rerun
                sizes[sig][c].append(run_examples(r, c, derived) if metric == "accuracy" else None)
    out = []
    for row in rows:
        cells = {}
        for c in columns:
            ns = sizes[row.sig][c]
            n_examples = min(ns) if ns and None not in ns else None
            cells[c] = aggregate(list(values[row.sig][c].values()), stat, n_examples, ci)
        out.append(RowCells(row, cells, values[row.sig]))
    return out


def run_configs(df: pd.DataFrame, rows: list[RowKey]) -> dict[str, dict]:
    """Each row's resolved config as its trial runs logged it (params), by row signature; rows without runs are
    absent. Params are the trial's whole flat config, so a key the model lacks is absent too."""
    if df.empty:
        return {}
    pcols = [c for c in df.columns if c.startswith("param.")]
    want = {r.sig for r in rows}
    out: dict[str, dict] = {}
    for r in records(df):
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


def paper_cell(row: RowCells, paper, c: str, labels: dict, tables: list):
    """(published (centre, std) or None, our Summary, Test or the reason there is none) of one column."""
    p = refs.cell_for(paper, c, labels.get(c), tables)
    ours = row.cells[c]
    if p is None or ours is None:
        return p, ours, None
    seeds = next(t.seeds for t in tables if t.id == paper.table)
    return p, ours, S.against_paper(ours, p[0], p[1], seeds)


def fmt_paper(p, ours: Optional[Summary], test) -> str:
    """``75.79 ± 6.10 (Δ +5.88; p 0.42, consistent)``; untested: ``(Δ +1.15; untested: no std published)``."""
    if p is None:
        return EMPTY
    text = fmt_num(p[0]) + (f" ± {fmt_std(p[1])}" if p[1] is not None else "")
    if ours is None:
        return text
    if isinstance(test, S.Test):
        p_shown = test.p if test.p_adjusted is None else test.p_adjusted
        return f"{text} (Δ {fmt_diff(ours.centre - p[0])}; {fmt_p(p_shown)}, {test.verdict()})"
    return f"{text} (Δ {fmt_diff(ours.centre - p[0])}; untested: {test})"


def fmt_difference(test) -> str:
    """A row's difference from the base row: ``+1.20 [−0.50, 2.90] (paired, p 0.12)``."""
    if test is None:
        return EMPTY
    if isinstance(test, float):  # one seed on a side: the difference alone
        return f"{fmt_diff(test)} (n=1)"
    low, high = test.interval()
    return f"{fmt_diff(test.diff)}{fmt_interval(low, high)} ({test.method}, {fmt_p(test.p)})"


def cell_record(kind: str, label: str, split: str, column: str, cell: Optional[Summary] = None, **extra) -> dict:
    """A CSV line: one column per quantity."""
    rec = {"configuration": label, "kind": kind, "split": split, "column": column}
    if cell is not None:
        rec.update({"n": cell.n, "centre": cell.centre, "mean": cell.mean, "sd": cell.sd, "examples": cell.examples,
                    "split_se": cell.split_se, "ci_low": cell.low, "ci_high": cell.high, "ci": cell.method})
    for k, v in extra.items():
        if isinstance(v, S.Test):
            low, high = v.interval()
            rec.update({"diff": v.diff, "diff_se": v.se, "diff_low": low, "diff_high": high, "df": v.df,
                        "t": v.stat, "p": v.p, "p_adjusted": v.p_adjusted, "test": v.method})
            if kind == "paper":
                rec["verdict"] = v.verdict()
        elif isinstance(v, str) and k == "test":
            rec["verdict"] = f"untested: {v}"
        elif v is not None:
            rec[k] = v
    return rec


def find_row(rows: list[RowKey], label: str) -> int:
    norm = lambda x: " ".join(refs.norm(x).replace("−", "-").split())  # noqa: E731
    hits = [i for i, r in enumerate(rows) if norm(r.label) == norm(label)]
    if not hits:
        raise UserError(f"--compare-to {label!r}: no row of this table is named so; rows: "
                        + "; ".join(r.label for r in rows))
    return hits[0]


def ablation(df: pd.DataFrame, spec=None, task: Optional[str] = None, stat: Optional[str] = None,
             metric: str = "accuracy", n_expected: int = 0, reference: Optional[str] = None,
             splits: Optional[list[tuple[str, str]]] = None, about: Optional[str] = None, ci: str = DEFAULT_CI,
             correction: str = "none", compare_to: Optional[str] = None) -> Grid:
    """RIR-Table-5 layout: rows = configurations (spec order), columns = ``splits`` ((split, paper label)
    in the papers' order, as the sweep recorded them), else the splits the runs report, by name. With
    ``reference``, each row is followed by the published row that describes its configuration, each cell with its
    test (``correction``: ``holm`` over the table's tests); with ``compare_to`` (a row's label), each other row by
    its difference from that row."""
    task = task or getattr(spec, "task", None)
    done = usable(df)
    labelled = list(splits or [])
    columns = [s for s, _ in labelled] or split_columns(done, metric)
    labels = dict(labelled)
    observed = list(df["swept"]) if len(df) else []
    rows = ablation_rows(spec, observed)
    base = find_row(rows, compare_to) if compare_to else None
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
    derived: set = set()
    ours = row_cells(done, rows, columns, stat, metric, ci, derived)
    tests = {(i, c): paper_cell(rc, pairing.paper[i], c, labels, ref_tables)
             for i, rc in enumerate(ours) if pairing and i in pairing.paper for c in columns}
    done_tests = [t for _, _, t in tests.values() if isinstance(t, S.Test)]
    if correction == "holm" and done_tests:
        for t, adjusted in zip(done_tests, S.holm([t.p for t in done_tests])):
            t.p_adjusted = adjusted
    objectives = objective_columns(spec)  # a multi-objective search's own metrics, after the splits
    pad = [EMPTY] * len(objectives)
    grid = Grid(["configuration", *(labels.get(c, c) for c in columns), *objectives], [], [], stat=stat)
    used = []
    for i, rc in enumerate(ours):
        mine = done[[signature(s) == rc.row.sig for s in done["swept"]]] if objectives and len(done) else done
        own = [fmt_cell(aggregate(list(mine.get(f"metric.{m}", [])), stat), n_expected) for m in objectives]
        grid.body.append([rc.row.label, *(fmt_cell(rc.cells[c], n_expected) for c in columns), *own])
        grid.kinds.append("ours")
        grid.records += [cell_record("ours", rc.row.label, c, labels.get(c, c), rc.cells[c]) for c in columns]
        grid.seeds.update({(rc.row.label, labels.get(c, c)): dict(rc.by_seed[c]) for c in columns if rc.by_seed[c]})
        if base is not None and i != base:
            diffs = {c: difference(rc, ours[base], c) for c in columns}
            name = f"{rc.row.label} {MINUS} {rows[base].label}"
            grid.body.append([name, *(fmt_difference(diffs[c]) for c in columns), *pad])
            grid.kinds.append("difference")
            grid.records += [cell_record("difference", name, c, labels.get(c, c),
                                         **({"diff": diffs[c]} if isinstance(diffs[c], float) else {"test": diffs[c]}))
                             for c in columns]
        paper = pairing.paper.get(i) if pairing else None
        if paper is None:
            continue
        used.append(paper.table)
        grid.body.append([f"paper: {paper.name}", *(fmt_paper(*tests[(i, c)]) for c in columns), *pad])
        grid.kinds.append("paper")
        for c in columns:
            p, cell, test = tests[(i, c)]
            if p is not None:
                grid.records.append(cell_record("paper", f"paper: {paper.name}", c, labels.get(c, c), centre=p[0],
                                                sd=p[1], test=test))
    if len(done):  # once runs exist, a split that no row of ours and no published row fills is not a column
        empty = [j for j in range(1, len(grid.header)) if all(row[j] == EMPTY for row in grid.body)]
        if empty:
            keep = [j for j in range(len(grid.header)) if j not in empty]
            gone = {grid.header[j] for j in empty}
            grid.header = [grid.header[j] for j in keep]
            grid.body = [[row[j] for j in keep] for row in grid.body]
            grid.records = [r for r in grid.records if r["column"] not in gone]
    filled = [(c, rc.cells[c]) for rc in ours for c in columns if rc.cells[c] is not None]
    grid.footer = (about.splitlines() if about else []) + interval_footer(stat, ci, filled, derived, labels, metric) \
        + run_footer(df, stat, n_expected)
    if base is not None:
        grid.footer.append(f"{MINUS} {rows[base].label}: each row's difference from it [95% interval]: paired by seed "
                           "where both rows ran the same seeds (t over the seeds' differences), else Welch's t of the "
                           "two means; the test split's error is not counted (both rows were tested on the same "
                           "examples; their difference's binomial error needs per-example outcomes)")
    if pairing is not None:
        grid.footer += paper_footer(ref_tables, used, stat, pairing, rows, tests, correction)
    return grid


def difference(row: RowCells, base: RowCells, c: str):
    """Row minus base row in column ``c``: a Test, the bare difference (a side of one seed) or None."""
    if row.cells[c] is None or base.cells[c] is None:
        return None
    test = S.difference(row.by_seed[c], base.by_seed[c])
    return test if test is not None else row.cells[c].centre - base.cells[c].centre


def paper_footer(ref_tables, used, stat, pairing, rows, tests, correction) -> list[str]:
    titles = [t.title for t in ref_tables if t.id in used] or [t.title for t in ref_tables]
    paper_stats = sorted({t.stat for t in ref_tables if t.id in used} or {t.stat for t in ref_tables})
    lines = ["paper: " + "; ".join(titles) + f"; its cells are {' / '.join(paper_stats)}s over seeds, "
             f"ours {stat}s; Δ = ours − paper; a row of ours is paired with the published row whose "
             "model and configuration it runs"]
    done = [t for _, _, t in tests.values() if isinstance(t, S.Test)]
    if done:
        medians = "; the paper's medians are taken as means" if "median" in paper_stats else ""
        lines.append("each paper cell tests ours against it: Welch's t on the summary statistics (our mean and "
                     "sample std over our seeds; the paper's std over its seeds, read as a sample std), both test "
                     "splits' binomial errors added (the paper's at its centre, on a split of our N), "
                     "Welch–Satterthwaite df; one seed of ours: a new seed against the paper's mean, its spread "
                     f"taken as the paper's; two-sided p: consistent at p ≥ {S.ALPHA:.2f}, else above / below{medians}")
        if correction == "holm":
            lines.append(f"{len(done)} cells tested at once: p values Holm-corrected over them (family-wise "
                         f"error ≤ {S.ALPHA:.2f})")
        else:
            lines.append(f"{len(done)} cells tested at once: about {S.ALPHA * len(done):.1f} would read above / below "
                         f"by chance were all consistent; --correction holm corrects for the family")
    reasons = sorted({t for _, _, t in tests.values() if isinstance(t, str)})
    if reasons:
        lines.append("untested cells: " + "; ".join(reasons))
    if pairing.ours_unpaired:
        lines.append("rows of ours no published row describes: "
                     + "; ".join(rows[i].label for i in pairing.ours_unpaired))
    by_table: dict[str, list[str]] = {}
    for r in pairing.paper_unpaired:
        by_table.setdefault(r.table, []).append(r.name)
    for t in ref_tables:
        if t.id in by_table:
            lines.append(f"published rows ({t.id}) with no row of ours: " + "; ".join(by_table[t.id]))
    for r, ix in pairing.shared:
        lines.append(f"published row {r.name} fits several rows of ours ({'; '.join(rows[i].label for i in ix)}):"
                     f" they differ in a value it does not state")
    return lines


def objective_columns(spec) -> list[str]:
    """The metrics of a multi-objective spec (Optuna's objectives, e.g. dev/accuracy and cpu_time_per_step_ms): the
    table shows what the search optimised. [] for a single metric (the splits' columns say it)."""
    metrics = list(getattr(spec, "metrics", None) or [])
    return metrics if len(metrics) > 1 else []


def pivot(df: pd.DataFrame, rows_key: str, cols_key: str, split: str, stat: str = DEFAULT_STAT,
          metric: str = "accuracy", n_expected: int = 0, where: Optional[dict] = None,
          about: Optional[str] = None, ci: str = DEFAULT_CI) -> Grid:
    """Two swept axes for one split's metric, e.g. chunk size x beam width of ``test/accuracy``."""
    done = usable(df)
    where = where or {}
    groups: dict[tuple, dict[str, list]] = {}
    derived: set = set()
    for r in records(done):
        sw = r["swept"]
        if any(str(sw.get(k)) != str(v) for k, v in where.items()):
            continue
        if rows_key not in sw or cols_key not in sw:
            raise UserError(f"pivot axes must be swept parameters; this sweep swept {', '.join(k for k in sw if k != 'seed')}")
        key = (sw[rows_key], sw[cols_key])
        others = signature({k: v for k, v in sw.items() if k not in (rows_key, cols_key)})
        g = groups.setdefault(key, {})
        v = r.get(metric_column(split, metric))
        if present(v):
            g.setdefault(others, []).append((v, run_examples(r, split, derived) if metric == "accuracy" else None))
    for key, g in groups.items():
        if len(g) > 1:
            raise UserError(f"the pivot cell {rows_key}={key[0]}, {cols_key}={key[1]} mixes configurations that differ "
                            f"in other swept parameters; fix them with --where KEY=VALUE")
    order = lambda vals: sorted(set(vals), key=lambda v: (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)))  # noqa: E731
    row_vals, col_vals = order(k[0] for k in groups), order(k[1] for k in groups)
    grid = Grid([f"{rows_key} / {cols_key}", *(describe(cols_key, c) for c in col_vals)], [], [])
    filled = []
    for rv in row_vals:
        cells = []
        for cv in col_vals:
            runs = next(iter(groups[(rv, cv)].values()), []) if (rv, cv) in groups else []
            ns = [n for _, n in runs]
            cells.append(aggregate([v for v, _ in runs], stat, min(ns) if ns and None not in ns else None, ci))
        label = describe(rows_key, rv)
        grid.body.append([label, *(fmt_cell(c, n_expected) for c in cells)])
        grid.kinds.append("ours")
        grid.records += [cell_record("ours", label, split, describe(cols_key, cv), c) for cv, c in zip(col_vals, cells)]
        filled += [(split, c) for c in cells if c is not None]
    grid.footer = (about.splitlines() if about else []) + [contract.split_metric(split, metric)] \
        + interval_footer(stat, ci, filled, derived, {}, metric) + run_footer(df, stat, n_expected)
    return grid


def render(grid: Grid, fmt: str = "markdown") -> str:
    if fmt == "csv":  # one line per cell, one column per quantity (grid.records); a grid without them: its text
        buf = io.StringIO()
        frame = pd.DataFrame(grid.records) if grid.records else pd.DataFrame(grid.body, columns=grid.header)
        for col in ("n", "examples"):  # counts stay integers beside the empty cells
            if col in frame:
                frame[col] = frame[col].astype("Int64")
        frame.to_csv(buf, index=False)
        return buf.getvalue()
    if fmt == "latex":
        return render_latex(grid)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in grid.header) + " |",
             "|" + "|".join([":---", *("---:" for _ in grid.header[1:])]) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in grid.body]
    return "\n".join(lines) + "\n\n" + "\n".join(grid.footer) + "\n"


LATEX_SUBS = [("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
              ("$", r"\$"), ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}"),
              ("±", r"$\pm$"), ("Δ", r"$\Delta$"), (MINUS, "$-$"), ("–", "--"), ("—", "---")]
_LATEX = re.compile("|".join(re.escape(a) for a, _ in LATEX_SUBS))


def latex_escape(s: str) -> str:
    """In one pass: a substitution's own ``$`` or braces are never escaped again."""
    return _LATEX.sub(lambda m: dict(LATEX_SUBS)[m.group()], s)


def render_latex(grid: Grid) -> str:
    """booktabs tabular; paper rows in italics after ours; the footer (what ± and [interval] are) as comments."""
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
