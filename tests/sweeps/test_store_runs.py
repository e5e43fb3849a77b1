"""Runs look like MLflow runs: MLflow's own context tags on every parent and child run, and sweep experiments
marked as model training (MLflow 3's UI then opens their runs, not a GenAI overview)."""

from __future__ import annotations

import getpass

from rirlab import contract
from rirlab.contract import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
from rirlab.sweeps.record.tracker import Tracker

CONTEXT = ("mlflow.user", "mlflow.source.name", "mlflow.source.type", "mlflow.source.git.commit")


def test_parent_and_child_runs_carry_mlflow_context_tags(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = tracker.experiment_id("ctx")
    parent = tracker.start_parent(exp, "ctx sweep", {contract.SPEC_HASH: "abc"})
    child = tracker.start_child(exp, parent, "lr=0.1", {"lr": 0.1}, {contract.TRIAL_KEY: "k"})
    for run_id in (parent, child):
        tags = tracker.client.get_run(run_id).data.tags
        assert all(tags.get(k) for k in CONTEXT), {k: tags.get(k) for k in CONTEXT}
        assert tags["mlflow.user"] == getpass.getuser() and tags["mlflow.source.type"] == "LOCAL"
        assert len(tags["mlflow.source.git.commit"]) == 40 or tags["mlflow.source.git.commit"] == "unknown"
    child_tags = tracker.client.get_run(child).data.tags
    assert child_tags[contract.PARENT_RUN_ID] == parent and child_tags[contract.TRIAL_KEY] == "k"
    assert tracker.client.get_run(parent).data.tags[contract.SWEEP_TAG] == contract.PARENT


def test_sweep_experiments_are_model_training_experiments(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = tracker.experiment_id("kind")
    assert tracker.client.get_experiment(exp).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    old = tracker.client.create_experiment("made-earlier")  # by an earlier rirlab: tagged when a sweep runs in it
    tracker.start_parent(old, "sweep", {})
    assert tracker.client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
