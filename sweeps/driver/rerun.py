"""``rirlab sweep SPEC --rerun-failed``: train again, from scratch, the trials of a finished sweep that did not finish
(FAILED, KILLED, or left RUNNING by a driver that died), as new child runs under the same parent run.

Why a Ray Tune experiment of its own, and not ``Tuner.restore(restart_errored=True)`` of the sweep's one: Tune
restarts only trials in its ERROR state, while a sweep's failed trials are not all there (a non-finite loss ends a
trial TERMINATED with its reason; a ``--resume`` turns an errored trial into one that reports its recorded failure
and ends TERMINATED), and Tune would restart them under the sweep's searcher, which does not know them (an Optuna
study cannot be told a second result for a trial it closed). Here the trials to rerun are read from MLflow, which
records every trial's end, and a fresh Tune experiment (a BasicVariantGenerator handing out exactly their
configurations) trains them; it does not need the sweep's own Tune folder, which may be gone.

Why from scratch, not from the failed attempt's last checkpoint: Ray Tune already retried each errored trial from
its last checkpoint ``max_failures`` times before it failed, the state may be what failed (a NaN weight, a checkpoint
cut short by a full disk), and a fresh start gives the new run a whole metric history from step 0.

Why new runs under the same parent, not the failed runs reopened: a reopened run would mix two attempts' metric
histories (the new attempt's steps 0.. beside the failed one's, which the no-step-twice rule would then skip). The
new run carries ``rirlab.rerun_of`` (the run it replaces) and ``rirlab.attempt``; the replaced run stays in MLflow
as the record of the failure, tagged ``rirlab.superseded_by``, and every reader counts only the latest attempt of a
trial (``rirlab.contract.superseded``). The same parent, because a sweep's table is its parent's runs.

The rerun's Tune folder becomes the parent's ``rirlab.tune_path`` (the sweep's own one is kept in
``rirlab.first_tune_path``), with the list of runs it replaces beside Tune's state (``RERUN_FILE``): a rerun
interrupted by Ctrl-C continues with ``--resume`` from its trials' checkpoints like any sweep, and runs it creates
then still name the runs they replace.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

from rirlab import contract
from rirlab.errors import UserError
from rirlab.sweeps.spec.trials import VARIANT_KEY, swept_signature as signature

RERUN_FILE = "rirlab_rerun.json"  # in the rerun's Tune folder: the runs its trials replace
INHERITED_TAGS = (contract.OPTUNA_TRIAL_NUMBER, contract.OPTUNA_STUDY)  # the Optuna trial that proposed the config


class NothingToRerun(Exception):
    """The sweep has no trial to rerun: the CLI prints the message and exits 0 (nothing is started)."""


@dataclasses.dataclass(frozen=True)
class Rerun:
    """One trial to train again: the run it replaces, that run's end, and the trial's swept values."""

    run_id: str
    name: str
    status: str
    reason: str
    swept: dict
    attempt: int  # of the new run (the replaced run's attempt + 1)
    inherit: dict = dataclasses.field(default_factory=dict)  # tags the new run takes over (the Optuna trial)

    @property
    def signature(self) -> str:
        return signature(self.swept)

    def point(self) -> dict:
        """The trial's Tune config of swept keys (``TrialSpace.trial`` turns it back into the same trial)."""
        swept = dict(self.swept)
        variant = swept.pop("variant", "")
        return ({VARIANT_KEY: variant} if variant else {}) | swept


def check_parent(parent) -> None:
    """A sweep whose own trials did not all run yet (interrupted, or its driver died) is continued with --resume
    first: the trials it never started have no run to rerun. One that had a rerun already may be in any state (an
    interrupted rerun is rerun again, from scratch)."""
    tags = parent.data.tags
    if parent.info.status == "FINISHED" or tags.get(contract.RERUNS):
        return
    raise UserError(f"--rerun-failed: sweep run {parent.info.run_id} did not finish ({parent.info.status}); "
                    f"continue it first with --resume (same spec and flags), then rerun its failed trials")


