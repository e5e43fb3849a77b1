"""`rirlab tables`, `rirlab export`, `rirlab plot pareto|curves`: reading sweeps back out of MLflow."""

from __future__ import annotations

import click

from rirlab.cli.options import tracking_option
from rirlab.errors import UserError

spec_argument = click.argument("spec", type=click.Path(dir_okay=False, exists=True), required=False)
experiment_option = click.option("--experiment", default=None, help="Experiment name (default: the spec's name).")
parent_option = click.option("--parent", default=None, metavar="RUN_ID", help="Sweep parent run to read (default: the latest).")
stat_option = click.option("--stat", type=click.Choice(["median", "mean"]), default="median", show_default=True,
                           help="Centre of each cell over seeds (the papers report the median of 3 runs on ListOps).")


def _write(text: str, out) -> None:
    if out:
        with open(out, "w") as f:
            f.write(text)
        click.echo(f"wrote {out}")
    else:
        click.echo(text, nl=False)


def _sweep(spec, experiment, tracking_uri, parent, allow_empty=False):
    """(client, Sweep) for SPEC or --experiment."""
    from mlflow.tracking import MlflowClient

    from analysis.runs import load_sweep
    from sweeps.tracking import resolve_tracking_uri

    if spec is None and experiment is None:
        raise UserError("give a SPEC file or --experiment NAME")
    loaded = None
    if spec is not None:
        from analysis.runs import read_spec

        loaded = read_spec(spec)
        experiment = experiment or loaded.name
    client = MlflowClient(resolve_tracking_uri(tracking_uri))
    return client, load_sweep(client, experiment, parent, spec=loaded, allow_empty=allow_empty and loaded is not None)


def _where(pairs) -> dict:
    from rirlab.config import parse_overrides

    return parse_overrides(pairs)


@click.command()
@spec_argument
@experiment_option
@tracking_option
@parent_option
@click.option("--layout", type=click.Choice(["ablation", "pivot"]), default="ablation", show_default=True,
              help="ablation: a row per configuration, a column per split (RIR Table 5); pivot: two swept axes.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "latex", "csv"]), default="markdown", show_default=True)
@stat_option
@click.option("--metric", default="accuracy", show_default=True, help="Per-split metric in the cells (<split>/<metric>).")
@click.option("--reference", default=None, metavar="NAME[:TABLE]",
              help="Add the paper's published row under each of ours with the difference: rir, ebt, halt (or rir:table5).")
@click.option("--rows", "rows_key", default=None, help="pivot: swept parameter along the rows (default: the first swept).")
@click.option("--cols", "cols_key", default=None, help="pivot: swept parameter along the columns (default: the second).")
@click.option("--split", default=None, help="pivot: evaluation split of the cells (default: the task's first test split).")
@click.option("--where", multiple=True, metavar="KEY=VALUE", help="pivot: keep only runs with this swept value (repeatable).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the table to FILE instead of stdout.")
def tables(spec, experiment, tracking_uri, parent, layout, fmt, stat, metric, reference, rows_key, cols_key, split,
           where, out):
    """Print the table of a sweep, from its runs in MLflow, in the papers' style (median ± std over seeds).

    \b
    rirlab tables search_spaces/chunk_beam.yaml --format latex
    rirlab tables search_spaces/rir_ablation.yaml --reference rir      # RIR Table 5 beside ours
    rirlab tables search_spaces/chunk_beam.yaml --layout pivot --rows chunk_size --cols beam_size
    """
    from analysis import tables as T

    client, sw = _sweep(spec, experiment, tracking_uri, parent, allow_empty=True)
    if sw.parent is not None and sw.runs.empty and not reference and layout == "pivot":
        raise UserError(f"sweep run {sw.parent.info.run_id} of '{sw.experiment}' has no trial runs yet")
    if layout == "ablation":
        grid = T.ablation(sw.runs, spec=sw.spec, stat=stat, metric=metric, n_expected=sw.n_expected, reference=reference,
                          splits=sw.splits)
    else:
        if sw.runs.empty:
            raise UserError(f"no runs of '{sw.experiment}' yet: run `rirlab sweep` first (a pivot needs runs)")
        keys = [k for k in (sw.spec.search if sw.spec is not None else {})] or \
            [k for k in sw.runs["swept"].iloc[0] if k not in ("seed", "variant")]
        rows_key = rows_key or (keys[0] if keys else None)
        cols_key = cols_key or next((k for k in keys if k != rows_key), None)
        if not rows_key or not cols_key:
            raise UserError(f"a pivot needs two swept parameters; this sweep swept {', '.join(keys) or 'none'} "
                            f"(use the ablation layout)")
        split = split or (sw.splits[0][0] if sw.splits else (T.split_columns(T.usable(sw.runs), metric) or ["test"])[0])
        grid = T.pivot(sw.runs, rows_key, cols_key, split, stat=stat, metric=metric, n_expected=sw.n_expected,
                       where=_where(where))
    if sw.parent is None:
        click.echo(f"note: no sweep of '{sw.experiment}' in the tracking store yet; showing the layout only", err=True)
    _write(T.render(grid, fmt), out)


@click.command()
@click.option("--experiment", required=True, help="Experiment (sweep spec name) to export.")
@tracking_option
@click.option("--parent", default=None, metavar="RUN_ID", help="Only the trials of this sweep parent run.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Parquet file of the runs (one row per trial).")
@click.option("--history/--no-history", default=True, show_default=True,
              help="Also write per-step metric histories to OUT's stem + .history.parquet.")
def export(experiment, tracking_uri, parent, out, history):
    """Export every trial run of an experiment to Parquet: ids, status, params, final metrics (+ histories)."""
    from mlflow.tracking import MlflowClient

    from analysis.export import export_runs
    from sweeps.tracking import resolve_tracking_uri

    client = MlflowClient(resolve_tracking_uri(tracking_uri))
    paths = export_runs(client, experiment, out, parent_id=parent, history=history)
    for kind, (path, n) in paths.items():
        click.echo(f"wrote {path} ({n} {kind} rows)")


@click.group()
def plot():
    """Plots of a sweep: Pareto frontiers (accuracy vs time/memory) and training curves."""


@plot.command()
@spec_argument
@experiment_option
@tracking_option
@parent_option
@click.option("--x", "x", type=click.Choice(["time", "memory", "both"]), default="both", show_default=True,
              help="x axis: time per sample (ms) or peak memory (MB); both = two panels (RIR Figure 2 a, b).")
@click.option("--split", default=None, help="y: accuracy on this split (default: mean over the task's OOD splits).")
@stat_option
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Image file: .png, .svg or .pdf.")
def pareto(spec, experiment, tracking_uri, parent, x, split, stat, out):
    """OOD accuracy against time per sample and peak memory, a point per configuration, Pareto frontier drawn."""
    from analysis.plots import pareto_plot

    _, sw = _sweep(spec, experiment, tracking_uri, parent)
    n = pareto_plot(sw, out, x=x, split=split, stat=stat)
    click.echo(f"wrote {out} ({n} configurations)")


@plot.command()
@spec_argument
@experiment_option
@tracking_option
@parent_option
@click.option("--metric", default="dev/accuracy", show_default=True, help="Logged metric to plot against step.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Image file: .png, .svg or .pdf.")
def curves(spec, experiment, tracking_uri, parent, metric, out):
    """Training curves per configuration: mean over seeds with a min-max band."""
    from analysis.plots import curves_plot

    client, sw = _sweep(spec, experiment, tracking_uri, parent)
    n = curves_plot(client, sw, metric, out)
    click.echo(f"wrote {out} ({n} configurations)")
