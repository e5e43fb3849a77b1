"""`rirlab models`, `rirlab tasks`: what the registries hold."""

from __future__ import annotations

import click


@click.command("models")
def list_models():
    """List registered models, the task kinds they support and what each is.

    A model's config fields are flat keys of a trial (`--set`, sweep specs); plugins listed in $RIRLAB_PLUGINS
    appear here too.

    \b
    rirlab models
    """
    from rirlab.models import registry

    for name in registry.names():
        e = registry.get(name)
        click.echo(f"{name:14s} [{','.join(e.kinds)}] {e.doc.splitlines()[0] if e.doc else ''}")


@click.command("tasks")
def list_tasks():
    """List registered tasks, their kind (classify, pair, lm) and what each is.

    \b
    rirlab tasks
    rirlab data generate listops --split test --out -   # a task's data files
    """
    from rirlab.tasks import registry

    for name in registry.names():
        e = registry.get(name)
        click.echo(f"{name:14s} [{e.kind}] {e.doc.splitlines()[0] if e.doc else ''}")
