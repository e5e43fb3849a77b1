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
from rirlab.analysis.stats import DEFAULT_CI, DEFAULT_STAT, centre, centre_groups, summarise  # noqa: E402
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
    centres, counts = centre_groups(df[["sig", "acc", "time", "memory"]], "sig", stat)
    rows = [{"label": row.label, **centres.loc[row.sig, ["acc", "time", "memory"]].to_dict(), "n": int(counts[row.sig])}
            for row in ablation_rows(sw.spec, list(df["swept"])) if row.sig in counts.index]
    pts = pd.DataFrame(rows, columns=["label", "acc", "time", "memory", "n"])
    pts.attrs["time_metric"] = timed
    return pts, ylabel


# Points numbered in a Pareto plot before only the frontier's are: so many numbers hide the points they name, and a
# key of hundreds of configurations is not read (`rirlab tables` lists them all).
MAX_LABELS = 60
LABEL_PT = 8.0  # font size of the numbers beside the points
MARKER_PT = 4.5  # half the side of the box kept clear around each marker (points; the frontier's ring is ~4.2)
KEY_PT = 7.5  # font size of the key
LABEL_GID, CONNECTORS_GID = "point-label", "label-connectors"  # what the labels and their lines are (tests count them)
OTHERS_GID = "other-curves"  # plot curves: the configurations drawn grey, past MAX_CURVES


def label_sizes(fig, texts: list[str], fontsize: float = LABEL_PT) -> np.ndarray:
    """Width and height (points) of each of ``texts`` as the renderer lays them out, measured once per distinct
    string without a Text artist or a draw: what keeps labels apart and where their connectors end."""
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    prop = FontProperties(size=fontsize)
    per_pt = renderer.points_to_pixels(1.0)
    height = renderer.get_text_width_height_descent("lp", prop, ismath=False)[1] / per_pt  # one line of text
    width = {t: renderer.get_text_width_height_descent(t, prop, ismath=False)[0] / per_pt for t in set(texts)}
    return np.array([[width[t], height] for t in texts], dtype=float).reshape(-1, 2)


def spread(points, sizes, pad: float = 1.5, marker: float = MARKER_PT, steps: int = 200) -> tuple[np.ndarray, int]:
    """Centres (points) for label boxes of ``sizes`` beside ``points`` (points: display space in 1/72 inch), none
    overlapping another label or any marker: each starts up-right of its point, then every overlapping pair is
    pushed apart along the axis it overlaps least on, all pairs of a step at once (arrays, not a Python loop over
    pairs), until none overlaps or ``steps`` run out. Returns (centres, the steps taken)."""
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    half = np.asarray(sizes, dtype=float).reshape(-1, 2) / 2 + pad / 2
    n = len(pts)
    pos = pts + half + 0.6 * marker
    other = ~np.eye(n, dtype=bool)
    tie = np.sign(np.arange(n)[:, None] - np.arange(n)[None, :]).astype(float)  # labels at one place: by index
    for step in range(steps):
        moves = []
        for d, depth, share, hit in _overlaps(pos, half, pts, marker, other):
            if hit.any():
                axis = np.argmin(depth, axis=2)[..., None]  # the shortest way out of each overlap
                away = np.sign(np.take_along_axis(d, axis, 2)[..., 0])
                away = np.where(away == 0, tie if share < 1 else 1.0, away)
                amount = np.where(hit, away * (share * np.take_along_axis(depth, axis, 2)[..., 0] + 0.25), 0.0)
                moves.append(np.stack([np.where(axis[..., 0] == k, amount, 0.0).sum(axis=1) for k in (0, 1)], 1))
        if not moves:
            return pos, step
        pos = pos + sum(moves)
    return pos, steps


def _overlaps(pos, half, pts, marker, other):
    """For the labels at ``pos``: (offsets, overlap depth per axis, the share of it each moves, which overlap) against
    the other labels (each of a pair moves half) and against the markers (the label moves it all)."""
    d = pos[:, None, :] - pos[None, :, :]
    depth = half[:, None, :] + half[None, :, :] - np.abs(d)
    yield d, depth, 0.5, other & (depth > 0).all(axis=2)
    d = pos[:, None, :] - pts[None, :, :]
    depth = half[:, None, :] + marker - np.abs(d)
    yield d, depth, 1.0, (depth > 0).all(axis=2)


def spread_labels(ax, xy: list[tuple[float, float]], texts: list[str]) -> tuple[list[tuple[float, float]], np.ndarray]:
    """Place ``texts`` near the data points ``xy`` of ``ax`` (its final layout) without overlaps (:func:`spread`).
    Returns each label's offset from its point and its size, in points."""
    fig = ax.figure
    ax.get_xlim(), ax.get_ylim()  # the view limits the autoscaling settles on (no draw needed for them)
    per_pt = fig.dpi / 72.0
    pts = ax.transData.transform(np.asarray(xy, dtype=float).reshape(-1, 2)) / per_pt
    sizes = label_sizes(fig, texts)
    centres, _ = spread(pts, sizes)
    return [tuple(o) for o in centres - pts], sizes


