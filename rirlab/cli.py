"""The `rirlab` command line. Heavy imports (torch, ray, mlflow) happen inside the commands."""

from __future__ import annotations

import sys

import click

from rirlab import __version__
from rirlab.errors import UserError

TRAIN_QUICK = {"steps": 200, "batch_size": 32, "eval_every": 100, "log_every": 20, "max_eval_examples": 200}


class Group(click.Group):
    """Turns UserError into one line on stderr and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(err.exit_code)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="rirlab")
def main():
    """Sweeps and ablations for Recursion-in-Recursion sequence models.

    \b
    Typical session:
      rirlab sweep search_spaces/chunk_beam.yaml --quick   # Ray Tune trials, recorded in MLflow
      rirlab tables search_spaces/chunk_beam.yaml          # the ablation table from those runs
      rirlab ui                                            # browse every trial in the MLflow UI

    The MLflow store is --tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///mlruns.db in the
    current directory.
    """


tracking_option = click.option("--tracking-uri", default=None, metavar="URI",
                               help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns.db).")
set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override any config field, e.g. --set chunk_size=20 (repeatable).")


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--quick", is_flag=True, help="Apply the spec's quick: block (tiny model, few steps; minutes on a CPU).")
@tracking_option
@click.option("--address", default=None, metavar="ADDR",
              help="Ray cluster to run on: auto, HOST:PORT or ray://HOST:PORT (default: a local Ray sized to this machine).")
@set_option
@click.option("--dry-run", is_flag=True, help="Print the expanded trials and the spec hash; start nothing.")
@click.option("--resume", is_flag=True, help="Continue the last sweep of this spec (same --quick/--set) after its driver died.")
@click.option("--no-checkpoint-artifacts", is_flag=True, help="Do not copy each trial's final checkpoint into MLflow.")
@click.option("--output-dir", default="rirlab_runs", show_default=True, type=click.Path(file_okay=False),
              help="Where Ray Tune keeps trial state, checkpoints and Ray's logs.")
def sweep(spec, quick, tracking_uri, address, sets, dry_run, resume, no_checkpoint_artifacts, output_dir):
    """Run the sweep described by the YAML file SPEC with Ray Tune, recording every trial in MLflow.

    The spec is validated completely (every trial's config) before Ray or MLflow is touched.
    """
    from rirlab.config import parse_overrides
    from sweeps.spec import load_spec

    loaded = load_spec(spec, quick=quick, overrides=parse_overrides(sets))
    if dry_run:
        from sweeps.runner import dry_run as show

        show(loaded)
        return
    from sweeps.runner import run_sweep
    from sweeps.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    click.echo(f"sweep {loaded.spec.name} (spec hash {loaded.hash}) -> MLflow {uri}")
    try:
        counts = run_sweep(loaded, uri, address=address, resume=resume,
                           checkpoint_artifacts=not no_checkpoint_artifacts, output_root=output_dir)
    except KeyboardInterrupt:
        click.echo(f"interrupted; continue with: rirlab sweep {spec}{' --quick' if quick else ''}"
                   f"{''.join(' --set ' + s for s in sets)} --resume", err=True)
        sys.exit(130)
    if counts["interrupted"]:
        sys.exit(130)
    click.echo(f"done: {counts['finished']} finished, {counts['failed']} failed; parent run {counts['parent_run_id']}")
    click.echo(f"next: rirlab tables {spec}   |   rirlab ui")
    if counts["finished"] == 0:
        sys.exit(1)


@main.command()
@click.option("--model", required=True, help="Registered model name (see `rirlab models`).")
@click.option("--task", required=True, help="Registered task name, e.g. listops.")
@click.option("--quick", is_flag=True, help="Small data, tiny model, 200 steps.")
@set_option
@tracking_option
@click.option("--experiment", default="rirlab-train", show_default=True, help="MLflow experiment to record the run in.")
def train(model, task, quick, sets, tracking_uri, experiment):
    """Train and evaluate ONE trial in this process (no Ray), recording one MLflow run."""
    from rirlab.config import field_names, resolve
    from rirlab.models import registry as models
    from rirlab.tasks import registry as tasks
    from rirlab.config import parse_overrides

    config = {"model": model, "task": task}
    if quick:
        config.update(TRAIN_QUICK)
        config.update(dict(tasks.get(task).quick))
        if "hidden_size" in field_names(models.get(model).config):
            config["hidden_size"] = 32
    config.update(parse_overrides(sets))
    flat = resolve(config, where="train").flat()

    from rirlab.train import run_trial
    from sweeps.tracking import Tracker, resolve_tracking_uri

    tracker = Tracker(resolve_tracking_uri(tracking_uri))
    exp_id = tracker.experiment_id(experiment)
    run_id = tracker.client.create_run(exp_id, run_name=f"{model}-{task}").info.run_id
    tracker.log_params(run_id, flat)
    click.echo(f"run {run_id} in experiment '{experiment}'")

    def report(metrics, checkpoint=None):
        tracker.log_result(run_id, metrics, int(metrics.get("step", 0)))
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}
        click.echo(" ".join(f"{k}={v}" for k, v in shown.items()))

    try:
        run_trial(config, report)
    except BaseException as err:
        tracker.finish(run_id, "FAILED" if not isinstance(err, KeyboardInterrupt) else "KILLED", repr(err))
        raise
    tracker.finish(run_id, "FINISHED")


@main.command()
@tracking_option
@click.option("--port", default=5000, show_default=True, help="Port of the MLflow UI.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (0.0.0.0 exposes it).")
def ui(tracking_uri, port, host):
    """Start the MLflow UI on the same store `rirlab sweep` writes to (runs nested under each sweep)."""
    import os

    from sweeps.tracking import artifact_root, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    root = artifact_root(uri)
    if root:
        cmd += ["--default-artifact-root", root]
    click.echo(f"MLflow UI on http://{host}:{port} for {uri} (Ctrl-C stops it)")
    os.execv(sys.executable, cmd)


@main.command("models")
def list_models():
    """List registered models and the task kinds they support."""
    from rirlab.models import registry

    for name in registry.names():
        e = registry.get(name)
        click.echo(f"{name:14s} [{','.join(e.kinds)}] {e.doc.splitlines()[0] if e.doc else ''}")


@main.command("tasks")
def list_tasks():
    """List registered tasks."""
    from rirlab.tasks import registry

    for name in registry.names():
        e = registry.get(name)
        click.echo(f"{name:14s} [{e.kind}] {e.doc.splitlines()[0] if e.doc else ''}")


# Further command groups register themselves on `main` when imported (one module per area).
from rirlab import cli_analysis  # noqa: E402,F401  tables (export and plots come with the analysis issue)
from rirlab import cli_bench  # noqa: E402,F401  bench
from rirlab import cli_data  # noqa: E402,F401  data generate|verify|stats|import

if __name__ == "__main__":
    main()
