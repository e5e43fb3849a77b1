"""Opt-in (``pytest -m browser``): `rirlab ui SPEC` on a quick sweep's store, opened in headless Chromium: the printed
URL lists the sweep's trial runs (no click) with the swept parameters and the metric as columns, in the
model-training view; a trial's page stays in that view once MLflow's switch is on Model training.

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
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]

SCRIPT = r"""
const { chromium } = require('playwright-core');
const [url, childNames, columns, shot, runUrl, runShot] = [process.argv[2], JSON.parse(process.argv[3]),
  JSON.parse(process.argv[4]), process.argv[5], process.argv[6], process.argv[7]];
const sidebar = async (page) => (await page.locator('nav, aside').allInnerTexts()).join('\n');
(async () => {
  const browser = await chromium.launch({ executablePath: '%s', args: %s });
  const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
  // the URL `rirlab ui SPEC` printed: the spec's experiment, its trials listed (no click), its columns, best first
  await page.goto(url, { waitUntil: 'load', timeout: 180000 });
  for (const name of childNames) await page.getByText(name, { exact: true }).first().waitFor({ timeout: 180000 });
  const headers = await page.locator('[role=columnheader]').allInnerTexts();
  for (const c of columns) if (!headers.some(h => h.trim() === c)) throw new Error('no column ' + c + ' in ' + headers);
  const side = await sidebar(page);
  if (/Judges|Evaluation runs/.test(side)) throw new Error('landing page in the GenAI view: ' + side.slice(0, 300));
  await page.screenshot({ path: shot });
  console.log('OK ' + childNames.length + ' trial runs listed with columns ' + columns.join(', '));
  // run pages follow MLflow's own GenAI / Model training switch (kept in the browser): picked once, they stay
  // (each pick opens the experiment's page in that view; the GenAI one greets with a popover that covers the page)
  for (const [label, type] of [['GenAI', 'genai'], ['Model training', 'machine_learning']]) {
    await page.getByText(label, { exact: true }).first().click({ timeout: 60000 });
    for (let i = 0; i < 60 && !page.url().includes('workflowType=' + type); i++) await page.waitForTimeout(500);
    await page.waitForTimeout(3000);
    const gotIt = page.getByRole('button', { name: 'Got it' });
    if (await gotIt.count()) await gotIt.first().click();
  }
  await page.goto(runUrl, { waitUntil: 'load', timeout: 180000 });
  await page.getByText(childNames[0], { exact: true }).first().waitFor({ timeout: 120000 });
  await page.waitForTimeout(2000);
  const runSide = await sidebar(page);
  if (/Judges|Evaluation runs/.test(runSide)) throw new Error('run page in the GenAI view: ' + runSide.slice(0, 300));
  await page.screenshot({ path: runShot });
  console.log('OK run page in the model-training view');
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


def test_rirlab_ui_lands_on_the_sweeps_trials_with_their_columns(tmp_path):
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
    ui = subprocess.Popen([*rirlab, "ui", str(ROOT / "search_spaces" / "chunk_beam.yaml"), "--tracking-uri", uri,
                           "--port", str(port)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = _printed_url(ui)  # printed once the UI answers
        assert url.startswith(f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs?") and \
            "viewStateShareKey=" in url, url
        script = tmp_path / "ui_check.js"
        script.write_text(SCRIPT % (CHROMIUM, str(FLAGS).replace("'", '"')))
        shots = Path(os.environ.get("RIRLAB_SCREENSHOT_DIR", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        shot, run_shot = shots / "mlflow_ui_sweep.png", shots / "mlflow_ui_trial_run.png"
        import json

        columns = ["chunk_size", "beam_size", "dev/accuracy"]  # the swept parameters and the metric
        child = next(r for r in runs if r.info.run_name == children[0])
        run_url = f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs/{child.info.run_id}"
        res = subprocess.run([node, str(script), url, json.dumps(children), json.dumps(columns), str(shot), run_url,
                              str(run_shot)], env={**os.environ, "NODE_PATH": modules}, capture_output=True, text=True,
                             timeout=420)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "OK 4 trial runs listed with columns chunk_size, beam_size, dev/accuracy" in res.stdout
        assert "OK run page in the model-training view" in res.stdout
        for png in (shot, run_shot):
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
        print(f"screenshots: {shot} {run_shot}")
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # the UI's own process group (mlflow + uvicorn workers)
        try:
            ui.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)


def _printed_url(proc, timeout: float = 420) -> str:
    """The URL `rirlab ui` prints (on the line after "MLflow UI for ...") once the UI answers (its own start-up limit
    is 180 s after MLflow is imported; on 2 busy cores both take minutes)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    t0 = time.time()
    while time.time() - t0 < timeout:
        if not sel.select(timeout=5):
            continue
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"rirlab ui exited with {proc.wait()} before printing a URL")
        if line.strip().startswith("http://"):
            return line.strip()
    raise AssertionError(f"rirlab ui printed no URL within {timeout}s")
