"""Evaluation-only rows of a sweep (a variant with ``evaluates: ROW``): once the trials of the row they name have
finished, each cell evaluates that trial's weights (those its own cells were measured with: the best dev evaluation's,
unless its recipe selects the last) with the row's settings changed, e.g. RIR Table 5's "+RIR inference" (RIR-EBT-GRC
trained once, tested under RIR inference, RIR App. D).

Each evaluation is a child run of the sweep like a trial's: named after its row and seed, its params the config it
was evaluated with, its metrics every split's accuracy and loss, tagged with the run whose weights it evaluated
(``contract.EVALUATES``; its MLflow note links to it). It runs as a Ray task with the sweep's per-trial resources, on
the weights read from the trial's Ray Tune folder (or, when that is gone, its logged checkpoint artifact). A resumed
sweep evaluates only what has no FINISHED run yet, in the run it had.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from rirlab import contract
from rirlab.config import EVALUATION_KEYS
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.record.tracker import Tracker


def _usable(run) -> bool:
    """A trial run whose weights an evaluation may test: FINISHED, not stopped early, not an evaluation itself."""
    tags = run.data.tags
    return run.info.status == "FINISHED" and tags.get(contract.EARLY_STOPPED) != contract.TRUE and \
        not tags.get(contract.EVALUATES) and not contract.is_parent(tags)


def same_training(params: dict, flat: dict) -> bool:
    """Whether a run's params (its logged flat config) train what the flat config ``flat`` trains: every key both
    have is equal, the evaluation-time keys (``rirlab.config.EVALUATION_KEYS``) and ``log_every`` aside. A key the
    run lacks is a newer config field, at its default then."""
    return all(params[k] == str(v) for k, v in flat.items()
               if k in params and k not in EVALUATION_KEYS and k != "log_every")


def trained_before(tracker: Tracker, ev) -> Optional[object]:
    """The latest usable trial run in the store, of any sweep or experiment, trained with ``ev``'s source config
    (RIR Table 2's RIR-EBT-GRC seed 0 is Table 5's): for a row this sweep does not train."""
    from rirlab.trial import resolve

    flat = resolve(ev.source.config).flat()
    model, seed = flat.get("model"), flat.get("seed")
    ids = [e.experiment_id for e in tracker.client.search_experiments()]
    if not ids:
        return None
    runs = tracker.client.search_runs(
        ids, filter_string=f"params.model = '{model}' and params.seed = '{seed}' and attributes.status = 'FINISHED'",
        order_by=["attributes.end_time DESC"], max_results=1000)
    return next((r for r in runs if _usable(r) and same_training(r.data.params, flat)), None)


def _source_run(tracker: Tracker, plan: SweepPlan, children: list, ev) -> Optional[object]:
    """The run of ``ev``'s source trial: this sweep's (same swept values), or, for a row it does not train, one
    trained before."""
    if any(v.name == ev.source.variant and not v.trains for v in plan.spec.variants):
        return trained_before(tracker, ev)
    return next((r for r in children if _usable(r) and contract.swept_of(r.data.tags) == ev.source.swept), None)


def missing_sources(plan: SweepPlan, tracker: Tracker) -> list:
    """The evaluations of rows this sweep does not train whose trial no earlier sweep in the store finished."""
    return [ev for ev in plan.evaluations
            if any(v.name == ev.source.variant and not v.trains for v in plan.spec.variants)
            and (not tracker.store_exists() or trained_before(tracker, ev) is None)]


def _latest_checkpoint(trial_dir: str) -> Optional[Path]:
    """The trial folder's latest state file: the one search `rirlab evaluate` makes too (rirlab.train)."""
    from rirlab.train import latest_checkpoint

    return latest_checkpoint(trial_dir)


def checkpoint_bytes(tracker: Tracker, run) -> bytes:
    """The final checkpoint (state.pt) of a finished trial run: from its sweep's Ray Tune folder, else its logged
    artifact."""
    key = run.data.tags.get(contract.TRIAL_KEY, "")
    try:
        tune_path = tracker.client.get_run(run.data.tags[contract.PARENT_RUN_ID]).data.tags.get(contract.TUNE_PATH, "")
    except Exception:  # noqa: BLE001 - no parent (a run of another tool): its artifact only
        tune_path = ""
    key = key if tune_path else ""
    for trial_dir in sorted(glob.glob(os.path.join(glob.escape(tune_path), f"*{glob.escape(key)}*"))) if key else []:
        state = _latest_checkpoint(trial_dir)
        if state is not None:
            return state.read_bytes()
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = tracker.client.download_artifacts(
                run.info.run_id, f"{contract.CHECKPOINT_ARTIFACT}/{contract.CHECKPOINT_STATE_FILE}", tmp)
        except Exception as err:  # noqa: BLE001 - no artifact, an unreachable artifact store
            raise LookupError(f"no checkpoint of run {run.info.run_name} ({run.info.run_id}) in its Ray Tune folder "
                              f"or its artifacts ({type(err).__name__})") from None
        return Path(path).read_bytes()


