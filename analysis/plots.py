"""Plots of a sweep (matplotlib): the Pareto frontier of accuracy against cost (RIR Appendix F,
Figure 2 a and b) and training curves per configuration (the tables' statistic over seeds, ``rirlab.analysis.stats``,
the band its 95% interval over seeds, named in the legend).

Pareto points are numbered; the key beside the axes names each number's full configuration, and numbers
that would overlap are pushed apart (points at the same place share one label, ``1, 3``). Curves differ in
colour, line style and marker, so identical curves stay visible."""

from __future__ import annotations

import itertools
from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from rirlab.analysis.layouts import ablation_rows, signature  # noqa: E402
from rirlab.analysis.stats import DEFAULT_CI, DEFAULT_STAT, centre, summarise  # noqa: E402
from rirlab.analysis.tables import metric_column, split_columns, usable  # noqa: E402
from rirlab import contract  # noqa: E402
from rirlab.errors import UserError  # noqa: E402

X_AXES = {"memory": "peak memory (MB)"}  # and "time": time_axis(), which names its clock
METRIC_WORDS = {"loss": "loss", "accuracy": "accuracy (%)", **contract.CLOCK_WORDS,
                contract.PEAK_MEM_MB: "peak memory (MB)"}
CLOCKS = {"cpu": contract.CPU_TIME_PER_STEP_MS, "wall": contract.TIME_PER_STEP_MS}  # --clock: the Pareto time axis
SPLIT_WORDS = {"train": "training", "dev": "dev"}


def metric_words(metric: str, labels: Optional[dict] = None) -> str:
    """A logged metric's name in words: ``dev/accuracy`` -> ``dev accuracy (%)``, ``len_200_300/accuracy`` ->
    ``200–300 accuracy (%)`` (the paper's split label), ``train/loss`` -> ``training loss``."""
    split, _, kind = metric.rpartition("/")
    words = METRIC_WORDS.get(kind, kind.replace("_", " "))
    if not split:
        return words
    return f"{(labels or {}).get(split) or SPLIT_WORDS.get(split, split.replace('_', ' '))} {words}"


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats (lower or equal x AND higher or equal y, one strictly),
    ordered by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def _ood_splits(sw, df: pd.DataFrame, split: Optional[str]) -> tuple[list[str], str]:
    labels = dict(sw.splits)
    if split:
        return [split], metric_words(contract.split_metric(split), labels)
    names = [s for s, _ in sw.splits]  # as the sweep recorded them, in the papers' order
    present = set(split_columns(df))
    ood = [s for s in names[1:] if s in present]  # the first split is the near-IID test split
    if len(ood) == 1:
        return ood, metric_words(contract.split_metric(ood[0]), labels)
    if ood:
        return ood, "OOD accuracy (%): mean of " + ", ".join(labels.get(s, s) for s in ood)
    cols = [s for s in names if s in present] or split_columns(df)
    if not cols:
        raise UserError("the runs have no evaluation split metrics (<split>/accuracy); did the trials finish?")
    return cols[:1], metric_words(contract.split_metric(cols[0]), labels) + " (no OOD split evaluated)"


def time_metric(df: pd.DataFrame, clock: str = "auto") -> str:
    """The step time the Pareto time axis reads (docs/metrics.md): ``cpu`` the trials' CPU time (fair when they
    share the cores), ``wall`` the wall clock, ``auto`` CPU time unless a run trained on a GPU (a GPU each: the
    wall clock is fair there, and CPU time leaves out the GPU's work). Runs recorded before the CPU time existed
    have the wall clock alone."""
    if clock == "auto":
        on_gpu = "device" in df and df["device"].fillna("cpu").ne("cpu").any()
        clock = "wall" if on_gpu else "cpu"
    column = f"metric.{CLOCKS[clock]}"
    return CLOCKS[clock] if column in df and df[column].notna().all() else contract.TIME_PER_STEP_MS


def time_axis(metric: str) -> str:
    """The Pareto time axis in words, naming its clock: ``CPU time per training sample (ms)``."""
    return contract.CLOCK_WORDS[metric].replace(" per step ", " per training sample ")


