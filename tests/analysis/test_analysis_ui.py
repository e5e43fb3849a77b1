"""`rirlab ui [SPEC]` (issue 33 item 2): the printed URL lands on the spec's experiment (not the newest one), through
an MLflow saved view that lists the sweep's trial runs with its swept parameters and metric as columns, best first.
The view is what MLflow 3's UI reads: the experiment tag mlflow.sharedViewState.<key> named by viewStateShareKey
(checked in a real browser by tests/e2e/test_browser.py)."""

from __future__ import annotations

import json
import subprocess
import urllib.parse

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from rirlab import contract
from rirlab.cli import main, ui as ui_cli
from tests.helpers.analysis_store import make_sweep

SPEC = {"name": "chunk_beam", "task": "listops", "model": "rir_ebt_grc",
        "search": {"chunk_size": {"grid": [10, 30]}, "beam_size": {"grid": [5, 7]}}, "seeds": 1, "mode": "max"}
NEWER = {"name": "newer", "task": "listops", "model": "rir_ebt_grc", "search": {"lr": {"grid": [0.1, 0.2]}},
         "seeds": 1, "metric": "train/loss", "mode": "min"}


@pytest.fixture
def store(tmp_path):
    runs = [{"swept": {"chunk_size": c, "beam_size": b, "seed": 0}, "metrics": {"dev/accuracy": 40 + c + b}}
            for c in (10, 30) for b in (5, 7)]
    uri, spec = make_sweep(tmp_path, SPEC, runs)
    make_sweep(tmp_path, NEWER, [{"swept": {"lr": lr, "seed": 0}, "metrics": {"train/loss": lr}} for lr in (0.1, 0.2)])
    client = MlflowClient(uri)
    _, newer = _parent(client, "newer")  # as `rirlab sweep` records them: the metric tag and the spec as params
    client.set_tag(newer.info.run_id, contract.METRIC, "train/loss")
    client.log_param(newer.info.run_id, contract.SPEC_PARAM_PREFIX + "mode", "min")
    return uri, spec, client


def _parent(client, name):
    exp = client.get_experiment_by_name(name)
    (parent,) = client.search_runs([exp.experiment_id], filter_string=contract.parent_filter())
    return exp.experiment_id, parent


def _saved_state(client, exp_id, key):
    envelope = json.loads(client.get_experiment(exp_id).tags[ui_cli.VIEW_TAG_PREFIX + key])
    assert envelope["name"] == ui_cli.VIEW_NAME and isinstance(envelope["createdAt"], int)
    return json.loads(envelope["state"])  # MLflow's saved-view envelope: the state as a JSON string


def test_the_sweep_view_lists_its_trials_with_swept_params_and_the_metric_best_first(store):
    _, _, client = store
    exp_id, parent = _parent(client, "chunk_beam")
    key = ui_cli.sweep_view(client, exp_id)
    state = _saved_state(client, exp_id, key)
    assert state["selectedColumns"] == ["params.`chunk_size`", "params.`beam_size`", "params.`seed`",
                                        "metrics.`dev/accuracy`"]
    assert state["searchFilter"] == f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    assert state["orderByKey"] == "metrics.`dev/accuracy`" and state["orderByAsc"] is False
    # the filter finds exactly the sweep's trial runs
    assert len(client.search_runs([exp_id], filter_string=state["searchFilter"])) == 4
    assert ui_cli.sweep_view(client, exp_id) == key  # the same view again: one tag, not one per call
    assert sum(k.startswith(ui_cli.VIEW_TAG_PREFIX) for k in client.get_experiment(exp_id).tags) == 1


def test_a_loss_to_minimise_sorts_lowest_first(store):
    _, _, client = store
    exp_id, _ = _parent(client, "newer")
    state = _saved_state(client, exp_id, ui_cli.sweep_view(client, exp_id))
    assert state["selectedColumns"] == ["params.`lr`", "params.`seed`", "metrics.`train/loss`"]
    assert state["orderByKey"] == "metrics.`train/loss`" and state["orderByAsc"] is True


def test_the_url_carries_the_view_and_no_search_parameter_of_its_own():
    url = ui_cli.ui_url("http://127.0.0.1:5000", "7", "abc123")
    route, _, query = url.partition("?")
    params = urllib.parse.parse_qs(query)
    assert route == "http://127.0.0.1:5000/#/experiments/7/runs"
    assert params == {"workflowType": ["machine_learning"], "compareRunsMode": ["TABLE"], "viewStateShareKey": ["abc123"]}
    # MLflow ignores a shared view when the URL has search facets of its own
    assert not {"searchFilter", "orderByKey", "orderByAsc", "startTime", "lifecycleFilter"} & set(params)


class _FakeServer:
    """Stands in for the `mlflow ui` process: answers at once and exits 0 (nothing is started)."""

    pid, returncode, stdout = 0, 0, iter(())

    def __init__(self, cmd, **_):
        self.cmd = cmd

    def poll(self):
        return 0

    def wait(self, timeout=None):
        return 0


def _fake_server(monkeypatch) -> list:
    """`rirlab ui` with MLflow's server faked (answering at once, no signal handlers): the commands it would start."""
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: started.append(cmd) or _FakeServer(cmd, **kw))
    monkeypatch.setattr(ui_cli, "_wait_until_answering", lambda server, host, port, tail: f"http://{host}:{port}")
    monkeypatch.setattr(ui_cli.signal, "signal", lambda *a: None)
    return started


