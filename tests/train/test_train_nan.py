"""`rirlab train` whose loss turns NaN (issue 18): the run is FAILED and the command says so in one line. In-process
(click's CliRunner; the exit code and stderr are the command's own): a process of its own cost seconds of imports."""

from __future__ import annotations

import pytest

from tests.helpers.cli import invoke, sqlite_uri


@pytest.mark.parametrize("extra,hint", [
    ([], "or a tighter clip (--set grad_clip=1.25)"),  # the adamw recipe clips at 5
    (["--set", "precision=bf16", "--set", "grad_clip=0"],
     "gradient clipping (--set grad_clip=1) or fp32 instead of bf16 (--set precision=fp32)")])
def test_train_nan_is_one_line_naming_the_step_and_what_to_try(workdir, new_store, monkeypatch, extra, hint):
    store = workdir / "store.db"
    new_store(store)  # a migrated empty store (creating one runs MLflow's migrations: seconds)
    small = ["--set", "n_train=200", "--set", "iid_pool=500", "--set", "n_eval=10"]  # the NaN comes at step 4
    monkeypatch.setenv("RIRLAB_PLUGINS", "tests.helpers.plugin_models")
    result = invoke("train", "--model", "nan_grc", "--task", "listops", "--quick", "--set", "steps=10",
                    "--set", "log_every=1", *small, *extra, "--tracking-uri", sqlite_uri(store))
    assert result.exit_code == 2, (result.output[-3000:], result.exception)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: training loss became nan at step 4 "), lines
    assert "marked FAILED" in lines[0] and "--set lr=0.0001" in lines[0] and hint in lines[0]

    import mlflow

    runs = mlflow.MlflowClient(sqlite_uri(store)).search_runs(
        [e.experiment_id for e in mlflow.MlflowClient(sqlite_uri(store)).search_experiments()])
    assert [r.info.status for r in runs] == ["FAILED"]
