"""`rirlab export` and `plot curves` against a real local `mlflow server` (issue 50: 56 s against SQLite's 9 s at
100 runs, one history request per run and metric): the histories come in bulk, through the endpoint MLflow's UI
draws its charts with, a request per up to 100 runs and metric, and the export equals the export of the same runs
read from the SQLite file the server serves. Counted in HTTP requests, not timed (benchmarks/readonly_at_scale.py
--server has the times)."""

from __future__ import annotations

import collections
import os
import re
import threading
import time
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest
import requests
import urllib3
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from rirlab import store_reads
from rirlab.analysis import runs as analysis_runs
from rirlab.analysis.export import EXPORT_ID_KEY, export_runs, history_path, trial_runs
from rirlab.analysis.plots import curves_plot
from rirlab.analysis.runs import load_sweep, metric_histories
from rirlab.compat import mlflow as compat_mlflow
from tests.helpers.analysis_store import make_sweep
from tests.helpers.mlflow_server import free_port, kill, start_server

N = 12
BULK = compat_mlflow.HISTORY_BULK
PER_RUN = "/api/2.0/mlflow/metrics/get-history"
LONG = 9  # points of the last run's dev/accuracy history (the others have 3)


def _runs():
    runs = [{"swept": {"lr": round(1e-4 * (i + 1), 6), "seed": 0},
             "metrics": {"dev/accuracy": 50.0 + i, "test/accuracy": 40.0 + i},
             "history": {"dev/accuracy": [(10, 20.0 + i), (20, 30.0 + i), (30, 40.0 + i)],
                         "train/loss": [(10, 2.0), (20, 1.0 + i / 100)]}} for i in range(N)]
    runs[-1]["history"]["dev/accuracy"] = [(10 * (s + 1), 1.0 + s) for s in range(LONG)]
    return runs


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A 12-run sweep in a SQLite store and a `mlflow server` serving that same file: (sqlite uri, server uri, name)."""
    root = tmp_path_factory.mktemp("served")
    spec = {"name": "served", "task": "listops", "model": "rir_grc", "seeds": 1,
            "search": {"lr": {"grid": [round(1e-4 * (i + 1), 6) for i in range(N)]}}}
    uri, _ = make_sweep(root, spec, _runs())
    port = free_port()
    server = start_server(root, port, db=root / "mlruns.db")
    try:
        yield uri, f"http://127.0.0.1:{port}", spec["name"]
    finally:
        kill(server)


@pytest.fixture
def requests_made(monkeypatch):
    """The path of every HTTP request this process makes from here on (MLflow's client goes through requests)."""
    paths = collections.Counter()
    real = requests.Session.request

    def counted(self, method, url, *a, **k):
        paths[urlparse(url).path] += 1
        return real(self, method, url, *a, **k)

    monkeypatch.setattr(requests.Session, "request", counted)
    return paths


@pytest.fixture
def traffic(monkeypatch):
    """Every HTTP request from here on, as the test server sees them: ``paths`` (a Counter), ``bodies`` (each
    request's JSON body, by path), ``in_flight`` (the most bulk history requests open at once: each is held 0.2 s,
    so that requests sent together overlap) and ``connections`` (TCP connections opened)."""
    seen = {"paths": collections.Counter(), "bodies": collections.defaultdict(list), "in_flight": 0,
            "connections": 0}
    lock, now = threading.Lock(), [0]
    real, connect = requests.Session.request, urllib3.connection.HTTPConnection.connect

    def counted(self, method, url, *a, **k):
        path = urlparse(url).path
        with lock:
            seen["paths"][path] += 1
            seen["bodies"][path].append(k.get("json"))
            now[0] += path == BULK
            seen["in_flight"] = max(seen["in_flight"], now[0])
        try:
            if path == BULK:
                time.sleep(0.2)
            return real(self, method, url, *a, **k)
        finally:
            with lock:
                now[0] -= path == BULK

    def opened(self, *a, **k):
        with lock:
            seen["connections"] += 1
        return connect(self, *a, **k)

    monkeypatch.setattr(requests.Session, "request", counted)
    monkeypatch.setattr(urllib3.connection.HTTPConnection, "connect", opened)
    return seen


def test_bulk_history_requests_go_several_at_a_time_on_reused_connections(served, tmp_path, monkeypatch, traffic):
    """Issue 50: a 1,000-run export through a server made 369 bulk requests one after another (8 s of 16). They are
    independent: SERVER_IN_FLIGHT at a time now, each thread on a connection of its own that it keeps. Here 2 runs
    a request, so the export's 3 metrics of 12 runs are 18 requests."""
    sqlite_uri, server_uri, name = served
    export_runs(MlflowClient(sqlite_uri), name, tmp_path / "sqlite.parquet")
    monkeypatch.setattr(compat_mlflow, "HISTORY_BULK_RUNS", 2)
    client = MlflowClient(server_uri)
    client.get_experiment_by_name(name)  # (a connection to the server is open, as after the export's first request)
    traffic["connections"] = 0
    export_runs(client, name, tmp_path / "server.parquet")
    assert traffic["paths"][BULK] == 18, traffic["paths"]
    assert 2 <= traffic["in_flight"] <= store_reads.SERVER_IN_FLIGHT, traffic["in_flight"]  # before: 1
    assert traffic["connections"] <= store_reads.SERVER_IN_FLIGHT, traffic["connections"]  # one a thread, kept
    assert not [t for t in threading.enumerate() if t.name == "rirlab-store-read" and t.is_alive()
                and not t.join(5) and t.is_alive()]
    ta, tb = (pq.read_table(history_path(tmp_path / f"{kind}.parquet")) for kind in ("sqlite", "server"))
    assert ta.to_pylist() == tb.to_pylist()


def test_a_failed_bulk_request_is_raised_and_no_request_starts_after_it(served, monkeypatch):
    """A server that stops answering half-way: the error MLflow's client raised for that request is raised (the
    command's one line), the requests not sent yet are not sent, and the reading threads end."""
    _, server_uri, name = served
    client = MlflowClient(server_uri)
    ids = [r.info.run_id for r in trial_runs(client, name)]
    calls = []
    real = compat_mlflow.server_history_bulk

    def failing(uri, run_ids, key):
        calls.append(key)
        if len(calls) == 3:
            raise MlflowException("API request to the server failed with exception: connection refused")
        time.sleep(0.05)
        return real(uri, run_ids, key)

    monkeypatch.setattr(compat_mlflow, "server_history_bulk", failing)
    monkeypatch.setattr(compat_mlflow, "HISTORY_BULK_RUNS", 1)  # 12 requests a metric
    with pytest.raises(MlflowException, match="connection refused"):
        analysis_runs.metric_histories_of(client, {"dev/accuracy": ids, "train/loss": ids})
    time.sleep(0.5)
    assert len(calls) <= 3 + store_reads.SERVER_IN_FLIGHT, len(calls)  # those in flight, none after (of 24)
    for t in threading.enumerate():
        if t.name == "rirlab-store-read":
            t.join(5)
            assert not t.is_alive()


def test_runs_are_searched_in_pages_through_a_server_and_read_as_one_search(served, tmp_path, monkeypatch, traffic):
    """A thousand runs in one runs/search response was seconds of the server's work under one request timeout (10 s
    an attempt for rirlab's commands); in pages of SERVER_PAGE runs now (5 here: 13 runs, the parent too, in 3),
    the export equal to the SQLite file's and the sweep's runs all read."""
    sqlite_uri, server_uri, name = served
    export_runs(MlflowClient(sqlite_uri), name, tmp_path / "sqlite.parquet")
    monkeypatch.setattr(analysis_runs, "SERVER_PAGE", 5)
    client = MlflowClient(server_uri)
    export_runs(client, name, tmp_path / "server.parquet")
    searches = traffic["bodies"]["/api/2.0/mlflow/runs/search"]
    assert len(searches) == 3 and all(b["max_results"] <= 5 for b in searches), searches  # before: 1 of 50,000
    ta, tb = pq.read_table(tmp_path / "sqlite.parquet"), pq.read_table(tmp_path / "server.parquet")
    assert ta.to_pylist() == tb.to_pylist()
    sw = load_sweep(client, name)
    assert len(sw.runs) == N and sw.runs["run_id"].is_unique


def _per_run(client, run_ids, key):
    return {rid: [(m.key, m.value, m.timestamp, m.step) for m in client.get_metric_history(rid, key)]
            for rid in run_ids}


def _points(histories):
    return {rid: [(m.key, m.value, m.timestamp, m.step) for m in ms] for rid, ms in histories.items()}


def test_an_export_through_a_server_equals_the_export_of_its_sqlite_file_in_a_request_per_metric(served, tmp_path,
                                                                                                requests_made):
    sqlite_uri, server_uri, name = served
    export_runs(MlflowClient(sqlite_uri), name, tmp_path / "sqlite.parquet")
    requests_made.clear()
    written = export_runs(MlflowClient(server_uri), name, tmp_path / "server.parquet")
    assert written["run"][1] == N and written["history"][1] == N * 7 + LONG - 3  # dev 3 + 1 final, loss 2, test 1
    # the three metrics' histories: one bulk request each for the 12 runs (before: 36 per-run requests)
    assert requests_made[BULK] == 3 and requests_made[PER_RUN] == 0, requests_made
    for kind in ("sqlite", "server"):
        assert (tmp_path / f"{kind}.history.parquet").exists()
    for a, b in ((tmp_path / "sqlite.parquet", tmp_path / "server.parquet"),
                 (history_path(tmp_path / "sqlite.parquet"), history_path(tmp_path / "server.parquet"))):
        ta, tb = pq.read_table(a), pq.read_table(b)
        assert ta.schema.remove_metadata() == tb.schema.remove_metadata()
        assert ta.to_pylist() == tb.to_pylist()
        meta = {k: v for k, v in (ta.schema.metadata or {}).items() if k not in (EXPORT_ID_KEY, b"rirlab.tracking_uri")}
        assert meta == {k: v for k, v in (tb.schema.metadata or {}).items()
                        if k not in (EXPORT_ID_KEY, b"rirlab.tracking_uri")}


def test_a_curves_plot_through_a_server_reads_the_histories_in_one_request(served, tmp_path, figures, requests_made):
    _, server_uri, name = served
    client = MlflowClient(server_uri)
    sw = load_sweep(client, name)
    requests_made.clear()
    assert curves_plot(client, sw, "dev/accuracy", tmp_path / "c.png") == N
    assert requests_made[BULK] == 1 and requests_made[PER_RUN] == 0, requests_made


def test_runs_past_a_requests_limits_are_read_in_several_and_a_cut_response_again_in_halves(served, monkeypatch,
                                                                                          requests_made):
    """At most HISTORY_BULK_RUNS run ids a request; a response holding HISTORY_BULK_POINTS points may have been cut
    by the server (it returns no more): asked again in halves, and a run alone over the limit read by the per-run
    call (which pages). Here 5 runs a request and 9 points a response, so the server cuts for real: each run holds
    4 points of dev/accuracy (3 evaluations and the final value), the long one 10."""
    _, server_uri, name = served
    client = MlflowClient(server_uri)
    ids = [r.info.run_id for r in trial_runs(client, name)]
    expected = _per_run(client, ids, "dev/accuracy")
    assert sorted(len(v) for v in expected.values()) == [4] * (N - 1) + [LONG + 1]
    monkeypatch.setattr(compat_mlflow, "HISTORY_BULK_RUNS", 5)
    monkeypatch.setattr(compat_mlflow, "HISTORY_BULK_POINTS", 9)
    requests_made.clear()
    got = _points(metric_histories(client, ids, "dev/accuracy"))
    assert got == expected and list(got) == ids
    assert requests_made[PER_RUN] == 1, requests_made  # the long run alone
    assert requests_made[BULK] > 3, requests_made  # 3 groups of runs (5, 5, 2), the cut ones again in halves


def test_a_server_without_the_bulk_read_is_read_run_by_run(served, monkeypatch, requests_made):
    """An older MLflow, a proxy that passes only /api, a server under a static prefix: the endpoint answers 404,
    and every run is read through the public per-run call, as before."""
    _, server_uri, name = served
    client = MlflowClient(server_uri)
    ids = [r.info.run_id for r in trial_runs(client, name)]
    expected = _per_run(client, ids, "train/loss")
    monkeypatch.setattr(compat_mlflow, "HISTORY_BULK", "/ajax-api/2.0/mlflow/metrics/no-such-read")
    requests_made.clear()
    assert _points(metric_histories(client, ids, "train/loss")) == expected
    assert requests_made["/ajax-api/2.0/mlflow/metrics/no-such-read"] == 1 and requests_made[PER_RUN] == N


def test_request_chunks_stay_within_the_run_limit_and_a_request_line_gunicorn_takes():
    ids = [f"{i:032x}" for i in range(250)]
    chunks = compat_mlflow.history_bulk_chunks(ids, "dev/accuracy")
    assert [rid for c in chunks for rid in c] == ids
    assert all(len(c) <= compat_mlflow.HISTORY_BULK_RUNS for c in chunks)
    line = max(len(requests.Request("GET", "http://h:5000" + compat_mlflow.HISTORY_BULK,
                                    params={"run_id": c, "metric_key": "dev/accuracy",
                                            "max_results": compat_mlflow.HISTORY_BULK_POINTS}).prepare().path_url)
               for c in chunks)
    assert line < 4094, line


def test_a_server_that_stops_answering_mid_command_is_one_line_without_its_password(served, tmp_path, monkeypatch):
    """The store is probed when the command starts; a request after that which times out (at a thousand runs a busy
    server's answer can outlast an attempt) was MLflow's traceback. Now one line naming the server (password
    masked), what happened and the fix; exit code 2."""
    from click.testing import CliRunner

    from rirlab.analysis import export as export_module
    from rirlab.cli import main

    _, server_uri, name = served

    def times_out(*a, **k):
        try:
            raise requests.exceptions.ConnectionError("HTTPConnectionPool: Max retries exceeded (Caused by "
                                                      "ReadTimeoutError: Read timed out. (read timeout=10))")
        except requests.exceptions.ConnectionError as err:
            raise MlflowException(f"API request to {server_uri}/api/2.0/mlflow/runs/search failed") from err

    monkeypatch.setattr(export_module, "search_all", times_out)
    uri = server_uri.replace("http://", "http://reader:s3cret-pw@")
    result = CliRunner().invoke(main, ["export", "--experiment", name, "--tracking-uri", uri,
                                       "--out", str(tmp_path / "x.parquet")])
    out = result.output.strip()
    assert result.exit_code == 2, (result.exit_code, out, result.exception)
    assert len(out.splitlines()) == 1 and out.startswith("error: the MLflow tracking server"), out
    assert "stopped answering" in out and "timed out" in out and "MLFLOW_HTTP_REQUEST_TIMEOUT" in out, out
    assert "s3cret-pw" not in out and "reader:" in out, out
    waited, advised = re.search(r"(\d+) s an attempt", out), re.search(r"MLFLOW_HTTP_REQUEST_TIMEOUT=(\d+)", out)
    assert waited and advised and int(advised.group(1)) > int(waited.group(1)), out  # the advice is to wait longer


def test_a_read_only_command_gives_a_busy_server_longer_than_a_sweeps_driver_does(served, monkeypatch):
    """A sweep's driver waits 10 s an attempt (to notice a dead server); a read of a thousand runs on a busy server
    outlasted that, and each timed-out request was asked again while the server still worked on it. Read-only
    commands wait READ_TIMEOUT_S, unless the user set $MLFLOW_HTTP_REQUEST_TIMEOUT; the retries stay bounded."""
    from click.testing import CliRunner

    from rirlab.cli import analysis as cli_analysis
    from rirlab.cli import main

    _, server_uri, name = served
    for var in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        monkeypatch.setenv(var, "0")  # (restored, or removed, after the test)
        monkeypatch.delenv(var)
    result = CliRunner().invoke(main, ["runs", "--experiment", name, "--tracking-uri", server_uri])
    assert result.exit_code == 0, result.output
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == str(cli_analysis.READ_TIMEOUT_S) == "60"  # before: 10
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "4"  # the driver's bound, as before
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")  # the user's: kept
    assert CliRunner().invoke(main, ["runs", "--experiment", name, "--tracking-uri", server_uri]).exit_code == 0
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "7"
