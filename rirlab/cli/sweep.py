"""`rirlab sweep`: run a spec's trials with Ray Tune, record them in MLflow."""

from __future__ import annotations

import shlex
import sys
import traceback

import click

from rirlab.cli.options import command_name, set_option, tracking_option
from rirlab.errors import command


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--quick", is_flag=True, help="Apply the spec's quick: block (tiny model, few steps; minutes on a CPU).")
@tracking_option
@click.option("--address", default=None, metavar="ADDR",
              help="Ray cluster to run on: auto, HOST:PORT or ray://HOST:PORT (default: a local Ray sized to this machine).")
@set_option
@click.option("--dry-run", is_flag=True,
              help="Print the trials as a table (a column per swept value), the spec hash and a compute estimate; "
                   "start nothing.")
@click.option("--resume", is_flag=True, help="Continue the last sweep of this spec (same --quick/--set) after its driver died.")
@click.option("--restart-damaged", type=click.Choice(["previous", "scratch"]), default=None,
              help="With --resume: a trial whose checkpoint cannot be read (state.pt truncated or deleted, its "
                   "checkpoint folder gone) trains again, from the newest earlier checkpoint of it that reads "
                   "(previous; the sweep keeps one checkpoint per trial, so often none: then from step 0) or from "
                   "step 0 (scratch). Without it such a trial stops at once, FAILED with the file named, while "
                   "the other trials resume, and the sweep exits 2.")
@click.option("--rerun-failed", is_flag=True,
              help="Train again, from scratch, the trials of the last sweep of this spec (same --quick/--set) that "
                   "did not finish (FAILED or KILLED), as new runs under the same parent run; its finished trials "
                   "are untouched and tables count each trial's latest run. Nothing failed: says so, exits 0. With "
                   "--dry-run: lists them.")
@click.option("--warm-start", "warm_start", multiple=True, metavar="EXPERIMENT_OR_SPEC",
              help="algorithm random or optuna: start the search from the finished trials of earlier sweeps of this "
                   "experiment (or of the spec file's; repeatable), read from the store, within this spec's search "
                   "space (the rest skipped, counted). random runs the best of them first; optuna's study is told "
                   "their results. Recorded on the parent run, not in the spec hash.")
@click.option("--no-checkpoint-artifacts", is_flag=True,
              help="Do not copy each trial's final checkpoint (and its weights as an MLflow PyTorch model) "
                   "into MLflow.")
@click.option("--progress", type=click.Choice(["line", "trials"]), default="line", show_default=True,
              help="line: one live line (trials running/pending/finished/failed, the best final value of each "
                   "objective); trials: also one line per trial as it starts, finishes or fails.")
@click.option("--system-metrics", is_flag=True,
              help="Record CPU, memory, disk, network and GPU use of each trial's machine in its MLflow run "
                   "(MLflow system metrics, every $RIRLAB_SYSTEM_METRICS_INTERVAL_S seconds, default 10).")
@click.option("--output-dir", default="rirlab_runs", show_default=True, type=click.Path(file_okay=False),
              help="Where Ray Tune keeps trial state, checkpoints and Ray's logs.")
@click.option("--trial", "trial", type=int, default=None, metavar="I",
              help="Run only trial I of a grid (from 0, in --dry-run's order: its #I+1), as one job of --group: "
                   "one job per trial, e.g. a Slurm job array (cluster/slurm/rirlab-array.sbatch). The trial's "
                   "name, config and the spec hash are those of the whole sweep, and `rirlab tables SPEC` reads "
                   "the group's jobs as one sweep. Evaluation-only cells run in the job of the trial they evaluate.")
@click.option("--group", default=None, metavar="NAME",
              help="With --trial: the name the jobs of one sweep share (letters, digits, _ . -), default "
                   "$SLURM_ARRAY_JOB_ID; --resume finds the job by --trial and --group.")
@click.option("--count", is_flag=True,
              help="Print how many trials the grid has (--trial takes 0 to that minus 1) and exit: a job array's size.")
