"""Searches through the CLI into MLflow, a real local Ray: Optuna with sparse evaluations runs each suggestion once
per seed into a persistent study, and each child run and the Optuna trial that proposed it name each other (issue
33 item 1: from optuna-dashboard to the run and back). A random search: tests/e2e/test_sweep_engine_runs.py."""

from __future__ import annotations

from tests.helpers.cli import run_cli
from tests.helpers.sweep_runs import TINY, write_spec


def test_optuna_sweep_runs_each_suggestion_per_seed_into_a_persistent_study_linked_to_its_runs(workdir, new_store):
    """log_every != eval_every (dev/accuracy only in some reports) used to crash Ray's OptunaSearch and leave the
    child run RUNNING; each suggestion must run once per seed and the study must be on disk."""
    import optuna
    from mlflow.tracking import MlflowClient

    from rirlab import contract

    new_store(workdir / "mlruns.db")
    spec = write_spec(workdir / "o.yaml", name="s_optuna", algorithm="optuna", num_samples=2, seeds=2,
                      search={"lr": {"loguniform": [1e-4, 1e-2]}},
                      fixed={**TINY["fixed"], "steps": 20, "log_every": 5, "eval_every": 10},
                      optuna={"sampler": "random"})
    run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, check=True, timeout=300)
    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    exp = client.get_experiment_by_name("s_optuna")
    children = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 4 and all(r.info.status == "FINISHED" for r in children)
    lrs: dict = {}
    for r in children:
        lrs.setdefault(r.data.params["lr"], []).append(int(r.data.params["seed"]))
    assert len(lrs) == 2 and all(sorted(s) == [0, 1] for s in lrs.values())
    dbs = list(workdir.glob("**/optuna.db"))
    assert len(dbs) == 1
    summaries = optuna.get_all_study_summaries(f"sqlite:///{dbs[0]}")
    assert len(summaries) == 1
    study = optuna.load_study(study_name=summaries[0].study_name, storage=f"sqlite:///{dbs[0]}")
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2 and {f"{t.params['lr']}" for t in done} == set(lrs)

    # the link: each run names its Optuna trial (number, study); each Optuna trial lists its runs, one per seed
    by_number = {t.number: t for t in study.trials}
    for run in children:
        tags = run.data.tags
        assert tags.get(contract.OPTUNA_STUDY) == summaries[0].study_name, tags
        trial = by_number[int(tags[contract.OPTUNA_TRIAL_NUMBER])]
        assert run.info.run_id in trial.user_attrs[contract.OPTUNA_RUN_IDS_ATTR], trial.user_attrs
        assert float(run.data.params["lr"]) == trial.params["lr"]
    linked = sorted(i for t in study.trials for i in t.user_attrs.get(contract.OPTUNA_RUN_IDS_ATTR, []))
    assert linked == sorted(r.info.run_id for r in children)  # two seeds' runs per Optuna trial, none elsewhere
