"""Every use rirlab makes of MLflow below its public API, and the MLflow versions that use was checked on.

Checked on MLflow 3.17.2 (the version ``tests/sweeps`` and ``tests/e2e`` ran on); 2.10 is the oldest rirlab has
claimed to support since its first setup.cfg. A sweep refuses an MLflow outside ``SUPPORTED`` before it touches
the store (``check()``), and ``tests/train/test_compat.py`` fails naming any attribute or keyword below that a new
MLflow removed.

The private parts, and why no public API does their job:

- ``mlflow.store.db.utils._initialize_tables`` / ``_upgrade_db``: build a SQLite store's schema, or migrate an
  earlier MLflow's, on a temporary copy that is then linked into place (``sweeps/record/store.py``), so a Ctrl-C
  leaves a complete store or none. MLflow's public path creates or upgrades the store in place, on first use.
- ``_get_latest_schema_revision`` / ``_get_alembic_config``: tell a current store from one of an earlier MLflow
  (migrate it) and from one of a newer MLflow (refuse it: a migration would fail half-way) without writing.
- ``mlflow.tracking.context.registry.resolve_tags``: the run-context tags (user, source, git commit) that
  ``mlflow.start_run`` sets; the driver creates runs through ``MlflowClient``, which sets none.
- ``mlflow.system_metrics.system_metrics_monitor.SystemMetricsMonitor`` with ``resume_logging``/``tracking_uri``:
  system metrics of a run created by another process (the driver) on another store than the default one;
  ``mlflow.enable_system_metrics_logging`` covers only runs this process started with ``mlflow.start_run``.
- ``mlflow.utils.rest_utils.http_request`` with ``max_retries=0``: one probe of a tracking server in seconds;
  ``MlflowClient`` retries for minutes before it reports an unreachable server.
- ``MlflowClient._tracking_client.store.engine`` and the ``PRAGMA busy_timeout = 20000`` MLflow's SQLite sessions
  start with (``wait_for_locks``): a store another process holds is waited for as long as rirlab states, not 20 s;
  MLflow has no setting for it and its pragma overrides any connect timeout. The same engine gets ``PRAGMA
  synchronous = FULL`` on each connection (``full_sync``) while a sweep writes in SQLite's write-ahead-log mode,
  and its pooled connections closed (``close_connections``) before the sweep sets the rollback journal back
  (``sweeps/record/store.py``): MLflow has no setting for either.
- ``MlflowClient._tracking_client.store.get_metric_history_bulk`` (``SqlAlchemyStore``) and, on a tracking server,
  the endpoint its UI draws charts with, ``GET /ajax-api/2.0/mlflow/metrics/get-history-bulk``
  (``mlflow.server.handlers.get_metric_history_bulk_handler``: up to 100 run ids a request, up to 25,000 points a
  response; ``server_history_bulk`` below, with MLflow's own credentials and HTTP retries): one metric's history of
  many runs in one query or request, where the public client asks once per run, so `rirlab export` and `plot
  curves` on a sweep of 1,000 runs made thousands of round trips (over HTTP: 56 s against SQLite's 9 s at 100
  runs; the requests of one read go four at a time). Reached in ``rirlab.store_reads.metric_history_bulk``, not
  here: its one user, ``rirlab.analysis.runs.metric_histories_of``, imports nothing of rirlab but the contract and
  a few torch-free helpers (tests/analysis/test_analysis.py), and falls back to the public per-run call where the store has no bulk read
  (a server that answers the endpoint with anything but its points: an older MLflow, a proxy passing only
  ``/api``, a server under a static prefix).
- the logger ``mlflow.store.db.utils``: quieted while a schema is built, and filtered of failed statements.
- ``mlflow.server.fastapi_app.app`` (what ``mlflow ui`` serves) and two localStorage keys of its built UI:
  ``rirlab ui`` serves that app with the keys preset (the last section says why no setting does it).
"""

from __future__ import annotations

import json
import os
from typing import Any

from rirlab.compat import Supported

SUPPORTED = Supported("mlflow", lowest="2.10", below="3.18")

