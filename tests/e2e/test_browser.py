"""Opt-in (``pytest -m browser``): `rirlab ui` on a quick sweep's store, opened in headless Chromium.

Needs Debian's chromium (``apt-get install chromium``), node, and playwright-core
(``npm install --prefix ~/.cache/rirlab-browser playwright-core``; or set RIRLAB_NODE_MODULES to a
node_modules folder that has it). Saves the screenshot to $RIRLAB_SCREENSHOT_DIR (default tmp_path).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]

SCRIPT = r"""
const { chromium } = require('playwright-core');
const [url, parentName, childNames, shot] = [process.argv[2], process.argv[3], JSON.parse(process.argv[4]), process.argv[5]];
(async () => {
  const browser = await chromium.launch({ executablePath: '%s', args: %s });
  const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
  await page.goto(url, { waitUntil: 'load', timeout: 180000 });
  const parent = page.getByText(parentName, { exact: true }).first();
  await parent.waitFor({ timeout: 180000 });
  // the run-name cell of a parent run has an expander button that shows its nested runs
  const row = page.locator('[role=row]', { has: parent });
  await row.locator('button[data-component-id*="runnamecellrenderer"]').first().click();
  for (const name of childNames) await page.getByText(name, { exact: true }).first().waitFor({ timeout: 60000 });
  await page.screenshot({ path: shot });
  console.log('OK parent and ' + childNames.length + ' nested runs listed');
  await browser.close();
})().catch(e => { console.error(String(e)); process.exit(1); });
"""


def _node_modules() -> str | None:
    for cand in [os.environ.get("RIRLAB_NODE_MODULES"), str(Path.home() / ".cache" / "rirlab-browser" / "node_modules")]:
        if cand and (Path(cand) / "playwright-core").is_dir():
            return cand
    npm = shutil.which("npm")
    if npm:
        out = subprocess.run([npm, "root", "-g"], capture_output=True, text=True).stdout.strip()
        if out and (Path(out) / "playwright-core").is_dir():
            return out
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc, timeout: float = 240) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"rirlab ui exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(2)
    raise AssertionError(f"MLflow UI did not answer on {url} within {timeout}s")


def test_mlflow_ui_lists_sweep_parent_and_nested_trials(tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip("no /usr/bin/chromium: apt-get install chromium")
    node, modules = shutil.which("node"), _node_modules()
    if node is None or modules is None:
        pytest.skip("needs node and playwright-core: npm install --prefix ~/.cache/rirlab-browser playwright-core")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    rirlab = [str(Path(sys.executable).parent / "rirlab")]
    sweep = subprocess.run([*rirlab, "sweep", str(ROOT / "search_spaces" / "chunk_beam.yaml"), "--quick",
                            "--tracking-uri", uri, "--output-dir", str(tmp_path / "ray")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("chunk_beam")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("rirlab.sweep") == "parent")
    children = [r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 4

    port = _free_port()
    ui = subprocess.Popen([*rirlab, "ui", "--tracking-uri", uri, "--port", str(port)], cwd=tmp_path,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/", ui)
        script = tmp_path / "ui_check.js"
        script.write_text(SCRIPT % (CHROMIUM, str(FLAGS).replace("'", '"')))
        shot = Path(os.environ.get("RIRLAB_SCREENSHOT_DIR", tmp_path)) / "mlflow_ui_sweep.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        import json

        url = f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs"
        res = subprocess.run([node, str(script), url, parent.info.run_name, json.dumps(children), str(shot)],
                             env={**os.environ, "NODE_PATH": modules}, capture_output=True, text=True, timeout=420)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "OK parent and 4 nested runs listed" in res.stdout
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        print(f"screenshot: {shot}")
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # the UI's own process group (mlflow + uvicorn workers)
        try:
            ui.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
