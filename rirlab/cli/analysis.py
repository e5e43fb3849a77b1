"""`rirlab tables`, `rirlab runs`, `rirlab export`, `rirlab plot pareto|curves`: reading sweeps back out of MLflow.
They only read: a missing sqlite store is an error (or, for `tables SPEC`, an empty layout), never created."""

from __future__ import annotations

import os
from pathlib import Path

import click

from rirlab.cli.options import READ_TIMEOUT_S, read_only, tracking_option
from rirlab.errors import UserError

spec_argument = click.argument("spec", type=click.Path(dir_okay=False, exists=True), required=False)
experiment_option = click.option("--experiment", default=None, help="Experiment name (default: the spec's name).")
parent_option = click.option("--run", "--parent", "parent", multiple=True, metavar="RUN_ID",
                             help="Sweep (parent run id, `rirlab runs` lists them) to read (default: the latest). "
                                  "Repeat it to read several sweeps of the spec as one, e.g. a row or a seed per "
                                  "sweep run on its own cores: their trial runs fill one table.")
records_option = click.option("--records", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
                               help="Read the sweeps from `rirlab export` runs files instead of a store (repeatable; "
                                    "every sweep in them as one, or those named by --run): a committed record prints "
                                    "the same table and curves after its store is gone.")
latest_full_option = click.option("--latest-full", is_flag=True, default=False,
                                  help="Read the latest sweep run without --quick (default: the latest of any kind).")
# rirlab.analysis.stats.STATS and its default, spelled here because the CLI imports the analysis layer only inside its
# commands (tests/train/test_imports.py); tests/analysis/test_analysis.py checks that the two agree
STAT_CHOICES, STAT_DEFAULT = ("median", "mean"), "median"
stat_option = click.option("--stat", type=click.Choice(STAT_CHOICES), default=None,
                           help=f"Centre over seeds of every table cell, Pareto point and curve (default: "
                                f"{STAT_DEFAULT}, as the papers on ListOps; for tables with --reference, the statistic "
                                f"the reference table reports, e.g. the EBT and dynamic-halt tables' mean).")
CI_CHOICES, CI_DEFAULT, CORRECTION_CHOICES = ("t", "bootstrap"), "t", ("none", "holm")  # rirlab.analysis.stats' own (tested)
ci_option = click.option("--ci", type=click.Choice(CI_CHOICES), default=CI_DEFAULT, show_default=True,
                         help="95% interval over seeds: t (Student t of the mean) or bootstrap (percentile bootstrap of "
                              "the --stat over seeds, fixed seed); tables add the test split's binomial error to it.")


def check_out(out, make_parent: bool = False) -> None:
    """Fail before any work when OUT cannot be written: one line naming the path and the fix."""
    if not out:
        return
    path = Path(out)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UserError(f"--out {out} is a directory; give a file name, e.g. {path / 'out'}")
    if not parent.is_dir():
        if make_parent and not parent.exists():  # made when the file is written, not before: a refusal leaves none
            ancestor = next(p for p in parent.resolve().parents if p.exists())
            if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
                raise UserError(f"cannot create the directory {parent} for --out ({ancestor} is not a writable "
                                f"directory); choose a writable path with --out")
            return
        raise UserError(f"the directory {parent} of --out {out} does not exist; create it or choose another --out")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"cannot write --out {out}: permission denied; choose a writable path with --out")


def _inputs_of(tracking_uri, inputs) -> list:
    """What a command reads, which its --out must not overwrite: (path, whether everything under it counts, what it
    is). The store of --tracking-uri (else $MLFLOW_TRACKING_URI, else ./mlruns.db, read or not): a SQLite file with
    its journal and lock files and the mlartifacts/ folder beside it, or a file store's folder; then INPUTS,
    ``(path, what)`` pairs (the spec, records files and their history twins)."""
    from rirlab.sweeps.record.store import sqlite_path
    from rirlab.sweeps.record.tracker import artifact_root, resolve_tracking_uri

    found = []
    try:
        uri = resolve_tracking_uri(tracking_uri)
    except UserError:  # a malformed URI: the command refuses it itself where it reads the store
        uri = None
    db = sqlite_path(uri) if uri else None
    if db is not None:
        store = f"the MLflow store {uri}"
        found += [(db, False, store), (db.with_name(f".{db.name}.lock"), False, f"the lock file of {store}")]
        found += [(db.with_name(db.name + end), False, f"SQLite's {end[1:]} file of {store}")
                  for end in ("-journal", "-wal", "-shm")]
        found.append((Path(artifact_root(uri)), True, f"in the artifacts folder of {store}"))
    elif uri and uri.raw.startswith("file://"):
        found.append((Path(uri.raw[len("file://"):]), True, f"in the MLflow file store {uri}"))
    return found + [(Path(p), False, what) for p, what in inputs if p]


