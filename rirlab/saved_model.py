"""A trial's evaluated model as a file: what its worker writes beside its final checkpoint
(``contract.CHECKPOINT_MODEL_FILE``) for the driver to log as the run's MLflow model
(``rirlab.sweeps.record.artifacts.log_model``). Here, in the library below the sweep's layers, because both sides use
it: the trial's worker (``rirlab.sweeps.tune``, which must not import the record layer) writes it, and the driver
writes it itself for a checkpoint made before workers did. No MLflow import: a fresh worker would pay 0.8 s of CPU
for it."""

from __future__ import annotations

from pathlib import Path

from rirlab import contract


def evaluated_weights(state: dict, config: dict) -> dict:
    """The weights a trial's final metrics were measured with: the best-dev ones unless it selects by the last
    step (as rirlab.train.run_trial does before evaluating)."""
    if config.get("select_by", "") != "last" and state.get("best_weights") is not None:
        return state["best_weights"]
    return state["model"]


def evaluated_model(resolved, state: dict):
    """The trial's model, built on the CPU from its resolved config and the task's vocabulary (the data is never
    loaded), with the weights its final metrics were measured with (``evaluated_weights``), in eval mode."""
    from rirlab.models import registry as models
    from rirlab.tasks import registry as tasks
    from rirlab.tasks.base import TaskInfo

    task = tasks.get(resolved.task)
    model = models.get(resolved.model).build(resolved.model_cfg, TaskInfo(len(task.vocab), task.num_classes, task.kind))
    model.load_state_dict(evaluated_weights(state, resolved.flat()))
    return model.eval()


def write_model_file(model, path) -> None:
    """``model`` pickled as MLflow's PyTorch flavor stores it (``torch.save`` through cloudpickle, which its
    ``mlflow.pytorch.pickle_module`` is): what a trial's worker writes into its final checkpoint
    (``contract.CHECKPOINT_MODEL_FILE``) without importing MLflow."""
    import cloudpickle
    import torch

    torch.save(model, path, pickle_module=cloudpickle)


def save_final_model(state: dict, folder) -> None:
    """A trial's final checkpoint ``state`` (as the trainer saved it): its evaluated model written beside it as
    ``contract.CHECKPOINT_MODEL_FILE``, on the trial's worker, for the driver to log (``log_model``)."""
    from rirlab.trial import resolve

    resolved = resolve(state[contract.STATE_CONFIG])
    write_model_file(evaluated_model(resolved, state), Path(folder) / contract.CHECKPOINT_MODEL_FILE)
