"""An Optuna sweep through the CLI (a real local Ray, real MLflow and Optuna stores): every child run names the Optuna
trial that proposed its configuration (its number and study), and that Optuna trial lists the run ids of its
runs, one per seed (issue 33 item 1: from optuna-dashboard to the run and back)."""

from __future__ import annotations

from tests.helpers.cli import run_cli
from tests.helpers.sweep_runs import TINY, write_spec


def test_each_run_and_its_optuna_trial_name_each_other(workdir):
    import optuna
    from mlflow.tracking import MlflowClient

    from rirlab import contract

    spec = write_spec(workdir / "o.yaml", name="s_link", algorithm="optuna", num_samples=2, seeds=2,
                      search={"lr": {"loguniform": [1e-4, 1e-2]}},
                      fixed={**TINY["fixed"], "steps": 20, "log_every": 5, "eval_every": 10},
                      optuna={"sampler": "random"})
    run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, check=True, timeout=600)
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    exp = client.get_experiment_by_name("s_link")
    children = [r for r in client.search_runs([exp.experiment_id]) if contract.PARENT_RUN_ID in r.data.tags]
    assert len(children) == 4
    (db,) = workdir.glob("**/optuna.db")
    (summary,) = optuna.get_all_study_summaries(f"sqlite:///{db}")
    study = optuna.load_study(study_name=summary.study_name, storage=f"sqlite:///{db}")
    by_number = {t.number: t for t in study.trials}
    for run in children:
        tags = run.data.tags
        assert tags.get(contract.OPTUNA_STUDY) == summary.study_name, tags
        trial = by_number[int(tags[contract.OPTUNA_TRIAL_NUMBER])]
        assert run.info.run_id in trial.user_attrs[contract.OPTUNA_RUN_IDS_ATTR], trial.user_attrs
        assert float(run.data.params["lr"]) == trial.params["lr"]
    linked = sorted(i for t in study.trials for i in t.user_attrs.get(contract.OPTUNA_RUN_IDS_ATTR, []))
    assert linked == sorted(r.info.run_id for r in children)  # two seeds' runs per Optuna trial, none elsewhere
