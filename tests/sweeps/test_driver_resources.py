"""Per-trial resources no node of the (local) Ray can hold are refused in one line before anything is recorded,
instead of a sweep that waits at "0 running | N pending" forever (a real local Ray)."""

from __future__ import annotations

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.helpers.cli import REPO, run_cli

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


@pytest.mark.e2e
def test_trials_no_node_can_hold_are_refused_before_anything_starts(workdir, new_store):
    resources, needle = {"cpu": 100}, "cpu: 100"
    db = workdir / "mlruns.db"
    new_store(db)  # the store exists (made by an earlier sweep)
    spec = workdir / "big.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "name": "big", "resources": resources}, sort_keys=False))
    proc = run_cli(["sweep", spec], cwd=workdir, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: resources: {") and needle in line and "does not fit this machine" in line, line
    assert MlflowClient(f"sqlite:///{db}").get_experiment_by_name("big") is None
    assert not (workdir / "rirlab_runs").exists()


def test_the_check_wants_one_node_with_both_cpu_and_gpu_and_only_warns_on_a_cluster(monkeypatch, capsys):
    import ray

    from rirlab.errors import UserError
    from rirlab.sweeps.driver.cluster import check_resources
    from rirlab.sweeps.spec.schema import Spec

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": True, "Resources": {"CPU": 1.0, "GPU": 1.0}},
             {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    spec = lambda **r: Spec(name="x", resources=r)  # noqa: E731
    check_resources(spec(cpu=1, gpu=0.25), None)  # the GPU node holds it
    check_resources(spec(cpu=2), None)
    for bad in (spec(cpu=2, gpu=0.25), spec(cpu=3), spec(cpu=1, gpu=2)):  # no single live node holds it
        with pytest.raises(UserError, match="does not fit this machine"):
            check_resources(bad, None)
    capsys.readouterr()
    check_resources(spec(cpu=2, gpu=0.25), "10.0.0.5:6379")  # a cluster: an autoscaler may add a node
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: resources: {cpu: 2, gpu: 0.25}") and "fits no node" in err[0]
