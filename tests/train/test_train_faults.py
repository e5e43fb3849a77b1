"""`rirlab train` keeps the promises `rirlab sweep` makes (issue 53): Ctrl-C or SIGTERM ends its run KILLED with one
line (exit 130 / 143; it said click's "Aborted!" or died at once, the run left RUNNING), and a model far too big for
this machine, or for the container's memory limit (its cgroup's, not the host's RAM), is refused before training."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.helpers.cli import RIRLAB, invoke, sqlite_uri


@pytest.mark.parametrize("sig,code,word", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")],
                         ids=["ctrl_c", "sigterm"])
def test_a_signal_ends_the_train_run_killed_in_one_line(workdir, new_store, sig, code, word):
    store = workdir / "store.db"
    new_store(store)
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([*RIRLAB, "train", "--model", "rir_grc", "--task", "listops", "--quick", "--set",
                             "steps=100000", "--set", "log_every=1", "--tracking-uri", sqlite_uri(store)],
                            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        for line in proc.stdout:  # the run exists and trains
            if "step=" in line:
                break
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, out[-2000:] + err
    assert err.strip().count("\n") == 0 and err.startswith(f"interrupted by {word}; run "), err
    import mlflow

    client = mlflow.MlflowClient(sqlite_uri(store))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.status for r in runs] == ["KILLED"]


def test_a_model_too_big_for_the_containers_memory_is_refused_by_train_and_sweep(workdir, cli, monkeypatch):
    """In a 3 GB cgroup on a bigger host the check read the host's RAM: a model too big for the container passed
    and the trials died ("actor is dead", no word of memory); `rirlab train` had no check (killed, exit 137). Here
    a 1 GB container and a model that needs more (a 128 GB host would take it)."""
    import rirlab.limits as limits
    from tests.helpers.cli import TINY_SPEC

    monkeypatch.delenv("RIRLAB_MEMORY_GB", raising=False)
    monkeypatch.setattr(limits, "cgroup_memory_bytes", lambda: 2**30)
    big = ["--set", "hidden_size=2048", "--set", "batch_size=512"]
    result = invoke("train", "--model", "rir_grc", "--task", "listops", "--quick", *big,
                    "--tracking-uri", sqlite_uri(workdir / "m.db"))
    assert result.exit_code == 2, (result.output, result.exception)
    assert "more than this container's memory limit (its cgroup's) (1.0 GB)" in result.stderr, result.stderr
    assert not (workdir / "m.db").exists()  # nothing recorded
    result = cli("sweep", TINY_SPEC, "--dry-run", *big)
    assert result.exit_code == 2 and "this container's memory limit (its cgroup's) (1.0 GB)" in result.stderr


def test_the_cgroup_memory_limit_is_the_tightest_of_the_cgroup_and_its_parents(tmp_path):
    from rirlab.limits import cgroup_memory_bytes

    proc = tmp_path / "cgroup"
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "memory.max").write_text("3221225472\n")
    (tmp_path / "a" / "b" / "memory.max").write_text("max\n")
    proc.write_text("0::/a/b\n")
    assert cgroup_memory_bytes(proc, tmp_path) == 3 * 2**30  # v2: the parent's limit holds its children
    (tmp_path / "memory" / "job").mkdir(parents=True)
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "memory" / "job" / "memory.limit_in_bytes").write_text("2147483648\n")
    proc.write_text("4:memory:/job\n0::/\n")
    assert cgroup_memory_bytes(proc, tmp_path) == 2 * 2**30  # v1
    proc.write_text("0::/\n")
    assert cgroup_memory_bytes(proc, tmp_path) is None  # no limit file: no limit
