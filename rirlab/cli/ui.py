"""`rirlab ui`: the MLflow UI on the store the sweeps write to."""

from __future__ import annotations

import sys

import click

from rirlab.cli.options import tracking_option


@click.command()
@tracking_option
@click.option("--port", default=5000, show_default=True, help="Port of the MLflow UI.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (0.0.0.0 exposes it).")
def ui(tracking_uri, port, host):
    """Start the MLflow UI on the same store `rirlab sweep` writes to (runs nested under each sweep).

    \b
    rirlab ui                                   # sqlite:///mlruns.db in this directory
    rirlab ui --tracking-uri http://mlflow:5000 --port 5001
    """
    import os

    from sweeps.tracking import artifact_root, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    root = artifact_root(uri)
    if root:
        cmd += ["--default-artifact-root", root]
    click.echo(f"MLflow UI on http://{host}:{port} for {uri} (Ctrl-C stops it)")
    os.execv(sys.executable, cmd)
