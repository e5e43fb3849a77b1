"""`rirlab ui`: the MLflow UI on the store the sweeps write to, opened on a sweep's runs table."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Optional

import click

from rirlab.cli.options import tracking_option
from rirlab.errors import UserError

STARTUP_TIMEOUT_S = 180
# one server process and no background job runner: what browsing a local store needs (MLflow's defaults, 4
# workers and the huey job consumers of its GenAI features, take about ten times the memory)
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False, exists=True), required=False)
@tracking_option
@click.option("--port", default=5000, show_default=True, type=click.IntRange(1, 65535), help="Port of the MLflow UI.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind; one beyond this machine (0.0.0.0) needs --allow-remote.")
@click.option("--allow-remote", is_flag=True,
              help="Bind --host beyond loopback although MLflow's UI has no authentication (put MLflow's basic-auth "
                   "app or a reverse proxy with auth in front).")
@click.option("--experiment", default=None, metavar="NAME",
              help="Experiment whose runs the printed URL opens (default: SPEC's name, else the most recent sweep's).")
def ui(spec, tracking_uri, port, host, allow_remote, experiment):
    """Start the MLflow UI on the same store `rirlab sweep` writes to and print the URL of a sweep's runs
    table once the UI answers: the experiment of SPEC (or --experiment), its swept parameters and metrics as
    columns, best first (a view saved on the experiment, `rirlab sweep view` in MLflow's saved views).

    \b
    rirlab ui search_spaces/chunk_beam.yaml      # sqlite:///mlruns.db in this directory
    rirlab ui --experiment chunk_beam --port 5001
    rirlab ui --tracking-uri http://mlflow:5000  # a tracking server: its UI is already there
    """
    from rirlab.redact import strip_credentials
    from rirlab.sweeps.record.store import scheme
    from rirlab.sweeps.record.tracker import Tracker, artifact_root, resolve_tracking_uri

    if beyond_loopback(host):  # before anything is read or written
        if not allow_remote:
            raise UserError(f"--host {host} opens the MLflow UI to other machines with no authentication (anyone who "
                            f"reaches port {port} can read and delete runs); keep --host 127.0.0.1 (ssh -L {port}:"
                            f"127.0.0.1:{port} from afar), or put auth in front ({AUTH_HINT}) and pass --allow-remote")
        click.echo(f"warning: the MLflow UI on {host} has no authentication; anyone who reaches port {port} can "
                   f"read and delete runs unless {AUTH_HINT} stands in front", err=True)
    if spec is not None and experiment is None:
        from rirlab.sweeps.spec.schema import read_spec

        experiment = read_spec(spec).name
    uri = resolve_tracking_uri(tracking_uri)
    tracker = Tracker(uri, create=False)  # no store: one line, and none is created
    exp_id = pick_experiment(tracker, experiment)
    view = sweep_view(tracker.client, exp_id) if exp_id is not None else None
    if scheme(uri) in ("http", "https"):  # a tracking server serves its own UI
        base = strip_credentials(uri.raw).rstrip("/")
        click.echo(f"MLflow UI of the tracking server {uri}:")
        _echo_urls(base, exp_id, view)
        click.echo(RUN_PAGES_HINT)
        return
    _check_port_free(host, port)
    from rirlab.compat.mlflow import UI_APP_NAME, ui_app_installed

    preset = ui_app_installed()
    # the store's URI (a password in it) through the environment, never the command line: any local user reads
    # another's command line (ps), only the owner its environment; `mlflow ui` hands it on to uvicorn the same way
    cmd = [sys.executable, "-m", "mlflow", "ui", "--host", host, "--port", str(port), "--workers", "1",
           "--uvicorn-opts", "--log-level warning"]
    if preset:  # MLflow's app with the model-training view and a closed Assistant preset (rirlab/compat/mlflow.py)
        cmd += ["--app-name", UI_APP_NAME]
    env = {**os.environ, **SERVER_ENV, "MLFLOW_BACKEND_STORE_URI": uri.raw}
    root = artifact_root(uri)
    if root:
        env["MLFLOW_DEFAULT_ARTIFACT_ROOT"] = root
    # its own session: Ctrl-C reaches rirlab alone, which stops the server with SIGTERM (uvicorn re-raises a SIGINT
    # it caught after shutting down: a KeyboardInterrupt and a CancelledError traceback on the terminal)
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", start_new_session=True)
    tail: collections.deque = collections.deque(maxlen=20)
    answering = threading.Event()
    relay = threading.Thread(target=_relay, args=(server, tail, answering), daemon=True)
    relay.start()

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        base = _wait_until_answering(server, host, port, tail)
        answering.set()
        click.echo(f"MLflow UI for {uri} (Ctrl-C stops it):")
        _echo_urls(base, exp_id, view)
        click.echo(PRESET_NOTE if preset else RUN_PAGES_HINT + "\n" + REINSTALL_HINT)
        server.wait()
        relay.join(timeout=5)
        if server.returncode not in (0, -signal.SIGINT, -signal.SIGTERM):
            raise UserError(f"the MLflow UI stopped with exit code {server.returncode}: {_last_error(tail)}")
    except KeyboardInterrupt:
        pass
    finally:
        answering.clear()  # its shutdown lines are not the user's business
        _stop(server)


AUTH_HINT = "MLflow's basic-auth app (mlflow server --app-name basic-auth) or a reverse proxy with auth"


def beyond_loopback(host: str) -> bool:
    """Whether binding ``host`` reaches beyond this machine: an address or a name that is not all loopback
    (127.0.0.0/8, ::1). A name that does not resolve is not: binding it fails with its own line."""
    import ipaddress

    if not host.strip("[] "):  # every interface
        return True
    try:
        return not ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return not all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def ui_url(base: str, exp_id, view: Optional[str] = None, mode: str = "TABLE") -> str:
    """The runs of an experiment on MLflow 3's model-training view (not its GenAI overview), as a table (``mode``
    TABLE) or as charts (CHART); with ``view`` (``sweep_view``), through MLflow's saved view of that key. MLflow
    applies a saved view only when the URL has no search parameters of its own (searchFilter, orderByKey, ...), so
    the view holds them."""
    if exp_id is None:
        return f"{base}/#/experiments"
    shared = f"&{VIEW_URL_PARAM}={view}" if view else ""
    return f"{base}/#/experiments/{exp_id}/runs?workflowType=machine_learning&compareRunsMode={mode}{shared}"


def _echo_urls(base: str, exp_id, view: Optional[str]) -> None:
    """The runs table's URL on a line of its own, then (with a saved view) the same view's charts."""
    click.echo(f"  {ui_url(base, exp_id, view)}")
    if exp_id is not None and view:
        click.echo(f"  charts (the swept parameters against the metric, learning curves): "
                   f"{ui_url(base, exp_id, view, 'CHART')}")


# MLflow 3's UI restores a runs view from the experiment tag mlflow.sharedViewState.<key> named by the URL
# parameter viewStateShareKey (its "share" button and saved views): a JSON envelope {name, createdAt, updatedAt,
# state} whose state holds the search facets (searchFilter, orderByKey, orderByAsc, ...) and the view's UI state:
# the table's (selectedColumns as `params.\`key\``, `metrics.\`name\``, `tags.\`key\``) and the chart view's
# (compareRunCharts, compareRunSections, isAccordionReordered, runsHiddenMode; the list of fields it applies is
# module 1395 of MLflow 3.17's main.*.js, HC less hN). Expanded rows (runsExpanded) are not part of a shared view in
# MLflow 3, so the view lists the sweep's trial runs themselves. The classic compare page (the runs table's
# Compare button, #/compare-runs) has no saved state: its parallel coordinates take the first metric a run lists
# and its contour the first two parameters by name (CompareRunView's ParallelCoordinatesPlotPanel and
# CompareRunContour, chunk 1886), whatever the sweep is about; the charts URL is the view that says it.
VIEW_URL_PARAM = "viewStateShareKey"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_NAME = "rirlab sweep view"
SWEEP_SECTION = "Sweep"  # the chart view's first section: the swept parameters against the metric
MODEL_SECTION = "Model metrics"  # MLflow's section of metrics without a "prefix/"
# A trial's page follows MLflow's GenAI / Model training switch (the URL's workflowType, else the browser's own
# choice in localStorage, GenAI until one picks; rirlab/compat/mlflow.py). `rirlab ui` serves MLflow's app with
# Model training preset for a browser that never picked; a tracking server (or an install made before that app
# was registered) serves the plain one: say how to keep trial pages in the training view there.
RUN_PAGES_HINT = ("  (a trial's page follows MLflow's GenAI / Model training switch, top left: pick Model training "
                  "there once and this browser keeps it)")
REINSTALL_HINT = ("  (reinstall rirlab, pip install -e . or scripts/setup.sh, and `rirlab ui` presets Model training "
                  "and a closed Assistant panel itself)")
PRESET_NOTE = ("  (trial and compare pages open in the Model training view and the Assistant panel stays closed "
               "until asked for, in a browser that has not picked otherwise)")


def column(kind: str, key: str) -> str:
    """A runs-table column key as MLflow's UI writes it (makeCanonicalSortKey): params.`chunk_size`."""
    return f"{kind}.`{key}`"


