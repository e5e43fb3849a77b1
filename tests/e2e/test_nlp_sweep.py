"""A quick sweep of a sentence-pair spec (RIR Table 7, SNLI) end to end: stand-in files in the publishers' formats,
two models trained through Ray, every split in MLflow, the table beside the paper's numbers."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import run_cli
from tests.helpers.nlp_specs import spec_path


def test_quick_sweep_of_a_sentence_pair_spec_end_to_end(workdir, new_store):
    """rirlab sweep rir_table7_snli.yaml --quick: SNLI stand-in files in the publishers' formats are written and
    read, the vocabulary and the stand-in GloVe built, two models trained through Ray, every split in MLflow."""
    env = {"RIRLAB_CACHE": str(workdir / "cache")}
    new_store(workdir / "mlruns.db")
    run_cli(["sweep", spec_path("rir_table7_snli"), "--quick"], cwd=workdir, env=env, check=True, timeout=600)
    loaded = load_spec(spec_path("rir_table7_snli"), quick=True)
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    exp = client.get_experiment_by_name(loaded.spec.name)
    runs = client.search_runs([exp.experiment_id], max_results=100)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert sorted(r.info.run_name for r in children) == sorted(t["name"] for t in expand(loaded.spec))
    for run in children:
        assert run.info.status == "FINISHED"
        for split in ("dev", "test", "hard", "break", "counterfactual"):
            assert 0.0 <= run.data.metrics[f"{split}/accuracy"] <= 100.0
        assert run.data.params["generated"] == "True" and run.data.params["task"] == "snli"
    table = run_cli(["tables", spec_path("rir_table7_snli"), "--reference", "rir_nlp:table7_snli"], cwd=workdir,
                    env=env, check=True).stdout
    assert "84.4" in table and "85.1" in table  # the paper's BBT-GRC and RIR-EBT-GRC IID beside ours