# (module, attribute, keyword arguments rirlab passes) of every private name used below: each must exist on the
# installed MLflow, with those keywords (test_compat.py)
PRIVATE = (
    ("mlflow.store.db.utils", "_initialize_tables", ()),
    ("mlflow.store.db.utils", "_upgrade_db", ()),
    ("mlflow.store.db.utils", "_get_latest_schema_revision", ()),
    ("mlflow.store.db.utils", "_get_alembic_config", ("db_url",)),
    ("mlflow.tracking.context.registry", "resolve_tags", ()),
    ("mlflow.system_metrics.system_metrics_monitor", "SystemMetricsMonitor",
     ("sampling_interval", "resume_logging", "tracking_uri")),
    ("mlflow.utils.rest_utils", "http_request", ("max_retries", "timeout", "raise_on_status")),
    ("mlflow.utils.credentials", "get_default_host_creds", ()),
    ("mlflow.server.fastapi_app", "app", ()),
    ("mlflow.server.handlers", "STATIC_PREFIX_ENV_VAR", ()),
    ("mlflow.store.tracking.sqlalchemy_store", "SqlAlchemyStore", ()),  # get_metric_history_bulk: rirlab.store_reads
    ("mlflow.server.handlers", "get_metric_history_bulk_handler", ()),  # HISTORY_BULK's server side
)

DB_LOGGER = "mlflow.store.db.utils"  # MLflow's logger of schema creation, migrations and failed statements


def check() -> None:
    """Raise one line (UnsupportedVersion) when the installed MLflow is outside ``SUPPORTED``."""
    SUPPORTED.check()


# ---- the SQLite store's schema (sweeps/record/store.py) ----------------------------------------------------

def latest_schema_revision() -> str:
    """The alembic revision of this MLflow's store schema (what a current store's ``alembic_version`` holds)."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def knows_schema_revision(revision: str) -> bool:
    """Whether ``revision`` is one of this MLflow's schema migrations (False: a store of a newer MLflow)."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    script = ScriptDirectory.from_config(_get_alembic_config(db_url=""))
    try:
        script.get_revision(revision)
    except Exception:  # alembic raises its own ResolutionError / CommandError kinds, which vary by version
        return False
    return True


def initialize_tables(engine) -> None:
    """Create this MLflow's complete schema through the SQLAlchemy ``engine`` (an empty database)."""
    from mlflow.store.db.utils import _initialize_tables

    _initialize_tables(engine)


def upgrade_db(engine) -> None:
    """Migrate the store behind ``engine`` from an earlier MLflow's schema to this one's."""
    from mlflow.store.db.utils import _upgrade_db

    _upgrade_db(engine)


# ---- runs (sweeps/record/tracker.py, sweeps/tune/trainable.py) -----------------------------------------

def run_context_tags() -> dict[str, Any]:
    """MLflow's run-context tags (mlflow.user, mlflow.source.name/type, mlflow.source.git.commit, ...), as
    ``mlflow.start_run`` would set them."""
    from mlflow.tracking.context.registry import resolve_tags

    return resolve_tags()


def system_metrics_sampler(run_id: str, interval: float, tracking_uri: str):
    """An unstarted sampler logging this machine's system metrics into the existing run ``run_id`` of the store
    at ``tracking_uri`` every ``interval`` seconds (``.start()``, then ``.finish()``)."""
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    return SystemMetricsMonitor(run_id, sampling_interval=interval, resume_logging=True, tracking_uri=tracking_uri)


# ---- tracking servers (sweeps/record/store.py) ---------------------------------------------------------

def probe_server(uri: str, endpoint: str, params: dict, timeout: float):
    """One GET of ``endpoint`` on the tracking server ``uri`` with MLflow's credentials from the environment, no
    retries; returns the response whatever its status (connection errors raise, as MLflow wraps them)."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    return http_request(get_default_host_creds(uri), endpoint, "GET", params=params, max_retries=0,
                        timeout=timeout, raise_on_status=False)


HISTORY_BULK = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"  # the UI's read (get_metric_history_bulk_handler)
HISTORY_BULK_RUNS = 100  # run ids the handler takes in one request (it refuses more)
HISTORY_BULK_POINTS = 25000  # points the handler returns at most (it cuts the rest off)
HISTORY_BULK_QUERY = 3500  # bytes of run_id=... in one request line: gunicorn, MLflow 2's server, refuses past 4094


class HistoryPoints(list):
    """A bulk response's points (dicts: key, value, timestamp, step, run_id); ``full``: as many as the server
    returns at most, so some may have been cut off."""

    full = False


def history_bulk_chunks(run_ids: list, key: str) -> list[list]:
    """``run_ids`` in groups that one bulk request may carry: at most ``HISTORY_BULK_RUNS`` ids, and a query string
    (``run_id=ID&`` per id, the key URL-encoded) within ``HISTORY_BULK_QUERY`` bytes."""
    from urllib.parse import quote

    chunks: list[list] = [[]]
    size = len(quote(key, safe="")) + 40
    for rid in run_ids:
        cost = len("run_id=&") + len(quote(str(rid), safe=""))
        if chunks[-1] and (len(chunks[-1]) == HISTORY_BULK_RUNS or size + cost > HISTORY_BULK_QUERY):
            chunks.append([])
            size = len(quote(key, safe="")) + 40
        chunks[-1].append(rid)
        size += cost
    return [c for c in chunks if c]


def server_history_bulk(uri: str, run_ids: list, key: str):
    """One ``GET`` of ``HISTORY_BULK`` on the tracking server ``uri``: the points of ``key`` logged by ``run_ids``
    (a :class:`HistoryPoints`, sorted by run, then timestamp, step and value), with the credentials and retries
    MLflow's client uses (``get_default_host_creds``: MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN, its TLS settings).
    None where the server answers anything but a list of points (404 or 405 from an older MLflow or a proxy,
    401/403: the per-run read then raises MLflow's own error); a server that does not answer raises as MLflow's
    client does."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    resp = http_request(get_default_host_creds(uri), HISTORY_BULK, "GET", raise_on_status=False,
                        params={"run_id": list(run_ids), "metric_key": key, "max_results": HISTORY_BULK_POINTS})
    if resp.status_code != 200:
        return None
    try:
        body = resp.json()
    except ValueError:  # not JSON: not MLflow's handler
        return None
    metrics = body.get("metrics", []) if isinstance(body, dict) else None
    if not isinstance(metrics, list) or not all(isinstance(m, dict) and "run_id" in m for m in metrics):
        return None
    points = HistoryPoints(metrics)
    points.full = len(points) >= HISTORY_BULK_POINTS
    return points