def _section(name: str) -> dict:
    return {"uuid": f"rirlab-section-{name}", "name": name, "display": True, "isReordered": False, "deleted": False,
            "isGenerated": False}


def _chart(kind: str, n: int, **fields) -> dict:
    """A chart card as MLflow's RunsChartsCardConfig holds it (the fields its constructors set), in the sweep's
    section."""
    return {"uuid": f"rirlab-chart-{n}", "type": kind, "runsCountToCompare": 1000, "deleted": False,
            "isGenerated": False, "metricSectionId": _section(SWEEP_SECTION)["uuid"], **fields}


def _line(n: int, metric: str) -> dict:
    return _chart("LINE", n, metricKey=metric, selectedMetricKeys=[metric], displayName=metric, lineSmoothness=0,
                  xAxisScaleType="linear", scaleType="linear", xAxisKey="step", selectedXAxisMetricKey="",
                  yAxisKey="metric", yAxisExpressions=[], ignoreOutliers=False, useGlobalXaxisKey=True,
                  useGlobalLineSmoothing=True,
                  range={"xMin": None, "xMax": None, "yMin": None, "yMax": None})


def chart_state(params: list, metrics: list, logged: tuple = ()) -> dict:
    """The chart view of a sweep: a first section with the swept ``params`` against its ``metrics`` (parallel
    coordinates; a contour of the first two parameters, or a scatter of the one), the learning curves of the
    first metric and of the training loss; then one section per metric prefix of ``logged`` (the trials' metric
    names) in name order, ``best/`` last (single values, not curves), MLflow's own "Model metrics" after them.
    The sections keep this order (isAccordionReordered) and MLflow fills them with a chart per metric."""
    from rirlab import contract

    charts = []
    if metrics and params:
        charts.append(_chart("PARALLEL", len(charts), selectedParams=list(params), selectedMetrics=list(metrics),
                             showAllRuns=True))
        axis = lambda key, kind: {"key": key, "type": kind}  # noqa: E731
        if len(params) >= 2:
            charts.append(_chart("CONTOUR", len(charts), xaxis=axis(params[0], "PARAM"),
                                 yaxis=axis(params[1], "PARAM"), zaxis=axis(metrics[0], "METRIC")))
        else:
            charts.append(_chart("SCATTER", len(charts), xaxis=axis(params[0], "PARAM"),
                                 yaxis=axis(metrics[0], "METRIC")))
    for m in dict.fromkeys([*metrics[:1], contract.TRAIN_LOSS]):
        charts.append(_line(len(charts), m))
    best = contract.BEST_PREFIX_METRIC.rstrip("/")
    prefixes = sorted({k.rpartition("/")[0] for k in logged if "/" in k and not k.startswith("system/")} - {best})
    prefixes += [best] if any(k.startswith(contract.BEST_PREFIX_METRIC) for k in logged) else []
    sections = [_section(name) for name in [SWEEP_SECTION, *prefixes, MODEL_SECTION]]
    return {"compareRunCharts": charts, "compareRunSections": sections, "isAccordionReordered": True,
            "runsHiddenMode": "SHOW_ALL", "hideEmptyCharts": True}