def configuration_points(sw, split: Optional[str] = None, stat: str = DEFAULT_STAT,
                         clock: str = "auto") -> tuple[pd.DataFrame, str]:
    """One row per configuration: label, accuracy (centre over seeds), time per sample (the ``clock``'s step
    time, :func:`time_metric`, over the batch size; ``pts.attrs["time_metric"]`` names it), peak memory."""
    df = usable(sw.runs)
    if df.empty:
        raise UserError(f"no finished runs of '{sw.experiment}' to plot; run `rirlab sweep` first")
    splits, ylabel = _ood_splits(sw, df, split)
    missing = [s for s in splits if metric_column(s) not in df.columns]
    if missing:
        raise UserError(f"no runs report split '{missing[0]}'; splits: {', '.join(split_columns(df))}")
    timed = time_metric(df, clock)
    time_col, batch_col = f"metric.{timed}", f"param.{contract.PARAM_BATCH_SIZE}"
    df = df.assign(acc=df[[metric_column(s) for s in splits]].mean(axis=1),
                   time=df[time_col].astype(float) / df[batch_col].astype(float)
                   if time_col in df and batch_col in df else float("nan"),
                   memory=df.get(f"metric.{contract.PEAK_MEM_MB}", float("nan")), sig=[signature(s) for s in df["swept"]])
    rows = []
    for row in ablation_rows(sw.spec, list(df["swept"])):
        g = df[df["sig"] == row.sig]
        if len(g):
            rows.append({"label": row.label, "acc": centre(g["acc"], stat), "time": centre(g["time"], stat),
                         "memory": centre(g["memory"], stat), "n": len(g)})
    pts = pd.DataFrame(rows)
    pts.attrs["time_metric"] = timed
    return pts, ylabel


# Points numbered in a Pareto plot before only the frontier's are: placing N labels apart is O(N^2) a step (minutes
# at the 333 configurations of a 1,000-run random search, benchmarks/readonly_at_scale.py), and so many numbers
# overlap the points they name anyway.
MAX_LABELS = 60


def spread_labels(ax, xy: list[tuple[float, float]], texts: list[str], min_px: float = 14.0, steps: int = 60):
    """Place ``texts`` near the points ``xy`` without overlaps: start up-right of each point, then push labels
    apart (and off every point) in display space for a few steps. Returns the label offsets in points."""
    import numpy as np

    fig = ax.figure
    fig.canvas.draw()
    to_px = ax.transData.transform
    pts = np.array([to_px(p) for p in xy], dtype=float).reshape(-1, 2)
    pos = pts + 9.0
    scale = fig.dpi / 72.0
    sizes = np.array([[6.0 * len(t) * scale, 11.0 * scale] for t in texts]).reshape(-1, 2)
    for _ in range(steps):
        moved = False
        for i in range(len(pos)):
            for j in range(len(pos)):
                if i == j:
                    continue
                d = pos[i] - pos[j]
                gap = (sizes[i] + sizes[j]) / 2 + 2
                if abs(d[0]) < gap[0] and abs(d[1]) < gap[1]:  # boxes overlap: move i away along y (then x)
                    away = np.sign(d[1]) or (1.0 if i > j else -1.0)
                    pos[i, 1] += away * ((gap[1] - abs(d[1])) / 2 + 0.5)
                    moved = True
            for p in pts:  # keep clear of the markers
                d = pos[i] - p
                if np.hypot(*d) < min_px:
                    pos[i] += (d / (np.hypot(*d) or 1.0) if np.hypot(*d) else np.array([1.0, 1.0])) * (min_px - np.hypot(*d))
                    moved = True
        if not moved:
            break
    return [tuple((pos[i] - pts[i]) / scale) for i in range(len(pos))]


def point_groups(xy: list[tuple[float, float]]) -> list[list[int]]:
    """Indices of points at the same place (to 1e-9 relative): they share one label."""
    groups: dict[tuple, list[int]] = {}
    for i, (x, y) in enumerate(xy):
        groups.setdefault((round(x, 9), round(y, 9)), []).append(i)
    return list(groups.values())


def objective_points(sw, stat: str = DEFAULT_STAT) -> pd.DataFrame:
    """One row per configuration of a multi-objective sweep: label, its first objective (``acc``, the y axis) and
    its second (``objectives``, the x axis), each the centre over seeds, n; ``attrs`` name the two and their modes."""
    df = usable(sw.runs)
    (ym, xm), modes = sw.spec.metrics[:2], sw.spec.modes[:2]
    missing = [m for m in (ym, xm) if f"metric.{m}" not in df]
    if df.empty or missing:
        raise UserError(f"no finished runs of '{sw.experiment}' report {missing[0] if missing else ym}; run "
                        f"`rirlab sweep` first")
    sigs = [signature(s) for s in df["swept"]]
    rows = []
    for row in ablation_rows(sw.spec, list(df["swept"])):
        g = df[[s == row.sig for s in sigs]]
        if len(g):
            rows.append({"label": row.label, "acc": centre(g[f"metric.{ym}"].astype(float), stat),
                         "objectives": centre(g[f"metric.{xm}"].astype(float), stat), "n": len(g)})
    pts = pd.DataFrame(rows)
    pts.attrs.update(metrics=(ym, xm), modes=modes)
    return pts


