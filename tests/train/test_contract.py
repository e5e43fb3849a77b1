"""The MLflow contract (rirlab.contract) is the one spelling of every metric: the trainer reports only names it
lists, docs/metrics.md documents exactly those, and the names the sweep side spells agree with MLflow's own."""

from __future__ import annotations

import re

import pytest

from rirlab import contract
from rirlab.train import run_trial
from tests.helpers.cli import REPO


def documented_names() -> set[str]:
    """The backticked names in the first column of docs/metrics.md's metric table."""
    names = set()
    for line in (REPO / "docs" / "metrics.md").read_text().splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def test_docs_metrics_table_lists_exactly_the_contracts_metrics():
    documented = {n.replace("dev/", "<split>/") for n in documented_names()}
    assert documented == set(contract.METRICS), (sorted(documented - set(contract.METRICS)),
                                                 sorted(set(contract.METRICS) - documented))


def metrics_doc():
    """scripts/metrics_doc.py, the page's generator, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("metrics_doc", REPO / "scripts" / "metrics_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_metrics_table_is_the_one_generated_from_the_contract():
    """The contract is the one source of the metric list (issue 48 item 7): the page's table is what
    scripts/metrics_doc.py writes from contract.METRICS, names, units and meanings alike."""
    doc = metrics_doc()
    page = doc.PAGE.read_text(encoding="utf-8")
    assert doc.with_table(page) == page, "docs/metrics.md is out of date: run python scripts/metrics_doc.py"
    assert page.count(contract.metrics_table()) == 1 and doc.main(["--check"]) == 0


def test_a_metric_added_to_the_contract_but_not_the_page_fails_the_check(monkeypatch):
    doc = metrics_doc()
    monkeypatch.setitem(contract.METRICS, "train/grad_norm", ("—", "norm of the gradients"))
    page = doc.PAGE.read_text(encoding="utf-8")
    assert "| `train/grad_norm` | — | norm of the gradients |" in doc.with_table(page)
    assert doc.main(["--check"]) == 1  # the page lacks it: the check (and the test above) fails


def test_the_trainer_spells_no_metric_table_of_its_own():
    """rirlab.train's docstring pointed to the contract but wrote the table a third time; it points only now."""
    import rirlab.train

    assert "====" not in rirlab.train.__doc__ and "METRICS" in rirlab.train.__doc__


@pytest.mark.parametrize("model,extra", [("rir_grc", {"chunk_size": 5}), ("gut", {"num_heads": 2, "halt_loss_weight": 0.01})])
def test_every_reported_metric_is_in_the_contract(model, extra):
    reported: set[str] = set()
    last: dict = {}

    def report(metrics, checkpoint=None):
        reported.update(metrics)
        last.clear()
        last.update(metrics)

    run_trial({"task": "listops", "model": model, "hidden_size": 8, "steps": 6, "batch_size": 8, "log_every": 3,
               "eval_every": 3, "n_train": 40, "n_dev": 16, "n_test": 16, "eval_splits": ["test"], "num_threads": 1,
               "recipe": "paper", "epochs": None, **extra}, report)
    keys = {k for k in reported if k not in (contract.FINAL, contract.DEVICE)
            and not k.startswith((contract.ARTIFACT_PREFIX, contract.PARAM_PREFIX))}
    undocumented = sorted(m for m in keys if not contract.is_documented(m))
    assert not undocumented, f"reported but not in rirlab.contract.METRICS: {undocumented}"
    assert set(contract.RUN_METRICS) <= reported  # and what every trial promises is reported
    assert last[contract.split_metric("test", contract.EXAMPLES)] == 16  # N of each split, for its binomial error
    if model == "gut":
        assert set(contract.HALTING_STATS) <= reported


def test_is_documented_refuses_a_name_outside_the_contract():
    assert contract.is_documented("test/accuracy") and contract.is_documented("ops_10/loss")
    assert not contract.is_documented("process_rss") and not contract.is_documented("train/grad_norm")


def test_the_contract_spells_mlflows_own_tags_as_mlflow_does():
    from mlflow.utils import mlflow_tags

    assert contract.PARENT_RUN_ID == mlflow_tags.MLFLOW_PARENT_RUN_ID
    assert contract.NOTE == mlflow_tags.MLFLOW_RUN_NOTE
    assert contract.GIT_COMMIT_MLFLOW == mlflow_tags.MLFLOW_GIT_COMMIT


def test_best_is_one_rule_whatever_the_order_ties_go_to_the_first_name():
    """The progress line, the parent run (best_trials) and `rirlab runs` used three rules that disagreed on ties."""
    import itertools
    import types

    from rirlab.sweeps.driver.progress import ProgressCallback
    from rirlab.sweeps.record.artifacts import best_trials
    from rirlab.sweeps.spec.trials import TrialSpace

    trials = [("lr=0.1,seed=0", 80.0), ("lr=0.01,seed=0", 90.0), ("lr=0.001,seed=0", 90.0), ("bad", float("nan"))]
    for order in itertools.permutations(trials):
        runs = [types.SimpleNamespace(info=types.SimpleNamespace(status="FINISHED", run_name=n),
                                      data=types.SimpleNamespace(metrics={"dev/accuracy": v}, tags={}))
                for n, v in order]
        assert best_trials(runs, ["dev/accuracy"], ["max"])["dev/accuracy"].info.run_name == "lr=0.001,seed=0"
        progress = ProgressCallback("x", 4, "dev/accuracy", "max", TrialSpace(), stream=open("/dev/null", "w"))
        for n, v in order:
            progress._update_best({"dev/accuracy": v}, n)
        assert progress.best["dev/accuracy"] == (90.0, "lr=0.001,seed=0")
    assert contract.is_better(1.0, "b", (2.0, "a"), "min") and not contract.is_better(2.0, "a", (1.0, "b"), "min")
    assert not contract.is_better(float("inf"), "a", None, "max")


def test_a_text_trial_records_each_splits_oov_rate_as_a_param(tmp_path, cache):
    """Issue: the OOV rate per split, as a param of each trial. The trainer reports param:oov/<split> (the task's
    own count under the trial's vocabulary) and the tracker logs those keys as the run's params."""
    from rirlab.sweeps.record.tracker import Tracker

    final = run_trial({"task": "sst5", "model": "bbt_grc", "generated": True, "embeddings": "random",
                       "vocab_from": "train", "hidden_size": 8, "steps": 2, "batch_size": 4, "log_every": 1,
                       "eval_every": 2, "num_threads": 1, "epochs": None})
    oov = {k: v for k, v in final.items() if k.startswith(contract.PARAM_PREFIX)}
    assert set(oov) == {"param:oov/dev", "param:oov/test"} and all(0 <= float(v) <= 1 for v in oov.values())
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}")
    exp = tracker.experiment_id("oov")
    run = tracker.start_child(exp, tracker.start_parent(exp, "p", {}), "t", {"lr": 0.1}, {})
    tracker.log_result(run, final, step=2)
    params = tracker.client.get_run(run).data.params
    assert params["oov/dev"] == oov["param:oov/dev"] and params["lr"] == "0.1" and "param:oov/dev" not in params