def history_metric(point: dict):
    """MLflow's ``Metric`` of one point of a ``server_history_bulk`` answer (what the per-run read returns)."""
    from mlflow.entities import Metric

    return Metric(point["key"], point["value"], point["timestamp"], point["step"])


# ---- the driver's SQLite sessions (sweeps/record/tracker.py) -------------------------------------------------

def wait_for_locks(client, wait_s: float):
    """``client`` whose SQLite store's statements wait ``wait_s`` seconds for a lock another process holds (a
    second sweep writing the same store, a backup) instead of the 20 s MLflow sets at the start of every session
    (``PRAGMA busy_timeout = 20000`` in ``mlflow.store.db.utils``, which overrides any connect timeout): that
    pragma is rewritten on its way to SQLite. Other stores are left as they are."""
    from sqlalchemy import event

    engine = _sqlite_engine(client)
    if engine is None or getattr(engine, "rirlab_waits", False):
        return client
    pragma = f"PRAGMA busy_timeout = {int(wait_s * 1000)};"

    def longer_wait(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("PRAGMA BUSY_TIMEOUT"):
            statement = pragma
        return statement, parameters

    event.listen(engine, "before_cursor_execute", longer_wait, retval=True)
    engine.rirlab_waits = True  # (MLflow caches one store, so one engine, per URI)
    return client


def _sqlite_engine(client):
    engine = getattr(getattr(client._tracking_client, "store", None), "engine", None)  # SqlAlchemyStore only
    return engine if engine is not None and engine.dialect.name == "sqlite" else None


def full_sync(client):
    """``client`` whose SQLite store's connections each start with ``PRAGMA synchronous = FULL``: in SQLite's
    write-ahead-log mode every commit is synced to the disk before it returns, whatever default SQLite was built
    with (some builds default WAL to NORMAL, which may lose the last commits on a power cut). The connections
    already pooled are closed, so that every later one is new. Other stores are left as they are."""
    from sqlalchemy import event

    engine = _sqlite_engine(client)
    if engine is None or getattr(engine, "rirlab_full_sync", False):
        return client

    def synchronous_full(dbapi_connection, connection_record):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    event.listen(engine, "connect", synchronous_full)
    engine.rirlab_full_sync = True
    engine.dispose()
    return client


def close_connections(client) -> None:
    """Close the pooled connections of ``client``'s SQLite store (MLflow keeps them open; leaving SQLite's
    write-ahead log needs none left open); the next statement opens a new one."""
    engine = _sqlite_engine(client)
    if engine is not None:
        engine.dispose()


# ---- the UI `rirlab ui` serves (rirlab/cli/ui.py) -------------------------------------------------------------
#
# MLflow's own server app with two of its browser-side defaults preset. Why: MLflow 3.17's UI keeps two choices in
# the browser's localStorage only, and defaults both against a sweep:
#
# - GenAI or model training. ``WorkflowTypeProvider`` (server/js/build/static/js/main.*.js, module 7975) takes the
#   URL's ``workflowType`` parameter, else localStorage ``mlflow.workflowType_v1``, else GenAI; the experiment tag
#   ``mlflow.experimentKind`` is read only where the feature flag ``Z0`` of module 89511 is off, and that flag is a
#   constant ``true`` in the built UI. Run links in the runs table and the Compare button carry no ``workflowType``,
#   so a browser that never picked opened every trial page and the compare page as GenAI pages (Traces, Sessions,
#   Judges); MLflow's switch, when picked, writes localStorage and navigates to the bare experiment page.
# - the Assistant panel. On a page whose host name is localhost, 127.0.0.1 or ::1 it opens by itself on the first
#   load (the floating button's effect, guarded by localStorage ``mlflow.assistant.fab.autoOpenedOnFirstLoad_v1``)
#   and takes a quarter of the runs page; no server setting or environment variable turns that off
#   (``MLFLOW_ENABLE_REMOTE_ASSISTANT`` only decides remote hosts).
#
# No server-side setting reaches either, so the app sets both keys from the page MLflow serves, before its scripts
# run, and only where the browser holds no value of its own: a user who picks GenAI or opens the Assistant keeps
# that. The keys are written as MLflow's ``useLocalStorage`` hook writes them (``<key>_v<version>``, JSON values).
#
# MLflow loads the app through its plugin entry point group ``mlflow.app`` (setup.cfg), as it loads its own
# basic-auth app: ``mlflow ui --app-name rirlab-ui``. ``create_ui_app`` is a factory, so ``mlflow ui``, which imports
# the entry point's module to look at it, does not import the server in its own process as well.

UI_APP_NAME = "rirlab-ui"  # the setup.cfg entry point in group mlflow.app
# localStorage key (as MLflow's useLocalStorage writes it) -> the value a browser without its own choice gets
UI_DEFAULTS = {
    "mlflow.workflowType_v1": "machine_learning",  # trial and compare pages in the model-training view
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": True,  # the Assistant panel stays closed until asked for
}


def defaults_script(defaults: dict = UI_DEFAULTS) -> bytes:
    """An inline script that stores each default whose key the browser does not hold yet (a browser without
    localStorage, or one that refuses it, loads the page unchanged)."""
    values = json.dumps({k: json.dumps(v) for k, v in defaults.items()})
    return ("<script>(function(){try{var d=" + values + ";for(var k in d){if(localStorage.getItem(k)===null)"
            "localStorage.setItem(k,d[k]);}}catch(e){}})();</script>").encode()


def inject(html: bytes, script: bytes) -> bytes:
    """``html`` with ``script`` before its first script tag (so it runs before MLflow's deferred bundle), else
    before ``</head>``; unchanged when it has neither."""
    at = html.find(b"<script")
    if at < 0:
        at = html.find(b"</head>")
    return html if at < 0 else html[:at] + script + html[at:]


class PresetUI:
    """ASGI middleware: the UI's page (GET of the root path) with ``defaults_script`` in it; everything else is
    MLflow's app untouched. The page is always served whole (the browser's conditional headers are dropped), so a
    copy cached from a plain `mlflow ui` on the same port is not reused."""

    def __init__(self, app, root: str = "/", script: bytes = b""):
        self.app, self.root, self.script = app, root, script or defaults_script()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET" or scope.get("path") != self.root:
            await self.app(scope, receive, send)
            return
        scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers", [])
                                      if k.lower() not in (b"if-none-match", b"if-modified-since")]}
        start: dict = {}
        chunks: list = []

        async def capture(message):
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            headers = [(k, v) for k, v in start.get("headers", [])]
            names = {k.lower(): v for k, v in headers}
            if (start.get("status") == 200 and names.get(b"content-type", b"").startswith(b"text/html")
                    and b"content-encoding" not in names):
                body = inject(body, self.script)
                headers = [(k, v) for k, v in headers
                           if k.lower() not in (b"content-length", b"etag", b"last-modified")]
                headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, capture)


def create_ui_app():
    """MLflow's FastAPI server app (what a plain `mlflow ui` serves) wrapped in ``PresetUI``."""
    from mlflow.server.fastapi_app import app
    from mlflow.server.handlers import STATIC_PREFIX_ENV_VAR

    prefix = (os.environ.get(STATIC_PREFIX_ENV_VAR) or "").rstrip("/")
    return PresetUI(app, root=prefix + "/")


def ui_app_installed() -> bool:
    """Whether this install registers the app with MLflow (an install made before the entry point existed does
    not, until it is reinstalled)."""
    import importlib.metadata

    try:
        points = importlib.metadata.entry_points(group="mlflow.app")
    except TypeError:  # Python < 3.10
        points = importlib.metadata.entry_points().get("mlflow.app", [])
    return any(p.name == UI_APP_NAME for p in points)
