"""Credentials never reach Ray's logs: a real local Ray started the way a sweep starts it, with MLflow credentials
in the driver's environment and a password in the tracking URI; every file Ray wrote is searched for them."""

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
from sweeps.runner import _ray_init
_ray_init(None, Path(sys.argv[1]), sys.argv[2])
@ray.remote(num_cpus=0)
def probe():
    import os
    return os.environ.get("MLFLOW_TRACKING_PASSWORD"), os.environ.get("MLFLOW_TRACKING_TOKEN")
print(repr(ray.get(probe.remote())))
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
    session = proc.stdout.strip().splitlines()[-1]  # (a local Ray's workers inherit the driver's environment)
    leaks = []
    for path in Path(session).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            if SECRET.encode() in data or TOKEN.encode() in data:
                leaks.append(str(path.relative_to(session)))
    assert list(Path(session).rglob("runtime_env_agent.log")), "Ray wrote no runtime_env_agent.log"
    assert leaks == []