def view_state(parent, logged: tuple = ()) -> dict:
    """The runs view of a sweep: its trial runs (children of ``parent``), its swept parameters and metrics as
    columns (a variant by its tag), sorted by its first metric, best first; and its chart view (``chart_state``;
    ``logged``: the metric names its trials logged)."""
    from rirlab import contract

    tags = parent.data.tags
    try:
        swept = json.loads(tags.get(contract.SWEPT_KEYS) or "[]")
    except ValueError:
        swept = []
    swept = [k for k in swept if k != "seed"] + ["seed"]
    metrics = [m for m in (tags.get(contract.METRIC) or "").split(",") if m]
    mode = parent.data.params.get(contract.SPEC_PARAM_PREFIX + "mode") or "max"  # the spec's mode: max or a JSON list
    mode = json.loads(mode)[0] if mode.startswith("[") else mode
    cols = [column("tags", contract.VARIANT) if k == "variant" else column("params", k) for k in swept]
    cols += [column("metrics", m) for m in metrics]
    state = {"searchFilter": contract.children_filter(parent.info.run_id), "lifecycleFilter": "Active",
             "selectedColumns": cols, "runListHidden": False, "viewMaximized": False}
    if metrics:
        state.update(orderByKey=column("metrics", metrics[0]), orderByAsc=mode == "min")
    # the parameters a chart can draw (a variant is a tag; the seed is noise, not what the sweep is about)
    state.update(chart_state([k for k in swept if k not in ("seed", "variant")], metrics, logged))
    return state


