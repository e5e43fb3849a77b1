"""End to end: the user's own commands, a real local Ray, a real MLflow sqlite store in a temp dir."""

from __future__ import annotations

import re

from mlflow.tracking import MlflowClient

from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import REPO, run_cli

SPEC = REPO / "search_spaces" / "chunk_beam.yaml"


def test_quick_sweep_then_tables(workdir):
    proc = run_cli(["sweep", SPEC, "--quick"], cwd=workdir, check=True)
    assert "finished" in proc.stdout

    loaded = load_spec(SPEC, quick=True)
    trials = expand(loaded.spec)
    assert len(trials) >= 4
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")  # the default store, in the current directory
    exp = client.get_experiment_by_name(loaded.spec.name)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("rirlab.sweep") == "parent"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["rirlab.spec_hash"] == loaded.hash
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == sorted(t["name"] for t in trials)
    for run in children:
        assert run.info.status == "FINISHED"
        assert 0.0 <= run.data.metrics["test/accuracy"] <= 100.0
        assert "dev/accuracy" in run.data.metrics and "train/loss" in run.data.metrics
        assert run.data.params["model"] == loaded.spec.model
        trial = next(t for t in trials if t["name"] == run.info.run_name)
        for key, value in trial["swept"].items():
            if key != "variant":
                assert run.data.params[key] == str(value)
        assert len(run.data.params) > 15  # the full flattened config, not only the swept values
        history = client.get_metric_history(run.info.run_id, "train/loss")
        assert len(history) >= 2  # logged per logging step, not only at the end

    table = run_cli(["tables", SPEC], cwd=workdir, check=True).stdout
    configs = {tuple((k, v) for k, v in t["swept"].items() if k != "seed") for t in trials}
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| configuration")]
    assert len(rows) == len(configs)  # one row per configuration
    assert all(re.search(r"\| \d+\.\d+ (± |\[)", row) for row in rows)  # a near-IID cell in every row (one seed: its interval)

    # the record the sweep's last lines offer: the export command it prints, then the same table from the file alone
    hint = re.search(r"^keep a record that outlives the store: \S+ (export .*?) \(then ", proc.stdout, re.M)
    assert hint, proc.stdout[-1500:]
    run_cli(hint.group(1).split(), cwd=workdir, check=True)
    record = workdir / re.search(r"--out (\S+)", hint.group(1)).group(1)  # the runs file (its .history twin beside)
    (workdir / "mlruns.db").rename(workdir / "elsewhere.db")  # no store: the file alone
    assert run_cli(["tables", SPEC, "--records", record], cwd=workdir, check=True).stdout == table
    (workdir / "elsewhere.db").rename(workdir / "mlruns.db")

    # the pivot of the two swept axes holds exactly the recorded test accuracies (1 seed: median = the value)
    pivot = run_cli(["tables", SPEC, "--layout", "pivot", "--rows", "chunk_size", "--cols", "beam_size", "--split",
                     "test"], cwd=workdir, check=True).stdout
    cells = {}
    for line in pivot.splitlines():
        m = re.match(r"\| chunk (\d+) \| (.*) \|$", line)
        if m:
            values = [float(c.split(" ")[0]) for c in m.group(2).split(" | ")]
            beams = sorted({int(r.data.params["beam_size"]) for r in children})
            cells.update({(int(m.group(1)), b): v for b, v in zip(beams, values)})
    recorded = {(int(r.data.params["chunk_size"]), int(r.data.params["beam_size"])): r.data.metrics["test/accuracy"]
                for r in children}
    assert cells.keys() == recorded.keys()
    assert all(abs(cells[k] - round(recorded[k], 2)) < 0.006 for k in recorded)
