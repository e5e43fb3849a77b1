"""Multi-node Ray on loopback: a head and worker nodes as separate `ray start` processes, a worker node killed
mid-sweep, and a PostgreSQL-backed MLflow server with basic auth, all started by the cluster/local/*.sh scripts
of the cluster README's local walkthrough. Slow (minutes): run with `pytest -m cluster tests/sweeps/test_cluster*.py`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from rirlab.contract import TRIAL_KEY
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import REPO, RIRLAB, run_cli, sqlite_uri

pytestmark = pytest.mark.cluster

LOCAL = REPO / "cluster" / "local"
QUICK_SPEC = REPO / "search_spaces" / "chunk_beam.yaml"
KILL_SPEC = REPO / "tests" / "specs" / "cluster_kill.yaml"
SECRET = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"  # a secret-looking value that must never reach MLflow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """One $RIRLAB_CLUSTER_DIR driven by the walkthrough's scripts, on free loopback ports."""

    def __init__(self, workers: int = 2):
        # postgres (as user `postgres`) must traverse it: mkdtemp's 0700 would lock it out
        self.dir = Path(tempfile.mkdtemp(prefix="rirlab-cluster-", dir="/tmp"))
        self.dir.chmod(0o755)
        self.port = free_port()
        self.env = {"RIRLAB_CLUSTER_DIR": str(self.dir), "RAY_HEAD_PORT": str(self.port),
                    "RAY_DASHBOARD_PORT": str(free_port()), "RAY_WORKERS": str(workers),
                    "PG_PORT": str(free_port()), "MLFLOW_PORT": str(free_port()), "VENV_BIN": str(Path(sys.executable).parent)}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def client_env(self) -> dict[str, str]:
        """What a client (the `rirlab sweep` driver) needs: the cluster's token (Ray token authentication)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.dir / "secrets" / "ray_auth_token")}

    def sh(self, script: str, timeout: int = 300) -> str:
        proc = subprocess.run(["bash", str(LOCAL / script)], env={**os.environ, **self.env}, capture_output=True,
                              text=True, timeout=timeout)
        assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    def raylets(self) -> dict[int, str]:
        """pid -> node temp dir name (head, worker1, ...) of this cluster's raylets."""
        out = {}
        for p in psutil.process_iter(["pid", "name", "cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if p.info["name"] == "raylet" and f"{self.dir}/ray/" in cmd:
                out[p.info["pid"]] = cmd.split(f"{self.dir}/ray/", 1)[1].split("/", 1)[0]
        return out

    def leftovers(self) -> list[int]:
        return [p.pid for p in psutil.process_iter(["cmdline"]) if f"{self.dir}/" in " ".join(p.info["cmdline"] or [])]

    def destroy(self) -> None:
        for script in ("mlflow-down.sh", "ray-down.sh"):
            subprocess.run(["bash", str(LOCAL / script)], env={**os.environ, **self.env}, capture_output=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_cluster():
    cluster = LocalCluster(workers=2)
    try:
        cluster.sh("ray-up.sh")
        yield cluster
    finally:
        cluster.destroy()
    assert not cluster.leftovers(), "ray-down.sh left processes of the cluster running"


def _postgres_available() -> bool:
    return any(Path("/usr/lib/postgresql").glob("*/bin/initdb"))


@pytest.fixture(scope="module")
def postgres_installed():
    """Debian's postgresql package; installed with apt when missing and we are root, else the test is skipped."""
    if not _postgres_available() and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql",
                       shell=True, capture_output=True, timeout=900)
    if not _postgres_available():
        pytest.skip("PostgreSQL is not installed and could not be installed here: apt-get install -y postgresql")


@pytest.fixture(scope="module")
def mlflow_server(ray_cluster, postgres_installed):
    """PostgreSQL + MLflow (basic auth) of the same cluster dir; yields the client settings of mlflow.env."""
    try:
        ray_cluster.sh("mlflow-up.sh", timeout=400)
        env = {}
        for line in (ray_cluster.dir / "mlflow.env").read_text().splitlines():
            key, value = line.removeprefix("export ").split("=", 1)
            env[key] = value
        yield env
    finally:
        subprocess.run(["bash", str(LOCAL / "mlflow-down.sh")], env={**os.environ, **ray_cluster.env},
                       capture_output=True, timeout=120)


def _children(client: MlflowClient, name: str):
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("rirlab.sweep") == "parent"]
    assert len(parents) == 1
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents[0], kids


def test_runtime_env_ships_code_plugins_and_mlflow_settings(ray_cluster, tmp_path):
    """_ray_init on a remote address: workers import rirlab, sweeps and $RIRLAB_PLUGINS packages from the
    runtime_env (not from the driver's checkout), and see the MLflow URI and credentials."""
    (tmp_path / "myplugin").mkdir()
    (tmp_path / "myplugin" / "__init__.py").write_text("MARK = 'plugin-from-driver'\n")
    script = f"""
import os, ray
from pathlib import Path
from rirlab.sweeps.driver.cluster import ray_init as _ray_init
_ray_init({ray_cluster.address!r}, Path({str(tmp_path / 'log')!r}), "http://127.0.0.1:1/tracking")
@ray.remote(num_cpus=1)
def probe():
    import rirlab, rirlab.sweeps.tune.trainable, myplugin
    return [rirlab.__file__, rirlab.sweeps.tune.trainable.__file__, myplugin.MARK, os.environ.get("MLFLOW_TRACKING_URI"),
            os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD"),
            os.environ.get("RIRLAB_PLUGINS"), "PYTHONPATH_LEAK" if {str(tmp_path)!r} in os.environ.get("PYTHONPATH", "") else ""]
print(repr(ray.get(probe.remote())))
"""
    env = {**os.environ, **ray_cluster.client_env, "PYTHONPATH": str(tmp_path), "RIRLAB_PLUGINS": "myplugin",
           "MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": SECRET}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rirlab_file, trainable_file, mark, uri, user, password, plugins, leak = eval(proc.stdout.strip().splitlines()[-1])
    for f in (rirlab_file, trainable_file):  # unpacked on a worker node, not the checkout
        assert f.startswith(f"{ray_cluster.dir}/ray/worker") and "/runtime_resources/py_modules_files/" in f, f
    assert (mark, uri, user, password, plugins, leak) == (  # credentials stay on the driver (Ray logs runtime_envs)
        "plugin-from-driver", "http://127.0.0.1:1/tracking", None, None, "myplugin", "")


def test_wrong_ray_token_is_one_line_exit_2(ray_cluster, tmp_path):
    env = {**ray_cluster.client_env, "RAY_AUTH_TOKEN": "0" * 64}  # RAY_AUTH_TOKEN wins over the token file
    proc = run_cli(["sweep", QUICK_SPEC, "--quick", "--address", ray_cluster.address, "--tracking-uri",
                    sqlite_uri(tmp_path / "mlruns.db")], cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot join the Ray cluster at {ray_cluster.address}") and "RAY_AUTH_TOKEN" in last


def test_quick_sweep_on_multi_node_cluster(ray_cluster, tmp_path):
    db = tmp_path / "mlruns.db"
    t0 = time.time()
    proc = run_cli(["sweep", QUICK_SPEC, "--quick", "--address", ray_cluster.address, "--tracking-uri", sqlite_uri(db),
                    "--set", "steps=50", "--output-dir", tmp_path / "runs"], cwd=tmp_path, env=ray_cluster.client_env,
                   check=True)
    print(f"\nquick sweep on head + 2 worker nodes: {time.time() - t0:.0f} s")
    assert "4 finished, 0 failed" in proc.stdout
    loaded = load_spec(QUICK_SPEC, quick=True, overrides={"steps": 50})
    parent, kids = _children(MlflowClient(sqlite_uri(db)), loaded.spec.name)
    assert parent.info.status == "FINISHED"
    assert json.loads(parent.data.tags["rirlab.cluster_resources"])["CPU"] == 2.0  # 0 on the head + 1 per worker
    assert sorted(r.info.run_name for r in kids) == sorted(t["name"] for t in expand(loaded.spec))
    assert all(r.info.status == "FINISHED" and "test/accuracy" in r.data.metrics for r in kids)
    # the trials ran on both worker nodes (the head has no CPU for them), each with the code it received
    # through the runtime_env (the head unpacks it too, for Ray Tune's zero-CPU helpers)
    nodes = {p.relative_to(ray_cluster.dir / "ray").parts[0]
             for p in (ray_cluster.dir / "ray").glob("*/session_*/runtime_resources/py_modules_files/*/rirlab/train.py")}
    assert {"worker1", "worker2"} <= nodes


def _results(trial_dir: Path) -> list[dict]:
    out = []
    path = trial_dir / "result.json"
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return out


def test_killed_worker_node_trials_resume_from_checkpoints(tmp_path):
    """SIGKILL the raylet of the worker node that runs a trial which has checkpointed: the sweep finishes, that
    trial is retried on the other node from its last checkpoint, one MLflow run per trial, none RUNNING."""
    cluster = LocalCluster(workers=2)
    try:
        t_start = time.time()
        cluster.sh("ray-up.sh")
        t_up = time.time()
        db, out = tmp_path / "mlruns.db", tmp_path / "runs"
        log = open(tmp_path / "sweep.log", "w")
        env = {**os.environ, **cluster.client_env, "PYTHONUNBUFFERED": "1"}
        env.pop("MLFLOW_TRACKING_URI", None)
        sweep = subprocess.Popen([*RIRLAB, "sweep", KILL_SPEC, "--address", cluster.address, "--tracking-uri",
                                  sqlite_uri(db), "--output-dir", out], cwd=tmp_path, env=env, stdout=log,
                                 stderr=subprocess.STDOUT)
        victim = None
        deadline = time.time() + 420
        while victim is None and time.time() < deadline and sweep.poll() is None:
            raylets = cluster.raylets()
            for trial_dir in sorted(out.glob("*/trial_*")):
                results = _results(trial_dir)
                if not results or results[-1].get("final") or not any(trial_dir.glob("checkpoint_*")):
                    continue
                try:
                    parent = psutil.Process(results[-1]["pid"]).parent()
                except psutil.NoSuchProcess:
                    continue
                if parent is not None and raylets.get(parent.pid, "").startswith("worker"):
                    victim = (trial_dir, parent, raylets[parent.pid], results[-1]["step"])
                    break
            time.sleep(0.2)
        assert victim is not None, "no running trial with a checkpoint was found on a worker node"
        trial_dir, raylet, node, step_at_kill = victim
        raylet.kill()  # SIGKILL: the node is lost, as when a machine dies
        t_kill = time.time()
        rc = sweep.wait(timeout=600)
        t_done = time.time()
        log.close()
        text = (tmp_path / "sweep.log").read_text()
        assert rc == 0, text[-4000:]
        assert "2 finished, 0 failed" in text

        client = MlflowClient(sqlite_uri(db))
        parent_run, kids = _children(client, "cluster_kill")
        assert parent_run.info.status == "FINISHED"
        names = [r.info.run_name for r in kids]
        assert sorted(names) == sorted(t["name"] for t in expand(load_spec(KILL_SPEC).spec))  # none lost, none twice
        assert all(r.info.status == "FINISHED" for r in kids)
        lost = next(r for r in kids if "trial_" + r.data.tags[TRIAL_KEY] == trial_dir.name)
        assert int(lost.data.tags["rirlab.retried"]) >= 1
        assert lost.data.metrics["test/accuracy"] >= 0
        steps = [m.step for m in client.get_metric_history(lost.info.run_id, "train/loss")]
        assert steps == sorted(set(steps)) and steps[-1] == 300  # each step once, through to the end

        # Ray Tune's own record: the retry started at the step after a checkpoint, not at step 0
        results = _results(trial_dir)
        restarts = [i for i, r in enumerate(results) if r.get("iterations_since_restore") == 1]
        assert len(restarts) >= 2 and results[0]["step"] == 10
        before = max(r["step"] for r in results[: restarts[1]])  # the trial ran on a little after the SIGKILL
        resumed_at = results[restarts[1]]["step"] - 10
        assert 20 <= resumed_at <= before and resumed_at % 20 == 0  # the last checkpoint before the loss, not step 0
        assert raylet.pid not in cluster.raylets()
        print(f"\nkilled {node}'s raylet when {trial_dir.name} had reported step {step_at_kill} (it got to step "
              f"{before}); retried from the step-{resumed_at} checkpoint. cluster up {t_up - t_start:.0f} s, "
              f"sweep {t_done - t_up:.0f} s ({t_done - t_kill:.0f} s after the kill), test {t_done - t_start:.0f} s")
    finally:
        cluster.destroy()
    assert not cluster.leftovers()


def test_postgres_mlflow_server_receives_the_sweep_and_no_secret(ray_cluster, mlflow_server, tmp_path, monkeypatch):
    env = {**ray_cluster.client_env, **mlflow_server, "RIRLAB_DEMO_API_TOKEN": SECRET}
    proc = run_cli(["sweep", QUICK_SPEC, "--quick", "--address", ray_cluster.address, "--set", "steps=30",
                    "--output-dir", tmp_path / "runs"], cwd=tmp_path, env=env, check=True)
    assert "4 finished, 0 failed" in proc.stdout
    uri = mlflow_server["MLFLOW_TRACKING_URI"]
    assert uri.startswith("http://127.0.0.1:")

    # basic auth is on: no credentials, no access
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{uri}/api/2.0/mlflow/experiments/search?max_results=1", timeout=30)
    assert err.value.code == 401

    for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.setenv(key, mlflow_server[key])
    client = MlflowClient(uri)
    parent, kids = _children(client, "chunk_beam")
    assert parent.info.status == "FINISHED" and len(kids) == 4
    assert all(r.info.status == "FINISHED" for r in kids)

    # the runs are rows of the PostgreSQL backend store; their checkpoints in the server's artifact root
    import psycopg2

    pw = (ray_cluster.dir / "secrets" / "pg_password").read_text().strip()
    with psycopg2.connect(host="127.0.0.1", port=int(ray_cluster.env["PG_PORT"]), user="postgres", password=pw,
                          dbname="mlflow") as conn, conn.cursor() as cur:
        cur.execute("SELECT run_uuid, status FROM runs")
        rows = dict(cur.fetchall())
    conn.close()
    assert {r.info.run_id: "FINISHED" for r in [parent, *kids]}.items() <= rows.items()
    for r in kids:
        assert any((ray_cluster.dir / "mlflow" / "artifacts").glob(f"*/{r.info.run_id}/artifacts/checkpoint/*"))

    # secrets in the driver's environment never reach params, tags or logged files
    secrets = [SECRET, mlflow_server["MLFLOW_TRACKING_PASSWORD"], pw]
    for r in [parent, *kids]:
        for value in [*r.data.params.values(), *r.data.tags.values()]:
            assert not any(s in value for s in secrets)
    for f in (ray_cluster.dir / "mlflow" / "artifacts").rglob("*"):
        if f.is_file() and f.suffix in (".yaml", ".json", ".txt"):
            assert not any(s in f.read_text(errors="replace") for s in secrets), f