def connector(offset, size, gap: float = 3.0, pad: float = 1.0):
    """A straight segment (points, from the point) from ``gap`` points off a point to the edge of its label's box
    (grown by ``pad``), the label ``offset`` away and ``size`` big; None for a label right beside its point."""
    (dx, dy), (hw, hh) = offset, (size[0] / 2 + pad, size[1] / 2 + pad)
    dist = float(np.hypot(dx, dy))
    if abs(dx) <= hw and abs(dy) <= hh:  # the point is inside its label's box
        return None
    edge = dist * (1 - min(hw / abs(dx) if dx else np.inf, hh / abs(dy) if dy else np.inf))  # to the box's edge
    if edge <= gap + 1.0:
        return None
    ux, uy = dx / dist, dy / dist
    return [(ux * gap, uy * gap), (ux * edge, uy * edge)]


def draw_labels(ax, xy: list[tuple[float, float]], texts: list[str]) -> None:
    """The numbers beside the points, apart (:func:`spread_labels`), each joined to its point by a plain line: one
    LineCollection for all, not an arrow per label clipped against its text box (seconds of Bezier clipping at
    every layout, legend placement and draw)."""
    from matplotlib.collections import LineCollection
    from matplotlib.transforms import Affine2D

    offsets, sizes = spread_labels(ax, xy, texts)
    segments, anchors = [], []
    for point, text, off, size in zip(xy, texts, offsets, sizes):
        ax.annotate(text, point, textcoords="offset points", xytext=off, fontsize=LABEL_PT, ha="center",
                    va="center", gid=LABEL_GID)
        seg = connector(off, size)
        if seg is not None:
            segments.append(seg)
            anchors.append(point)
    if segments:  # each segment in points, drawn at its point (offsets in data): right at any dpi and layout
        lines = LineCollection(segments, offsets=anchors, offset_transform=ax.transData, colors="0.6",
                               linewidths=0.6, transform=Affine2D().scale(1 / 72.0) + ax.figure.dpi_scale_trans,
                               zorder=2.5, gid=CONNECTORS_GID)
        ax.add_collection(lines, autolim=False)


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
    values = pd.DataFrame({"sig": [signature(s) for s in df["swept"]],
                           "acc": df[f"metric.{ym}"].astype(float).to_numpy(),
                           "objectives": df[f"metric.{xm}"].astype(float).to_numpy()})
    centres, counts = centre_groups(values, "sig", stat)
    rows = [{"label": row.label, **centres.loc[row.sig, ["acc", "objectives"]].to_dict(), "n": int(counts[row.sig])}
            for row in ablation_rows(sw.spec, list(df["swept"])) if row.sig in counts.index]
    pts = pd.DataFrame(rows, columns=["label", "acc", "objectives", "n"])
    pts.attrs.update(metrics=(ym, xm), modes=modes)
    return pts


