"""One real quick sweep (real Ray, a real MLflow sqlite store) and what its runs carry: the parent holds the
spec (params, artifact, description note) and the best trial; each child its config.yaml, its weights as an
MLflow PyTorch model and, with --system-metrics, system metrics; the terminal gets the progress line with
best FINAL values and per-trial lines, never Ray's token notice; Tune logs no snapshotting-bottleneck warning."""

from __future__ import annotations

import yaml
from mlflow.tracking import MlflowClient

from tests.helpers.cli import REPO, run_cli

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


def test_quick_sweep_parent_and_children_carry_the_sweep(workdir, new_store):
    new_store(workdir / "mlruns.db")
    spec = workdir / "carry.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "name": "carry", "seeds": 1, "description": "lr probe for the runner test",
                                    "fixed": {**TINY["fixed"], "steps": 20}}, sort_keys=False))
    proc = run_cli(["sweep", spec, "--progress", "trials", "--system-metrics"], cwd=workdir,
                   env={"RIRLAB_SYSTEM_METRICS_INTERVAL_S": "1"}, check=True)
    out = proc.stdout + proc.stderr
    assert "Token authentication" not in out and "RAY_AUTH_MODE" not in out, out
    assert "best final dev/accuracy" in proc.stdout
    assert proc.stdout.count("  trial lr=") == 4  # running + finished, per trial
    assert "Traceback" not in proc.stderr and "WARNING" not in proc.stderr, proc.stderr
    # the parent's table/plot (rirlab.analysis.report) is optional: when it cannot be attached, one warning line
    assert all(line.startswith("warning: ") for line in proc.stderr.splitlines() if "report" in line), proc.stderr
    (log,) = (workdir / "rirlab_runs").glob("carry-*/ray_driver.log")
    assert "bottleneck" not in log.read_text()

    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    exp = client.get_experiment_by_name("carry")
    assert exp.tags["mlflow.note.content"] == "lr probe for the runner test"
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("rirlab.sweep") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 2
    p = parent.data
    note = p.tags["mlflow.note.content"]  # the description, then the report the parent opens on (issue 54 item 2)
    assert note.startswith("lr probe for the runner test\n") and "| configuration |" in note, note
    assert p.params["spec.name"] == "carry" and p.params["spec.fixed.steps"] == "20"
    assert yaml.safe_load(p.params["spec.search.lr"]) == {"grid": [0.003, 0.001]}
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "spec")} >= {"spec/carry.yaml"}
    best = max(children, key=lambda r: r.data.metrics["dev/accuracy"])
    assert p.metrics["sweep/best/dev/accuracy"] == best.data.metrics["dev/accuracy"]
    assert p.tags["rirlab.best_run_id"] in {r.info.run_id for r in children}
    top = client.get_run(p.tags["rirlab.best_run_id"])
    assert p.metrics["sweep/best_trial/test/accuracy"] == top.data.metrics["test/accuracy"]
    summary = yaml.safe_load(open(client.download_artifacts(parent.info.run_id, "best_trial.yaml", str(workdir))))
    assert summary["name"] == top.info.run_name and summary["config"]["lr"] == top.data.params["lr"]

    import mlflow.pytorch
    import torch

    mlflow.set_tracking_uri(f"sqlite:///{workdir / 'mlruns.db'}")  # for runs:/ URIs
    for run in children:
        rid = run.info.run_id
        config = yaml.safe_load(open(client.download_artifacts(rid, "config.yaml", str(workdir / rid))))
        assert config["lr"] == float(run.data.params["lr"]) and config["steps"] == 20
        assert any(k.startswith("system/cpu_utilization") for k in run.data.metrics), sorted(run.data.metrics)
        model = mlflow.pytorch.load_model(f"runs:/{rid}/model")
        assert isinstance(model, torch.nn.Module) and not model.training
        assert sum(p.numel() for p in model.parameters()) == run.data.metrics["num_params"]
        (logged,) = client.search_logged_models([run.info.experiment_id], filter_string=f"source_run_id = '{rid}'")
        assert logged.status == "READY", logged.status  # in the Models tab, ready to load
        assert logged.tags["rirlab.trial"] == run.info.run_name
        again = mlflow.pytorch.load_model(f"models:/{logged.model_id}")
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