def pareto_plot(sw, out, x: str = "both", split: Optional[str] = None, stat: str = DEFAULT_STAT,
                clock: str = "auto") -> int:
    """The Pareto frontier of a sweep's configurations: accuracy against time and/or memory (RIR Figure 2), or
    (``x="objectives"``) a multi-objective sweep's own two objectives, each in its own direction (Optuna's front)."""
    if x == "objectives":
        if sw.spec is None or len(sw.spec.metrics) < 2:
            raise UserError("--x objectives needs a multi-objective spec (metric: [A, B]); plot --x time or memory")
        pts = objective_points(sw, stat)
        (ym, xm), modes = pts.attrs["metrics"], pts.attrs["modes"]
        ylabel = f"{metric_words(ym, dict(sw.splits))} ({modes[0]})"
        x_words = {"objectives": f"{metric_words(xm, dict(sw.splits))} ({modes[1]})"}
        flip = (-1.0 if modes[1] == "max" else 1.0, -1.0 if modes[0] == "min" else 1.0)  # pareto_front: min x, max y
    else:
        pts, ylabel = configuration_points(sw, split, stat, clock)
        x_words, flip = {**X_AXES, "time": time_axis(pts.attrs["time_metric"])}, (1.0, 1.0)
    axes_x = ["time", "memory"] if x == "both" else [x]
    usable_x = [xk for xk in axes_x if pts[xk].notna().any()]
    if not usable_x:
        raise UserError(f"the runs of '{sw.experiment}' logged no {' or '.join(x_words[k] for k in axes_x)}; "
                        f"plot another --x")
    key = [f"{i + 1}  {lbl}  (n={n})" for i, (lbl, n) in enumerate(zip(pts["label"], pts["n"]))]
    key_width = min(6.0, 0.9 + 0.065 * max(len(k) for k in key))
    fig, axes = plt.subplots(1, len(usable_x), figsize=(5.2 * len(usable_x) + key_width, 4.4), squeeze=False)
    for ax, xk in zip(axes[0], usable_x):
        ok = pts[xk].notna() & pts["acc"].notna()
        idx = [i for i in range(len(pts)) if ok.iloc[i]]
        xy = [(float(pts[xk].iloc[i]), float(pts["acc"].iloc[i])) for i in idx]
        front = [idx[i] for i in pareto_front([(flip[0] * a, flip[1] * b) for a, b in xy])]
        ax.scatter([p[0] for p in xy], [p[1] for p in xy], s=36, color="tab:blue", zorder=3, label="configuration")
        fx, fy = [float(pts[xk].iloc[i]) for i in front], [float(pts["acc"].iloc[i]) for i in front]
        ax.step(fx, fy, where="post", color="tab:red", lw=1.5, zorder=2, label="Pareto frontier")
        ax.scatter(fx, fy, s=70, facecolors="none", edgecolors="tab:red", zorder=4)
        ax.margins(0.15)
        groups = point_groups(xy)
        if len(groups) > MAX_LABELS:  # a search's hundreds of configurations: number the frontier's points only
            on_front = set(front)
            groups = [g for g in groups if any(idx[i] in on_front for i in g)]
            ax.text(0.99, 0.01, f"numbered: the frontier's {len(groups)} of {len(xy)} points", transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=7, color="0.35")
        texts = [", ".join(str(idx[i] + 1) for i in g) for g in groups]
        anchors = [xy[g[0]] for g in groups]
        for (px, py), text, off in zip(anchors, texts, spread_labels(ax, anchors, texts)):
            ax.annotate(text, (px, py), textcoords="offset points", xytext=off, fontsize=8, ha="center", va="center",
                        arrowprops=dict(arrowstyle="-", color="0.6", lw=0.6, shrinkA=0, shrinkB=3))
        ax.set_xlabel(x_words[xk])
        ax.set_ylabel(ylabel.split(":")[0])  # a mean over several splits names them in the title
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    mean_of = f"\ny = {ylabel}" if ":" in ylabel else ""
    what = "the study's objectives" if x == "objectives" else "accuracy vs cost"
    fig.suptitle(f"{sw.experiment}: {what} ({stat} over seeds){mean_of}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1 - key_width / fig.get_figwidth(), 1))
    fig.text(1 - key_width / fig.get_figwidth() + 0.01, 0.88, "\n".join(key), fontsize=7.5, va="top", ha="left",
             family="monospace")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return len(pts)


BANDS = {"t": "95% t-interval of the mean over seeds", "bootstrap": "95% bootstrap interval over seeds"}


def seed_band(table: pd.DataFrame, stat: str, ci: str) -> tuple[list, list]:
    """Per step (row of ``table``: a column per seed), the 95% interval over the seeds that logged it (``ci``, as the
    tables' cells but without a split's error); NaN where fewer than two did."""
    low, high = [], []
    for _, values in table.iterrows():
        s = summarise(values.dropna().tolist(), stat, ci=ci)
        ok = s is not None and s.n > 1
        low.append(s.low if ok else float("nan"))
        high.append(s.high if ok else float("nan"))
    return low, high


def _axis_on_the_seeds(ax, lows: list, highs: list) -> None:
    """The y axis over what the seeds logged (5% margin), not over the bands: with two seeds a 95% t-interval is
    +- 12.7 standard errors and would squash every curve into a line; a band cut by the axes says so."""
    lo, hi = min(lows), max(highs)
    pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi) * 0.05, 1e-9)
    top, bottom = ax.get_ylim()[1], ax.get_ylim()[0]
    ax.set_ylim(lo - pad, hi + pad)
    if bottom < lo - pad or top > hi + pad:
        ax.text(0.99, 0.01, "bands cut at the axes (few seeds: wide intervals)", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7, color="0.35")


