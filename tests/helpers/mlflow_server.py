"""A real local `mlflow server` for tests that read or write a store over HTTP (tests/e2e/test_tracking_server_dies.py,
tests/analysis/test_analysis_server.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: Path, port: int, db: Optional[Path] = None):
    """`mlflow server` on the SQLite store ``db`` (default ``workdir/server.db``), in its own process group (its
    workers die with it); returned once it answers."""
    db = db or workdir / "server.db"
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
                               "--default-artifact-root", str(workdir / "server-artifacts"), "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1"], cwd=workdir, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                              start_new_session=True)
    for _ in range(480):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return server
        except OSError:
            if server.poll() is not None:
                raise AssertionError(f"mlflow server exited ({server.returncode})")
            time.sleep(0.5)
    kill(server)
    raise AssertionError("mlflow server did not start")


def kill(server) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=60)