def sweep_view(client, exp_id: str) -> Optional[str]:
    """Save the runs view (table and charts) of the experiment's latest sweep as an MLflow saved view (an experiment tag) and
    return its key; None when there is no sweep or the store does not let this user write (a plain URL then)."""
    from rirlab import contract

    try:
        parents = client.search_runs([exp_id], filter_string=contract.parent_filter(),
                                     order_by=["attributes.start_time DESC"], max_results=1)
        if not parents:
            return None
        children = client.search_runs([exp_id], filter_string=contract.children_filter(parents[0].info.run_id),
                                      max_results=1000)
        logged = tuple(sorted({k for run in children for k in run.data.metrics}))
        state = json.dumps(view_state(parents[0], logged), sort_keys=True)
        key = hashlib.sha256(state.encode()).hexdigest()[:32]
        now = int(time.time() * 1000)
        envelope = json.dumps({"name": VIEW_NAME, "createdAt": now, "updatedAt": now, "state": state})
        exp = client.get_experiment(exp_id)
        if exp.tags.get(VIEW_TAG_PREFIX + key) is None:
            client.set_experiment_tag(exp_id, VIEW_TAG_PREFIX + key, envelope)
        return key
    except Exception:  # noqa: BLE001  (best effort: a read-only store or a shared server still gets the plain URL)
        return None