def _same(a: Path, b: Path, tree: bool) -> bool:
    """Whether writing A writes B (the same path, a link to it, or, with ``tree``, a path inside folder B)."""
    ra, rb = a.resolve(), b.resolve()
    if ra == rb or (tree and rb in ra.parents):
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)  # a hard link
    except OSError:
        return False


def read_files(spec, records) -> list:
    """The files a sweep-reading command reads besides the store: SPEC, the --records files and their history files."""
    from rirlab.analysis.export import history_path

    found = [(spec, f"the spec {spec}")] if spec else []
    for r in records:
        found += [(r, f"the records file {r}"), (history_path(r), f"the history file of the records file {r}")]
    return found


def guard_out(out, tracking_uri=None, inputs=(), beside=()) -> None:
    """Refuse, before any work, an --out that is something the command reads (``_inputs_of``: the store, its
    artifacts, the spec, a records file), as is a file written BESIDE it (export's history file): one line."""
    if not out:
        return
    read = _inputs_of(tracking_uri, inputs)
    for target in (out, *beside):
        for path, tree, what in read:
            if _same(Path(target), path, tree):
                which = f"--out {out}" if target == out else f"--out {out} also writes {target}, which"
                raise UserError(f"{which} is {what}; writing it would destroy it: choose another file with --out")


def write_error(out, err: OSError) -> UserError:
    return UserError(f"cannot write --out {out}: {err.strerror or err}; choose a writable path with --out")


def _write(text: str, out) -> None:
    """TEXT to OUT whole or not at all (a full disk leaves the old file, or none, never a truncated one)."""
    if out:
        tmp = Path(f"{out}.tmp-{os.getpid()}")
        try:
            tmp.write_text(text)
            os.replace(tmp, out)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise write_error(out, err) from None
        click.echo(f"wrote {out}")
    else:
        click.echo(text, nl=False)


def _client(tracking_uri, must_exist: bool = True):
    """A client of the store (None when it does not exist and ``must_exist`` is false)."""
    from rirlab.analysis.runs import require_store, store_exists
    from rirlab.sweeps.record.tracker import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if not must_exist and not store_exists(uri):
        return None
    require_store(uri)  # no store: one line naming the fix (reading never creates one)
    if uri.raw.startswith(("http://", "https://")):  # a tracking server: a busy one is waited for (READ_TIMEOUT_S)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(READ_TIMEOUT_S))
    from rirlab.sweeps.record.tracker import Tracker

    return Tracker(uri, create=False).client  # probed first: unreachable, foreign, older schema: one line


def _experiment_of(spec, experiment):
    if spec is None and experiment is None:
        raise UserError("give a SPEC file or --experiment NAME")
    loaded = None
    if spec is not None:
        from rirlab.analysis.runs import read_spec

        loaded = read_spec(spec)
        experiment = experiment or loaded.name
    return loaded, experiment


