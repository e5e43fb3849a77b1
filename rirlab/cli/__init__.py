"""The `rirlab` command line: one module per command group, added to ``main`` here.

Heavy imports (torch, ray, mlflow) happen inside the commands, so ``--help`` is fast.
"""

from __future__ import annotations

import sys

import click

from rirlab import __version__
from rirlab.errors import UserError


class Group(click.Group):
    """Turns UserError into one line on stderr and exit code 2 (a line per problem where it names several, e.g.
    every error of a spec)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as err:
            for line in str(err).splitlines() or [""]:
                click.echo(f"error: {line}", err=True)
            sys.exit(err.exit_code)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="rirlab")
def main():
    """Sweeps and ablations for Recursion-in-Recursion sequence models.

    \b
    Typical session:
      rirlab sweep search_spaces/chunk_beam.yaml --quick   # Ray Tune trials, recorded in MLflow
      rirlab tables search_spaces/chunk_beam.yaml          # the ablation table from those runs
      rirlab importance search_spaces/chunk_beam.yaml      # which swept parameters the metric depends on
      rirlab ui                                            # browse every trial in the MLflow UI

    The MLflow store is --tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///mlruns.db in the
    current directory.
    """


from rirlab.cli import analysis, bench, catalog, data, evaluate, sweep, train, ui  # noqa: E402  (one module per command group)

for _command in (sweep.sweep, train.train, evaluate.evaluate, analysis.tables, analysis.export, analysis.plot, bench.bench, data.data,
                 ui.ui, catalog.list_models, catalog.list_tasks):
    main.add_command(_command)
main.add_command(analysis.runs)  # `rirlab runs`: the sweeps of a spec
main.add_command(analysis.importance)  # `rirlab importance`: optuna.importance of a sweep's runs
