"""Read a sweep's runs back from MLflow into a pandas DataFrame (one row per child run)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from pathlib import Path
from typing import Optional

import pandas as pd
from mlflow.tracking import MlflowClient

from rirlab import contract
from rirlab.errors import UserError, command
from rirlab.store_reads import metric_history_bulk
from rirlab.sweeps.spec.schema import Spec, read_spec

__all__ = ["Sweep", "child_runs", "describe_parent", "effective_spec", "latest_parent", "load_sweep", "open_store",
           "require_store", "read_spec", "sweeps_of"]


def store_path(uri: str) -> Optional[Path]:
    """The database file of a ``sqlite:///`` tracking URI (None for a server or another scheme)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):].split("?")[0])


def store_exists(uri: str) -> bool:
    path = store_path(uri)
    return path is None or path.is_file()


def require_store(uri: str) -> None:
    """A one-line error when there is no store at URI (reading never creates an empty ``mlruns.db``)."""
    if not store_exists(uri):
        raise UserError(f"no MLflow store at {store_path(uri)}: run `rirlab sweep` here first, or pass the store of "
                        f"your sweeps with --tracking-uri (or $MLFLOW_TRACKING_URI)")


def open_store(uri: str) -> MlflowClient:
    """A client of an existing store: reading never creates an empty ``mlruns.db`` (MLflow would)."""
    require_store(uri)
    return MlflowClient(getattr(uri, "raw", uri))  # a masked URI (rirlab.sweeps.record.store.StoreURI) prints masked: the real one


def _experiment(client: MlflowClient, experiment: str):
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise UserError(f"no experiment '{experiment}' in the tracking store; run `rirlab sweep` on its spec first "
                        f"(or pass the same --tracking-uri)")
    return exp


SERVER_PAGE = 100  # runs per runs/search request to a tracking server (search_all)


def search_all(client: MlflowClient, exp_ids: list, filter_string: str = "", order_by=None,
               max_results: int = 50000) -> list:
    """Up to ``max_results`` runs of the search, in its order. A database store answers in one call; a tracking
    server in pages of ``SERVER_PAGE`` runs: one response of every run is the server's work of seconds at a
    thousand runs (~3 ms of CPU a run here) under one request timeout (10 s an attempt for rirlab's commands:
    rirlab.sweeps.record.faults), and one that timed out is asked again from the start while the server still works
    on it (seen at load 7-13 on one core: a page of 250 runs still timed out once on a fresh server; a page costs
    the server ~10 ms more than its runs). A run listed twice across pages (a run started meanwhile moves the later
    pages by one) is kept once."""
    if not str(getattr(client, "tracking_uri", "")).startswith(("http://", "https://")):
        return list(client.search_runs(exp_ids, filter_string=filter_string, order_by=order_by,
                                       max_results=max_results))
    runs: dict = {}
    token = None
    while len(runs) < max_results:
        page = client.search_runs(exp_ids, filter_string=filter_string, order_by=order_by,
                                  max_results=min(SERVER_PAGE, max_results - len(runs)), page_token=token)
        for run in page:
            runs.setdefault(run.info.run_id, run)
        token = page.token
        if not token or not page:
            break
    return list(runs.values())


def parents(client: MlflowClient, exp_id: str, full_only: bool = False) -> list:
    """The experiment's sweep parent runs, newest first (only those run without --quick with ``full_only``)."""
    flt = contract.parent_filter() + (f" and tags.`{contract.QUICK}` = 'False'" if full_only else "")
    return search_all(client, [exp_id], filter_string=flt, order_by=["attributes.start_time DESC"], max_results=1000)


def group_of(run) -> Optional[str]:
    """The group of a one-trial job's parent run (``rirlab sweep --trial I --group G``), None for a whole sweep's."""
    return run.data.tags.get(contract.SWEEP_GROUP) or None if contract.TRIAL_INDEX in run.data.tags else None


def sweep_key(run) -> str:
    """What names a sweep among an experiment's parent runs: a whole sweep's parent run, or a group of one-trial
    jobs (its name and spec hash: one group of one spec is one sweep)."""
    group = group_of(run)
    return run.info.run_id if group is None else f"group {group} {run.data.tags.get(contract.SPEC_HASH, '')}"


