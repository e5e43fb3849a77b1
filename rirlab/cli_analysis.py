"""`rirlab tables` (and, later, export and plots): reading sweeps back out of MLflow."""

from __future__ import annotations

import click

from rirlab.cli import main, tracking_option
from rirlab.errors import UserError


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False), required=False)
@click.option("--experiment", default=None, help="Experiment name (default: the spec's name).")
@tracking_option
@click.option("--format", "fmt", type=click.Choice(["markdown", "csv", "latex"]), default="markdown", show_default=True)
@click.option("--stat", type=click.Choice(["mean", "median"]), default="mean", show_default=True,
              help="Centre of each cell over seeds.")
@click.option("--parent", default=None, metavar="RUN_ID", help="Sweep parent run to read (default: the latest).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the table to FILE instead of stdout.")
def tables(spec, experiment, tracking_uri, fmt, stat, parent, out):
    """Print the table of a sweep: one row per configuration, one column per evaluation split."""
    from mlflow.tracking import MlflowClient

    from analysis.runs import child_runs, latest_parent
    from analysis.tables import build_table, render
    from sweeps.tracking import resolve_tracking_uri

    if spec is None and experiment is None:
        raise UserError("give a SPEC file or --experiment NAME")
    n_expected = 0
    if spec is not None:
        from sweeps.spec import load_spec

        loaded = load_spec(spec)
        experiment = experiment or loaded.spec.name
    client = MlflowClient(resolve_tracking_uri(tracking_uri))
    exp, parent_run = latest_parent(client, experiment, parent)
    n_expected = int(parent_run.data.tags.get("rirlab.seeds", "0") or 0)
    df = child_runs(client, exp.experiment_id, parent_run.info.run_id)
    if df.empty:
        raise UserError(f"sweep run {parent_run.info.run_id} of '{experiment}' has no trial runs yet")
    text = render(build_table(df, stat=stat, n_expected=n_expected), fmt)
    if out:
        with open(out, "w") as f:
            f.write(text)
        click.echo(f"wrote {out}")
    else:
        click.echo(text, nl=False)
