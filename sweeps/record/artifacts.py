"""What a sweep's MLflow runs carry besides metrics, written from the driver.

The parent run: the spec as params (``spec.<key>``; the spec file and the effective spec are artifacts
already), the spec's ``description`` as the run's and the experiment's MLflow note, and at the end the best
trial (per objective: its final value as ``sweep/best/<objective>``; by the first objective: the trial's name, run
id and final metrics as ``sweep/best_trial/<metric>``, with ``best_trial.yaml``). A child run: its resolved config
as ``config.yaml`` and its final weights as an MLflow PyTorch model named ``model``
(``mlflow.pytorch.load_model("runs:/<run id>/model")``): an MLflow 3 logged model, or the run's ``model/`` folder
on MLflow 2 (``log_model``). That model is pickled on the trial's worker, beside its final checkpoint
(``save_final_model``), and only logged here.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any, Optional

import yaml

from rirlab import contract
from rirlab.contract import (BEST_PREFIX, BEST_RUN_ID, BEST_TRIAL, BEST_TRIAL_ARTIFACT, BEST_TRIAL_PREFIX,
                             MODEL_ARTIFACT, NOTE, SPEC_PARAM_PREFIX)
from rirlab.saved_model import evaluated_model, write_model_file


def spec_params(spec_dict: dict, prefix: str = SPEC_PARAM_PREFIX) -> dict[str, str]:
    """The spec as flat params: ``spec.fixed.hidden_size``; a search axis, a variant list or any other list as
    JSON under its own key (``spec.search.lr``); unset (null) fields left out; values over MLflow's limit cut."""
    out: dict[str, str] = {}
    for key, value in spec_dict.items():
        name = prefix + key
        if key in ("description", "quick") or value is None:
            continue  # the note; --quick's own block is in the effective spec artifact
        if isinstance(value, dict) and key != "search" and value:
            out.update(spec_params(value, name + "."))
        elif key == "search" and isinstance(value, dict):
            out.update({f"{name}.{k}": json.dumps({a: b for a, b in v.items() if b is not None}
                                                  if isinstance(v, dict) else v, default=str)
                        for k, v in value.items()})
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value, default=str)
    return {k: v[:6000] for k, v in out.items()}


def record_spec(client, exp_id: str, parent_id: str, spec_dict: dict) -> None:
    """The spec as the parent's params; its description as the parent's and the experiment's note."""
    from mlflow.entities import Param

    params = [Param(k, v) for k, v in sorted(spec_params(spec_dict).items())]
    for i in range(0, len(params), 100):
        client.log_batch(parent_id, params=params[i : i + 100], synchronous=True)
    description = (spec_dict.get("description") or "").strip()
    if description:
        client.set_tag(parent_id, NOTE, description)
        client.set_experiment_tag(exp_id, NOTE, description)


def config_yaml(flat: dict[str, Any]) -> str:
    return yaml.safe_dump({k: flat[k] for k in sorted(flat)}, sort_keys=False, default_flow_style=False)


def best_trials(children: list, metrics: list[str], modes: list[str]) -> dict[str, Any]:
    """Per objective, the finished trial (not stopped early) with the best final value: {metric: run}
    (``contract.is_better``: ties go to the trial name that sorts first)."""
    best: dict[str, Any] = {}
    for run in children:
        if run.info.status != "FINISHED" or run.data.tags.get(contract.EARLY_STOPPED) == contract.TRUE:
            continue
        for metric, mode in zip(metrics, modes):
            v = run.data.metrics.get(metric)
            than = (best[metric].data.metrics[metric], best[metric].info.run_name) if metric in best else None
            if v is not None and contract.is_better(v, run.info.run_name, than, mode):
                best[metric] = run
    return best