def curves_plot(client, sw, metric: str, out, stat: str = DEFAULT_STAT, ci: str = DEFAULT_CI) -> int:
    """``metric`` against step for each configuration: ``stat`` over seeds (the tables' statistic), the band its
    95% interval (``ci``); each configuration has its own colour, line style and marker."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    from rirlab.analysis.runs import metric_histories

    df = sw.runs[sw.runs["status"].isin(["FINISHED", "RUNNING"])] if not sw.runs.empty else sw.runs
    if df.empty:
        raise UserError(f"no runs of '{sw.experiment}' to plot; run `rirlab sweep` first")
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    n, banded = 0, False
    lows, highs = [], []  # every seed's own values: the y axis spans them, not a band of few seeds
    sigs = [signature(s) for s in df["swept"]]
    # every run's history in one read (one query per 500 runs on a database store), not a call per run
    histories = metric_histories(client, list(df["run_id"]), metric)
    # 7 markers x 4 line styles, stepped together (28 distinct pairs); markers of each curve start at another
    # point, so curves that coincide still show every one's markers
    styles = zip(itertools.cycle(("-", "--", ":", "-.")), itertools.cycle(("o", "s", "^", "D", "v", "P", "X")))
    for i, row in enumerate(ablation_rows(sw.spec, list(df["swept"]))):
        series = []
        for run_id in df["run_id"][[s == row.sig for s in sigs]]:
            hist = histories[run_id]
            if hist:
                series.append(pd.Series({m.step: m.value for m in hist}, name=run_id))
        if not series:
            continue
        table = pd.concat(series, axis=1).sort_index()  # (steps, seeds)
        color, (ls, mk) = f"C{i % 10}", next(styles)
        every = 1 if len(table) <= 6 else max(2, len(table) // 10)  # few points: mark them all
        ax.plot(table.index, centre(table, stat, axis=1), color=color, ls=ls, marker=mk, ms=5, mfc="none", mew=1.2, lw=1.6,
                markevery=(n % every, every), label=f"{row.label} (n={len(series)})")
        lows.append(np.nanmin(table.to_numpy()))
        highs.append(np.nanmax(table.to_numpy()))
        if len(series) > 1:
            ax.fill_between(table.index, *seed_band(table, stat, ci), color=color, alpha=0.15, lw=0)
            banded = True
        n += 1
    if n == 0:
        plt.close(fig)
        raise UserError(f"no run logged metric '{metric}'; try dev/accuracy, train/loss or "
                        f"{contract.CPU_TIME_PER_STEP_MS}")
    words = metric_words(metric, dict(sw.splits))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel(words)
    # two lines: one would run past the figure's edge beside the legend
    ax.set_title(f"{sw.experiment}: {words}\n({stat} over seeds" + (f", band = {BANDS[ci]})" if banded else ")"),
                 fontsize=10)
    if banded:
        _axis_on_the_seeds(ax, lows, highs)
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0]
    if banded:
        handles.append(Patch(color="0.5", alpha=0.3, label=f"band: {BANDS[ci]}"))
    ax.legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return n


def split_panels(grid) -> list[dict]:
    """The rows of an ablation table (``rirlab.analysis.tables.ablation``) that have runs, each as a panel: its
    label, the split columns, its value per seed and split, and the published row paired with it (centre and std per
    split, None where the paper has no cell)."""
    columns = [h for h in grid.header[1:] if any(r["column"] == h and r["kind"] == "ours" for r in grid.records)]
    paper_cells = {(r["configuration"], r["column"]): (r["centre"], r.get("sd")) for r in grid.records
                   if r["kind"] == "paper"}
    panels = []
    for i, (row, kind) in enumerate(zip(grid.body, grid.kinds)):
        label = row[0]
        seeds: dict[str, dict[str, float]] = {}
        for c in columns:
            for seed, v in grid.seeds.get((label, c), {}).items():
                seeds.setdefault(seed, {})[c] = v
        if kind != "ours" or not seeds:
            continue
        paper = next((grid.body[j][0] for j in range(i + 1, len(grid.body)) if grid.kinds[j] != "difference"), None)
        paper = paper if paper is not None and paper.startswith("paper: ") else None
        panels.append({"label": label, "columns": columns, "seeds": seeds, "paper": paper,
                       "paper_cells": {c: paper_cells.get((paper, c)) for c in columns} if paper else {}})
    return panels


def splits_plot(sw, out, reference: Optional[str] = None, stat: Optional[str] = None,
                metric: str = "accuracy") -> int:
    """A panel per configuration of the sweep's table: every seed's value on every split (a point per seed, a line
    joining a seed's splits), our statistic over the seeds (the table's cell), and the paired published row's
    centre with its std over the paper's seeds (an error bar; a bare centre where none is published). What a
    results page shows beside its table: whether a gap is one seed or every seed."""
    from rirlab.analysis import tables as T

    grid = T.ablation(sw.runs, spec=sw.spec, stat=stat, metric=metric, n_expected=sw.n_expected, reference=reference,
                      splits=sw.splits)
    panels = split_panels(grid)
    if not panels:
        raise UserError(f"no finished run of '{sw.experiment}' has a test split's {metric}; run `rirlab sweep` first")
    width = max(7.5, 3.5 + 1.0 * max(len(p["columns"]) for p in panels))  # room for every split's label
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 2.9 * len(panels) + 0.4), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        xs = range(len(panel["columns"]))
        for k, (seed, values) in enumerate(sorted(panel["seeds"].items())):
            ys = [values.get(c, float("nan")) for c in panel["columns"]]
            ax.plot(xs, ys, ls=":", lw=0.9, marker="osD^v"[k % 5], ms=5, mfc="none", color=f"C{k % 10}",
                    label=f"seed {seed}")
        ours = [T.aggregate([v[c] for v in panel["seeds"].values() if c in v], grid.stat)
                for c in panel["columns"]]
        ax.scatter(xs, [o.centre if o is not None else float("nan") for o in ours], marker="_", s=400, lw=2,
                   color="black", zorder=3, label=f"ours ({grid.stat} of {len(panel['seeds'])})")
        if panel["paper"]:
            cells = [panel["paper_cells"].get(c) for c in panel["columns"]]
            px = [x + 0.12 for x, p in zip(xs, cells) if p is not None]
            spread = any(p is not None and p[1] is not None for p in cells)
            ax.errorbar(px, [p[0] for p in cells if p is not None],
                        yerr=[p[1] if p[1] is not None else 0.0 for p in cells if p is not None], fmt="s", ms=5,
                        color="firebrick", capsize=4, lw=1.4,
                        label=f"{panel['paper']} " + ("(± std over its seeds)" if spread else "(no std published)"))
        ax.set_xticks(list(xs), panel["columns"])
        ax.set_ylabel(metric_words(metric))
        ax.set_title(panel["label"], fontsize=10)
        ax.set_xlabel("test split", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.suptitle(f"{sw.experiment}: each seed on each test split" + (" against the paper" if reference else ""),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return len(panels)
