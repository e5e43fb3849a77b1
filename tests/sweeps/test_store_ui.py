"""`rirlab ui`: refuses in one line (no store, busy port, unknown experiment), picks the latest sweep's
experiment, prints its runs-table URL only once the UI answers, and stays small (one server process)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from rirlab.cli import main
from rirlab.cli.ui import pick_experiment, ui_url
from rirlab.contract import EXPERIMENT_KIND_TAG
from rirlab.sweeps.record.tracker import Tracker

REPO = Path(__file__).resolve().parents[2]


def _store(tmp_path: Path, sweeps=("older", "newer")) -> tuple[str, Tracker]:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracker = Tracker(uri)
    for name in sweeps:
        exp = tracker.experiment_id(name)
        parent = tracker.start_parent(exp, f"{name} sweep", {})
        tracker.start_child(exp, parent, "lr=0.1", {"lr": 0.1}, {})
        time.sleep(0.01)  # distinct start times
    return uri, tracker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ui(*args):
    return CliRunner().invoke(main, ["ui", *map(str, args)])


def test_ui_on_a_missing_store_is_one_line_and_creates_nothing(tmp_path):
    result = _ui("--tracking-uri", f"sqlite:///{tmp_path / 'mlruns.db'}", "--port", _free_port())
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        f"error: no MLflow store at sqlite:///{tmp_path / 'mlruns.db'}; run a sweep first or pass --tracking-uri"]
    assert list(tmp_path.iterdir()) == []


def test_ui_on_a_busy_port_is_one_line_exit_2(tmp_path):
    uri, _ = _store(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        t0 = time.time()
        result = _ui("--tracking-uri", uri, "--port", port)
    assert result.exit_code == 2 and time.time() - t0 < 30
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: port {port} on 127.0.0.1 is not available") \
        and f"--port {port + 1}" in lines[0]


def test_a_second_ui_whose_port_was_taken_after_its_check_refuses_instead_of_printing_the_others_url(
        tmp_path, monkeypatch):
    """Two `rirlab ui` on one port: the second passed the port check before the first server bound it, then
    found the first server answering and printed its URL (another store's) with exit 0."""
    import http.server
    import threading

    from rirlab.cli import ui

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Health)  # the first UI, serving another store
    threading.Thread(target=other.serve_forever, daemon=True).start()
    port = other.server_address[1]
    monkeypatch.setattr(ui, "_check_port_free", lambda host, port: None)  # the race: it was free when checked
    uri, _ = _store(tmp_path)
    try:
        result = _ui("--tracking-uri", uri, "--port", port)
    finally:
        other.shutdown()
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"port {port} on 127.0.0.1 is served by another process (pid {os.getpid()}" in line and "http://" not in line


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_ui_beyond_loopback_is_refused_without_allow_remote(tmp_path, host):
    """MLflow's UI has no authentication: on 0.0.0.0 another machine listed experiments and deleted runs."""
    result = _ui("--tracking-uri", f"sqlite:///{tmp_path / 'mlruns.db'}", "--host", host, "--port", _free_port())
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"error: --host {host} opens the MLflow UI to other machines with no authentication" in line
    assert "basic-auth" in line and "reverse proxy" in line and line.endswith("and pass --allow-remote")
    assert list(tmp_path.iterdir()) == []


def test_ui_passes_the_store_through_the_environment_not_the_command_line(tmp_path, monkeypatch):
    """`mlflow ui --backend-store-uri URI` put a database password where every local user reads it (ps)."""
    import types

    from rirlab.cli import ui

    class Started(Exception):
        pass

    seen = {}

    def popen(cmd, env=None, **kwargs):
        seen.update(cmd=cmd, env=env)
        raise Started

    monkeypatch.setattr(ui, "subprocess", types.SimpleNamespace(Popen=popen, PIPE=subprocess.PIPE,
                                                                STDOUT=subprocess.STDOUT))
    uri, _ = _store(tmp_path)
    result = _ui("--tracking-uri", uri, "--port", _free_port(), "--host", "0.0.0.0", "--allow-remote")
    assert isinstance(result.exception, Started), result.output
    assert seen["env"]["MLFLOW_BACKEND_STORE_URI"] == uri
    assert seen["env"]["MLFLOW_DEFAULT_ARTIFACT_ROOT"] == str(tmp_path / "mlartifacts")
    assert not [word for word in seen["cmd"] if str(tmp_path) in word], seen["cmd"]
    assert "warning: the MLflow UI on 0.0.0.0 has no authentication" in result.output


