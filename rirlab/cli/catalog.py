"""`rirlab models`, `rirlab tasks`: what the registries hold."""

from __future__ import annotations

import click


@click.command("models")
def list_models():
    """List registered models and the task kinds they support."""
    from rirlab.models import registry

    for name in registry.names():
        e = registry.get(name)
        click.echo(f"{name:14s} [{','.join(e.kinds)}] {e.doc.splitlines()[0] if e.doc else ''}")


@click.command("tasks")
def list_tasks():
    """List registered tasks."""
    from rirlab.tasks import registry

    for name in registry.names():
        e = registry.get(name)
        click.echo(f"{name:14s} [{e.kind}] {e.doc.splitlines()[0] if e.doc else ''}")