def sweep(spec, quick, tracking_uri, address, sets, dry_run, resume, restart_damaged, rerun_failed, warm_start,
          no_checkpoint_artifacts, progress, system_metrics, output_dir, trial, group, count):
    """Run the sweep described by the YAML file SPEC with Ray Tune, recording every trial in MLflow.

    The spec is validated completely (every trial's config) before Ray or MLflow is touched. Ctrl-C or
    SIGTERM stops the sweep: running trials end KILLED in MLflow and the command that continues it is printed
    (exit 130 for Ctrl-C, 143 for SIGTERM). A trial whose checkpoint is damaged stops, the others run on, and the
    line naming the file gives the command that trains it again (exit 2).

    --resume continues an unfinished sweep, each trial from its last checkpoint. --rerun-failed trains a finished
    sweep's FAILED and KILLED trials again from scratch (Tune already retried each from its checkpoint
    max_failures times): new child runs tagged rirlab.rerun_of, the failed runs kept and tagged
    rirlab.superseded_by. An interrupted rerun continues with --resume.

    One job per trial (a grid on a cluster where jobs of many nodes queue long): N jobs each run
    `rirlab sweep SPEC --trial I --group G` for I = 0 .. N-1 (N: --count); with --resume a job continues its
    own trial.
    """
    from rirlab.errors import UserError
    from rirlab.sweeps.record.faults import SweepFault
    from rirlab.sweeps.driver.signals import (SweepInterrupted, close_startup_window, interrupted, open_startup_window, sender,
                                       terminated)

    if restart_damaged and not resume:
        click.echo("error: --restart-damaged restarts trials of an earlier sweep: add --resume (or leave out "
                   "--restart-damaged)", err=True)
        sys.exit(2)
    if warm_start and (resume or rerun_failed):
        raise UserError(f"--warm-start seeds a new sweep; {'--resume' if resume else '--rerun-failed'} continues the "
                        f"recorded one as it started: leave out --warm-start")
    if rerun_failed and resume:
        raise UserError("--rerun-failed and --resume cannot be combined: --rerun-failed retrains a finished sweep's "
                        "failed trials, --resume continues an unfinished sweep; give one of them")
    group = _group_of(trial, group, dry_run or count, resume or rerun_failed)
    open_startup_window()  # no Ctrl-C or SIGTERM is lost before Ray Tune runs (closed before Tuner.fit)
    where = _where_flags(tracking_uri, output_dir, address)  # repeated in the hints: --resume needs the same store
    if trial is not None:  # the job's own trial, in the same group
        where += f" --trial {trial}" + (f" --group {shlex.quote(group)}" if group else "")
    where += _how_flags(no_checkpoint_artifacts, system_metrics, progress)
    try:
        from rirlab.compat import check_all

        check_all()  # a Ray or MLflow outside the versions checked: one line, before the spec, Ray or the store
        from rirlab.config import parse_overrides
        from rirlab.sweeps.plan.plan import SweepPlan
        from rirlab.sweeps.spec.load import load_spec

        plan = SweepPlan.of(load_spec(spec, quick=quick, overrides=parse_overrides(sets)))
        if count:
            click.echo(plan.jobs())
            return
        if trial is not None:  # refused (a search; out of range) before anything starts
            n, plan = len(plan.trials), plan.one_trial(trial)
            click.echo(f"trial {trial} of {n} (#{trial + 1} in --dry-run) alone: {plan.trials[0].name}"
                       + (f", group {group}" if group else ""))
        if warm_start:
            plan = _warm_started(plan, warm_start, tracking_uri)
        if dry_run and rerun_failed:  # the trials it would train again, nothing started
            _show_reruns(plan, tracking_uri, group)
            return
        if dry_run:
            from rirlab.sweeps.plan.dryrun import dry_run as show

            show(plan)

            def store() -> str:  # (resolved only if the algorithm asks: it imports MLflow, and checks the URI)
                from rirlab.sweeps.record.tracker import resolve_tracking_uri

                return resolve_tracking_uri(tracking_uri).raw

            note = plan.algorithm.dry_run_note(plan.spec, store)
            if note:
                click.echo(note)
            if trial is None and plan.algorithm.one_trial_jobs and plan.n_trials > 1:  # the index a job array takes
                click.echo(f"one job per trial: --trial I --group G runs #I+1 alone, I from 0 to {plan.n_trials - 1} "
                           f"(cluster/slurm/rirlab-array.sbatch --array=0-{plan.n_trials - 1})")
            return
        from rirlab.analysis.report import log_parent_report
        from rirlab.sweeps.driver.rerun import NothingToRerun
        from rirlab.sweeps.driver.sweep import run_sweep
        from rirlab.sweeps.record.tracker import resolve_tracking_uri

        uri = resolve_tracking_uri(tracking_uri)
        click.echo(f"sweep {plan.spec.name} (spec hash {plan.hash}) -> MLflow {uri}")
        try:
            result = run_sweep(plan, uri, address=address, resume=resume,
                               checkpoint_artifacts=not no_checkpoint_artifacts, output_root=output_dir,
                               progress=progress, system_metrics=system_metrics, report=log_parent_report,
                               restart_damaged=restart_damaged, rerun_failed=rerun_failed, group=group)
        except NothingToRerun as nothing:  # (refused before Ray or MLflow was touched)
            click.echo(str(nothing))
            return
    except SweepFault as err:  # a full disk, a store locked too long: the sweep stopped as on Ctrl-C
        then = (f"{err.fix}, then continue with: {_resume_command(spec, quick, sets, where)}" if err.parent_id else
                f"nothing was recorded: {err.fix} and run the same command again")
        click.echo(f"error: {err.why}; {then}", err=True)
        sys.exit(err.exit_code)
    except SweepInterrupted:
        click.echo(f"interrupted; continue with: {_resume_command(spec, quick, sets, where)}", err=True)
        sys.exit(143 if terminated() else 130)
    except KeyboardInterrupt:  # before the sweep's parent run existed: nothing to resume
        if not interrupted():  # every Ctrl-C and SIGTERM is recorded: this one came from code, not from a signal
            traceback.print_exc()
            click.echo("error: the sweep stopped on a KeyboardInterrupt that no signal explains (traceback above); "
                       "nothing was recorded: run the same command again, and please report it", err=True)
            sys.exit(1)
        by = sender()
        click.echo(f"interrupted{f' by SIGINT from {by}' if by else ''} before the sweep "
                   f"{'continued' if resume else 'started'}; nothing was recorded: run the same command again",
                   err=True)
        sys.exit(143 if terminated() else 130)
    finally:  # a refusal or a dry run ends before Tune: SIGINT unblocked again (an in-process caller keeps Ctrl-C)
        close_startup_window()
    if result.interrupted:
        click.echo(f"interrupted: {result.stopped} running trial(s) stopped, their last checkpoints kept; "
                   f"continue with:\n  {_resume_command(spec, quick, sets, where)}", err=True)
        sys.exit(143 if terminated() else 130)
    click.echo(result.done_line())
    for line in _done_hints(spec, plan.spec.name, result.parent_run_id, _where_flags(tracking_uri, None, None)):
        click.echo(line)
    if result.damaged:
        click.echo(_damaged_line(result.damaged, _resume_command(spec, quick, sets, where)), err=True)
        sys.exit(2)
    if result.trained_nothing:  # (evaluation-only rows train nothing)
        sys.exit(1)


