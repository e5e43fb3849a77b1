"""cluster/slurm/rirlab-sweep.sbatch under a real Slurm: the test starts a single-host Slurm of its own (slurmctld +
slurmd from Debian's slurm-wlm, one node = this host with one CPU, `auth/none`, pinned to core 1), submits the script
with a tiny spec and reads the sweep back from the MLflow sqlite store; a TERM like the one Slurm sends ahead of the
time limit makes the job requeue itself and the requeued run finish the sweep with --resume. Minutes: opt-in with
`pytest -m slurm tests/sweeps/test_slurm.py`. The network-filesystem refusal needs no Slurm and runs by default."""

from __future__ import annotations

import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.helpers.cli import REPO, TINY_SPEC

SBATCH = REPO / "cluster" / "slurm" / "rirlab-sweep.sbatch"
TINY = yaml.safe_load(TINY_SPEC.read_text())
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slurm:
    """A single-host Slurm in a temp dir: this host is the only node, with one CPU; its daemons run in the
    foreground (children of the test, so they are stopped by pid) on core 1, as the current user."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="rirlab-slurm-", dir="/tmp"))
        (self.dir / "state").mkdir()
        (self.dir / "spool").mkdir()
        host = socket.gethostname().split(".")[0]
        user = pwd.getpwuid(os.getuid()).pw_name
        d = self.dir  # FirstJobId: the script's Ray ports follow the job id, so two of these Slurms do not collide
        self.conf = d / "slurm.conf"
        self.conf.write_text(f"""\
ClusterName=rirlabtest
SlurmctldHost={host}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/none
CredType=cred/none
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobRequeue=1
FirstJobId={random.randrange(2, 900)}
MinJobAge=3600
SlurmdParameters=config_overrides
NodeName={host} CPUs=1 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.daemons: list[subprocess.Popen] = []

    def start(self):
        for daemon in ("slurmctld", "slurmd"):
            log = open(self.dir / f"{daemon}.out", "w")
            self.daemons.append(subprocess.Popen(["taskset", "-c", "1", daemon, "-D", "-f", str(self.conf)],
                                                 env=self.env, stdout=log, stderr=subprocess.STDOUT))
        end = time.time() + 120
        while time.time() < end:
            for p in self.daemons:
                assert p.poll() is None, f"{p.args[3]} exited {p.returncode}: {self.logs()}"
            if self.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() == "idle":
                return
            time.sleep(0.5)
        raise AssertionError(f"the Slurm node never became idle: {self.logs()}")

    def stop(self):
        # the jobs end before the daemons do: a slurmstepd outlives a stopped slurmd, and with it the job's Ray
        self.run("scancel", "--user", pwd.getpwuid(os.getuid()).pw_name, check=False)
        end = time.time() + 120
        while time.time() < end and self.run("squeue", "-h", check=False).stdout.strip():
            time.sleep(1)
        for p in reversed(self.daemons):  # slurmd first: it ends its job steps
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.dir.glob("*.log")) + sorted(
            self.dir.glob("*.out")) if p.exists())

    def run(self, *args, check=True, **kwargs) -> subprocess.CompletedProcess:
        proc = subprocess.run(args, env=kwargs.pop("env", self.env), capture_output=True, text=True, timeout=60,
                              **kwargs)
        assert not check or proc.returncode == 0, f"{args} exited {proc.returncode}: {proc.stderr}"
        return proc

    def job(self, job_id: str) -> dict[str, str]:
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(f.split("=", 1) for f in out.split() if "=" in f)

    def wait(self, job_id: str, until, timeout: float, what: str) -> dict[str, str]:
        end = time.time() + timeout
        while time.time() < end:
            job = self.job(job_id)
            if until(job):
                return job
            time.sleep(1)
        raise AssertionError(f"timed out waiting for {what}: {self.job(job_id)}\n{self.logs()}")


@pytest.fixture(scope="module")
def slurm():
    if shutil.which("slurmctld") is None or shutil.which("slurmd") is None:
        pytest.skip("slurmctld/slurmd not installed (Debian: apt-get install slurm-wlm)")
    cluster = Slurm()
    cluster.start()
    yield cluster
    cluster.stop()


