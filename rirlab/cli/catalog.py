"""`rirlab models`, `rirlab tasks`: what the registries hold."""

from __future__ import annotations

import click


def first_paragraph(doc: str) -> str:
    """A docstring's first paragraph on one line."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def entry_facts(e) -> str:
    """What the trainer and the bench take from a model's registry entry, where it differs from the default."""
    facts = ["selects by dev accuracy"] if e.select_by == "accuracy" else []
    facts += [f"auxiliary loss weighted by {e.aux_loss_key}"] if e.aux_loss_key else []
    facts += [f"RIR Table 1 row {e.table1_row}"] if e.table1_row is not None else []
    facts += [f"Table 1 with {', '.join(f'{k}={v}' for k, v in e.table1_settings.items())}"] if e.table1_settings \
        else []
    return "; ".join(facts)


@click.command("models")
def list_models():
    """List registered models (the catalogue: every model family's file registers its own), the task kinds they
    support, what each is, and what the trainer and bench take from it (dev metric under `select_by: auto`,
    auxiliary-loss weight, RIR Table 1 row).

    A model's config fields are flat keys of a trial (`--set`, sweep specs); plugins listed in $RIRLAB_PLUGINS
    appear here too.

    \b
    rirlab models
    """
    from rirlab.models import registry

    for name in registry.names():
        e = registry.get(name)
        click.echo(f"{name:14s} [{','.join(e.kinds)}] {first_paragraph(e.doc)}")
        facts = entry_facts(e)
        if facts:
            click.echo(f"{'':16s}{facts}")


@click.command("tasks")
def list_tasks():
    """List registered tasks, their kind (classify, pair, lm) and what each is; for the tasks read from your own
    files, the files each expects under its data_dir (`--set data_dir=DIR`, else $RIRLAB_DATA, else ./data).

    \b
    rirlab tasks
    rirlab data generate listops --split test --out -   # a task's data files
    rirlab train --model ebt_grc --task snli --set data_dir=~/data   # reads ~/data/snli_1.0/...
    """
    from rirlab.tasks import registry
    from rirlab.tasks.text import GLOVE_FILE, TextTask, data_root

    for name in registry.names():
        e = registry.get(name)
        click.echo(f"{name:14s} [{e.kind}] {e.doc.splitlines()[0] if e.doc else ''}")
        if isinstance(e, TextTask):
            for key, rel in e.files.items():
                used = [s for s, keys in e.needs.items() if key in keys]
                click.echo(f"{'':16s}{rel}  ({', '.join(used)})")
            if "embeddings" in {f for f in e.config.__dataclass_fields__}:
                click.echo(f"{'':16s}{GLOVE_FILE}  (frozen GloVe 840B-300d; or --set glove_path=FILE, "
                           f"--set embeddings=random)")
    click.echo(f"data_dir now: {data_root(None)}  (--set generated=true: a generated stand-in corpus instead)")
