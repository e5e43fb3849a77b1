"""`rirlab data generate|verify|stats|import`: the tasks' data files, through the Task interface only.

Every task reads and writes its standard text format (see the task modules):
``listops`` ``LABEL<TAB>TEXT`` (LRA's ``Source<TAB>Target`` files are read too),
``logic`` ``RELATION<TAB>premise<TAB>hypothesis``, ``flipflop`` one
space-separated token sequence per line. A malformed line is reported as
``file:line: reason`` and exits 2; a wrong label found by ``verify`` exits 1.

``import`` converts files into ``<cache>/<task>/imported/<split>.parquet``; a
trial then reads that split instead of generating it when the task config lists
it in ``imported`` (``--set imported=[test]`` or ``imported: [test]`` in a spec).
"""

from __future__ import annotations

import json
import sys
import time

import click

from rirlab.cli.options import set_option
from rirlab.errors import UserError

task_argument = click.argument("task", metavar="TASK")
files_argument = click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))


def _task(name: str):
    """The registered Task; an unknown name is one line with a did-you-mean and the known tasks (exit 2)."""
    from rirlab.tasks import registry

    return registry.get(name)


def _config(task, sets: tuple, seed=None):
    from rirlab.config import build, parse_overrides

    values = parse_overrides(sets)
    if seed is not None:
        values["data_seed"] = seed
    return build(task.config, values, f"data {task.name}")


def read_rows(task, paths) -> list[tuple[str, int, object]]:
    """(file, line number, parsed row) of every line; UserError listing file:line: reason when malformed."""
    rows, errors = [], []
    for path in paths:
        with open(path) as f:
            for no, line in enumerate(f, 1):
                if not line.strip() or (no == 1 and task.is_header(line)):
                    continue
                try:
                    rows.append((path, no, task.parse_line(line)))
                except ValueError as err:
                    errors.append(f"{path}:{no}: {err}")
    if errors:
        more = f" (and {len(errors) - 1} more malformed lines)" if len(errors) > 1 else ""
        for e in errors[1:20]:
            click.echo(e, err=True)
        raise UserError(f"{errors[0]}{more}")
    return rows


@click.group()
def data():
    """Generate, check, describe and import the tasks' data files (any registered task: see `rirlab tasks`).

    \b
    rirlab data generate listops --split test --out test.tsv
    rirlab data verify listops test.tsv
    rirlab data stats logic train0 --json
    rirlab data import listops lra_test.tsv --split lra
    """


@data.command()
@task_argument
@click.option("--split", required=True, help="Split name, e.g. train, dev, test, len_900_1000 (listops), ops_7 (logic).")
@click.option("--seed", type=int, default=None, help="Data seed (the task's data_seed; default its default).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="File to write ('-' for stdout).")
@set_option
def generate(task, split, seed, out, sets):
    """Write split SPLIT of TASK in the task's standard text format (cached under $RIRLAB_CACHE).

    \b
    rirlab data generate listops --split len_900_1000 --out len_900_1000.tsv
    rirlab data generate logic --split ops_12 --set n_eval=100 --out -
    """
    t = _task(task)
    cfg = _config(t, sets, seed)
    t0 = time.perf_counter()
    table = t.split_table(cfg, split)
    lines = t.to_lines(table)
    if out == "-":
        for line in lines:
            click.echo(line)
    else:
        with open(out, "w") as f:
            for line in lines:
                f.write(line + "\n")
    click.echo(f"{task} {split}: {table.num_rows} examples -> {out} in {time.perf_counter() - t0:.1f} s", err=True)


@data.command()
@task_argument
@files_argument
def verify(task, files):
    """Recompute every label of FILES with our solver/labeler; list mismatches as file:line, exit 1 if any.

    A malformed line exits 2 with file:line: reason.

    \b
    rirlab data verify listops test.tsv
    rirlab data verify logic test7 test8
    """
    t = _task(task)
    rows = read_rows(t, files)
    bad = [f"{path}:{no}: {problem}" for path, no, row in rows for problem in t.verify(row)]
    for line in bad[:100]:
        click.echo(line)
    click.echo(f"{len(rows)} examples in {len(files)} file(s): {len(bad)} wrong label(s)")
    if bad:
        sys.exit(1)


@data.command()
@task_argument
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--split", default=None, help="Describe this split: generated from the task config (cached), "
              "or FILES when given; with --compare, the split whose target FILES/the split are held to.")