def test_ui_spec_lands_on_the_specs_experiment_not_the_newest(store, monkeypatch):
    uri, spec, client = store
    started = _fake_server(monkeypatch)
    r = CliRunner().invoke(main, ["ui", str(spec), "--tracking-uri", uri, "--port", "5999"])
    assert r.exit_code == 0, r.output
    (url,) = [line.strip() for line in r.output.splitlines() if line.strip().startswith("http://")]
    # run pages stay in the model-training view: MLflow's app with that preset (issue 54 item 1; before, the user
    # was told to pick Model training once, tests/sweeps/test_ui_preset.py)
    assert started[0][-2:] == ["--app-name", "rirlab-ui"], "an install older than setup.cfg's: pip install -e ."
    assert "open in the Model training view" in r.output
    exp_id, _ = _parent(client, "chunk_beam")
    assert url.startswith(f"http://127.0.0.1:5999/#/experiments/{exp_id}/runs?workflowType=machine_learning&")
    key = urllib.parse.parse_qs(url.partition("?")[2])["viewStateShareKey"][0]
    assert _saved_state(client, exp_id, key)["selectedColumns"][-1] == "metrics.`dev/accuracy`"
    newest = CliRunner().invoke(main, ["ui", "--tracking-uri", uri, "--port", "5999"])  # no SPEC: the newest sweep's
    assert f"/#/experiments/{_parent(client, 'newer')[0]}/runs?" in newest.output, newest.output


def test_an_install_without_the_app_serves_plain_mlflow_and_says_how_to_keep_run_pages(store, monkeypatch):
    """An install made before the app's entry point existed (pip install -e . writes it) still starts the UI."""
    from rirlab.compat import mlflow as compat

    uri, spec, _ = store
    started = _fake_server(monkeypatch)
    monkeypatch.setattr(compat, "ui_app_installed", lambda: False)
    r = CliRunner().invoke(main, ["ui", str(spec), "--tracking-uri", uri, "--port", "5999"])
    assert r.exit_code == 0, r.output
    assert "--app-name" not in started[0]
    assert "pick Model training there once" in r.output and "reinstall rirlab" in r.output


def test_the_chart_view_draws_the_swept_parameters_against_the_metric(store, monkeypatch):
    """Issue 54 item 3: the saved view's charts (compareRunsMode=CHART) open on parallel coordinates of the swept
    parameters and the sweep's metric and a contour of the two swept parameters (MLflow's compare page defaulted
    to train/loss and to two constant parameters), then the learning curves; best/* after the curves."""
    uri, spec, client = store
    exp_id, parent = _parent(client, "chunk_beam")
    (child, *_) = client.search_runs([exp_id], filter_string=contract.children_filter(parent.info.run_id))
    for k in ("train/loss", "best/dev_accuracy", "best/step", "test_len_500/accuracy"):
        client.log_metric(child.info.run_id, k, 1.0, step=3)
    key = ui_cli.sweep_view(client, exp_id)
    state = _saved_state(client, exp_id, key)
    charts = {c["type"]: c for c in state["compareRunCharts"]}
    assert charts["PARALLEL"]["selectedParams"] == ["chunk_size", "beam_size"]  # not the seed: noise
    assert charts["PARALLEL"]["selectedMetrics"] == ["dev/accuracy"]
    contour = charts["CONTOUR"]
    assert [contour[a]["key"] for a in ("xaxis", "yaxis", "zaxis")] == ["chunk_size", "beam_size", "dev/accuracy"]
    assert [contour[a]["type"] for a in ("xaxis", "yaxis", "zaxis")] == ["PARAM", "PARAM", "METRIC"]
    lines = [c["metricKey"] for c in state["compareRunCharts"] if c["type"] == "LINE"]
    assert lines == ["dev/accuracy", "train/loss"]
    sections = [s["name"] for s in state["compareRunSections"]]
    assert sections == ["Sweep", "dev", "test_len_500", "train", "best", "Model metrics"]
    first = state["compareRunSections"][0]["uuid"]
    assert all(c["metricSectionId"] == first for c in state["compareRunCharts"])
    assert state["isAccordionReordered"] is True  # MLflow keeps this order instead of sorting sections by name
    assert state["runsHiddenMode"] == "SHOW_ALL"  # every trial in the charts, not MLflow's first 10
    # one parameter swept: a scatter of it against the metric instead of a contour
    newer_id, _ = _parent(client, "newer")
    charts = {c["type"]: c for c in _saved_state(client, newer_id, ui_cli.sweep_view(client, newer_id))["compareRunCharts"]}
    assert "CONTOUR" not in charts and charts["SCATTER"]["xaxis"] == {"key": "lr", "type": "PARAM"}
    assert charts["SCATTER"]["yaxis"] == {"key": "train/loss", "type": "METRIC"}
    # `rirlab ui` prints the charts' URL after the table's: the same saved view, compareRunsMode=CHART
    _fake_server(monkeypatch)
    r = CliRunner().invoke(main, ["ui", str(spec), "--tracking-uri", uri, "--port", "5999"])
    (chart_line,) = [line for line in r.output.splitlines() if "compareRunsMode=CHART" in line]
    assert chart_line.strip().startswith("charts (") and f"viewStateShareKey={key}" in chart_line
    assert f"/#/experiments/{exp_id}/runs?workflowType=machine_learning&" in chart_line