def record_best(client, exp_id: str, parent_id: str, metrics: list[str], modes: list[str]) -> Optional[str]:
    """The best trial on the parent run; returns its run name (None when no trial finished)."""
    from mlflow.entities import Metric, RunTag

    children = client.search_runs([exp_id], filter_string=contract.children_filter(parent_id), max_results=50000)
    children = [r for r in children if not r.data.tags.get(contract.EVALUATES)]  # trials only: nothing trained there
    best = best_trials(children, metrics, modes)
    if not best:
        return None
    import time

    now = int(time.time() * 1000)
    values = [Metric(BEST_PREFIX + m, run.data.metrics[m], now, 0) for m, run in best.items()]
    top = best.get(metrics[0]) or next(iter(best.values()))
    values += [Metric(BEST_TRIAL_PREFIX + k, v, now, 0) for k, v in sorted(top.data.metrics.items())
               if not k.startswith("system/")]
    tags = [RunTag(BEST_TRIAL, top.info.run_name), RunTag(BEST_RUN_ID, top.info.run_id)]
    from rirlab.sweeps.record.tracker import batches

    for m, _, t in batches(values, (), tags):  # (a trial of over 1,000 metrics: several calls)
        client.log_batch(parent_id, metrics=m, tags=t, synchronous=True)
    summary = {
        "objective": metrics[0], "mode": modes[0], "run_id": top.info.run_id, "name": top.info.run_name,
        "swept": contract.swept_of(top.data.tags), "final_metrics": dict(sorted(top.data.metrics.items())),
        "config": dict(sorted(top.data.params.items())),
        "best_per_objective": {m: {"value": run.data.metrics[m], "run_id": run.info.run_id, "name": run.info.run_name}
                               for m, run in best.items()},
    }
    client.log_text(parent_id, yaml.safe_dump(summary, sort_keys=False), BEST_TRIAL_ARTIFACT)
    return top.info.run_name


# MLflow's PyTorch model folder less the pickled model: saved once per process by mlflow.pytorch.save_model (its
# requirements, conda and virtualenv files, the pickle module's name, the MLmodel file), then filled per trial
_TEMPLATE: dict = {}


def _model_template() -> dict:
    """{"files": {relative path: bytes}, "mlmodel": MLmodel as a dict, "data": the pickled model's relative path,
    "size": the folder's size as MLflow counted it less that file's}: ``mlflow.pytorch.save_model`` of an empty
    module, once per process (its first call scans the installed packages: about 0.3 s)."""
    if _TEMPLATE:
        return _TEMPLATE
    import mlflow.pytorch
    import torch
    from mlflow.models import Model

    # MLflow's notice that loading a pickle runs code would print: kept out of the terminal
    quiet = logging.getLogger("mlflow.pytorch")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / MODEL_ARTIFACT
            mlflow.pytorch.save_model(torch.nn.Module(), str(path), serialization_format="pickle",
                                      pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"])
            mlmodel = Model.load(str(path / "MLmodel"))
            data = Path(mlmodel.flavors["pytorch"]["model_data"]) / getattr(
                mlflow.pytorch, "_SERIALIZED_TORCH_MODEL_FILE_NAME", "model.pth")
            files = {str(f.relative_to(path)): f.read_bytes() for f in path.rglob("*")
                     if f.is_file() and f.name != "MLmodel" and f.relative_to(path) != data}
            size = mlmodel.model_size_bytes - (path / data).stat().st_size \
                if getattr(mlmodel, "model_size_bytes", None) else None
    finally:
        quiet.setLevel(level)
    _TEMPLATE.update(files=files, mlmodel=mlmodel.to_dict(), data=str(data), size=size)
    return _TEMPLATE


def model_folder(model_file, path) -> None:
    """An MLflow PyTorch model folder at ``path`` around a pickled model (``write_model_file``), as
    ``mlflow.pytorch.save_model`` writes it (``mlflow.pytorch.load_model`` loads it): the template's files, the
    model file linked (or copied), and an MLmodel of its own id, time and size."""
    import datetime
    import os
    import shutil
    import uuid

    from mlflow.models import Model

    template = _model_template()
    for rel, data in template["files"].items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    target = path / template["data"]
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(model_file, target)
    except OSError:  # another file system
        shutil.copyfile(model_file, target)
    mlmodel = Model.from_dict(template["mlmodel"])
    mlmodel.model_uuid = uuid.uuid4().hex
    mlmodel.utc_time_created = str(datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None))
    if template["size"] is not None:
        mlmodel.model_size_bytes = template["size"] + target.stat().st_size
    mlmodel.save(str(path / "MLmodel"))


