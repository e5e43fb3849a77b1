"""Options shared by several commands."""

from __future__ import annotations

import os
import sys

import click


def command_name() -> str:
    """How the user called rirlab, for the commands the CLI suggests: ``.venv/bin/rirlab`` when they typed that
    path (as the README does), else ``rirlab``."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "rirlab" and os.sep in argv0:
        rel = os.path.relpath(argv0)
        return rel if not rel.startswith("..") else argv0
    return "rirlab"

tracking_option = click.option("--tracking-uri", default=None, metavar="URI",
                               help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns.db).")
set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override any config field, e.g. --set chunk_size=20 (repeatable).")