@click.option("--compare", is_flag=True, help="Compare with the split's original data (targets in "
              "rirlab/tasks/targets.py): ours, target, tolerance, ok; exit 1 when any is out of tolerance.")
@click.option("--seed", type=int, default=None, help="Data seed of the generated split (default the task's).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@set_option
def stats(task, files, split, compare, seed, as_json, sets):
    """Count, length distribution, depth/argument (listops) or operator (logic) counts, label shares of
    FILES or of a generated --split; --compare holds them to the original data's statistics.

    A statistic passes when |ours - target| <= 4 standard errors of the difference (+0.002); each
    generated split is compared at its configured size (--set n_eval=500 for a faster, looser check;
    listops dev/test keep their de-duplication pool, so compare them at the default iid_pool).

    \b
    rirlab data stats listops test.tsv
    rirlab data stats flipflop train.txt --json
    rirlab data stats listops --split args_10 --compare --set n_eval=500
    rirlab data stats listops lra_test.tsv --split lra --compare
    rirlab data stats logic test12 --split ops_12 --compare
    """
    t = _task(task)
    if files:
        rows = [row for _, _, row in read_rows(t, files)]
    elif split:
        cfg = _config(t, sets, seed)
        table = t.split_table(cfg, split)
        rows = [t.parse_line(line) for line in t.to_lines(table)]
    else:
        raise UserError(f"data stats {task}: give FILES or --split NAME")
    if compare:
        if not split:
            raise UserError(f"data stats {task}: --compare needs --split NAME (the target to compare with)")
        from rirlab.tasks import targets

        result = targets.compare(task, split, rows)
        failed = [name for name, *_, ok in result if not ok]
        if as_json:
            click.echo(json.dumps({"count": len(rows), "failed": failed, "stats": [
                dict(zip(("name", "ours", "target", "tolerance", "ok"), r)) for r in result]}, indent=1))
        else:
            click.echo(f"{task} {split}: {len(rows)} rows vs the original data")
            click.echo(f"{'statistic':40s} {'ours':>8s} {'target':>8s} {'tol':>7s}")
            for name, ours, target, tol, ok in result:
                click.echo(f"{name:40s} {ours:8.4f} {target:8.4f} {tol:7.4f}  {'ok' if ok else 'FAIL'}")
            click.echo(f"{len(result) - len(failed)}/{len(result)} within tolerance")
        if failed:
            sys.exit(1)
        return
    result = t.stats(rows)
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    for key, value in result.items():
        if isinstance(value, dict):
            value = "  ".join(f"{k}={v}" for k, v in value.items())
        click.echo(f"{key:26s} {value}")


@data.command("import")
@task_argument
@files_argument
@click.option("--split", required=True, help="Split the files replace, e.g. train, test, len_900_1000, ops_7.")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False),
              help="Cache root (default $RIRLAB_CACHE, else ~/.cache/rirlab).")
def import_(task, files, split, cache_dir):
    """Convert FILES into the cache as split SPLIT; trials use it with --set imported=[SPLIT].

    \b
    rirlab data import listops lra_test.tsv --split lra
    rirlab train --model rir_ebt_grc --task listops --set imported=[lra] --set eval_splits=[lra]
    """
    from rirlab.tasks import cache

    t = _task(task)
    if split not in t.all_splits:
        raise UserError(f"{task}: unknown split '{split}'; choose from {', '.join(t.all_splits)}")
    rows = [row for _, _, row in read_rows(t, files)]
    path = cache.imported_path(task, split, cache_dir)
    cache.write_atomic(t.import_rows(rows), path)
    click.echo(f"imported {len(rows)} examples as {task} split '{split}' -> {path}")
    click.echo(f"use it: --set imported=[{split}]   (or `imported: [{split}]` in a sweep spec)")