def _group_of(trial, group, looks: bool, again: bool):
    """The group of a one-trial job (--trial): --group, else the Slurm job array's id ($SLURM_ARRAY_JOB_ID: every task
    of one array shares it, a requeued task keeps it). A new job needs one, so that its trial is read back with its
    group's other jobs as one sweep and never merged with another array's run of the same grid; --resume
    (``again``) without one continues the trial's latest job, and a dry run or --count (``looks``) needs none."""
    import os

    from rirlab import contract
    from rirlab.errors import UserError

    if trial is None:
        if group is not None:
            raise UserError("--group names the jobs that run one trial each of a sweep: give --trial I too, or leave "
                            "out --group")
        return None
    group = group or os.environ.get("SLURM_ARRAY_JOB_ID") or None
    if group is not None and not contract.GROUP_NAME.match(group):
        raise UserError(f"--group {group[:80]!r}: use letters, digits, '_', '.' and '-' only (at most 100)")
    if group is None and not (looks or again):
        raise UserError(f"--trial {trial} runs one job of a sweep that several jobs share: name the sweep with "
                        f"--group NAME (the same in every job; inside a Slurm array, $SLURM_ARRAY_JOB_ID is taken)")
    return group


def _damaged_line(files, resume: str) -> str:
    """The one line after a sweep in which trials stopped on damaged checkpoints: the files, and the two ways on."""
    files = list(files)
    which = f"checkpoint {files[0]} is" if len(files) == 1 else f"checkpoints {', '.join(files)} are"
    them = "that trial" if len(files) == 1 else "those trials"
    return (f"error: {which} damaged (truncated or missing): {them} stopped, the others ran on; train {them} again "
            f"from an earlier checkpoint of {'it' if len(files) == 1 else 'theirs'} where one is kept (else step 0) "
            f"with: {resume} --restart-damaged previous, or from step 0 with --restart-damaged scratch")