def failed_trials(tracker, exp_id: str, parent, plan) -> list[Rerun]:
    """The trials of the sweep's parent run whose latest attempt did not finish, in the order they first ran;
    raises NothingToRerun where there is none. Trials stopped early (ASHA, a time limit) ended as the spec asks and
    are not rerun; evaluation-only rows are evaluated again by the sweep's end anyway."""
    runs = tracker.client.search_runs([exp_id], filter_string=contract.children_filter(parent.info.run_id),
                                      max_results=50000, order_by=["attributes.start_time ASC"])
    trials = [r for r in contract.current_runs(runs)
              if r.data.tags.get(contract.TRIAL_KEY) and not r.data.tags.get(contract.EVALUATES)]
    out, skipped = [], 0
    for run in trials:
        if run.info.status == "FINISHED":
            continue
        tags = run.data.tags
        swept = contract.swept_of(tags)
        reason = ((tags.get(contract.FAILURE_REASON) or "").strip().splitlines() or [""])[0][:200]
        rerun = Rerun(run.info.run_id, run.info.run_name, run.info.status, reason, swept,
                      int(tags.get(contract.ATTEMPT) or 1) + 1, {k: tags[k] for k in INHERITED_TAGS if k in tags})
        if not swept or signature(plan.space.trial(rerun.point()).swept) != rerun.signature:
            skipped += 1  # a run the spec cannot make again (recorded before the swept tag, or by another space)
            continue
        out.append(rerun)
    cannot = (f"{skipped} unfinished trial run(s) of sweep run {parent.info.run_id} have no swept values this spec "
              f"makes again (recorded by an earlier rirlab); left as they are")
    if not out:
        raise NothingToRerun(f"nothing to rerun: {cannot}" if skipped else
                             f"nothing to rerun: every trial of sweep run {parent.info.run_id} finished "
                             f"({len(trials)} trial run(s))")
    if skipped:
        print(f"warning: {cannot}", file=sys.stderr, flush=True)
    return out


def describe(reruns: list[Rerun], parent_id: str, dry_run: bool = False) -> str:
    """The line the driver prints before the rerun starts (``dry_run``: what --dry-run prints, a line per trial)."""
    by: dict[str, int] = {}
    for r in reruns:
        by[r.status] = by.get(r.status, 0) + 1
    head = (f"{'would rerun' if dry_run else 'rerunning'} {len(reruns)} trial(s) of sweep run {parent_id} from scratch "
            f"({', '.join(f'{n} {s}' for s, n in sorted(by.items()))})")
    if dry_run:
        return "\n".join([head + ":"] + [f"  {r.name}  {r.status} (attempt {r.attempt - 1})" + (
            f": {r.reason}" if r.reason else "") for r in reruns])
    return f"{head}: " + ", ".join(r.name for r in reruns[:5]) + (", ..." if len(reruns) > 5 else "")


def start(tracker, parent, tune_path: str, reruns: list[Rerun]) -> None:
    """Write the rerun's list of replaced runs into its Tune folder, then point the parent at that folder
    (in that order: a --resume never finds a rerun folder without its list)."""
    tags = parent.data.tags
    payload = [dataclasses.asdict(r) for r in reruns]
    Path(tune_path, RERUN_FILE).write_text(json.dumps(payload, indent=1, default=str))
    tracker.set_tags(parent.info.run_id, {
        contract.TUNE_PATH: tune_path, contract.RERUNS: str(int(tags.get(contract.RERUNS) or 0) + 1),
        contract.FIRST_TUNE_PATH: tags.get(contract.FIRST_TUNE_PATH) or tags.get(contract.TUNE_PATH, "")})


def load(tune_path: str) -> Optional[list[Rerun]]:
    """The runs a rerun's Tune folder replaces (None for a sweep's own folder)."""
    path = Path(tune_path, RERUN_FILE) if tune_path else None
    if path is None or not path.is_file():
        return None
    return [Rerun(**r) for r in json.loads(path.read_text())]