def tight_layout(fig, **kw) -> None:
    """``fig.tight_layout(**kw)`` without leaving a layout engine on the figure: with one (even the placeholder that
    ``Figure.tight_layout`` leaves), ``savefig`` draws the whole figure twice, once only to lay it out."""
    from matplotlib.layout_engine import TightLayoutEngine

    TightLayoutEngine(**kw).execute(fig)


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
    panels = []  # per axis: its points, frontier and numbered groups of points
    for xk in usable_x:
        ok = pts[xk].notna() & pts["acc"].notna()
        idx = [i for i in range(len(pts)) if ok.iloc[i]]
        xy = [(float(pts[xk].iloc[i]), float(pts["acc"].iloc[i])) for i in idx]
        front = [idx[i] for i in pareto_front([(flip[0] * a, flip[1] * b) for a, b in xy])]
        groups = point_groups(xy)
        if len(groups) > MAX_LABELS:  # a search's hundreds of configurations: number the frontier's points only
            on_front = set(front)
            groups = [g for g in groups if any(idx[i] in on_front for i in g)]
        panels.append((xk, idx, xy, front, groups))
    numbered = sorted({idx[i] for _, idx, _, _, groups in panels for g in groups for i in g})
    width = len(str(len(pts)))  # numbers right-aligned: the configurations line up
    key = [f"{i + 1:>{width}}  {pts['label'].iloc[i]}  (n={pts['n'].iloc[i]})" for i in numbered]
    if len(numbered) < len(pts):
        key += ["", f"(the {len(numbered)} numbered of {len(pts)}", " configurations; `rirlab tables`", " lists all)"]
    key_width = min(6.0, 0.9 + 0.065 * max(len(k) for k in key))
    line_in = KEY_PT * 1.45 / 72  # the key's line height (inches: monospace, 1.2 line spacing); the figure holds it
    height = max(4.4, (len(key) * line_in + 0.3) / 0.88)
    fig, axes = plt.subplots(1, len(usable_x), figsize=(5.2 * len(usable_x) + key_width, height), squeeze=False)
    for ax, (xk, idx, xy, front, groups) in zip(axes[0], panels):
        ax.scatter([p[0] for p in xy], [p[1] for p in xy], s=36, color="tab:blue", zorder=3, label="configuration")
        fx, fy = [float(pts[xk].iloc[i]) for i in front], [float(pts["acc"].iloc[i]) for i in front]
        ax.step(fx, fy, where="post", color="tab:red", lw=1.5, zorder=2, label="Pareto frontier")
        ax.scatter(fx, fy, s=70, facecolors="none", edgecolors="tab:red", zorder=4)
        ax.margins(0.15)
        if len(groups) < len(point_groups(xy)):
            ax.text(0.99, 0.01, f"numbered: the frontier's {len(groups)} of {len(xy)} points", transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=7, color="0.35")
        ax.set_xlabel(x_words[xk])
        ax.set_ylabel(ylabel.split(":")[0])  # a mean over several splits names them in the title
        ax.grid(alpha=0.3)
    mean_of = f"\ny = {ylabel}" if ":" in ylabel else ""
    what = "the study's objectives" if x == "objectives" else "accuracy vs cost"
    fig.suptitle(f"{sw.experiment}: {what} ({stat} over seeds){mean_of}", fontsize=10)
    tight_layout(fig, rect=(0, 0, 1 - key_width / fig.get_figwidth(), 1))
    fig.text(1 - key_width / fig.get_figwidth() + 0.01, 0.88, "\n".join(key), fontsize=KEY_PT, va="top", ha="left",
             family="monospace")
    for ax, (xk, idx, xy, front, groups) in zip(axes[0], panels):  # labels placed in the final layout
        draw_labels(ax, [xy[g[0]] for g in groups], [", ".join(str(idx[i] + 1) for i in g) for g in groups])
        ax.legend(fontsize=8, loc="best")
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


# Curves drawn each in its own colour, line style and marker, with its band and legend entry, before only the best
# are: a legend of hundreds of entries runs off the figure and hundreds of bands cover every curve. The others are
# drawn as one thin grey LineCollection, and the legend's title says what is omitted.
MAX_CURVES = 10


def lower_is_better(sw, metric: str) -> bool:
    """Whether a smaller ``metric`` is the better one: the sweep's own mode for its metrics, else by kind (losses,
    times and memory down, the rest up)."""
    spec = getattr(sw, "spec", None)
    if spec is not None and metric in spec.metrics:
        return spec.modes[spec.metrics.index(metric)] == "min"
    kind = metric.rpartition("/")[2]
    return kind == "loss" or kind.endswith("_ms") or kind.endswith("_mb")


def history_frame(histories: dict, run_sig: dict) -> pd.DataFrame:
    """Every logged point of the runs as one frame: sig (the run's configuration), run_id, step, value; a step a run
    logged twice keeps its last value (as a curve of that run did)."""
    rows = [(run_sig[rid], rid, m.step, m.value) for rid, hist in histories.items() for m in hist]
    frame = pd.DataFrame(rows, columns=["sig", "run_id", "step", "value"])
    return frame.drop_duplicates(["run_id", "step"], keep="last")


