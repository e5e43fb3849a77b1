"""Fast checks of the cluster/ deployment files: Ray's own schema for the `ray up` configs, and the properties
cluster/README.md promises (token auth, CPU-less heads, shared storage, private binding, no secrets in files)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.helpers.cli import REPO

CLUSTER = REPO / "cluster"


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_ray_up_configs_pass_rays_schema(cloud):
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((CLUSTER / cloud / "ray-cluster.yaml").read_text())
    validate_config(prepare_config(raw))  # raises on a key Ray does not know or a wrong type
    head = raw["available_node_types"][raw["head_node_type"]]
    assert head["resources"] == {"CPU": 0}  # the head runs the driver, never a trial
    assert raw["provider"]["use_internal_ips"] is True
    assert any(k.endswith(".ray/auth_token") for k in raw["file_mounts"])  # one token on every node
    setup = "\n".join(raw["setup_commands"])
    assert "MLFLOW_TRACKING_URI" in setup and "/mnt/shared" in setup and "[cluster]" in setup
    for cmd in raw["head_start_ray_commands"] + raw["worker_start_ray_commands"]:
        assert "rirlab.env" in cmd or cmd.startswith("ray stop")
    bad = dict(raw, available_node_typez=raw["available_node_types"])
    with pytest.raises(Exception):
        validate_config(prepare_config(bad))


def test_kuberay_manifests():
    docs = list(yaml.safe_load_all((CLUSTER / "kuberay" / "raycluster.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"PersistentVolumeClaim", "ConfigMap", "RayCluster"}
    assert kinds["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]
    spec = kinds["RayCluster"]["spec"]
    assert spec["authOptions"] == {"mode": "token"}
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    gpu = spec["workerGroupSpecs"][0]
    assert gpu["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    image_tag = re.search(r"FROM rayproject/ray:([\d.]+)-", (CLUSTER / "kuberay" / "Dockerfile").read_text()).group(1)
    assert spec["rayVersion"] == image_tag
    for group in [spec["headGroupSpec"], gpu]:
        mounts = group["template"]["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "shared", "mountPath": "/shared"} in mounts
    job = yaml.safe_load((CLUSTER / "kuberay" / "rayjob.yaml").read_text())
    assert job["kind"] == "RayJob" and job["spec"]["clusterSelector"]["ray.io/cluster"] == kinds["RayCluster"]["metadata"]["name"]
    assert "rirlab sweep" in job["spec"]["entrypoint"] and "--output-dir /shared/" in job["spec"]["entrypoint"]


def test_mlflow_compose_binds_privately_with_auth_and_no_secrets():
    compose = yaml.safe_load((CLUSTER / "mlflow" / "docker-compose.yml").read_text())
    services = compose["services"]
    published = {name for name, s in services.items() if s.get("ports")}
    assert published == {"mlflow"}  # PostgreSQL and MinIO are reachable only through the server
    assert services["mlflow"]["ports"] == ["${MLFLOW_BIND:-127.0.0.1}:${MLFLOW_PORT:-5000}:5000"]
    cmd = services["mlflow"]["command"]
    assert "--app-name=basic-auth" in cmd and "--serve-artifacts" in cmd
    assert any(c.startswith("--backend-store-uri=postgresql+psycopg2://mlflow@postgres") for c in cmd)  # no password
    ini = (CLUSTER / "mlflow" / "basic_auth.ini").read_text()
    assert not re.search(r"(?m)^\s*admin_password\s*=", ini) and "@postgres" in ini
    assert (CLUSTER / "mlflow" / ".gitignore").read_text().split() == [".env"]


@pytest.mark.parametrize("script", sorted(str(p.relative_to(REPO)) for p in CLUSTER.rglob("*.sh"))
                         + sorted(str(p.relative_to(REPO)) for p in CLUSTER.rglob("*.sbatch")))
def test_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
