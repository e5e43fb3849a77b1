"""Credentials never reach Ray's logs: a real local Ray started the way a sweep starts it, with MLflow and AWS
credentials in the driver's environment and a password in the tracking URI, running a Ray Tune trial (Tune copies
AWS keys into trainables' runtime_env unless told not to); every file Ray wrote is searched for them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SECRET = "pw-5c4b3a2918f7e6d5"
TOKEN = "tok-0a1b2c3d4e5f6071"

SCRIPT = """
import sys
from pathlib import Path
import ray
from rirlab.sweeps.driver.cluster import ray_init as _ray_init
_ray_init(None, Path(sys.argv[1]), sys.argv[2])
@ray.remote(num_cpus=0)
def probe():
    import os
    return os.environ.get("MLFLOW_TRACKING_PASSWORD"), os.environ.get("MLFLOW_TRACKING_TOKEN")
print(repr(ray.get(probe.remote())))
from ray import tune
from rirlab.sweeps.tune.tuner import keep_secrets_out_of_tune
keep_secrets_out_of_tune()  # as the sweep's driver does before its Tuner
grid = tune.Tuner(lambda config: tune.report({"ok": 1.0}),
                  run_config=tune.RunConfig(storage_path=sys.argv[1] + "/tune", verbose=0)).fit()
print("trial ok:", grid[0].metrics["ok"])
print(ray._private.worker._global_node.get_session_dir_path())
ray.shutdown()
"""


@pytest.mark.e2e
def test_mlflow_credentials_stay_out_of_ray_runtime_env_and_logs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_USERNAME": "alice",
           "MLFLOW_TRACKING_PASSWORD": SECRET, "MLFLOW_TRACKING_TOKEN": TOKEN, "AWS_SECRET_ACCESS_KEY": SECRET}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "log"), f"http://alice:{SECRET}@127.0.0.1:1"],
                          env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trial ok: 1.0" in proc.stdout, proc.stdout[-2000:]
    session = proc.stdout.strip().splitlines()[-1]  # (a local Ray's workers inherit the driver's environment)
    leaks = []
    for path in Path(session).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            if SECRET.encode() in data or TOKEN.encode() in data:
                leaks.append(str(path.relative_to(session)))
    assert list(Path(session).rglob("runtime_env_agent.log")), "Ray wrote no runtime_env_agent.log"
    assert leaks == []


@pytest.mark.e2e
def test_runs_ended_on_a_tracking_server_print_no_url_with_the_password(tmp_path):
    """MLflow prints "View run ... at: http://user:PASSWORD@host/..." for every run ended on a tracking server."""
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                               f"sqlite:///{tmp_path / 'mlruns.db'}", "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        script = ("from rirlab.sweeps.record.tracker import Tracker\n"
                  f"t = Tracker('http://alice:{SECRET}@127.0.0.1:{port}')\n"
                  "e = t.experiment_id('s')\n"
                  "p = t.start_parent(e, 's now', {})\n"
                  "t.finish(t.start_child(e, p, 'lr=0.1', {'lr': 0.1}, {}))\n"
                  "t.finish(p)\nprint('ended')\n")
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"}
        proc = subprocess.run([sys.executable, "-c", script], env={**env, "PYTHONPATH": str(REPO)}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert proc.returncode == 0 and "ended" in proc.stdout, proc.stderr[-2000:]
    assert SECRET not in proc.stdout + proc.stderr and "View run" not in proc.stdout, proc.stdout
