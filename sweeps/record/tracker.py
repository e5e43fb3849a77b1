"""MLflow bookkeeping, always from the driver: one parent run per sweep, one child run per trial.

Only the driver writes (safe with a sqlite store and concurrent trials; the
same code talks to a tracking server across machines). Child runs carry the
tag ``contract.TRIAL_KEY`` so a resumed sweep finds and continues its own runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, Optional

from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import (MAX_BATCH_LOG_REQUEST_SIZE, MAX_ENTITIES_PER_BATCH, MAX_METRICS_PER_BATCH,
                                     MAX_PARAMS_TAGS_PER_BATCH)

import rirlab
from rirlab import contract
from rirlab.redact import mask_url, redact_uri, strip_credentials
from rirlab.compat import mlflow as compat_mlflow
from rirlab.sweeps.record.faults import bound_http_waits, store_wait_s
from rirlab.sweeps.record.store import (DB_SCHEMES, StoreURI, can_create, check_store, journal_plan, raw, scheme,
                                        set_journal, sqlite_path, validate_uri)

DEFAULT_URI_FILE = "mlruns.db"
SUPPRESS_URL_PRINTING = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
RAY_KEYS = {"time_this_iter_s", "timestamp", "training_iteration", "time_total_s", "time_since_restore",
            "iterations_since_restore", "pid", "done", contract.STEP, "checkpoint_dir_name", "should_checkpoint"}
SECRET_MARKERS = ("PASSWORD", "SECRET", "TOKEN", "KEY", "CREDENTIAL")
# forwarded to Ray workers (when set): plugins, the data cache, MLflow's TLS and S3 endpoint settings. Never a
# secret: Ray writes a job's runtime_env, env_vars included, into its world-readable runtime_env_agent.log, and
# trials do not need MLflow credentials (only the driver writes to MLflow). cluster/README.md says how to give
# workers credentials of their own should a plugin need them.
WORKER_ENV = ("MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH", "MLFLOW_S3_ENDPOINT_URL",
              "MLFLOW_S3_IGNORE_TLS", "AWS_DEFAULT_REGION", "AWS_REGION", "RIRLAB_PLUGINS", "RIRLAB_CACHE")


def _quiet_db_errors(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


def _quiet_http_retries(record: logging.LogRecord) -> bool:
    """urllib3's "Retrying (Retry(total=3, ...)) after connection broken by ..." warnings, one per retry of every
    request to a tracking server that is down: the driver waits a bounded time and then says so in one line."""
    return not str(record.msg).startswith("Retrying")


def resolve_tracking_uri(cli_value: Optional[str] = None) -> StoreURI:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlruns.db; checked for its form (one-line
    UserError: in-memory SQLite, wrong slashes, unknown scheme), a relative SQLite path made absolute. The result
    prints with its password masked (``.raw`` is the real URI)."""
    if cli_value:
        return validate_uri(cli_value, "--tracking-uri")
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return validate_uri(os.environ["MLFLOW_TRACKING_URI"], "$MLFLOW_TRACKING_URI")
    return validate_uri(f"sqlite:///{Path.cwd() / DEFAULT_URI_FILE}")