def _show_reruns(plan, tracking_uri, group=None) -> None:
    """--rerun-failed --dry-run: the trials a --rerun-failed would train again (a line each: run name, how its run
    ended, its attempt and why it failed), read from the store without writing."""
    from rirlab.sweeps.driver import rerun
    from rirlab.sweeps.driver.sweep import _no_parent_message
    from rirlab.sweeps.record.tracker import Tracker, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    tracker = Tracker(uri, create=False)
    exp_id = tracker.experiment_id(plan.spec.name, create=False)
    parent = tracker.find_parent(exp_id, plan.hash, plan.trial_index, group) if exp_id else None
    if parent is None:
        from rirlab.errors import UserError

        raise UserError(_no_parent_message(tracker, exp_id, plan, uri, "--rerun-failed", group))
    rerun.check_parent(parent)
    try:
        reruns = rerun.failed_trials(tracker, exp_id, parent, plan)
    except rerun.NothingToRerun as nothing:
        click.echo(str(nothing))
        return
    click.echo(rerun.describe(reruns, parent.info.run_id, dry_run=True))


def _warm_started(plan, sources, tracking_uri):
    """The plan seeded with the earlier finished configurations of ``sources`` (--warm-start), its line printed."""
    plan.check_warm_start()  # (a grid: refused before the store is read)
    from rirlab.sweeps.record.tracker import Tracker, resolve_tracking_uri
    from rirlab.sweeps.record.warm import read_warm_start

    warm = read_warm_start(Tracker(resolve_tracking_uri(tracking_uri), create=False).client, list(sources), plan.spec)
    click.echo(warm.line())
    return plan.warm_started(warm)


def _done_hints(spec, name: str, run_id: str, store: str) -> list[str]:
    """What to run after a sweep ended: its tables, the UI, an export (every word shell-quoted)."""
    export = command(command_name(), "export", "--experiment", name, "--run", run_id)
    return [f"next: {command(command_name(), 'tables', spec)}{store}   |   {command(command_name(), 'ui')}{store}",
            f"keep a record that outlives the store: {export}{store} --out "
            f"{shlex.quote(f'{name}-{run_id[:8]}.parquet')} (then {command(command_name(), 'tables', spec, '--records')} "
            f"FILE)"]


def _where_flags(tracking_uri, output_dir, address) -> str:
    """The options that say where a sweep lives (its store, its Tune folder, its cluster), as the user gave them: a
    hint without them would continue or read another sweep. A password in the store's URI is masked."""
    from rirlab.redact import mask_url

    given = [("--tracking-uri", tracking_uri and mask_url(tracking_uri)),
             ("--output-dir", output_dir if output_dir not in (None, "rirlab_runs") else None),
             ("--address", address)]
    return "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in given if value)


def _how_flags(no_checkpoint_artifacts: bool, system_metrics: bool, progress: str) -> str:
    """The options that say how a sweep records and reports, as the user gave them: the printed --resume command
    dropped them, so a sweep started with --no-checkpoint-artifacts went on copying checkpoints into MLflow after a
    pasted resume, and one started with --system-metrics stopped recording them."""
    flags = ((["--no-checkpoint-artifacts"] if no_checkpoint_artifacts else [])
             + (["--system-metrics"] if system_metrics else [])
             + (["--progress", progress] if progress != "line" else []))
    return "".join(f" {shlex.quote(flag)}" for flag in flags)


def _resume_command(spec, quick: bool, sets, where: str = "") -> str:
    """The command that continues this sweep, as the user called rirlab, a password in a --set value masked."""
    from rirlab.redact import mask_url, redact_uri

    masked = [key + eq + redact_uri(mask_url(value)) for key, eq, value in (s.partition("=") for s in sets)]
    flags = (["--quick"] if quick else []) + [w for s in masked for w in ("--set", s)]
    return f"{command(command_name(), 'sweep', spec, *flags)}{where} --resume"