def group_parents(client: MlflowClient, exp_id: str, run) -> list:
    """The parent runs of the sweep ``run`` is a parent of: itself, or for a one-trial job every job of its group
    and spec hash, in the grid's order, the latest job of a trial where one ran twice (started again without
    --resume). The jobs write nothing shared (rirlab.sweeps.driver.sweep.SweepDriver says why): this is where
    they become one sweep."""
    group = group_of(run)
    if group is None or not contract.GROUP_NAME.match(group):
        return [run]
    tags = run.data.tags
    jobs = search_all(client, [exp_id], filter_string=contract.group_filter(group, tags.get(contract.SPEC_HASH, "")))
    return latest_jobs([*jobs, run])


def latest_jobs(jobs: list) -> list:
    """One-trial jobs' parent runs (of one group), the latest of each trial index, in the grid's order."""
    latest: dict = {}
    for job in sorted(jobs, key=lambda job: -(job.info.start_time or 0)):  # newest first: the first of an index stays
        latest.setdefault(job.data.tags.get(contract.TRIAL_INDEX), job)
    return sorted(latest.values(), key=lambda job: int(job.data.tags.get(contract.TRIAL_INDEX, "0") or 0))


def describe_group(jobs: list) -> str:
    """One line naming a group of one-trial jobs read as one sweep: ``sweep group 812 (4 of 18 one-trial jobs, spec
    hash 1a2b3c, quick, 2026-11-23 18:40 UTC, 3 FINISHED, 1 RUNNING; parent runs 3f2a…, …)``."""
    tags = jobs[0].data.tags
    states: dict = {}
    for job in jobs:
        states[job.info.status] = states.get(job.info.status, 0) + 1
    status = next(iter(states)) if len(states) == 1 else ", ".join(f"{n} {st}" for st, n in sorted(states.items()))
    ids = [job.info.run_id for job in jobs]
    return (f"sweep group {group_of(jobs[0])} ({len(jobs)} of {tags.get(contract.GRID_TRIALS, '?')} one-trial jobs, "
            f"spec hash {tags.get(contract.SPEC_HASH, '?')}, {profile(tags)}, "
            f"{when(min(job.info.start_time or 0 for job in jobs))}, {status}; parent runs "
            f"{', '.join(ids) if len(ids) <= 3 else ', '.join(ids[:2]) + f', ... {ids[-1]}'})")


def n_sweeps(runs: list) -> int:
    """How many sweeps the parent runs ``runs`` are (a group of one-trial jobs is one)."""
    return len({sweep_key(r) for r in runs})


def latest_parent(client: MlflowClient, experiment: str, parent_id: Optional[str] = None, latest_full: bool = False):
    exp = _experiment(client, experiment)
    if parent_id:
        try:
            run = client.get_run(parent_id)
        except Exception:  # noqa: BLE001  (MLflow raises its own exception types for a malformed or unknown id)
            run = None
        if run is None or run.info.experiment_id != exp.experiment_id or not contract.is_parent(run.data.tags):
            raise UserError(f"run {parent_id} is not a sweep of '{experiment}'; "
                            f"`{command('rirlab', 'runs', '--experiment', experiment)}` lists its sweeps")
        return exp, run
    runs = parents(client, exp.experiment_id, full_only=latest_full)
    if not runs:
        if latest_full:
            raise UserError(f"experiment '{experiment}' has no full sweep (every sweep ran with --quick); drop "
                            f"--latest-full, or run `rirlab sweep` without --quick")
        raise UserError(f"experiment '{experiment}' has no sweep parent run; run `rirlab sweep` first")
    return exp, runs[0]


def when(ms) -> str:
    """MLflow's epoch milliseconds as ``2026-11-23 18:40 UTC``."""
    if not ms:
        return "?"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def profile(tags: dict) -> str:
    """``quick`` or ``full``, with the --set overrides: ``quick, --set steps=5``."""
    kind = "quick" if tags.get(contract.QUICK) == "True" else "full"
    try:
        overrides = json.loads(tags.get(contract.OVERRIDES) or "{}")
    except ValueError:
        overrides = {}
    return kind + "".join(f", --set {k}={v}" for k, v in (overrides or {}).items())


