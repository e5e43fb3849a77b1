"""Options shared by several commands."""

from __future__ import annotations

import click

tracking_option = click.option("--tracking-uri", default=None, metavar="URI",
                               help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns.db).")
set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override any config field, e.g. --set chunk_size=20 (repeatable).")
