"""Fast checks (no Ray, no server) of what travels to remote Ray workers and what may be recorded."""

from __future__ import annotations

from rirlab.redact import redact_uri
from sweeps.record.tracker import redact_env, worker_env

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