def pick_experiment(tracker, name):
    """The experiment named ``name``, else the one of the most recent sweep (parent run), else the most recently
    created experiment holding runs; None for an empty store. Tags it as a model-training experiment (so the UI
    opens its runs, not a GenAI overview) when it is not yet."""
    from rirlab import contract
    from rirlab.contract import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

    client = tracker.client
    if name is not None:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            names = sorted(e.name for e in client.search_experiments())
            raise UserError(f"--experiment {name}: no such experiment in {tracker.uri}; it has: {', '.join(names) or 'none'}")
    else:
        exps = [e for e in client.search_experiments(max_results=1000)]
        if not exps:
            return None
        ids = [e.experiment_id for e in exps]
        latest = None
        for i in range(0, len(ids), 100):  # the store's limit of experiments per search
            runs = client.search_runs(ids[i:i + 100], filter_string=f"tags.`{contract.SWEEP_TAG}` = '{contract.PARENT}'",
                                      order_by=["attributes.start_time DESC"], max_results=1)
            if runs and (latest is None or runs[0].info.start_time > latest.info.start_time):
                latest = runs[0]
        if latest is not None:
            exp = client.get_experiment(latest.info.experiment_id)
        else:
            with_runs = [e for e in exps if client.search_runs([e.experiment_id], max_results=1)]
            if not with_runs:
                return None
            exp = max(with_runs, key=lambda e: e.creation_time or 0)
    if exp.tags.get(EXPERIMENT_KIND_TAG) is None:
        try:  # an experiment of an earlier rirlab; best effort (a shared server may not let this user write)
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        except Exception:
            pass
    return exp.experiment_id


def _check_port_free(host: str, port: int) -> None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise UserError(f"--host {host}: not an address of this machine ({err.strerror}); use 127.0.0.1") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will
        try:
            s.bind(addr)
        except OSError as err:
            raise UserError(f"port {port} on {host} is not available ({err.strerror}); pass a free one, e.g. "
                            f"--port {port + 1}") from None


def _relay(server: subprocess.Popen, tail: collections.deque, answering: threading.Event) -> None:
    """Keep the server's last lines for an error message; once it answers, copy its log (warnings and errors:
    uvicorn runs at --log-level warning) to stderr. Its start-up chatter is not shown."""
    for line in server.stdout:
        tail.append(line.rstrip())
        if answering.is_set():
            sys.stderr.write(line)


def _last_error(tail) -> str:
    lines = [t for t in tail if t.strip()]
    errors = [t for t in lines if "Error" in t or "error" in t]
    return (errors or lines or ["no output"])[-1][:300]


def _wait_until_answering(server: subprocess.Popen, host: str, port: int, tail) -> str:
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    if ":" in probe_host:
        probe_host = f"[{probe_host}]"
    base = f"http://{probe_host}:{port}"
    t0 = time.monotonic()
    while time.monotonic() - t0 < STARTUP_TIMEOUT_S:
        if server.poll() is not None:
            time.sleep(0.2)  # let the relay read the last lines
            raise UserError(f"the MLflow UI did not start (exit code {server.returncode}): {_last_error(tail)}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    other = _foreign_listener(server.pid, port)
                    if other is not None:  # took the port between our check and our server's start
                        raise UserError(f"port {port} on {host} is served by another process ({other}), not by this "
                                        f"store's UI; pass a free one, e.g. --port {port + 1}")
                    return base
        except OSError:
            pass
        time.sleep(0.25)
    raise UserError(f"the MLflow UI did not answer on {base} within {STARTUP_TIMEOUT_S} s: {_last_error(tail)}")


def _foreign_listener(pid: int, port: int):
    """The process listening on ``port`` when it is neither the server ``pid`` nor one of its children (a second
    `rirlab ui` on the same port would otherwise print a URL that serves another store); None when it is ours or
    the system does not say."""
    import psutil

    try:
        ours = {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
        listeners = {c.pid for c in psutil.net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    except (psutil.Error, OSError):
        return None
    others = sorted(listeners - ours)
    if not others or listeners & ours:
        return None
    try:
        return f"pid {others[0]}: {' '.join(psutil.Process(others[0]).cmdline()[:6])}"[:200]
    except psutil.Error:
        return f"pid {others[0]}"


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (mlflow ui and its uvicorn), SIGKILL after 20 s."""
    if server.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait()