def test_ui_unknown_experiment_lists_the_known_ones(tmp_path):
    uri, _ = _store(tmp_path)
    result = _ui("--tracking-uri", uri, "--experiment", "nope", "--port", _free_port())
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith("error: --experiment nope: no such experiment")
    assert "newer" in result.output and "older" in result.output


def test_default_experiment_is_the_most_recent_sweeps(tmp_path):
    _, tracker = _store(tmp_path)
    newer = tracker.experiment_id("newer", create=False)
    assert pick_experiment(tracker, None) == newer
    assert pick_experiment(tracker, "older") == tracker.experiment_id("older", create=False)
    # an experiment made by an earlier rirlab gets its kind, so MLflow's UI shows its runs rather than GenAI pages
    tracker.client.delete_experiment_tag(newer, EXPERIMENT_KIND_TAG)
    assert pick_experiment(tracker, None) == newer
    assert tracker.client.get_experiment(newer).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"


def test_ui_url_opens_the_runs_table_of_the_training_view():
    assert ui_url("http://127.0.0.1:5000", "7") == \
        "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning&compareRunsMode=TABLE"
    assert ui_url("http://127.0.0.1:5000", None) == "http://127.0.0.1:5000/#/experiments"


def _tree(pid: int) -> list:
    import psutil

    root = psutil.Process(pid)
    return [root] + root.children(recursive=True)


@pytest.mark.e2e
def test_ui_prints_the_url_once_it_answers_with_one_small_server(tmp_path):
    uri, tracker = _store(tmp_path)
    exp = tracker.experiment_id("newer", create=False)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rirlab.cli", "ui", "--tracking-uri", uri, "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith("MLflow UI for sqlite:///"), proc.stderr.read()[-3000:]
        url = proc.stdout.readline().strip()
        # the sweep's saved view (tests/analysis/test_analysis_ui.py): its trials, swept params and metric as columns
        assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/#/experiments/{exp}/runs\?workflowType=machine_learning"
                            rf"&compareRunsMode=TABLE&viewStateShareKey=[0-9a-f]{{32}}", url), url
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:  # answering when printed
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/get?experiment_id={exp}",
                                    timeout=10) as r:
            assert b'"newer"' in r.read()
        # a tracking server: the probe accepts it and `rirlab ui` prints the server's own URL, starting nothing
        served = _ui("--tracking-uri", f"http://127.0.0.1:{port}", "--experiment", "older")
        assert served.exit_code == 0, served.output
        older = tracker.experiment_id("older", create=False)
        (served_url,) = [line.strip() for line in served.output.splitlines() if line.strip().startswith("http://")]
        assert served_url.startswith(
            f"http://127.0.0.1:{port}/#/experiments/{older}/runs?workflowType=machine_learning&compareRunsMode=TABLE")
        procs = _tree(proc.pid)
        assert not [p for p in procs[1:] if str(tmp_path) in " ".join(p.cmdline())]  # the store: in the env only
        rss_mb = sum(p.memory_info().rss for p in procs) / 2**20
        print(f"\nrirlab ui: {len(procs)} processes, {rss_mb:.0f} MiB RSS")
        assert len(procs) <= 3 and rss_mb < 1200  # rirlab, mlflow ui, one uvicorn process (before: 15, ~2.4-3.2 GB)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a terminal sends it: to the whole foreground group
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "Traceback" not in err and "CancelledError" not in err, err[-3000:]
        assert not [p for p in procs[1:] if p.is_running() and p.status() != "zombie"]  # (issue 54 item 4)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