def training_curves(points: pd.DataFrame, runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``dev/<kind>`` as training saw it: a trial's final dev value (the tested, best-dev weights, under the test
    inference: rirlab.train) takes its last step's place in the history; where the run recorded that step's own
    dev evaluation (``last/dev_<kind>``), its curve ends on that instead. Runs recorded before it are as logged."""
    split, _, kind = metric.partition("/")
    column = f"metric.{contract.LAST_PREFIX_METRIC}dev_{kind}"
    if split != "dev" or column not in runs or points.empty:
        return points
    last = points["step"] == points.groupby("run_id")["step"].transform("max")
    values = points.loc[last, "run_id"].map(dict(zip(runs["run_id"], runs[column]))).dropna()
    points.loc[values.index, "value"] = values.astype(float)
    return points


def curves_plot(client, sw, metric: str, out, stat: str = DEFAULT_STAT, ci: str = DEFAULT_CI) -> int:
    """``metric`` against step for each configuration: ``stat`` over seeds (the tables' statistic), the band its
    95% interval (``ci``); each configuration has its own colour, line style and marker. Past MAX_CURVES
    configurations the best MAX_CURVES by their last point are drawn so, the others as thin grey lines without bands,
    and the legend says so."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    from rirlab.analysis.runs import metric_histories

    df = sw.runs[sw.runs["status"].isin(["FINISHED", "RUNNING"])] if not sw.runs.empty else sw.runs
    if df.empty:
        raise UserError(f"no runs of '{sw.experiment}' to plot; run `rirlab sweep` first")
    run_sig = dict(zip(df["run_id"], (signature(s) for s in df["swept"])))
    # every run's history in one read (one query per 500 runs on a database store, a request per 100 on a server)
    points = training_curves(history_frame(metric_histories(client, list(df["run_id"]), metric), run_sig), df, metric)
    centres, _ = centre_groups(points[["sig", "step", "value"]], ["sig", "step"], stat)  # one groupby, every curve
    seeds = points.groupby("sig")["run_id"].nunique()
    rows = [row for row in ablation_rows(sw.spec, list(df["swept"])) if row.sig in seeds.index]
    if not rows:
        raise UserError(f"no run logged metric '{metric}'; try dev/accuracy, train/loss or "
                        f"{contract.CPU_TIME_PER_STEP_MS}")
    curve = {row.sig: centres["value"].loc[row.sig].sort_index() for row in rows}
    order = {row.sig: i for i, row in enumerate(ablation_rows(sw.spec, list(df["swept"])))}  # colours as before
    shown = rows
    if len(rows) > MAX_CURVES:  # the best by their last point, in the order of the rows
        best = sorted(rows, key=lambda r: curve[r.sig].iloc[-1], reverse=not lower_is_better(sw, metric))
        keep = {r.sig for r in best[:MAX_CURVES]}
        shown = [r for r in rows if r.sig in keep]
        order = {r.sig: i for i, r in enumerate(shown)}
    longest = max(len(f"{row.label} (n={seeds[row.sig]})") for row in shown)  # the legend's widest entry
    legend_in = min(7.0, max(2.9, 0.8 + 0.053 * longest))  # inches kept right of the axes for the legend
    fig, ax = plt.subplots(figsize=(4.6 + legend_in, 4.4))
    rest = [row for row in rows if row not in shown]
    if rest:  # one artist for all the others
        ax.add_collection(LineCollection([np.column_stack([curve[r.sig].index, curve[r.sig].to_numpy()]) for r in rest],
                                         colors="0.55", linewidths=0.6, alpha=0.6, zorder=1.5, gid=OTHERS_GID))  # over the bands
    banded = False
    # 7 markers x 4 line styles, stepped together (28 distinct pairs); markers of each curve start at another
    # point, so curves that coincide still show every one's markers
    styles = zip(itertools.cycle(("-", "--", ":", "-.")), itertools.cycle(("o", "s", "^", "D", "v", "P", "X")))
    for n, row in enumerate(shown):
        line = curve[row.sig]
        color, (ls, mk) = f"C{order[row.sig] % 10}", next(styles)
        every = 1 if len(line) <= 6 else max(2, len(line) // 10)  # few points: mark them all
        ax.plot(line.index, line.to_numpy(), color=color, ls=ls, marker=mk, ms=5, mfc="none", mew=1.2, lw=1.6,
                markevery=(n % every, every), label=f"{row.label} (n={seeds[row.sig]})")
        if seeds[row.sig] > 1:
            table = points[points["sig"] == row.sig].pivot(index="step", columns="run_id", values="value")
            ax.fill_between(table.index, *seed_band(table, stat, ci), color=color, alpha=0.15, lw=0)
            banded = True
    ax.autoscale_view()
    words = metric_words(metric, dict(sw.splits))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel(words)
    # two lines: one would run past the figure's edge beside the legend
    ax.set_title(f"{sw.experiment}: {words}\n({stat} over seeds" + (f", band = {BANDS[ci]})" if banded else ")"),
                 fontsize=10)
    if banded:  # every seed's own values: the y axis spans them, not a band of few seeds
        _axis_on_the_seeds(ax, [float(points["value"].min())], [float(points["value"].max())])
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0]
    title = None
    if rest:
        handles.append(Line2D([], [], color="0.6", lw=0.6, label=f"the other {len(rest)} (no band)"))
        title = f"the {len(shown)} {'lowest' if lower_is_better(sw, metric) else 'highest'} of {len(rows)} " \
                f"configurations\nby the last point"
    if banded:
        handles.append(Patch(color="0.5", alpha=0.3, label=f"band: {BANDS[ci]}"))
    legend = ax.legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                       title=title, title_fontsize=7.5)
    legend.set_in_layout(False)  # its room is kept by hand: the layout squeezed the axes yet let a long legend run off
    tight_layout(fig, rect=(0, 0, 1 - legend_in / fig.get_figwidth(), 1))
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return len(rows)


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