def log_model(client, run_id: str, checkpoint_dir: str, resolved, experiment_id: Optional[str] = None,
              run_name: Optional[str] = None) -> None:
    """The trial's evaluated weights as an MLflow PyTorch model named ``model``, stored once, where this MLflow's own
    ``mlflow.pytorch.log_model`` puts it: on MLflow 3 a logged model whose source is the run (the UI's Models tab
    and the run's logged models, ``models:/<model id>``; ``runs:/<run id>/model`` resolves to it), on MLflow 2,
    which has no logged models, the run's ``model/`` artifacts. Where the logged model cannot be made (an MLflow 3
    client, a tracking server of MLflow 2) the weights go to the run's ``model/`` and the run's
    ``rirlab.model_error`` says why.

    The pickled model is the one the trial's worker wrote into its final checkpoint
    (``contract.CHECKPOINT_MODEL_FILE``, ``save_final_model``), put into a model folder made from a template
    (``model_folder``); a checkpoint without it (written before rirlab did so) has the model rebuilt here from the
    trial's resolved config and the task's vocabulary (the data is never loaded) with the checkpoint's weights."""
    with tempfile.TemporaryDirectory() as d:
        model_file = Path(checkpoint_dir) / contract.CHECKPOINT_MODEL_FILE
        if not model_file.is_file():
            from rirlab.train import load_checkpoint

            state = load_checkpoint(Path(checkpoint_dir) / contract.CHECKPOINT_STATE_FILE)  # weights, plain data
            model_file = Path(d) / contract.CHECKPOINT_MODEL_FILE
            write_model_file(evaluated_model(resolved, state), model_file)
        path = Path(d) / MODEL_ARTIFACT
        model_folder(model_file, path)
        if not hasattr(client, "create_logged_model"):  # MLflow 2
            client.log_artifacts(run_id, str(path), MODEL_ARTIFACT)  # runs:/<run id>/model
            return
        try:
            log_logged_model(client, run_id, str(path), experiment_id, run_name)
        except Exception as err:  # noqa: BLE001 - the weights are kept the MLflow 2 way instead
            client.log_artifacts(run_id, str(path), MODEL_ARTIFACT)
            client.set_tag(run_id, contract.MODEL_ERROR,
                           f"no logged model ({type(err).__name__}: {err}); the weights are the run's "
                           f"{MODEL_ARTIFACT}/ artifacts"[:5000])


def log_logged_model(client, run_id: str, model_dir: str, experiment_id: Optional[str] = None,
                     run_name: Optional[str] = None) -> str:
    """The saved model directory as an MLflow 3 logged model (the UI's Models tab, ``search_logged_models``,
    ``models:/<model id>``, and ``runs:/<run id>/model``), linked to the trial's run as its source and as a run
    output; returns its id. The run is read only when the caller does not give its experiment and name."""
    from mlflow.entities import LoggedModelOutput

    if experiment_id is None or run_name is None:
        run = client.get_run(run_id)
        experiment_id, run_name = run.info.experiment_id, run.info.run_name
    model = client.create_logged_model(experiment_id, name=MODEL_ARTIFACT, source_run_id=run_id,
                                       model_type="pytorch", tags={contract.TRIAL_NAME_TAG: run_name})
    try:
        client.log_model_artifacts(model.model_id, model_dir)
    except Exception:
        client.finalize_logged_model(model.model_id, "FAILED")
        raise
    client.finalize_logged_model(model.model_id, "READY")
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=0)])
    return model.model_id
