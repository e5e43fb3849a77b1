"""The MLflow app `rirlab ui` serves (issue 54 items 1 and 3): MLflow's own app whose page presets, in a browser that
holds no choice of its own, the model-training view (trial and compare pages were GenAI pages) and a closed Assistant
panel (it opened by itself over a quarter of the runs page). rirlab/compat/mlflow.py says why no setting does it;
tests/e2e/test_browser.py checks it in a real browser."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rirlab.compat import mlflow as compat

PAGE = (b'<!doctype html><html><head><title>MLflow</title><script defer="defer" src="static-files/main.js"></script>'
        b'</head><body><div id="root"></div></body></html>')


def _serve(page: bytes, path: str = "/", status: int = 200, headers=None, request_headers=()):
    """Run PresetUI over a stand-in for MLflow's app; return (what the inner app saw, the messages sent)."""
    seen, sent = {}, []
    headers = headers if headers is not None else [(b"content-type", b"text/html; charset=utf-8"),
                                                   (b"content-length", str(len(page)).encode()), (b"etag", b"x")]

    async def inner(scope, receive, send):
        seen["scope"] = scope
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": page[:20], "more_body": True})
        await send({"type": "http.response.body", "body": page[20:]})

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": path, "headers": list(request_headers)}
    asyncio.run(compat.PresetUI(inner)(scope, receive, send))
    return seen, sent


def _body(sent) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_the_page_runs_the_defaults_before_mlflows_bundle_and_says_its_new_length():
    _, sent = _serve(PAGE)
    body = _body(sent)
    script = compat.defaults_script()
    assert body.index(script) < body.index(b'<script defer="defer"')  # before MLflow's (deferred) bundle
    assert body.replace(script, b"") == PAGE
    headers = dict(sent[0]["headers"])
    assert headers[b"content-length"] == str(len(body)).encode()
    assert b"etag" not in headers  # the file's tag no longer describes the page


def test_only_the_page_is_touched_and_it_is_served_whole():
    js = b"<script>not a page</script>"
    _, sent = _serve(js, path="/static-files/static/js/main.js",
                     headers=[(b"content-type", b"application/javascript"), (b"content-length", b"27")])
    assert _body(sent) == js and dict(sent[0]["headers"])[b"content-length"] == b"27"
    _, sent = _serve(b"{}", headers=[(b"content-type", b"application/json")])  # not HTML: left as it is
    assert _body(sent) == b"{}"
    # a copy the browser cached from a plain `mlflow ui` on this port is not revalidated into use (304)
    seen, _ = _serve(PAGE, request_headers=[(b"if-none-match", b"x"), (b"accept", b"text/html")])
    assert [k for k, _ in seen["scope"]["headers"]] == [b"accept"]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")
def test_the_script_sets_only_what_the_browser_has_not_chosen():
    """Run in node against a stand-in localStorage: a fresh browser gets both defaults (as MLflow's hook reads them:
    JSON under <key>_v1); one that picked GenAI keeps GenAI."""
    script = compat.defaults_script().decode()
    js = re.fullmatch(r"<script>(.*)</script>", script).group(1)
    harness = """
    const runs = (store) => { const localStorage = { getItem: k => (k in store ? store[k] : null),
                                                     setItem: (k, v) => { store[k] = String(v); } };
                              %s; return store; };
    console.log(JSON.stringify([runs({}), runs({'mlflow.workflowType_v1': '"genai"'})]));
    """ % js
    out = subprocess.run(["node", "-e", harness], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    fresh, picked = json.loads(out.stdout)
    assert json.loads(fresh["mlflow.workflowType_v1"]) == "machine_learning"
    assert json.loads(fresh["mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"]) is True
    assert json.loads(picked["mlflow.workflowType_v1"]) == "genai"


def test_mlflow_finds_the_app_by_its_entry_point_and_it_wraps_mlflows_own():
    """`mlflow ui --app-name rirlab-ui` looks the app up in the entry point group mlflow.app (setup.cfg)."""
    points = [p for p in importlib.metadata.entry_points(group="mlflow.app") if p.name == compat.UI_APP_NAME]
    assert len(points) == 1, "no mlflow.app entry point rirlab-ui: an install older than setup.cfg's; pip install -e ."
    (point,) = points
    assert point.load() is compat.create_ui_app and compat.ui_app_installed()
    from mlflow.server import _find_app, _is_factory
    from mlflow.server.fastapi_app import app

    assert _is_factory(_find_app(compat.UI_APP_NAME))  # uvicorn --factory: the server is built in the worker only
    wrapped = compat.create_ui_app()
    assert isinstance(wrapped, compat.PresetUI) and wrapped.app is app and wrapped.root == "/"


def test_the_keys_are_the_ones_the_installed_mlflow_ui_reads():
    """The built UI names them: a new MLflow that renames a key fails here (adapt rirlab/compat/mlflow.py)."""
    import mlflow

    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    bundle = "".join(p.read_text(errors="replace") for p in js.glob("main.*.js"))
    for key, value in compat.UI_DEFAULTS.items():
        name, version = re.fullmatch(r"(.+)_v(\d+)", key).groups()
        assert re.search(rf'key:"{re.escape(name)}",version:{version}\b', bundle), key
    assert 'e.MACHINE_LEARNING="machine_learning"' in bundle  # the workflow type's value
    assert "`${e}_v${t}`" in bundle  # useLocalStorage's key: <key>_v<version>, the value as JSON
