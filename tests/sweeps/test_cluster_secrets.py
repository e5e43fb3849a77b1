"""Fast checks (no Ray, no server) of what travels to remote Ray workers and what may be recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rirlab.redact import mask_url, redact_uri, strip_credentials
from rirlab.sweeps.record.store import validate_uri
from rirlab.sweeps.record.tracker import redact_env, worker_env

REPO = Path(__file__).resolve().parents[2]

SECRET = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def test_redact_env_drops_secret_looking_variables_and_uri_passwords():
    env = {"RIRLAB_DEMO_API_TOKEN": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET, "MLFLOW_TRACKING_PASSWORD": SECRET,
           "AWS_ACCESS_KEY_ID": "AKIA123", "my_db_credentials": SECRET, "PATH": "/usr/bin",
           "MLFLOW_TRACKING_URI": f"postgresql://mlflow:{SECRET}@10.0.0.5:5432/mlflow",
           "MLFLOW_TRACKING_USERNAME": "alice"}
    safe = redact_env(env)
    assert SECRET not in repr(safe)
    assert safe == {"PATH": "/usr/bin", "MLFLOW_TRACKING_URI": "postgresql://mlflow:***@10.0.0.5:5432/mlflow",
                    "MLFLOW_TRACKING_USERNAME": "alice"}


def test_redact_uri_keeps_uris_without_passwords():
    assert redact_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert redact_uri("https://alice@mlflow.internal/") == "https://alice@mlflow.internal/"
    assert redact_uri("s3://bucket/a:b@c") == "s3://bucket/a:b@c"
    assert redact_uri(f"https://alice:{SECRET}@mlflow.internal/x") == "https://alice:***@mlflow.internal/x"


def test_worker_env_forwards_tracking_settings_only(monkeypatch):
    for key, value in {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": SECRET,
                       "AWS_ACCESS_KEY_ID": "minio", "MLFLOW_S3_ENDPOINT_URL": "http://10.0.0.5:9000",
                       "RIRLAB_DEMO_API_TOKEN": SECRET, "MLFLOW_TRACKING_URI": "http://from-env:5000"}.items():
        monkeypatch.setenv(key, value)
    env = worker_env("http://10.0.0.5:5000")
    # no credential travels in Ray's runtime_env (Ray logs it in plain text; only the driver writes to MLflow)
    assert env == {"MLFLOW_S3_ENDPOINT_URL": "http://10.0.0.5:9000", "MLFLOW_TRACKING_URI": "http://10.0.0.5:5000"}
    assert SECRET not in repr(worker_env(f"http://alice:{SECRET}@10.0.0.5:5000"))
    assert worker_env(None)["MLFLOW_TRACKING_URI"] == "http://from-env:5000"  # no --tracking-uri: the env's


@pytest.mark.parametrize("password", ["Pw@At9x", "pa/ss:w0rd", "it's \"quoted\"", "with spaces in it", "p%40ss/x@y"])
def test_a_password_is_masked_whatever_it_holds(password):
    """A URL is parsed (user info up to its last @), not matched by a pattern that stopped at / @ quotes or spaces."""
    for scheme in ("http", "postgresql+psycopg2"):
        url = f"{scheme}://admin:{password}@db.internal:5432/mlflow"
        assert mask_url(url) == f"{scheme}://admin:***@db.internal:5432/mlflow"
        assert str(validate_uri(url)) == f"{scheme}://admin:***@db.internal:5432/mlflow"
        assert strip_credentials(url) == f"{scheme}://db.internal:5432/mlflow"
        # inside a message a URL ends at a space or a quote: the password a whole URL showed is masked anyway
        line = redact_uri(f"error: cannot parse {url}: bad password {password}")
        assert password not in line and f"{scheme}://admin:***@db.internal" in line, line


def test_worker_env_holds_no_user_info_whatever_the_password():
    env = worker_env("http://alice:pa/ss@w0rd@10.0.0.5:5000")
    assert env["MLFLOW_TRACKING_URI"] == "http://10.0.0.5:5000"


def test_redaction_takes_linear_time():
    """A 10 MB description spun for minutes in the old pattern (quadratic: 20k characters 0.8 s, 40k 3.6 s); these
    texts of 1 MB each would take hours so, and take well under a second now."""
    code = ("from rirlab.redact import redact_uri, redact_path\n"
            "n = 1_000_000\n"
            "for text in ('a' * n, 'a:' * (n // 2), '://' * (n // 3), 'x://' + '@' * n, 'http://u:p@' * (n // 11)):\n"
            "    redact_uri(text)\n"
            "    redact_path(text)\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)
