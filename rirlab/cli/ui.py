"""`rirlab ui`: the MLflow UI on the store the sweeps write to, opened on a sweep's runs table."""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import click

from rirlab.cli.options import tracking_option
from rirlab.errors import UserError

STARTUP_TIMEOUT_S = 180
# one server process and no background job runner: what browsing a local store needs (MLflow's defaults, 4
# workers and the huey job consumers of its GenAI features, take about ten times the memory)
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


@click.command()
@tracking_option
@click.option("--port", default=5000, show_default=True, type=click.IntRange(1, 65535), help="Port of the MLflow UI.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (0.0.0.0 exposes it).")
@click.option("--experiment", default=None, metavar="NAME",
              help="Experiment (sweep spec name) whose runs the printed URL opens (default: the most recent sweep's).")
def ui(tracking_uri, port, host, experiment):
    """Start the MLflow UI on the same store `rirlab sweep` writes to and print the URL of a sweep's runs
    table (the parent run with its trials nested under it) once the UI answers.

    \b
    rirlab ui                                   # sqlite:///mlruns.db in this directory
    rirlab ui --experiment chunk_beam --port 5001
    rirlab ui --tracking-uri http://mlflow:5000  # a tracking server: its UI is already there
    """
    from sweeps.record.store import scheme
    from sweeps.record.tracker import Tracker, artifact_root, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    tracker = Tracker(uri, create=False)  # no store: one line, and none is created
    exp_id = pick_experiment(tracker, experiment)
    if scheme(uri) in ("http", "https"):  # a tracking server serves its own UI
        base = re.sub(r"^(https?://)[^/@]*@", r"\1", uri.raw).rstrip("/")
        click.echo(f"MLflow UI of the tracking server {uri}:")
        click.echo(f"  {ui_url(base, exp_id)}")
        return
    _check_port_free(host, port)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri.raw, "--host", host, "--port", str(port),
           "--workers", "1", "--uvicorn-opts", "--log-level warning"]
    root = artifact_root(uri)
    if root:
        cmd += ["--default-artifact-root", root]
    server = subprocess.Popen(cmd, env={**os.environ, **SERVER_ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace")
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
        click.echo(f"  {ui_url(base, exp_id)}")
        server.wait()
        relay.join(timeout=5)
        if server.returncode not in (0, -signal.SIGINT, -signal.SIGTERM):
            raise UserError(f"the MLflow UI stopped with exit code {server.returncode}: {_last_error(tail)}")
    except KeyboardInterrupt:
        pass
    finally:
        _stop(server)


def ui_url(base: str, exp_id) -> str:
    """The runs table of an experiment on MLflow 3's model-training view (not its GenAI overview)."""
    if exp_id is None:
        return f"{base}/#/experiments"
    return f"{base}/#/experiments/{exp_id}/runs?workflowType=machine_learning&compareRunsMode=TABLE"


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
        raise UserError(f"--host {host}: not an address of this machine ({err.strerror}); use 127.0.0.1 or 0.0.0.0") from None
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
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