def describe_parent(run) -> str:
    """One line naming a sweep: ``sweep 3f2a… (spec hash 1a2b3c, quick, 2026-11-23 18:40 UTC, FINISHED)``."""
    tags = run.data.tags
    return (f"sweep {run.info.run_id} (spec hash {tags.get(contract.SPEC_HASH, '?')}, {profile(tags)}, "
            f"{when(run.info.start_time)}, {run.info.status})")


def sweeps_of(client: MlflowClient, experiment: str) -> pd.DataFrame:
    """One row per sweep of EXPERIMENT, newest first: parent run, date, quick/full, spec hash, status, trials
    finished / stopped early / failed / other (counted from its child runs) and the best final value of its first metric."""
    exp = _experiment(client, experiment)
    rows, seen = [], set()
    for p in parents(client, exp.experiment_id):
        if sweep_key(p) in seen:  # a group of one-trial jobs: one row, with its first job's run id
            continue
        seen.add(sweep_key(p))
        jobs = group_parents(client, exp.experiment_id, p)
        p = min(jobs, key=lambda job: job.info.start_time or 0)
        tags = p.data.tags
        frames = [child_runs(client, exp.experiment_id, job.info.run_id) for job in jobs]
        kids = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else \
            frames[0]
        metric = (tags.get(contract.METRIC) or "").split(",")[0]
        spec = effective_spec(client, p)
        mode = spec.modes[0] if spec is not None else "max"
        best, best_name = None, ""
        if len(kids) and f"metric.{metric}" in kids.columns:
            done = kids[(kids["status"] == "FINISHED") & ~kids["early_stopped"]].dropna(subset=[f"metric.{metric}"])
            for value, name in zip(done[f"metric.{metric}"], done["name"]):  # the parent's and the progress line's rule
                if contract.is_better(float(value), str(name), (best, best_name) if best is not None else None, mode):
                    best, best_name = float(value), str(name)
        status = kids["status"] if len(kids) else pd.Series([], dtype=str)
        early = int(((status == "FINISHED") & kids["early_stopped"]).sum()) if len(kids) else 0
        group = "" if len(jobs) == 1 and group_of(p) is None else \
            f", group {group_of(p)} ({len(jobs)} of {tags.get(contract.GRID_TRIALS, '?')} one-trial jobs)"
        states = sorted({job.info.status for job in jobs})
        rows.append({"parent_run": p.info.run_id, "date": when(p.info.start_time), "profile": profile(tags) + group,
                     "spec_hash": tags.get(contract.SPEC_HASH, ""),
                     "status": "RUNNING" if "RUNNING" in states else "/".join(states),
                     "finished": int((status == "FINISHED").sum()) - early, "stopped_early": early,
                     "failed": int((status == "FAILED").sum()),
                     "other": int((~status.isin(["FINISHED", "FAILED"])).sum()), "metric": metric, "mode": mode,
                     "best": best, "best_trial": best_name})
    return pd.DataFrame(rows)


def metric_histories(client, run_ids, key: str) -> dict:
    """{run id: the Metric points of ``key``} of every run in ``run_ids``, each in ``client.get_metric_history``'s
    order (timestamp, step, value); a run that never logged ``key`` maps to [] (:func:`metric_histories_of`)."""
    return metric_histories_of(client, {key: run_ids})[key]


def metric_histories_of(client, wanted: dict) -> dict:
    """{key: {run id: the Metric points of key}} of each key of ``wanted`` ({key: run ids}), each run's points in
    ``client.get_metric_history``'s order (timestamp, step, value); a run that never logged a key maps to []. Read in
    bulk where the store has a read for several runs (``rirlab.store_reads.metric_history_bulk``: a database store
    one query per metric and 500 runs, a tracking server one request per metric and up to 100 runs, several at a
    time): the public client has no call for several runs, and one call per run is a round trip per run, seconds at
    a thousand runs (a minute over HTTP). Other stores, and the runs a bulk read left unread, are read a run at a
    time."""
    wanted = {key: list(dict.fromkeys(run_ids)) for key, run_ids in wanted.items()}
    bulk = metric_history_bulk(client)  # below MLflow's public client: rirlab.store_reads, listed in rirlab.compat
    if bulk is not None and any(wanted.values()):
        out, unread = bulk(wanted)
    else:
        out, unread = {key: {} for key in wanted}, wanted
    for key, run_ids in unread.items():
        for rid in run_ids:
            out[key][rid] = list(client.get_metric_history(rid, key))
    return {key: {rid: out[key][rid] for rid in run_ids} for key, run_ids in wanted.items()}


