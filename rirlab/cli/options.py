"""Options shared by several commands."""

from __future__ import annotations

import functools
import gc
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


def read_only(fn):
    """A command that reads the store and ends: the cyclic garbage collector is paused while it runs. Importing
    MLflow and opening its SQLAlchemy store build some 10^5 long-lived objects, and the collector's passes over
    them (which free nothing) are about 15% of such a command's time (issue 33 item 6); reference counting still
    frees everything else."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return run
