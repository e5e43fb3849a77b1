"""An evaluation-only row end to end: a real sweep trains a row, then tests each of its trials' weights with another
inference mode (RIR Table 5's "+RIR inference"), each evaluation its own MLflow run linked to the trial it tests, a
row of `rirlab tables` and of the export; --resume of the finished sweep evaluates nothing again; a later sweep of the
evaluation row alone tests the weights trained before (or is refused when none were trained like its row)."""

from __future__ import annotations

import yaml

from tests.helpers.cli import run_cli
from tests.helpers.sweep_runs import runs_of

FIXED = {"hidden_size": 16, "steps": 6, "batch_size": 8, "log_every": 3, "eval_every": 100000, "n_train": 48,
         "n_dev": 16, "n_test": 16, "iid_pool": 400, "eval_splits": ["test", "len_200_300"],
         "max_eval_examples": 16, "eval_batch_size": 4, "num_threads": 1}
ROWS = [{"name": "RIR-EBT-GRC", "set": {}},
        {"name": "same weights", "evaluates": "RIR-EBT-GRC", "set": {}},  # nothing changed: the trial's own cells
        {"name": "+RIR inference", "evaluates": "RIR-EBT-GRC", "set": {"inference": "rir"}}]


def test_evaluation_rows_test_each_trials_weights_and_are_recorded_once(workdir):
    spec = workdir / "ev.yaml"
    spec.write_text(yaml.safe_dump({"name": "ev", "task": "listops", "model": "rir_ebt_grc", "fixed": FIXED,
                                    "variants": ROWS, "seeds": [0, 1]}, sort_keys=False))
    proc = run_cli(["sweep", spec], cwd=workdir, check=True)
    assert "evaluation-only cells: 4 evaluated" in proc.stdout, proc.stdout[-2000:]
    client, parents, children = runs_of(workdir / "mlruns.db", "ev")
    trials = {r.data.tags["rirlab.swept"]: r for r in children if "rirlab.evaluates" not in r.data.tags}
    evals = [r for r in children if "rirlab.evaluates" in r.data.tags]
    assert len(trials) == 2 and sorted(r.info.run_name for r in evals) == [
        "+RIR inference,seed=0", "+RIR inference,seed=1", "same weights,seed=0", "same weights,seed=1"]
    for run in evals:
        assert run.info.status == "FINISHED"
        seed = int(run.data.params["seed"])
        source = next(t for t in trials.values() if int(t.data.params["seed"]) == seed)
        assert run.data.tags["rirlab.evaluates"] == source.info.run_id  # linked to the trial whose weights it tests
        assert source.info.run_id in run.data.tags["mlflow.note.content"]
        if run.info.run_name.startswith("same weights"):  # the trial's best-dev weights, evaluated as the trial did
            for m in ("test/accuracy", "test/loss", "len_200_300/accuracy", "dev/accuracy"):
                assert abs(run.data.metrics[m] - source.data.metrics[m]) < 1e-9, (m, run.data.metrics, source.data.metrics)
        else:
            assert run.data.params["inference"] == "rir" and source.data.params["inference"] == "non_rir"
            assert 0 <= run.data.metrics["len_200_300/accuracy"] <= 100
    assert parents[0].data.tags["rirlab.best_run_id"] in {t.info.run_id for t in trials.values()}  # a trained trial

    table = run_cli(["tables", spec], cwd=workdir, check=True).stdout
    body = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    for row in ("RIR-EBT-GRC", "same weights", "+RIR inference"):
        assert row in body and "—" not in body[row], table
    assert body["same weights"].split("|")[2:] == body["RIR-EBT-GRC"].split("|")[2:]

    again = run_cli(["sweep", spec, "--resume"], cwd=workdir, check=True)  # finished: nothing evaluated again
    assert "done: 2 finished, 0 failed; evaluation-only cells: 4 evaluated;" in again.stdout, again.stdout[-2000:]
    _, _, again = runs_of(workdir / "mlruns.db", "ev")
    assert sorted(r.info.run_id for r in again) == sorted(r.info.run_id for r in children)
    for run in evals:
        assert len(client.get_metric_history(run.info.run_id, "test/accuracy")) == 1

    run_cli(["export", "--experiment", "ev", "--out", "ev.parquet"], cwd=workdir, check=True)
    assert run_cli(["tables", spec, "--records", "ev.parquet"], cwd=workdir, check=True).stdout == table

    # the row alone, later: the trials trained above are found in the store by their config, nothing is trained
    alone = run_cli(["sweep", spec, "--set", "variant=+RIR inference"], cwd=workdir, check=True)
    assert "done: 0 finished, 0 failed; evaluation-only cells: 2 evaluated;" in alone.stdout, alone.stdout[-2000:]
    _, parents2, children2 = runs_of(workdir / "mlruns.db", "ev")
    latest = max(parents2, key=lambda p: p.info.start_time)
    mine = [r for r in children2 if r.data.tags["mlflow.parentRunId"] == latest.info.run_id]
    first = {r.info.run_name: r for r in evals}
    assert sorted(r.info.run_name for r in mine) == ["+RIR inference,seed=0", "+RIR inference,seed=1"]
    for run in mine:
        assert run.data.tags["rirlab.evaluates"] == first[run.info.run_name].data.tags["rirlab.evaluates"]
        assert run.data.metrics["len_200_300/accuracy"] == first[run.info.run_name].data.metrics["len_200_300/accuracy"]

    other = run_cli(["sweep", spec, "--set", "variant=+RIR inference", "--set", "hidden_size=8"], cwd=workdir)
    assert other.returncode == 2 and len(other.stderr.strip().splitlines()) == 1, other.stderr
    assert "evaluates the weights of trial RIR-EBT-GRC,seed=0, which this sweep does not train" in other.stderr