def evaluate_state(config: dict, blob: bytes) -> dict:
    """A trial's checkpoint (``state.pt`` as bytes) evaluated on every split of ``config`` (in a Ray worker)."""
    from rirlab.train import evaluate_checkpoint, load_checkpoint

    return evaluate_checkpoint(config, load_checkpoint(io.BytesIO(blob)), "auto")  # weights only: no code runs


def _note(ev, source, exp_id: str) -> str:
    changed = ", ".join(f"{k}={v}" for k, v in ev.changed.items()) or "no setting changed"
    return (f"Evaluation only: the trained weights of trial [{source.info.run_name}](#/experiments/{exp_id}/runs/"
            f"{source.info.run_id}) (run {source.info.run_id}), evaluated with {changed}. Nothing was trained here.")


def _metrics(result: dict) -> dict:
    out = {contract.split_metric(split, m): float(v[m]) for split, v in result["splits"].items()
           for m in contract.EVAL_METRICS}
    best = result.get("best") or {}
    out.update({contract.BEST_PREFIX_METRIC + k: float(v) for k, v in best.items() if isinstance(v, (int, float))})
    return out


@dataclasses.dataclass
class EvaluationCounts:
    """The evaluation-only cells of a sweep: evaluated (runs FINISHED, this driver's and earlier ones), failed,
    waiting (no finished source trial)."""

    evaluated: int = 0
    failed: int = 0
    waiting: int = 0


def run_evaluations(plan: SweepPlan, tracker: Tracker, exp_id: str, parent_id: str,
                    say: Callable[[str], None]) -> EvaluationCounts:
    """Run every evaluation-only cell of the plan whose source trial finished and that has no FINISHED run yet.
    Returns counts: evaluated (runs FINISHED, this driver's and earlier ones), failed, waiting (no finished source
    trial: failed or stopped early). Ctrl-C ends the runs in progress KILLED and is raised again."""
    counts = EvaluationCounts()
    if not plan.evaluations:
        return counts
    import ray

    children = tracker.children(exp_id, parent_id)
    runs = {r.data.tags.get(contract.TRIAL_KEY): r for r in children}
    remote = ray.remote(num_cpus=plan.spec.resources.cpu, num_gpus=plan.spec.resources.gpu, max_retries=1)(
        evaluate_state)
    pending: dict = {}  # ray object ref -> (run id, evaluation)
    try:
        for ev, resolved in zip(plan.evaluations, plan.evaluated):
            old = runs.get(ev.key)
            if old is not None and old.info.status == "FINISHED":
                counts.evaluated += 1
                continue
            source = _source_run(tracker, plan, children, ev)
            if source is None:
                counts.waiting += 1
                say(f"  {ev.record.name}: not evaluated, trial {ev.source.name} did not finish")
                continue
            if old is not None:
                run_id = old.info.run_id
                tracker.reopen(run_id)
            else:
                tags = {**ev.record.tags(ev.key), contract.EVALUATES: source.info.run_id,
                        contract.EVALUATES_TRIAL: source.info.run_name}
                run_id = tracker.start_child(exp_id, parent_id, ev.record.name, resolved.flat(), tags)
            tracker.set_tags(run_id, {contract.NOTE: _note(ev, source, exp_id)})
            try:
                blob = checkpoint_bytes(tracker, source)
            except LookupError as err:
                tracker.finish(run_id, "FAILED", str(err))
                counts.failed += 1
                say(f"  {ev.record.name}: FAILED ({err})")
                continue
            say(f"  {ev.record.name}: evaluating the weights of {source.info.run_name}")
            pending[remote.remote(dict(ev.record.config), blob)] = (run_id, ev)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            run_id, ev = pending.pop(done[0])
            try:
                result = ray.get(done[0])
            except Exception as err:  # noqa: BLE001 - the evaluation's own error: its run says why
                why = (str(err).strip().splitlines() or [type(err).__name__])[-1][:500]
                tracker.finish(run_id, "FAILED", why)
                counts.failed += 1
                say(f"  {ev.record.name}: FAILED ({why})")
                continue
            tracker.log_result(run_id, {**_metrics(result), contract.STEP: result["step"]}, int(result["step"]))
            tracker.set_tags(run_id, {contract.FINAL_LOGGED: contract.TRUE})
            tracker.finish(run_id, "FINISHED")
            counts.evaluated += 1
            cells = ", ".join(f"{s} {v['accuracy']:.2f}" for s, v in result["splits"].items() if s != "dev")
            say(f"  {ev.record.name}: {cells}")
    except BaseException:
        for ref, (run_id, _) in pending.items():  # Ctrl-C: the evaluations still running end KILLED; --resume reruns them
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            with contextlib.suppress(Exception):
                tracker.set_tags(run_id, {contract.INTERRUPTED: contract.TRUE})
                tracker.finish(run_id, "KILLED")
        raise
    return counts


def evaluation_banner(plan: SweepPlan) -> Optional[str]:
    """The line the sweep prints before its evaluations run."""
    if not plan.evaluations:
        return None
    rows = sorted({ev.record.variant for ev in plan.evaluations})
    return (f"evaluating {len(plan.evaluations)} cell(s) of evaluation-only row(s) {', '.join(rows)} "
            f"({time.strftime('%H:%M:%S')})")
