"""Plots of a sweep (matplotlib): the Pareto frontier of accuracy against cost (RIR Appendix F,
Figure 2 a and b) and training curves per configuration (mean over seeds with a min-max band)."""

from __future__ import annotations

from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.layouts import ablation_rows, signature  # noqa: E402
from analysis.tables import metric_column, split_columns, usable  # noqa: E402
from sweeps import schema  # noqa: E402
from sweeps.schema import UserError  # noqa: E402

X_AXES = {"time": "training time per sample (ms)", "memory": "peak memory (MB)"}


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
    if split:
        return [split], f"{split} accuracy"
    names = [s for s, _ in sw.splits]  # as the sweep recorded them, in the papers' order
    present = set(split_columns(df))
    ood = [s for s in names[1:] if s in present]  # the first split is the near-IID test split
    if ood:
        return ood, "OOD accuracy (mean over " + ", ".join(ood) + ")"
    cols = [s for s in names if s in present] or split_columns(df)
    if not cols:
        raise UserError("the runs have no evaluation split metrics (<split>/accuracy); did the trials finish?")
    return cols[:1], f"{cols[0]} accuracy (no OOD split evaluated)"


def configuration_points(sw, split: Optional[str] = None, stat: str = "median") -> tuple[pd.DataFrame, str]:
    """One row per configuration: label, accuracy (centre over seeds), time per sample, peak memory."""
    df = usable(sw.runs)
    if df.empty:
        raise UserError(f"no finished runs of '{sw.experiment}' to plot; run `rirlab sweep` first")
    splits, ylabel = _ood_splits(sw, df, split)
    missing = [s for s in splits if metric_column(s) not in df.columns]
    if missing:
        raise UserError(f"no runs report split '{missing[0]}'; splits: {', '.join(split_columns(df))}")
    time_col, batch_col = f"metric.{schema.TIME_PER_STEP_MS}", f"param.{schema.PARAM_BATCH_SIZE}"
    df = df.assign(acc=df[[metric_column(s) for s in splits]].mean(axis=1),
                   time=df[time_col].astype(float) / df[batch_col].astype(float) if time_col in df else float("nan"),
                   memory=df.get(f"metric.{schema.PEAK_MEM_MB}", float("nan")), sig=[signature(s) for s in df["swept"]])
    agg = "median" if stat == "median" else "mean"
    rows = []
    for row in ablation_rows(sw.spec, list(df["swept"])):
        g = df[df["sig"] == row.sig]
        if len(g):
            rows.append({"label": row.label, "acc": getattr(g["acc"], agg)(), "time": getattr(g["time"], agg)(),
                         "memory": getattr(g["memory"], agg)(), "n": len(g)})
    return pd.DataFrame(rows), ylabel


def pareto_plot(sw, out, x: str = "both", split: Optional[str] = None, stat: str = "median") -> int:
    pts, ylabel = configuration_points(sw, split, stat)
    axes_x = ["time", "memory"] if x == "both" else [x]
    fig, axes = plt.subplots(1, len(axes_x), figsize=(5.5 * len(axes_x), 4.2), squeeze=False)
    for ax, xk in zip(axes[0], axes_x):
        xy = list(zip(pts[xk].astype(float), pts["acc"].astype(float)))
        front = pareto_front(xy)
        ax.scatter(pts[xk], pts["acc"], s=36, color="tab:blue", zorder=3, label="configuration")
        fx, fy = [xy[i][0] for i in front], [xy[i][1] for i in front]
        ax.step(fx, fy, where="post", color="tab:red", lw=1.5, zorder=2, label="Pareto frontier")
        ax.scatter(fx, fy, s=70, facecolors="none", edgecolors="tab:red", zorder=4)
        for (px, py), lbl in zip(xy, pts["label"]):
            ax.annotate(lbl, (px, py), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel(X_AXES[xk])
        ax.set_ylabel(ylabel if len(ylabel) < 50 else ylabel.split(" (")[0])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{sw.experiment}: accuracy vs cost ({stat} over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return len(pts)


def curves_plot(client, sw, metric: str, out) -> int:
    """``metric`` against step for each configuration: mean over seeds, min-max band."""
    df = sw.runs[sw.runs["status"].isin(["FINISHED", "RUNNING"])] if not sw.runs.empty else sw.runs
    if df.empty:
        raise UserError(f"no runs of '{sw.experiment}' to plot; run `rirlab sweep` first")
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    n = 0
    sigs = [signature(s) for s in df["swept"]]
    for i, row in enumerate(ablation_rows(sw.spec, list(df["swept"]))):
        series = []
        for run_id in df["run_id"][[s == row.sig for s in sigs]]:
            hist = client.get_metric_history(run_id, metric)
            if hist:
                series.append(pd.Series({m.step: m.value for m in hist}, name=run_id))
        if not series:
            continue
        table = pd.concat(series, axis=1).sort_index()  # (steps, seeds)
        color = f"C{i % 10}"
        ax.plot(table.index, table.mean(axis=1), color=color, lw=1.6, label=f"{row.label} (n={len(series)})")
        if len(series) > 1:
            ax.fill_between(table.index, table.min(axis=1), table.max(axis=1), color=color, alpha=0.2, lw=0)
        n += 1
    if n == 0:
        plt.close(fig)
        raise UserError(f"no run logged metric '{metric}'; try dev/accuracy, train/loss or time_per_step_ms")
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(f"{sw.experiment}: {metric} (mean over seeds, band = min-max)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return n