def _sweep(spec, experiment, tracking_uri, parent, allow_empty=False, latest_full=False, records=()):
    """(client, Sweep) for SPEC or --experiment; ``allow_empty``: a SPEC with no store or sweep yet gives its layout.
    ``records``: `rirlab export` files to read instead of the store (the "client" is then their
    :class:`rirlab.analysis.records.Records`, which gives the metric histories too)."""
    from rirlab.analysis.runs import load_sweep

    loaded, experiment = _experiment_of(spec, experiment)
    if records:
        if tracking_uri or latest_full:
            raise UserError("--records reads the sweeps from export files, not a store: drop "
                            f"{'--tracking-uri' if tracking_uri else '--latest-full'} (--run picks sweeps in the files)")
        from rirlab.analysis.records import Records

        rec = Records(records)
        return rec, rec.load(experiment, parent, spec=loaded)
    allow_empty = allow_empty and loaded is not None
    client = _client(tracking_uri, must_exist=not (allow_empty and not parent and not latest_full))
    sw = load_sweep(client, experiment, parent, spec=loaded, allow_empty=allow_empty, latest_full=latest_full)
    if client is None:
        from rirlab.analysis.runs import store_path
        from rirlab.sweeps.record.tracker import resolve_tracking_uri

        click.echo(f"note: no MLflow store at {store_path(resolve_tracking_uri(tracking_uri))}", err=True)
    elif sw.study is not None:
        click.echo(f"note: the Optuna study '{sw.study}' spans {len(sw.parents)} sweeps of '{sw.experiment}', read as "
                   f"one ({sum(sw.runs['status'] == 'FINISHED')} finished trial runs); --run RUN_ID reads one", err=True)
    elif sw.n_sweeps > 1 and not parent and not latest_full:
        click.echo(f"note: '{sw.experiment}' has {sw.n_sweeps} sweeps; this is the latest, {sw.about} "
                   f"(`rirlab runs` lists them; --run RUN_ID or --latest-full picks another)", err=True)
    return client, sw


def _where(pairs) -> dict:
    from rirlab.config import parse_overrides

    return parse_overrides(pairs)


