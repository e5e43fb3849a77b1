"""`rirlab data generate|verify|stats|import`: the tasks' data files.

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
from collections import Counter

import click

from rirlab.cli.options import set_option
from rirlab.errors import UserError

TASKS = ("listops", "logic", "flipflop")


def _module(task: str):
    if task not in TASKS:
        raise UserError(f"unknown data task '{task}'; choose from {', '.join(TASKS)}")
    import importlib

    return importlib.import_module(f"rirlab.tasks.{task}")


def _config(task: str, sets: tuple, seed=None):
    from rirlab.config import build
    from rirlab.tasks import registry
    from rirlab.config import parse_overrides

    values = parse_overrides(sets)
    if seed is not None:
        values["data_seed"] = seed
    return build(registry.get(task).config, values, f"data {task}")


def read_rows(task: str, paths) -> list[tuple[str, int, object]]:
    """(file, line number, parsed row) of every line; UserError listing file:line: reason when malformed."""
    mod = _module(task)
    rows, errors = [], []
    for path in paths:
        with open(path) as f:
            for no, line in enumerate(f, 1):
                if not line.strip() or (no == 1 and mod.is_header(line)):
                    continue
                try:
                    rows.append((path, no, mod.parse_line(line)))
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
    """Generate, check, describe and import the tasks' data files (listops, logic, flipflop)."""


@data.command()
@click.argument("task")
@click.option("--split", required=True, help="Split name, e.g. train, dev, test, len_900_1000 (listops), ops_7 (logic).")
@click.option("--seed", type=int, default=None, help="Data seed (the task's data_seed; default its default).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="File to write ('-' for stdout).")
@set_option
def generate(task, split, seed, out, sets):
    """Write split SPLIT of TASK in the task's standard text format (cached under $RIRLAB_CACHE)."""
    mod = _module(task)
    cfg = _config(task, sets, seed)
    t0 = time.perf_counter()
    table = mod.split_table(cfg, split)
    lines = mod.to_lines(table)
    if out == "-":
        for line in lines:
            click.echo(line)
    else:
        with open(out, "w") as f:
            for line in lines:
                f.write(line + "\n")
    click.echo(f"{task} {split}: {table.num_rows} examples -> {out} in {time.perf_counter() - t0:.1f} s", err=True)


@data.command()
@click.argument("task")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def verify(task, files):
    """Recompute every label of FILES with our solver/labeler; list mismatches as file:line, exit 1 if any."""
    mod = _module(task)
    rows = read_rows(task, files)
    bad = []
    for path, no, row in rows:
        if task == "listops":
            want = mod.solve(mod.tokenize(row[0]))
            if want != row[1]:
                bad.append(f"{path}:{no}: label {row[1]}, solver says {want}")
        elif task == "logic":
            want = mod.label(row[1], row[2])
            if want != row[0]:
                bad.append(f"{path}:{no}: relation {row[0]}, labeler says {want}")
        else:
            for tok, expected, found in mod.check(row):
                bad.append(f"{path}:{no}: token {tok + 1}: read bit {found}, last written bit is {expected}")
    for line in bad[:100]:
        click.echo(line)
    click.echo(f"{len(rows)} examples in {len(files)} file(s): {len(bad)} wrong label(s)")
    if bad:
        sys.exit(1)


def _dist(values) -> dict:
    import numpy as np

    v = np.asarray(list(values), dtype=float)
    q = np.quantile(v, [0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0]) if len(v) else [0] * 7
    return {"mean": round(float(v.mean()), 2) if len(v) else 0,
            **{k: float(x) for k, x in zip(("min", "q25", "median", "q75", "q90", "q99", "max"), q)}}


def _hist(values) -> dict:
    c = Counter(values)
    return {str(k): c[k] for k in sorted(c)}


def _share(counter: Counter) -> dict:
    total = sum(counter.values()) or 1
    return {str(k): round(v / total, 4) for k, v in sorted(counter.items())}


def stats_of(task: str, rows: list) -> dict:
    mod = _module(task)
    out: dict = {"count": len(rows)}
    if task == "listops":
        toks = [mod.tokenize(text) for text, _ in rows]
        lengths = [len(t) for t in toks]
        shapes = [mod.shape(t) for t in toks]
        out["length"] = _dist(lengths)
        out["share_len_le_100"] = round(sum(n <= 100 for n in lengths) / max(1, len(rows)), 4)
        out["depth"] = _hist(d for d, _ in shapes)
        out["args_per_operator"] = _hist(a for _, counts in shapes for a in counts)
        out["max_args_per_example"] = _hist(max(c, default=0) for _, c in shapes)
        out["labels"] = _share(Counter(y for _, y in rows))
    elif task == "logic":
        ops = [(mod.n_ops(p), mod.n_ops(h)) for _, p, h in rows]
        out["length"] = _dist(sum(t not in ("(", ")") for t in (p + " " + h).split()) for _, p, h in rows)
        out["operators_N"] = _hist(max(a, b) for a, b in ops)
        out["operators_other_formula"] = _hist(min(a, b) for a, b in ops)
        words = Counter(t for _, p, h in rows for t in (p + " " + h).split() if t in ("not", "and", "or"))
        out["operator_shares"] = _share(words)
        out["relations"] = _share(Counter(r for r, _, _ in rows))
    else:
        out["length"] = _dist(len(t) for t in rows)
        ins = Counter(t[j] for t in rows for j in range(0, len(t), 2))
        out["instruction_shares"] = _share(ins)
        out["reads_per_sequence"] = round(ins["r"] / max(1, len(rows)), 2)
        out["read_bits"] = _share(Counter(t[j + 1] for t in rows for j in range(0, len(t), 2) if t[j] == "r"))
    return out


@data.command()
@click.argument("task")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stats(task, files, as_json):
    """Count, length distribution, depth/argument (listops) or operator (logic) counts, label shares of FILES."""
    result = stats_of(task, [row for _, _, row in read_rows(task, files)])
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    for key, value in result.items():
        if isinstance(value, dict):
            value = "  ".join(f"{k}={v}" for k, v in value.items())
        click.echo(f"{key:26s} {value}")


@data.command("import")
@click.argument("task")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--split", required=True, help="Split the files replace, e.g. train, test, len_900_1000, ops_7.")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False), help="Cache root (default $RIRLAB_CACHE, else ~/.cache/rirlab).")
def import_(task, files, split, cache_dir):
    """Convert FILES into the cache as split SPLIT; trials use it with --set imported=[SPLIT]."""
    from rirlab.tasks import cache

    mod = _module(task)
    if split not in mod.ALL_SPLITS:
        raise UserError(f"{task}: unknown split '{split}'; choose from {', '.join(mod.ALL_SPLITS)}")
    rows = [row for _, _, row in read_rows(task, files)]
    if task == "flipflop":
        rows = [[mod.TOKEN_ID[t] for t in toks] for toks in rows]
    path = cache.imported_path(task, split, cache_dir)
    cache.write_atomic(mod.to_table(rows), path)
    click.echo(f"imported {len(rows)} examples as {task} split '{split}' -> {path}")
    click.echo(f"use it: --set imported=[{split}]   (or `imported: [{split}]` in a sweep spec)")