def artifact_root(uri: str) -> Optional[str]:
    """For a sqlite store, keep artifacts next to the database file (mlartifacts/)."""
    uri = raw(uri)
    if uri.startswith("sqlite:///"):
        return str(Path(uri[len("sqlite:///"):].partition("?")[0]).parent / "mlartifacts")
    return None


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(rirlab.__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def split_result(result: dict) -> tuple[dict[str, float], dict[str, str]]:
    """Numeric, finite values -> metrics; strings -> tags; Ray's bookkeeping keys dropped."""
    metrics, tags = {}, {}
    for k, v in result.items():
        if k in RAY_KEYS or k.startswith(("config", contract.ARTIFACT_PREFIX, contract.PARAM_PREFIX)) or \
                k in ("trial_id", "experiment_tag", "date", "hostname", "node_ip"):
            continue
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            metrics[k] = float(v)
        elif isinstance(v, str):
            tags[contract.result_tag(k)] = v[:5000]
    return metrics, tags


def batches(metrics=(), params=(), tags=()):
    """``(metrics, params, tags)`` lists, each within what one MLflow ``log_batch`` call may carry (1,000 metrics,
    100 params, 100 tags, 1,000 entities in all, a request under 1 MB: ``mlflow.utils.validation``), in as few calls
    as those limits allow: a result of a few dozen metrics is one call, one of 2,500 metrics three. A call over a limit
    is refused whole by the store or server (INVALID_PARAMETER_VALUE), which would lose every value of the report.

    Each call takes what it can of each kind; the request size is bounded on each entity's key and value lengths
    (half the limit: a margin for the JSON around them and escaped characters)."""
    queues = {"m": deque(metrics), "p": deque(params), "t": deque(tags)}
    limit = {"m": MAX_METRICS_PER_BATCH, "p": MAX_PARAMS_TAGS_PER_BATCH, "t": MAX_PARAMS_TAGS_PER_BATCH}
    budget = MAX_BATCH_LOG_REQUEST_SIZE // 2
    while any(queues.values()):
        chunk: dict[str, list] = {"m": [], "p": [], "t": []}
        size = count = 0
        for kind in ("m", "p", "t"):
            queue = queues[kind]
            while queue and len(chunk[kind]) < limit[kind] and count < MAX_ENTITIES_PER_BATCH:
                cost = len(str(queue[0].key)) + len(str(queue[0].value)) + 100
                if count and size + cost > budget:
                    break
                chunk[kind].append(queue.popleft())
                size, count = size + cost, count + 1
        yield chunk["m"], chunk["p"], chunk["t"]


def creates_may_repeat(uri: str) -> bool:
    """Whether one ``create_run`` call may leave two runs in the store: over HTTP (a tracking server, Databricks) a
    request whose answer is lost is retried by MLflow's client after the server made the run. A database or folder
    store is written by the driver's own process, each call once (its SQL transaction commits or rolls back)."""
    return scheme(raw(uri)) not in ("sqlite", "file", *DB_SCHEMES)


def context_tags() -> dict[str, str]:
    """MLflow's own run-context tags (mlflow.user, mlflow.source.name/type, mlflow.source.git.commit, ...), as
    ``mlflow.start_run`` would set them."""
    return {k: str(v) for k, v in compat_mlflow.run_context_tags().items()}


class Tracker:
    """MLflow writes of the driver. The store is probed (and, with ``create``, built safely) first: a wrong,
    unreachable, read-only or foreign store is a one-line UserError in seconds; ``create=False`` never makes a
    store (read-only commands)."""

    def __init__(self, uri: str, create: bool = True):
        for noisy in (compat_mlflow.DB_LOGGER, "alembic"):  # schema-creation chatter on a new store
            logging.getLogger(noisy).setLevel(logging.WARNING)
        # MLflow logs every failed statement (SQL, parameters, traceback) before raising it; the driver handles the
        # exception itself (a full disk: one line and the resume command), so the log would only bury that line
        # (a filter: MLflow's logging set-up, run again on later imports, resets the levels of its loggers)
        db_log = logging.getLogger(compat_mlflow.DB_LOGGER)
        if _quiet_db_errors not in db_log.filters:
            db_log.addFilter(_quiet_db_errors)
        # MLflow prints "View run ... at: <server URL>" on stdout for every run ended on a tracking server: with a
        # user:password@ URL, the password in clear, once per trial (and the progress line is the sweep's output)
        os.environ.setdefault(SUPPRESS_URL_PRINTING, "true")
        uri = validate_uri(uri)
        if raw(uri).startswith(("http://", "https://")):  # a tracking server: a dead one noticed in bounded time
            bound_http_waits()
            http_log = logging.getLogger("urllib3.connectionpool")
            if _quiet_http_retries not in http_log.filters:
                http_log.addFilter(_quiet_http_retries)
        path = sqlite_path(uri)
        # a new SQLite store is built at the first write, not here: a command refused before it writes anything
        # (--resume with no earlier sweep, an unreachable --address) leaves no empty store behind
        self._deferred = create and path is not None and not path.exists()
        if self._deferred:
            can_create(uri)
        else:
            check_store(uri, create=create)
        self.uri = uri  # prints masked; uri.raw for MLflow
        self.creates_may_repeat = creates_may_repeat(uri)  # (``_one_run`` searches for a run's twin only then)
        self._client: Optional[MlflowClient] = None
        self._wal = False  # a sweep writes this SQLite store in SQLite's write-ahead-log mode (``write_ahead``)
        self._context: Optional[dict[str, str]] = None
        self._artifact_uris: dict[str, str] = {}  # runs this driver created: where their artifacts go

    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            if self._deferred:
                check_store(self.uri, create=True)  # builds it (atomically, under a lock) unless someone did
                self._deferred = False
            if self._wal:
                self._start_write_ahead()
            self._client = compat_mlflow.wait_for_locks(MlflowClient(tracking_uri=self.uri.raw), store_wait_s())
            if self._wal:
                compat_mlflow.full_sync(self._client)
        return self._client

    def store_exists(self) -> bool:
        return not self._deferred or sqlite_path(self.uri).exists()

    def write_ahead(self, other_machines: bool = False) -> Optional[str]:
        """A sweep's writes to a SQLite store in SQLite's write-ahead-log mode, synchronous FULL, where the file is on a
        local filesystem (``rirlab.sweeps.record.store.journal_plan``: a commit costs one sync, not several, and
        readers and the writer never wait for each other); the one line saying which journal the sweep uses. None
        for any other store. ``other_machines``: processes on other machines write the store too (trials sampling
        system metrics on a cluster), which the write-ahead log cannot serve: the rollback journal. ``end_write_ahead``
        sets the rollback journal back."""
        path = sqlite_path(self.uri)
        if path is None:
            return None
        if other_machines:
            return ("store journal: SQLite's rollback journal (trials on other machines write system metrics to the "
                    "store: no write-ahead log)")
        self._wal, line = journal_plan(path)
        if self._wal and self._client is not None:  # (else when the client is made: the store may not exist yet)
            self._start_write_ahead()
            compat_mlflow.full_sync(self._client)
        return line

    def _start_write_ahead(self) -> None:
        set_journal(sqlite_path(self.uri), "wal", store_wait_s())  # (refused: the rollback journal, as before)

    def end_write_ahead(self) -> None:
        """The rollback journal back on the SQLite store a sweep wrote with the write-ahead log: the file alone is the
        store again (a reader without write access to its folder can open it). Where another process has the store
        open (a second sweep, `rirlab runs`), it stays in WAL mode: whoever closes it last in a sweep sets it back,
        and any SQLite reads it as it is. Never raises: every write of the sweep is committed already."""
        if not self._wal:
            return
        self._wal = False
        try:
            if self._client is not None:
                compat_mlflow.close_connections(self._client)
            set_journal(sqlite_path(self.uri), "delete", 2.0)
        except Exception:  # noqa: BLE001  (a store gone or unwritable at the end: its journal mode is SQLite's)
            pass

    def context(self) -> dict[str, str]:
        if self._context is None:
            self._context = context_tags()
            self._context.setdefault(contract.GIT_COMMIT, git_commit())
            self._context.setdefault(contract.GIT_COMMIT_MLFLOW, self._context[contract.GIT_COMMIT])
        return self._context

    def create_run(self, exp_id: str, name: str, tags: Optional[dict[str, str]] = None):
        """A run with MLflow's context tags (user, source, git commit) under the given tags."""
        run = self.client.create_run(exp_id, run_name=name, tags={**self.context(), **(tags or {})})
        self._artifact_uris[run.info.run_id] = run.info.artifact_uri
        return run

    def _local_artifacts(self, run_id: str):
        """A run's artifact folder as MLflow's local repository, where this driver created the run and its artifacts
        are files on this machine (an SQLite store's mlartifacts/); else None (MLflow's client finds the run's
        repository, reading the run once)."""
        uri = self._artifact_uris.get(run_id, "")
        kind = scheme(uri)
        if not (kind == "file" or (kind == "" and os.path.isabs(uri))):
            return None
        from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

        return LocalArtifactRepository(uri)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """``MlflowClient.log_text``, without reading the run back where its artifacts are local files."""
        repo = self._local_artifacts(run_id)
        if repo is None:
            return self.client.log_text(run_id, text, artifact_file)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / Path(artifact_file).name
            path.write_text(text, encoding="utf-8")
            repo.log_artifact(str(path), str(Path(artifact_file).parent) if "/" in artifact_file else None)

    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: Optional[str] = None,
                      exclude: tuple[str, ...] = ()) -> None:
        """``MlflowClient.log_artifacts``, without reading the run back where its artifacts are local files;
        ``exclude``: names in ``local_dir`` left out (each other entry then logged on its own)."""
        repo = self._local_artifacts(run_id)
        client = repo or self.client
        args = () if repo else (run_id,)
        if not any((Path(local_dir) / name).exists() for name in exclude):
            return client.log_artifacts(*args, local_dir, artifact_path)
        for entry in sorted(Path(local_dir).iterdir()):
            if entry.name in exclude:
                continue
            if entry.is_dir():
                client.log_artifacts(*args, str(entry),
                                     f"{artifact_path}/{entry.name}" if artifact_path else entry.name)
            else:
                client.log_artifact(*args, str(entry), artifact_path)

    def experiment_id(self, name: str, create: bool = True) -> Optional[str]:
        if not create and not self.store_exists():
            return None
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        if not create:
            return None
        root = artifact_root(self.uri)
        return self.client.create_experiment(name, artifact_location=f"{root}/{name}" if root else None,
                                             tags={contract.EXPERIMENT_KIND_TAG: contract.EXPERIMENT_KIND})

    def start_parent(self, exp_id: str, name: str, tags: dict[str, str]) -> str:
        if contract.EXPERIMENT_KIND_TAG not in self.client.get_experiment(exp_id).tags:  # made by an earlier rirlab
            self.client.set_experiment_tag(exp_id, contract.EXPERIMENT_KIND_TAG, contract.EXPERIMENT_KIND)
        run = self.create_run(exp_id, name, {contract.SWEEP_TAG: contract.PARENT, **tags, contract.VERSION: rirlab.__version__,
                                             contract.GIT_COMMIT: self.context()[contract.GIT_COMMIT]})
        spec_hash = tags.get(contract.SPEC_HASH, "")
        if self.creates_may_repeat and re.fullmatch(r"[0-9a-f]*", spec_hash):  # pasted into a filter: only a hash (or none)
            self._one_run(exp_id, run, contract.parent_filter(spec_hash), contract.TUNE_PATH)
        return run.info.run_id

    def find_parent(self, exp_id: str, spec_hash: str, trial: Optional[int] = None, group: Optional[str] = None):
        """The latest parent run of this spec hash: the whole sweep's (``trial`` None: the parent of a one-trial job,
        ``rirlab sweep --trial I``, is one trial's, not the sweep's), or trial ``trial``'s (of ``group`` if given)."""
        if trial is not None:
            flt = (contract.group_filter(group, spec_hash) if group else contract.parent_filter(spec_hash)) + \
                f" and tags.`{contract.TRIAL_INDEX}` = '{int(trial)}'"
            runs = self.client.search_runs([exp_id], filter_string=flt, order_by=["attributes.start_time DESC"],
                                           max_results=1)
            return runs[0] if runs else None
        for many in (1, 50000):  # (a second, wider search only where the latest is a one-trial job's)
            runs = self.client.search_runs([exp_id], filter_string=contract.parent_filter(spec_hash),
                                           order_by=["attributes.start_time DESC"], max_results=many)
            whole = [r for r in runs if contract.TRIAL_INDEX not in r.data.tags]
            if whole or len(runs) < many:
                return whole[0] if whole else None
        return None

    def children(self, exp_id: str, parent_id: str) -> list:
        return self.client.search_runs([exp_id], filter_string=contract.children_filter(parent_id), max_results=50000)

    def start_child(self, exp_id: str, parent_id: str, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        run = self.create_run(exp_id, name, {contract.PARENT_RUN_ID: parent_id, **tags})
        key = tags.get(contract.TRIAL_KEY, "")
        if self.creates_may_repeat and re.fullmatch(r"[\w.-]+", key):  # Ray Tune's trial ids; pasted into a filter
            flt = f"{contract.children_filter(parent_id)} and tags.`{contract.TRIAL_KEY}` = '{key}'"
            self._one_run(exp_id, run, flt, contract.TRIAL_KEY)
        self.log_params(run.info.run_id, params)
        return run.info.run_id

    def _one_run(self, exp_id: str, run, flt: str, key_tag: str) -> None:
        """Creating a run is idempotent by its key (a trial's key; a sweep's Tune folder): a tracking server whose
        answer to ``runs/create`` was lost (a proxy's 503 after forwarding it) has made the run twice by the time
        MLflow's client, retrying, returns one. The others of that key that hold nothing (no param, no metric: made
        by the same request, never written to) are deleted, and no empty run stays RUNNING forever beside it. Only
        where the store is reached over HTTP (``creates_may_repeat``): a run that was in the store before this call
        (a resumed sweep's) is found by the caller first and never created again (``MLflowTrialCallback``)."""
        key = run.data.tags.get(key_tag)
        if key is None:
            return
        for other in self.client.search_runs([exp_id], filter_string=flt, max_results=1000):
            if other.info.run_id != run.info.run_id and other.data.tags.get(key_tag) == key \
                    and not other.data.params and not other.data.metrics:
                self.client.set_terminated(other.info.run_id, "KILLED")
                self.client.delete_run(other.info.run_id)

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        self.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in sorted(params.items())])

    def log_batch(self, run_id: str, metrics=(), params=(), tags=(), last_tags=()) -> None:
        """Metrics, params and tags of a run in as few ``log_batch`` calls as MLflow's limits allow (``batches``):
        one round trip to the store for a whole result, never one per metric. ``last_tags`` are written with the
        last of the other values or after them, never before (a mark that says they are all in the store: a
        driver killed between two calls of a large result leaves no mark)."""
        tags, last_tags = list(tags), list(last_tags)
        chunks = list(batches(metrics, params, tags + last_tags))
        if last_tags and len(chunks) > 1:
            chunks = [*batches(metrics, params, tags), ([], [], last_tags)]
        for m, p, t in chunks:
            self.client.log_batch(run_id, metrics=m, params=p, tags=t, synchronous=True)

    def log_result(self, run_id: str, result: dict, step: int) -> None:
        self.log_results(run_id, [(result, step)])

    def log_results(self, run_id: str, results: list[tuple[dict, int]],
                    last_tags: Optional[dict[str, str]] = None) -> None:
        """Several results of one run (each with its step) in as few ``log_batch`` calls as MLflow's limits allow:
        the driver's buffered reports of a trial (``MLflowTrialCallback``) in one round trip. A param or string
        value reported twice keeps its latest value (MLflow refuses one key twice in a call). ``last_tags`` (the
        trial's final-result marks) go with the last call (``log_batch``)."""
        metrics, params, tags = [], {}, {}
        now = int(time.time() * 1000)
        for result, step in results:
            for key, obj in result.items():
                if key.startswith(contract.ARTIFACT_PREFIX):
                    self.client.log_dict(run_id, obj, key.removeprefix(contract.ARTIFACT_PREFIX))
            values, strings = split_result(result)
            metrics += [Metric(k, v, now, step) for k, v in values.items()]
            tags.update(strings)
            params.update({k.removeprefix(contract.PARAM_PREFIX): str(v)[:6000] for k, v in result.items()
                           if k.startswith(contract.PARAM_PREFIX)})
        last = {k: str(v) for k, v in (last_tags or {}).items()}
        self.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()],
                       tags=[RunTag(k, v) for k, v in tags.items() if k not in last],
                       last_tags=[RunTag(k, v) for k, v in last.items()])

    def log_datasets(self, run_id: str, datasets: list[dict]) -> None:
        """Record a trial's splits as MLflow dataset inputs (``Task.datasets`` as dicts; see contract.DATASET_*)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        inputs = []
        for d in datasets:
            generated = d["source"] == contract.DATASET_GENERATED
            source = {"params": d["params"]} if generated else {"uri": d["source"], **d["params"]}
            dataset = Dataset(name=d["name"], digest=d["digest"],
                              source_type=contract.DATASET_GENERATED if generated else "local",
                              source=json.dumps(source, sort_keys=True, default=str),
                              profile=json.dumps({"rows": d["rows"], "rows_from": d["rows_from"]}))
            inputs.append(DatasetInput(dataset, tags=[InputTag(contract.DATASET_CONTEXT, d["split"])]))
        if not inputs:
            return
        for attempt in range(5):
            try:
                self.client.log_inputs(run_id, datasets=inputs)
                return
            except Exception as err:  # noqa: BLE001 -- only the insert race below is retried
                # two sweeps of one spec started together insert the same new dataset row at once: the store's
                # "does it exist" check passes in both, one insert fails UNIQUE (datasets.experiment_id, name,
                # digest; PostgreSQL: "dataset_pk"); the row exists now, so the same call again links to it
                if "UNIQUE constraint failed: datasets" not in str(err) and "\"dataset_pk\"" not in str(err) \
                        or attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def finish(self, run_id: str, status: str = "FINISHED", reason: Optional[str] = None) -> None:
        if reason:
            self.set_tags(run_id, {contract.FAILURE_REASON: reason[:5000]})
        self.client.set_terminated(run_id, status=status)

    def reopen(self, run_id: str) -> None:
        """Run a run again (--resume): RUNNING, and no longer marked interrupted (an interruption marks it anew)."""
        if contract.INTERRUPTED in self.client.get_run(run_id).data.tags:
            self.client.delete_tag(run_id, contract.INTERRUPTED)
        self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))


def redact_env(env: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Environment variables safe to record: none whose name looks like a secret, no password inside a URI."""
    env = os.environ if env is None else env
    return {k: redact_uri(mask_url(v)) for k, v in env.items() if not any(m in k.upper() for m in SECRET_MARKERS)}


def worker_env(tracking_uri: Optional[str] = None) -> dict[str, str]:
    """What Ray workers need from the driver's environment: the plugins and $RIRLAB_CACHE (trials read imported
    splits and share generated ones there; a task config's cache_dir travels in the trial config itself), the
    tracking URI without its user info, MLflow's TLS/S3 endpoint settings. No secret: Ray logs a runtime_env in
    plain text (runtime_env_agent.log), and trials never write to MLflow themselves (--system-metrics' sampler gets
    the store's URI as a trial parameter, through Ray's object store, never its runtime_env)."""
    env = {k: os.environ[k] for k in WORKER_ENV if os.environ.get(k)}
    if "RIRLAB_CACHE" in env:  # a relative path would resolve against each worker's own directory (a trial's)
        env["RIRLAB_CACHE"] = str(Path(env["RIRLAB_CACHE"]).expanduser().resolve())
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        env["MLFLOW_TRACKING_URI"] = strip_credentials(raw(uri))
    return env