RERUN_ATTR = "rirlab_rerun_of"  # user attr of an Optuna trial added by tell_study: the number of the trial it reruns


def tell_study(tracker, exp_id: str, parent_id: str, spec, tracking_uri: str) -> str:
    """An optuna sweep's rerun tells its study what the rerun measured; returns the line the driver prints ("" when
    there was nothing to tell).

    The rerun trains the failed configurations outside the study (a BasicVariantGenerator, module docstring), and
    Optuna cannot be told a second result for a trial it closed (``study.tell`` refuses a FAIL trial), so the study
    kept the failure as that configuration's only record: its sampler never learnt the value and would propose the
    region again. Here each configuration whose every seed now has a finished run (the latest attempts, one of them
    made by a rerun) becomes a new COMPLETE trial of the study with the seed mean of each metric, as the sweep's own
    searcher tells it (``study.add_trial``, the same params and distributions; user attrs: the rerun trial's number
    and the MLflow run ids). The closed trial stays as the record of the failure. Told once: a resumed rerun, or a
    second one, skips what the study already holds."""
    import optuna

    from rirlab.sweeps.tune.optuna import optuna_study, rdb_storage

    runs = tracker.client.search_runs([exp_id], filter_string=contract.children_filter(parent_id), max_results=50000)
    groups: dict[tuple[str, int], list] = {}
    for run in contract.current_runs(runs):
        tags = run.data.tags
        if tags.get(contract.OPTUNA_STUDY) and (tags.get(contract.OPTUNA_TRIAL_NUMBER) or "").isdigit() \
                and not tags.get(contract.EVALUATES):
            groups.setdefault((tags[contract.OPTUNA_STUDY], int(tags[contract.OPTUNA_TRIAL_NUMBER])), []).append(run)
    ready = {key: group for key, group in groups.items()
             if any(r.data.tags.get(contract.RERUN_OF) for r in group) and len(group) == len(spec.seed_list)
             and all(r.info.status == "FINISHED" and r.data.tags.get(contract.EARLY_STOPPED) != contract.TRUE
                     and all(m in r.data.metrics for m in spec.metrics) for r in group)}
    if not ready:
        return ""
    parent = tracker.client.get_run(parent_id)
    told = []
    for study_name in sorted({name for name, _ in ready}):
        folder = parent.data.tags.get(contract.FIRST_TUNE_PATH) or parent.data.tags.get(contract.TUNE_PATH)
        _, storage = optuna_study(spec, tracking_uri, folder)
        try:
            study = optuna.load_study(study_name=study_name, storage=rdb_storage(storage))
        except Exception as err:  # noqa: BLE001 -- the trials are recorded in MLflow; the study misses them only
            print(f"warning: Optuna study {study_name!r} could not be told the rerun's results "
                  f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})", file=sys.stderr,
                  flush=True)
            continue
        trials = study.get_trials(deepcopy=False)
        by_number = {t.number: t for t in trials}
        done = {(t.user_attrs.get(RERUN_ATTR), tuple(sorted(t.user_attrs.get(contract.OPTUNA_RUN_IDS_ATTR, ()))))
                for t in trials if RERUN_ATTR in t.user_attrs}
        for (name, number), group in sorted(ready.items()):
            if name != study_name or number not in by_number:
                continue
            ids = tuple(sorted(r.info.run_id for r in group))
            if (number, ids) in done:
                continue
            closed = by_number[number]
            values = [sum(r.data.metrics[m] for r in group) / len(group) for m in spec.metrics]
            new = optuna.trial.create_trial(params=closed.params, distributions=closed.distributions, values=values,
                                            user_attrs={RERUN_ATTR: number, contract.OPTUNA_RUN_IDS_ATTR: list(ids)})
            study.add_trial(new)
            told.append(f"{number} ({closed.state.name.lower()})")
    if not told:
        return ""
    return (f"told Optuna study {', '.join(sorted({n for n, _ in ready}))!r} the rerun results of trial(s) "
            f"{', '.join(told)} as new finished trials (the closed ones stay as the record of their failure)")