def _submit(slurm, tmp_path, spec: dict) -> tuple[str, Path, MlflowClient]:
    """sbatch the script as a user would, sized for the one-CPU node; the store is sqlite on local disk."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "home").mkdir()
    db = tmp_path / "mlruns.db"
    env = {**slurm.env, "RIRLAB_REPO": str(REPO), "RIRLAB_VENV": sys.prefix, "RIRLAB_SHARED": str(tmp_path / "runs"),
           "RIRLAB_CACHE": str(tmp_path / "cache"), "MLFLOW_TRACKING_URI": f"sqlite:///{db}",
           "HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    job_id = slurm.run("sbatch", "--parsable", "--nodes=1", "--cpus-per-task=1", "--time=30",
                       f"--output={tmp_path}/job-%j.log", str(SBATCH), str(path), "--no-checkpoint-artifacts",
                       env=env, cwd=tmp_path).stdout.strip()
    return job_id, tmp_path / f"job-{job_id}.log", MlflowClient(f"sqlite:///{db}")


def _runs(client, name):
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id]) if exp else []
    return ([r for r in runs if "mlflow.parentRunId" not in r.data.tags],
            [r for r in runs if "mlflow.parentRunId" in r.data.tags])


def _log(path: Path) -> str:
    return path.read_text() if path.exists() else "(no job log)"


@pytest.mark.slurm
def test_the_sbatch_script_runs_a_sweep_to_the_end(slurm, tmp_path):
    spec = {**TINY, "name": "slurm_sweep", "seeds": 1, "search": {"lr": {"grid": [0.003]}},
            "fixed": {**TINY["fixed"], "steps": 10, "eval_every": 10, "log_every": 5}, "checkpoint_every": 5}
    job_id, log, client = _submit(slurm, tmp_path, spec)
    job = slurm.wait(job_id, lambda j: j["JobState"] in ENDED, 1800, "the job to end")
    assert job["JobState"] == "COMPLETED", f"{job}\n{_log(log)}\n{slurm.logs()}"
    assert "1 of 1 nodes" in _log(log)  # the Ray cluster came up with the node Slurm gave
    parents, children = _runs(client, "slurm_sweep")
    assert [p.info.status for p in parents] == ["FINISHED"], _log(log)
    assert len(children) == 1 and children[0].info.status == "FINISHED", _log(log)
    assert children[0].data.params["lr"] == "0.003"
    assert not list((tmp_path / "runs").glob(".ray_token_*"))  # the job's Ray token does not outlive it


@pytest.mark.slurm
def test_term_ahead_of_the_time_limit_requeues_the_job_and_the_requeued_run_resumes_the_sweep(slurm, tmp_path):
    """`--signal=B:TERM@120` sends TERM to the batch shell two minutes before the time limit (preemption sends one
    too); `scancel --batch --signal=TERM` is that signal, now."""
    spec = {**TINY, "name": "slurm_requeue", "seeds": 1, "search": {},
            "fixed": {**TINY["fixed"], "steps": 200, "eval_every": 100, "log_every": 5}, "checkpoint_every": 10}
    job_id, log, client = _submit(slurm, tmp_path, spec)

    def reporting(job):
        assert job["JobState"] in {"PENDING", "RUNNING"}, f"{job}\n{_log(log)}"
        return (tmp_path / "mlruns.db").exists() and any(c.data.metrics for c in _runs(client, "slurm_requeue")[1])

    slurm.wait(job_id, reporting, 900, "a trial reporting")
    (parent,) = _runs(client, "slurm_requeue")[0]
    slurm.run("scancel", "--batch", "--signal=TERM", job_id)
    requeued = slurm.wait(job_id, lambda j: j.get("Restarts") == "1" and j["JobState"] in {"PENDING", "RUNNING"},
                          300, "the job to requeue itself")
    assert requeued["Requeue"] == "1"
    slurm.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")  # Slurm holds a requeued job back ~2 min
    job = slurm.wait(job_id, lambda j: j["JobState"] in ENDED, 1800, "the requeued job to end")
    text = _log(log)
    assert job["JobState"] == "COMPLETED", f"{job}\n{text}\n{slurm.logs()}"
    assert "TERM from Slurm" in text and "requeued (restart 1): continuing the sweep with --resume" in text, text
    parents, children = _runs(client, "slurm_requeue")
    assert [(p.info.run_id, p.info.status) for p in parents] == [(parent.info.run_id, "FINISHED")], text
    assert len(children) == 1 and children[0].info.status == "FINISHED", text  # the same trial, continued


@pytest.mark.slurm
def test_term_while_ray_starts_requeues_the_job_and_the_requeued_run_starts_the_sweep(slurm, tmp_path):
    """A TERM before the driver runs (Ray still starting) used to end the job unrequeued, by bash's default: the
    early trap requeues it, and the requeued run starts the sweep (no --resume: there was nothing to resume)."""
    spec = {**TINY, "name": "slurm_early_term", "seeds": 1, "search": {},
            "fixed": {**TINY["fixed"], "steps": 10, "eval_every": 10, "log_every": 5}}
    job_id, log, client = _submit(slurm, tmp_path, spec)
    slurm.wait(job_id, lambda j: j["JobState"] == "RUNNING", 300, "the job to start")
    slurm.run("scancel", "--batch", "--signal=TERM", job_id)  # Ray takes seconds to come up: the driver has not run
    slurm.wait(job_id, lambda j: j.get("Restarts") == "1" and j["JobState"] in {"PENDING", "RUNNING"}, 300,
               f"the job to requeue itself\n{_log(log)}")
    slurm.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")  # Slurm holds a requeued job back ~2 min
    job = slurm.wait(job_id, lambda j: j["JobState"] in ENDED, 1800, "the requeued job to end")
    text = _log(log)
    assert job["JobState"] == "COMPLETED", f"{job}\n{text}\n{slurm.logs()}"
    assert "TERM from Slurm before the sweep started" in text, text
    assert "requeued (restart 1) before its sweep had started: starting it" in text, text
    parents, children = _runs(client, "slurm_early_term")
    assert [p.info.status for p in parents] == ["FINISHED"], text  # one sweep, started once
    assert len(children) == 1 and children[0].info.status == "FINISHED", text


def test_sqlite_on_a_network_filesystem_is_refused_with_one_line(tmp_path):
    """SQLite's locking is unreliable on NFS/Lustre/...; rirlab's default store (sqlite:///mlruns.db in the submit
    directory) lands there on most clusters. The filesystem of tmp_path stands in for NFS (RIRLAB_NETWORK_FS)."""
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout.strip()
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(SLURM_SUBMIT_DIR=str(REPO), SLURM_JOB_ID="7", SLURM_JOB_NODELIST="n1", RIRLAB_VENV=sys.prefix,
               RIRLAB_SHARED=str(tmp_path / "runs"), RIRLAB_NETWORK_FS=f"nfs {fs}", HOME=str(tmp_path / "home"))
    for args, uri in (([], "sqlite:///mlruns.db"), (["--tracking-uri", f"sqlite:///{tmp_path}/x.db"],
                                                     f"sqlite:///{tmp_path}/x.db")):
        proc = subprocess.run(["bash", str(SBATCH), "spec.yaml", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert f"{uri} is sqlite on a {fs} filesystem" in line and "MLFLOW_TRACKING_URI" in line, line
        assert not (tmp_path / "runs").exists()  # refused before anything was started or created
    # a local filesystem passes the check; the script then asks Slurm for the nodes: a stand-in scontrol stops it there
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/sh\nexit 3\n")
    (fake / "scontrol").chmod(0o755)
    env.update(RIRLAB_NETWORK_FS="nfs", PATH=f"{fake}:{env['PATH']}")
    proc = subprocess.run(["bash", str(SBATCH), "spec.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3 and "is sqlite on a" not in proc.stderr and (tmp_path / "runs").is_dir(), proc.stderr


ARRAY = REPO / "cluster" / "slurm" / "rirlab-array.sbatch"


@pytest.mark.slurm
def test_the_array_script_runs_one_task_per_trial_into_one_sweep(slurm, tmp_path):
    """cluster/slurm/rirlab-array.sbatch, `--array=0-(N-1)` with N from `rirlab sweep SPEC --count`: each task runs
    its trial in a Ray of its own, and `rirlab tables SPEC` reads the array's tasks as one sweep (issue 54 item 10)."""
    from tests.helpers.cli import run_cli

    spec = {**TINY, "name": "slurm_array", "seeds": 1,  # a grid of two trials: lr 0.003 and 0.001
            "fixed": {**TINY["fixed"], "steps": 10, "eval_every": 10, "log_every": 5}, "checkpoint_every": 5}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    n = int(run_cli(["sweep", path, "--count"], cwd=tmp_path, check=True).stdout)
    assert n == 2
    (tmp_path / "home").mkdir()
    db = tmp_path / "mlruns.db"
    env = {**slurm.env, "RIRLAB_REPO": str(REPO), "RIRLAB_VENV": sys.prefix, "RIRLAB_SHARED": str(tmp_path / "runs"),
           "RIRLAB_CACHE": str(tmp_path / "cache"), "MLFLOW_TRACKING_URI": f"sqlite:///{db}",
           "HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    array = slurm.run("sbatch", "--parsable", f"--array=0-{n - 1}", "--cpus-per-task=1", "--time=30",
                      f"--output={tmp_path}/job-%A_%a.log", str(ARRAY), str(path), "--no-checkpoint-artifacts",
                      env=env, cwd=tmp_path).stdout.strip()
    logs = lambda: "\n".join(_log(tmp_path / f"job-{array}_{i}.log") for i in range(n))  # noqa: E731
    for i in range(n):
        job = slurm.wait(f"{array}_{i}", lambda j: j["JobState"] in ENDED, 1800, f"array task {i} to end")
        assert job["JobState"] == "COMPLETED", f"{job}\n{logs()}\n{slurm.logs()}"
    client = MlflowClient(f"sqlite:///{db}")
    parents, children = _runs(client, "slurm_array")
    assert sorted((p.data.tags["rirlab.trial_index"], p.data.tags["rirlab.sweep_group"], p.info.status)
                  for p in parents) == [("0", array, "FINISHED"), ("1", array, "FINISHED")], logs()
    assert sorted(c.data.params["lr"] for c in children) == ["0.001", "0.003"], logs()
    assert "1 CPUs, 0 GPUs for trial 0" in logs()  # the task's Ray, sized by Slurm
    tables = run_cli(["tables", path, "--tracking-uri", f"sqlite:///{db}"], cwd=tmp_path, check=True)
    assert f"sweep group {array} (2 of 2 one-trial jobs" in tables.stdout, tables.stdout
    assert "2 finished runs; 0 failed" in tables.stdout, tables.stdout
    assert not list((tmp_path / "runs").glob(".ray_token_*"))