def child_runs(client: MlflowClient, exp_id: str, parent_id: str) -> pd.DataFrame:
    """Columns: run_id, name, status, swept (dict), params.*, metrics (final values) and tags of interest. A run
    that a later attempt of its trial replaced (``--rerun-failed``: ``contract.superseded``) is left out, so each
    trial is counted once, by its latest attempt."""
    runs = contract.current_runs(
        search_all(client, [exp_id], filter_string=contract.children_filter(parent_id)))
    rows = []
    for r in runs:
        tags = r.data.tags
        row = {"run_id": r.info.run_id, "name": r.info.run_name, "status": r.info.status,
               "swept": contract.swept_of(tags), "early_stopped": tags.get(contract.EARLY_STOPPED) == contract.TRUE,
               "parent_id": tags.get(contract.PARENT_RUN_ID), "failure_reason": tags.get(contract.FAILURE_REASON),
               "start_time": r.info.start_time, "end_time": r.info.end_time,
               "device": tags.get(contract.result_tag(contract.DEVICE)),  # cpu, or the GPU's name
               "optuna_study": tags.get(contract.OPTUNA_STUDY)}  # algorithm: optuna: the study that proposed it
        row.update({f"param.{k}": v for k, v in r.data.params.items()})
        row.update({f"metric.{k}": v for k, v in r.data.metrics.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def effective_spec_json(client: MlflowClient, parent_run) -> Optional[dict]:
    """The parent's record of the spec a sweep actually ran (after --quick/--set), as JSON; None if absent."""
    import tempfile

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = client.download_artifacts(parent_run.info.run_id, contract.EFFECTIVE_SPEC_ARTIFACT, tmp)
            with open(path) as f:
                return json.load(f)
    except Exception:  # noqa: BLE001  (no artifact, unreachable artifact store, not JSON)
        return None


def spec_of(raw: Optional[dict]):
    """A recorded effective spec (:func:`effective_spec_json`) as a Spec; None if absent or of an older schema."""
    try:
        return None if raw is None else Spec.model_validate(raw, context={"recorded": True})
    except Exception:  # noqa: BLE001  (an older schema)
        return None


def effective_spec(client: MlflowClient, parent_run):
    """The spec a sweep actually ran (after --quick/--set), from the parent's artifact; None if absent."""
    return spec_of(effective_spec_json(client, parent_run))


@dataclasses.dataclass
class Sweep:
    """One sweep read back: its parent run (None when nothing ran yet), its trial runs, its spec, and the
    task's evaluation splits as the sweep recorded them ([] before any run, or for an older parent run)."""

    experiment: str
    parent: object
    runs: pd.DataFrame
    spec: object  # rirlab.sweeps.spec.schema.Spec or None
    n_expected: int
    splits: list = dataclasses.field(default_factory=list)  # [(split, paper label)] in the papers' order
    n_sweeps: int = 0  # sweeps of the experiment (parent runs), this one included
    parents: list = dataclasses.field(default_factory=list)  # several sweeps read as one (``combine``): each parent
    study: Optional[str] = None  # the Optuna study these sweeps continued one after another (``study_parents``)
    group: Optional[str] = None  # the group of one-trial jobs (--trial I --group G) these parents are

    @property
    def about(self) -> Optional[str]:
        """Which sweep this is (parent run, spec hash, quick or full, date), a line per sweep when several are
        read as one (one line for a group of one-trial jobs); None before any sweep."""
        if self.group is not None:
            return describe_group(self.parents)
        if self.parents:
            return "\n".join(describe_parent(p) for p in self.parents)
        return None if self.parent is None else describe_parent(self.parent)


def combine(sweeps: list[Sweep], spec=None) -> Sweep:
    """Several sweeps of one experiment read as one: their trial runs together (e.g. a row or a seed per sweep,
    each sweep pinned to its own cores or machine), laid out by ``spec`` (the spec file: every row it lists; else the
    first sweep's), cells over the seeds of every sweep, the splits of all in order. ``parent`` is the first
    sweep's; ``parents`` names them all."""
    first = sweeps[0]
    frames = [s.runs for s in sweeps if not s.runs.empty]
    runs = pd.concat(frames, ignore_index=True).drop_duplicates("run_id") if frames else pd.DataFrame()
    splits = list(dict.fromkeys(x for s in sweeps for x in s.splits))
    n = len(spec.seed_list) if spec is not None else max(s.n_expected for s in sweeps)
    return Sweep(first.experiment, first.parent, runs, spec or first.spec, n, splits, first.n_sweeps,
                 [s.parent for s in sweeps])


def load_sweep(client: Optional[MlflowClient], experiment: str, parent_id=None, spec=None,
               allow_empty: bool = False, latest_full: bool = False) -> Sweep:
    """The latest (``latest_full``: the latest without --quick; or the given) sweep of EXPERIMENT; ``parent_id``
    may list several sweeps, read as one (:func:`combine`). ``allow_empty``: no store (client None), experiment or
    parent yet is not an error (tables of a spec print their layout with empty cells)."""
    ids = list(dict.fromkeys([parent_id] if isinstance(parent_id, str) else parent_id or []))
    if len(ids) > 1:
        return combine([load_sweep(client, experiment, i, spec) for i in ids], spec)
    parent_id = ids[0] if ids else None
    try:
        if client is None:
            raise UserError("no store")
        exp, parent = latest_parent(client, experiment, parent_id, latest_full)
    except UserError:
        if not allow_empty or parent_id or latest_full:
            raise
        n = len(spec.seed_list) if spec is not None else 0
        return Sweep(experiment, None, pd.DataFrame(), spec, n)
    count = n_sweeps(parents(client, exp.experiment_id))
    ran = effective_spec(client, parent)
    jobs = group_parents(client, exp.experiment_id, parent)
    if group_of(parent) is not None:  # one job of a group (its --run too): the group is the sweep
        sweeps = [recorded_sweep(experiment, job, child_runs(client, exp.experiment_id, job.info.run_id), ran, spec,
                                 count) for job in jobs]  # (one spec hash: one effective spec)
        return dataclasses.replace(combine(sweeps, spec), group=group_of(parent))
    sweep = recorded_sweep(experiment, parent, child_runs(client, exp.experiment_id, parent.info.run_id), ran, spec,
                           count)
    study, ids = study_parents(client, exp.experiment_id, sweep.runs)
    if parent_id is None and len(ids) > 1:  # a continued study is read as the study: every sweep of it
        return dataclasses.replace(combine([load_sweep(client, experiment, i, spec) for i in ids], spec), study=study)
    return sweep


def study_parents(client: MlflowClient, exp_id: str, runs: pd.DataFrame) -> tuple[Optional[str], list[str]]:
    """(the Optuna study of a sweep's trial runs, the parent runs of every sweep of the experiment whose trials it
    proposed, oldest first): a study continued by later sweeps (the same optuna.study_name and storage) is one
    search. (None, []) when the runs name no single study."""
    studies = set(runs["optuna_study"].dropna()) if "optuna_study" in runs else set()
    if len(studies) != 1 or "'" in next(iter(studies)):
        return None, []
    study = studies.pop()
    kids = search_all(client, [exp_id], filter_string=f"tags.`{contract.OPTUNA_STUDY}` = '{study}'")
    ids = {r.data.tags.get(contract.PARENT_RUN_ID) for r in kids} - {None}
    found = [p for p in parents(client, exp_id) if p.info.run_id in ids]
    return study, [p.info.run_id for p in sorted(found, key=lambda p: p.info.start_time or 0)]


def recorded_sweep(experiment: str, parent, runs: pd.DataFrame, ran, spec, n_sweeps: int) -> Sweep:
    """The Sweep of a parent run (from a store, or an export's record of it: :mod:`rirlab.analysis.records`) and its trial
    ``runs``: laid out by the spec it ran (``ran``, else the given ``spec``), its seed count and splits from its tags."""
    tags = parent.data.tags
    n = int(tags.get(contract.SEEDS, "0") or 0) or (len(spec.seed_list) if spec is not None else 0)
    return Sweep(experiment, parent, runs, ran or spec, n, contract.decode_splits(tags), n_sweeps)
