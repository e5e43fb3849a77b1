"""`rirlab data generate|verify|stats|import`: the tasks' data files, through the Task interface only.

Every task reads and writes its standard text format (see the task modules):
``listops`` ``LABEL<TAB>TEXT`` (LRA's ``Source<TAB>Target`` files are read too),
``logic`` ``RELATION<TAB>premise<TAB>hypothesis``, ``flipflop`` one
space-separated token sequence per line. A malformed line is reported as
``file:line: reason`` and exits 2, and so does a file that is empty, binary, not
UTF-8 or starts with a byte-order mark; a wrong label found by ``verify`` exits 1.

``import`` checks every label, applies the papers' protocol (a ListOps training
file becomes train and dev, logic train0..train6 become train and dev; see
``rirlab data import --help`` and ``Task.import_protocol``; ``--as-is`` stores
the files unchanged) and writes ``<cache>/<task>/imported/<split>.parquet`` with
its import record (source files and SHA-256, protocol, rows, content digest); a
wrong label exits 2 and writes nothing. A trial then reads that split instead of
generating it when the task config lists it in ``imported`` (``--set
imported=[test]`` or ``imported: [test]`` in a spec).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time

import click

from rirlab.cli.options import set_option
from rirlab.errors import UserError, command

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


BOM = b"\xef\xbb\xbf"


MAX_LINE_BYTES = 64 * 2**20  # one example per line: a longer line is not a data file (and would fill memory)


def _lines(path, digest=None):
    """(line number, text) of a data file read as UTF-8; UserError for what is not a text file of lines.
    ``digest``: a hashlib object fed every byte read, so a record hashes what was read, not what the path holds
    later (a file replaced during an import)."""
    import stat

    try:
        mode = os.stat(path).st_mode  # before open(): opening a FIFO without a writer would wait forever
    except OSError as err:
        raise UserError(f"{path}: {err.strerror}; give a data file") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
        raise UserError(f"{path}: {kind}, not a data file; give a regular file (copy a stream to one first)")
    with open(path, "rb") as f:
        for no, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:
                raise UserError(f"{path}:{no}: a line longer than {MAX_LINE_BYTES // 2**20} MiB: not a data file of "
                                f"text lines (an LRA Retrieval row is under 1 MiB)")
            if digest is not None:
                digest.update(raw)
            if no == 1 and raw.startswith(BOM):
                raise UserError(f"{path}:1: the file starts with a UTF-8 byte-order mark; save it as UTF-8 without "
                                f"one (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' {path})")
            if b"\0" in raw:
                raise UserError(f"{path}:{no}: NUL bytes: a binary file, not a data file of text lines")
            try:
                yield no, raw.decode("utf-8").rstrip("\r\n")  # LF or CRLF line ends: the text never keeps a \r
            except UnicodeDecodeError as err:
                raise UserError(f"{path}:{no}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
                                f"a data file is UTF-8 text, one example per line") from None


def read_rows(task, paths, digests: dict | None = None) -> list[tuple[str, int, object]]:
    """(file, line number, parsed row) of every line; UserError listing file:line: reason when malformed, and
    for a file that is empty, not UTF-8 text, binary or starts with a byte-order mark. ``digests``: filled with
    path -> SHA-256 of the bytes read."""
    import hashlib

    rows, errors = [], []
    for path in paths:
        before = len(rows)
        digest = hashlib.sha256()
        for no, line in _lines(path, digest):
            if not line.strip() or (no == 1 and task.is_header(line)):
                continue
            try:
                rows.append((path, no, task.parse_line(line)))
            except ValueError as err:
                errors.append(f"{path}:{no}: {err}")
        if digests is not None:
            digests[path] = digest.hexdigest()
        if len(rows) == before and not errors:
            raise UserError(f"{path}: no examples (an empty file); give a {task.name} data file, one example per line")
    if errors:  # one line: the first, with the count (`rirlab data verify` lists them all)
        more = f" (and {len(errors) - 1} more malformed lines)" if len(errors) > 1 else ""
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
              "rirlab/tasks/targets.py, targets.json): ours, target, tolerance, ok; exit 1 when any is out of tolerance.")
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
    if split and not files and hasattr(t, "oov"):  # text tasks: the share of the split's tokens read as <unk>
        try:
            result["oov"] = round(t.oov(cfg, [split])[split], 6)
        except UserError as err:
            result["oov"] = f"n/a ({str(err)[:160]})"
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
@click.option("--as-is", "as_is", is_flag=True,
              help="Store FILES unchanged as SPLIT: no dev carved out of a training file, no filter, no protocol checks.")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False),
              help="Cache root (default $RIRLAB_CACHE, else ~/.cache/rirlab).")
def import_(task, files, split, as_is, cache_dir):
    """Convert FILES into the cache as split SPLIT, with the papers' protocol; trials use it with --set imported=[...].

    Every label is checked with the task's solver/labeler first: a malformed line or a wrong label is one
    file:line error (exit 2) and nothing is written.

    \b
    The papers' protocol (--as-is turns it off):
      listops --split train   dev = the file's first 1,000 lines (unfiltered), train = the rest with <= 100
                              tokens: writes splits train AND dev
      logic --split train     files train0 ... train6 in the order given (pairs of N <= 6 operators): every
                              10th pair is dev, the others train: writes train AND dev
      logic --split ops_N     file testN: every pair must have N operators (ops_12: 12 or more)
      any other split         the files as they are

    \b
    rirlab data import listops train_d20s.tsv --split train
    rirlab data import logic train0 train1 train2 train3 train4 train5 train6 --split train
    rirlab data import logic test7 --split ops_7
    rirlab data import listops basic_test.tsv --split lra
    rirlab train --model rir_ebt_grc --task listops --set imported=[train,dev,lra]
    """
    import os

    from rirlab.tasks import cache

    t = _task(task)
    if split not in t.all_splits:
        raise UserError(f"{task}: unknown split '{split}'; choose from {', '.join(t.all_splits)}")
    digests: dict = {}
    rows = read_rows(t, files, digests)
    wrong = [f"{path}:{no}: {problem}" for path, no, row in rows for problem in t.verify(row)]
    if wrong:  # one line: the first, with the count
        more = f" (and {len(wrong) - 1} more wrong labels)" if len(wrong) > 1 else ""
        raise UserError(f"{wrong[0]}{more}; nothing imported: fix the labels "
                        f"(`{command('rirlab', 'data', 'verify', task)} FILE` lists them)")
    protocol, parts = ("as-is (--as-is)", {split: rows}) if as_is else t.import_protocol(split, rows)
    lines = {path: sum(1 for p, _, _ in rows if p == path) for path in files}
    record = {"files": [{"path": os.path.abspath(path), "sha256": digests[path], "examples": lines[path]}
                        for path in files], "protocol": protocol, "imported_as": split}
    tables = {name: t.import_rows([row for _, _, row in part]) for name, part in parts.items()}  # all, then write
    empty = [name for name, table in tables.items() if table.num_rows == 0]
    if empty:
        raise UserError(f"{task} split '{empty[0]}' would have no examples ({', '.join(map(str, files))} has none the "
                        f"protocol keeps); nothing imported: check the file (only a header?)")
    for name, table in tables.items():
        path = cache.write_imported(task, name, table, record, cache_dir)
        click.echo(f"imported {table.num_rows} examples as {task} split '{name}' -> {path}")
    click.echo(protocol)
    names = ",".join(tables)
    click.echo(f"use it: --set {shlex.quote(f'imported=[{names}]')}   (or `imported: [{names}]` in a sweep spec)")
