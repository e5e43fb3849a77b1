"""Opt-in (``pytest -m browser``): `rirlab ui SPEC` on a quick sweep's store, opened in a fresh headless Chromium (no
choice of its own stored, as a new user's browser): the printed URL lists the sweep's trial runs (no click) with the
swept parameters and the metric as columns, in the model-training view, with the Assistant panel closed; clicking a
trial opens its page in that view, as does the compare page (issue 54 items 1 and 3: both were GenAI pages); the
printed charts URL opens on parallel coordinates and a contour of the swept parameters against the metric.

Needs Debian's chromium (``apt-get install chromium``), node, and playwright-core
(``npm install --prefix ~/.cache/rirlab-browser playwright-core``; or set RIRLAB_NODE_MODULES to a
node_modules folder that has it). Saves the screenshots to $RIRLAB_SCREENSHOT_DIR (default tmp_path).
"""

from __future__ import annotations

import json
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
GENAI = "/Judges|Evaluation runs|Sessions/"  # the GenAI view's side navigation

SCRIPT = r"""
const { chromium } = require('playwright-core');
const a = JSON.parse(process.argv[2]);
const sidebar = async (page) => (await page.locator('nav, aside').allInnerTexts()).join('\n');
const training = async (page, what) => {
  const side = await sidebar(page);
  if (%(genai)s.test(side)) throw new Error(what + ' in the GenAI view: ' + side.slice(0, 300));
};
(async () => {
  const browser = await chromium.launch({ executablePath: '%(chromium)s', args: %(flags)s });
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 800 } })).newPage();
  // the URL `rirlab ui SPEC` printed: the spec's experiment, its trials listed (no click), its columns, best first
  await page.goto(a.url, { waitUntil: 'load', timeout: 180000 });
  for (const name of a.children) await page.getByText(name, { exact: true }).first().waitFor({ timeout: 180000 });
  const headers = await page.locator('[role=columnheader]').allInnerTexts();
  for (const c of a.columns) if (!headers.some(h => h.trim() === c)) throw new Error('no column ' + c + ' in ' + headers);
  await training(page, 'landing page');
  await page.waitForTimeout(5000);  // MLflow opens the Assistant on a first load within a second or two
  const open = await page.evaluate(() => window.localStorage.getItem('mlflow.assistant.panelOpen_v1'));
  if (open === 'true') throw new Error('the Assistant panel opened by itself');
  await page.locator('[data-assistant-ui=true]').first().waitFor({ timeout: 30000 });  // its button, shown while closed
  await page.screenshot({ path: a.shots.table });
  console.log('OK ' + a.children.length + ' trial runs listed with columns ' + a.columns.join(', ') + '; Assistant closed');
  // a click on a trial, as a user does: its page, still in the model-training view
  await page.locator('a[href$="/runs/' + a.childId + '"]').first().click();
  for (let i = 0; i < 60 && !page.url().includes('/runs/' + a.childId); i++) await page.waitForTimeout(500);
  if (!page.url().includes('/runs/' + a.childId)) throw new Error('the click did not open the trial: ' + page.url());
  await page.getByText('Model metrics', { exact: true }).first().waitFor({ timeout: 120000 });
  await page.waitForTimeout(2000);
  await training(page, 'trial page');
  await page.screenshot({ path: a.shots.run });
  console.log('OK trial page in the model-training view');
  // the compare page (the runs table's Compare button): model-training view too
  await page.goto(a.compareUrl, { waitUntil: 'load', timeout: 180000 });
  await page.getByText('Parallel Coordinates Plot', { exact: false }).first().waitFor({ timeout: 120000 });
  await page.waitForTimeout(2000);
  await training(page, 'compare page');
  await page.screenshot({ path: a.shots.compare });
  console.log('OK compare page in the model-training view');
  // the charts URL: the swept parameters against the metric first
  await page.goto(a.chartUrl, { waitUntil: 'load', timeout: 180000 });
  await page.getByText('Parallel Coordinates', { exact: true }).first().waitFor({ timeout: 180000 });
  await page.getByText(a.contour, { exact: true }).first().waitFor({ timeout: 60000 });
  await page.waitForTimeout(3000);
  const axes = (await page.locator('svg text').allTextContents()).join('|');
  for (const c of a.columns) if (!axes.includes(c)) throw new Error('no axis ' + c + ' in the charts: ' + axes.slice(0, 300));
  await training(page, 'charts');
  await page.screenshot({ path: a.shots.charts });
  console.log('OK charts: parallel coordinates of ' + a.columns.join(', ') + '; contour ' + a.contour);
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
        url, printed = _printed_url(ui)  # printed once the UI answers
        assert url.startswith(f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs?") and \
            "viewStateShareKey=" in url, url
        chart_url = next(line.split(": ", 1)[1] for line in printed if "compareRunsMode=CHART" in line)
        assert chart_url == url.replace("compareRunsMode=TABLE", "compareRunsMode=CHART"), printed
        script = tmp_path / "ui_check.js"
        script.write_text(SCRIPT % {"chromium": CHROMIUM, "flags": json.dumps(FLAGS), "genai": GENAI})
        shots = Path(os.environ.get("RIRLAB_SCREENSHOT_DIR", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        names = {"table": "mlflow_ui_sweep.png", "run": "mlflow_ui_trial_run.png", "compare": "mlflow_ui_compare.png",
                 "charts": "mlflow_ui_charts.png"}
        child = next(r for r in runs if r.info.run_name == children[0])
        ids = [r.info.run_id for r in runs if r.info.run_name in children]
        compare_url = (f"http://127.0.0.1:{port}/#/compare-runs?runs={json.dumps(ids, separators=(',', ':'))}"
                       f"&experiments={json.dumps([exp.experiment_id])}")  # where the Compare button goes
        columns = ["chunk_size", "beam_size", "dev/accuracy"]  # the swept parameters and the metric
        args = {"url": url, "children": children, "columns": columns, "childId": child.info.run_id,
                "compareUrl": compare_url, "chartUrl": chart_url, "contour": "chunk_size vs. beam_size vs. dev/accuracy",
                "shots": {k: str(shots / v) for k, v in names.items()}}
        res = subprocess.run([node, str(script), json.dumps(args)], env={**os.environ, "NODE_PATH": modules},
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "OK 4 trial runs listed with columns chunk_size, beam_size, dev/accuracy; Assistant closed" in res.stdout
        assert "OK trial page in the model-training view" in res.stdout
        assert "OK compare page in the model-training view" in res.stdout
        assert "OK charts: parallel coordinates of chunk_size, beam_size, dev/accuracy" in res.stdout
        for png in names.values():
            png = shots / png
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
        print(f"screenshots: {', '.join(str(shots / v) for v in names.values())}")
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # the UI's own process group (mlflow + uvicorn workers)
        try:
            ui.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)


def _printed_url(proc, timeout: float = 420) -> tuple[str, list]:
    """The URL `rirlab ui` prints (on the line after "MLflow UI for ...") once the UI answers, and the lines it prints
    up to its charts URL (its own start-up limit is 180 s after MLflow is imported; on 2 busy cores both take
    minutes)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    fd = proc.stdout.fileno()  # read the pipe itself: a text stream's readline buffers lines select() then misses
    t0, url, lines, pending = time.time(), None, [], b""
    while time.time() - t0 < timeout:
        if not sel.select(timeout=5):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"rirlab ui exited with {proc.wait()} after printing {lines}")
        *done, pending = (pending + chunk).split(b"\n")
        for line in (d.decode(errors="replace").strip() for d in done):
            lines.append(line)
            if url is None and line.startswith("http://"):
                url = line
            if url is not None and "compareRunsMode=CHART" in line:
                return url, lines
    raise AssertionError(f"rirlab ui printed no URL and charts URL within {timeout}s: {lines}")