@click.command()
@spec_argument
@experiment_option
@tracking_option
@parent_option
@latest_full_option
@records_option
@click.option("--layout", type=click.Choice(["ablation", "pivot"]), default="ablation", show_default=True,
              help="ablation: a row per configuration, a column per split (RIR Table 5); pivot: two swept axes.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "latex", "csv"]), default="markdown", show_default=True)
@stat_option
@click.option("--metric", default="accuracy", show_default=True, help="Per-split metric in the cells (<split>/<metric>).")
@click.option("--reference", default=None, metavar="NAME[:TABLE]",
              help="Add the paper's published row under each of ours with the difference and its test (consistent, "
                   "above or below at p < 0.05): rir, ebt, halt (or rir:table5).")
@ci_option
@click.option("--correction", type=click.Choice(CORRECTION_CHOICES), default="none", show_default=True,
              help="--reference: correct the p values of the table's many tests (holm: Holm's step-down).")
@click.option("--compare-to", "compare_to", default=None, metavar="ROW",
              help="Add each row's difference from the row labelled ROW, with its 95% interval (paired by seed where "
                   "both ran the same seeds), e.g. --compare-to RIR-EBT-GRC for the ablation's effects.")
@click.option("--rows", "rows_key", default=None, help="pivot: swept parameter along the rows (default: the first swept).")
@click.option("--cols", "cols_key", default=None, help="pivot: swept parameter along the columns (default: the second).")
@click.option("--split", default=None, help="pivot: evaluation split of the cells (default: the task's first test split).")
@click.option("--where", multiple=True, metavar="KEY=VALUE", help="pivot: keep only runs with this swept value (repeatable).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the table to FILE instead of stdout.")
@read_only
def tables(spec, experiment, tracking_uri, parent, latest_full, records, layout, fmt, stat, metric, reference, ci,
           correction, compare_to, rows_key, cols_key, split, where, out):
    """Print the table of a sweep, from its runs in MLflow, in the papers' style: median or mean ± sample std over
    seeds and a 95% interval that counts the seeds and the test split's sampling error; with --reference, each
    published cell's test against ours.

    \b
    rirlab tables search_spaces/chunk_beam.yaml --format latex
    rirlab tables search_spaces/rir_ablation.yaml --reference rir      # RIR Table 5 beside ours
    rirlab tables search_spaces/chunk_beam.yaml --layout pivot --rows chunk_size --cols beam_size
    rirlab tables search_spaces/ebt_table4_logic.yaml --records docs/results/ebt_table4_logic_egt_grc_seed2.parquet
    rirlab tables search_spaces/rir_ablation.yaml --compare-to RIR-EBT-GRC --ci bootstrap
    """
    from rirlab.analysis import tables as T

    check_out(out)
    guard_out(out, tracking_uri, read_files(spec, records))
    client, sw = _sweep(spec, experiment, tracking_uri, parent, allow_empty=True, latest_full=latest_full,
                        records=records)
    if layout == "pivot" and compare_to:
        raise UserError("--compare-to applies to the ablation layout; drop it or --layout pivot")
    if sw.parent is not None and sw.runs.empty and not reference and layout == "pivot":
        raise UserError(f"sweep run {sw.parent.info.run_id} of '{sw.experiment}' has no trial runs yet")
    if layout == "ablation":
        grid = T.ablation(sw.runs, spec=sw.spec, stat=stat, metric=metric, n_expected=sw.n_expected, reference=reference,
                          splits=sw.splits, about=sw.about, ci=ci, correction=correction, compare_to=compare_to)
    else:
        if sw.runs.empty:
            raise UserError(f"no runs of '{sw.experiment}' yet: run `rirlab sweep` first (a pivot needs runs)")
        keys = [k for k in (sw.spec.search if sw.spec is not None else {})] or \
            [k for k in sw.runs["swept"].iloc[0] if k not in ("seed", "variant")]
        rows_key = rows_key or (keys[0] if keys else None)
        cols_key = cols_key or next((k for k in keys if k != rows_key), None)
        if not rows_key or not cols_key:
            raise UserError(f"a pivot needs two swept parameters; this sweep swept {', '.join(keys) or 'none'} "
                            f"(use the ablation layout)")
        split = split or (sw.splits[0][0] if sw.splits else (T.split_columns(T.usable(sw.runs), metric) or ["test"])[0])
        grid = T.pivot(sw.runs, rows_key, cols_key, split, stat=stat or STAT_DEFAULT, metric=metric,
                       n_expected=sw.n_expected, where=_where(where), about=sw.about, ci=ci)
    if sw.parent is None:
        click.echo(f"note: no sweep of '{sw.experiment}' in the tracking store yet; showing the layout only", err=True)
    _write(T.render(grid, fmt), out)


@click.command()
@click.option("--experiment", required=True, help="Experiment (sweep spec name) to export.")
@tracking_option
@click.option("--run", "--parent", "parent", default=None, metavar="RUN_ID", help="Only the trials of this sweep (parent run).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Parquet file of the runs (one row per trial).")
@click.option("--history/--no-history", default=True, show_default=True,
              help="Also write per-step metric histories to OUT's stem + .history.parquet.")
@click.option("--redact", is_flag=True, default=False,
              help="A record to publish: every absolute local path (the store, Ray's experiment folder, data and cache "
                   "folders, tracebacks) cut to its last component and the user name dropped. Passwords in URIs are "
                   "masked with or without it.")
@read_only
def export(experiment, tracking_uri, parent, out, history, redact):
    """Export every trial run of an experiment to Parquet: ids, status, params, final metrics (+ histories), and
    each sweep's parent run and spec, so that `rirlab tables|plot|importance SPEC --records OUT` print the sweep
    after its store is gone.

    \b
    rirlab export --experiment chunk_beam --out chunk_beam.parquet
    rirlab export --experiment ebt_table4_logic --run RUN_ID --redact --out docs/results/ebt_table4_logic.parquet
    """
    from rirlab.analysis.export import export_runs, history_path

    from rirlab import contract

    if parent:
        contract.children_filter(parent)  # a malformed run id: refused before anything (it goes into a filter)
    check_out(out, make_parent=True)
    guard_out(out, tracking_uri, beside=[history_path(out)] if history else [])
    client = _client(tracking_uri)
    try:
        paths = export_runs(client, experiment, out, parent_id=parent, history=history, redact=redact)
    except OSError as err:
        raise write_error(out, err) from None
    for kind, (path, n) in paths.items():
        click.echo(f"wrote {path} ({n} {kind} rows)")


def sweep_selection(fn):
    """SPEC, --experiment, --tracking-uri, --run, --latest-full and --records: the sweep a plot reads."""
    for option in reversed((spec_argument, experiment_option, tracking_option, parent_option, latest_full_option,
                            records_option)):
        fn = option(fn)
    return fn


def _drawn(out, draw) -> None:
    """Run ``draw()`` (which writes OUT and returns the number of configurations drawn) and say what it wrote."""
    try:
        n = draw()
    except OSError as err:
        raise write_error(out, err) from None
    click.echo(f"wrote {out} ({n} configurations)")


@click.group()
def plot():
    """Plots of a sweep: Pareto frontiers (accuracy vs time/memory), training curves, and each seed on each test
    split beside the paper."""


@plot.command()
@sweep_selection
@click.option("--x", "x", type=click.Choice(["time", "memory", "both", "objectives"]), default=None,
              help="x axis: time per sample (ms) or peak memory (MB); both = two panels (RIR Figure 2 a, b); "
                   "objectives = a multi-objective spec's first two metrics, y the first (its Optuna front). "
                   "Default: objectives for a multi-objective spec without --split, else both.")
@click.option("--split", default=None, help="y: accuracy on this split (default: mean over the task's OOD splits).")
@click.option("--clock", type=click.Choice(["auto", "cpu", "wall"]), default="auto", show_default=True,
              help="time axis: the trials' CPU time (fair when trials share the cores; runs without it: wall clock) "
                   "or wall-clock time (CUDA trials, a GPU each); auto: wall clock where a run trained on a GPU, "
                   "else CPU time. The axis says which (docs/metrics.md).")
@stat_option
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Image file: .png, .svg or .pdf.")
@read_only
def pareto(spec, experiment, tracking_uri, parent, latest_full, records, x, split, clock, stat, out):
    """OOD accuracy against time per sample and peak memory, a point per configuration, Pareto frontier drawn."""
    from rirlab.analysis.plots import pareto_plot

    check_out(out)
    guard_out(out, tracking_uri, read_files(spec, records))
    _, sw = _sweep(spec, experiment, tracking_uri, parent, latest_full=latest_full, records=records)
    if x is None:
        x = "objectives" if sw.spec is not None and len(sw.spec.metrics) > 1 and not split else "both"
    _drawn(out, lambda: pareto_plot(sw, out, x=x, split=split, stat=stat or STAT_DEFAULT, clock=clock))


@plot.command()
@sweep_selection
@click.option("--metric", default="dev/accuracy", show_default=True, help="Logged metric to plot against step.")
@stat_option
@ci_option
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Image file: .png, .svg or .pdf.")
@read_only
def curves(spec, experiment, tracking_uri, parent, latest_full, records, metric, stat, ci, out):
    """Training curves per configuration: the tables' statistic over seeds (--stat), the band its 95% interval
    over seeds (--ci), as the tables' cells."""
    from rirlab.analysis.plots import curves_plot

    check_out(out)
    guard_out(out, tracking_uri, read_files(spec, records))
    client, sw = _sweep(spec, experiment, tracking_uri, parent, latest_full=latest_full, records=records)
    _drawn(out, lambda: curves_plot(client, sw, metric, out, stat=stat or STAT_DEFAULT, ci=ci))


@plot.command()
@sweep_selection
@click.option("--reference", default=None, metavar="NAME[:TABLE]",
              help="Beside each configuration, the paper's published row paired with it (as `rirlab tables "
                   "--reference`): its mean with its std over the paper's seeds.")
@stat_option
@click.option("--metric", default="accuracy", show_default=True, help="Per-split metric (<split>/<metric>).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Image file: .png, .svg or .pdf.")
@read_only
def splits(spec, experiment, tracking_uri, parent, latest_full, records, reference, stat, metric, out):
    """Every seed on every test split, a panel per configuration, beside the paper's mean ± std (--reference):
    whether a gap to the paper is one seed or all of them. The rows and cells are those of `rirlab tables`.

    \b
    rirlab plot splits search_spaces/ebt_table4_logic.yaml --records docs/results/ebt_table4_logic_egt_grc_seed1.parquet \\
        --records docs/results/ebt_table4_logic_egt_grc_seed2.parquet --reference ebt_nlp:table4_logic --out s.png
    """
    from rirlab.analysis.plots import splits_plot

    check_out(out)
    guard_out(out, tracking_uri, read_files(spec, records))
    _, sw = _sweep(spec, experiment, tracking_uri, parent, latest_full=latest_full, records=records)
    _drawn(out, lambda: splits_plot(sw, out, reference=reference, stat=stat, metric=metric))


@click.command()
@sweep_selection
@click.option("--metric", default=None, help="Final metric to explain (default: the spec's metric, its first if several).")
@click.option("--evaluator", type=click.Choice(["ped-anova", "fanova", "mdi"]), default="ped-anova", show_default=True,
              help="optuna.importance evaluator: PED-ANOVA (Optuna's default; conditional parameters too), fANOVA, or "
                   "mean decrease impurity (the last two: parameters every trial has).")
@click.option("--format", "fmt", type=click.Choice(["markdown", "csv"]), default="markdown", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the table to FILE instead of stdout.")
@read_only
def importance(spec, experiment, tracking_uri, parent, latest_full, records, metric, evaluator, fmt, out):
    """Rank the swept parameters by how much the metric depends on them: optuna.importance over the sweep's
    finished trial runs, for grid and random sweeps as for Optuna ones (each run a trial of an in-memory study;
    seeds are repeated trials of one configuration).

    \b
    rirlab importance search_spaces/chunk_beam.yaml
    rirlab importance search_spaces/chunk_beam.yaml --metric test/accuracy --evaluator fanova
    """
    from rirlab.analysis.importance import param_importances, render
    from rirlab import contract

    check_out(out)
    guard_out(out, tracking_uri, read_files(spec, records))
    _, sw = _sweep(spec, experiment, tracking_uri, parent, latest_full=latest_full, records=records)
    if sw.runs.empty:
        raise UserError(f"sweep run {sw.parent.info.run_id} of '{sw.experiment}' has no trial runs yet")
    metrics = sw.spec.metrics if sw.spec is not None else \
        [m for m in (sw.parent.data.tags.get(contract.METRIC) or "dev/accuracy").split(",") if m]
    modes = sw.spec.modes if sw.spec is not None else ["max"] * len(metrics)
    metric = metric or metrics[0]
    # a metric the spec does not optimise: lower is better for losses, times and memory
    mode = dict(zip(metrics, modes)).get(metric) or ("min" if metric.endswith(("loss", "_ms", "_mb")) else "max")
    result = param_importances(sw.runs, sw.spec, metric, mode, evaluator)
    _write(render(result, sw.about, fmt), out)


@click.command()
@spec_argument
@experiment_option
@tracking_option
@click.option("--format", "fmt", type=click.Choice(["markdown", "csv"]), default="markdown", show_default=True)
@read_only
def runs(spec, experiment, tracking_uri, fmt):
    """List the sweeps of a spec, newest first: parent run, date, quick/full, trials finished/stopped early/failed,
    best.

    \b
    rirlab runs search_spaces/chunk_beam.yaml
    rirlab tables search_spaces/chunk_beam.yaml --run RUN_ID     # the table of one of them
    """
    from rirlab.analysis.runs import sweeps_of
    from rirlab.analysis.tables import fmt_num
    from rirlab import contract

    _, experiment = _experiment_of(spec, experiment)
    df = sweeps_of(_client(tracking_uri), experiment)
    if df.empty:
        raise UserError(f"experiment '{experiment}' has no sweep yet; run `rirlab sweep` first")
    if fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
        return
    head = ["parent run", "date", "profile", "spec hash", "status", "finished", "stopped early", "failed", "other", "best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for _, r in df.iterrows():
        best = "—" if r["best"] is None or r["best"] != r["best"] else \
            f"{contract.metric_named(r['metric'])} {fmt_num(r['best'])} ({r['best_trial']})"
        lines.append("| " + " | ".join([r["parent_run"], r["date"], r["profile"], r["spec_hash"], r["status"],
                                        str(r["finished"]), str(r["stopped_early"]), str(r["failed"]), str(r["other"]),
                                        best]) + " |")
    click.echo("\n".join(lines) + f"\n\n{len(df)} sweep{'s' if len(df) > 1 else ''} of '{experiment}', newest first; "
               f"`rirlab tables SPEC --run RUN_ID` shows one\n")
