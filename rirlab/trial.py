"""One trial's config: a flat dict of keys (what a spec, ``--set`` and MLflow's params hold) split into the training,
model and task dataclasses of the registered entries, every key and value validated.

Above the config layer (``rirlab.config``: the dataclasses, the recipe, the one-owner rule for flat keys) and the
registries (which import the config layer to claim their keys): the registries are read here, so that nothing
below imports them back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rirlab.config import TrainConfig, build, closest, field_names
from rirlab.errors import UserError
from rirlab.models import registry as models
from rirlab.tasks import registry as tasks


@dataclasses.dataclass
class TrialConfig:
    """The resolved, validated pieces of one flat trial config."""

    model: str
    task: str
    train: Any
    model_cfg: Any
    task_cfg: Any

    def flat(self) -> dict[str, Any]:
        out = {"model": self.model, "task": self.task}
        for part in (self.train, self.model_cfg, self.task_cfg):
            out.update(dataclasses.asdict(part))
        return out


def resolve(flat: dict[str, Any], where: str = "config") -> TrialConfig:
    """Split a flat dict into train / model / task configs, validating every key and value."""
    flat = dict(flat)
    model = flat.pop("model", None)
    task = flat.pop("task", None)
    if model is None or task is None:
        raise UserError(f"{where}: both 'model' and 'task' must be set")
    mentry = models.get(model)
    tentry = tasks.get(task)
    groups = {"train": TrainConfig, "model": mentry.config, "task": tentry.config}
    owners = {key: g for g, cls in groups.items() for key in field_names(cls)}  # one owner each (claim_keys)
    split: dict[str, dict] = {g: {} for g in groups}
    for key, value in flat.items():
        owner = owners.get(key)
        if owner is None:
            raise UserError(
                f"{where}: unknown parameter '{key}' for model '{model}' and task '{task}'"
                f"{closest(key, owners)}", key=key
            )
        split[owner][key] = value
    if model not in tentry.models_ok(mentry):
        raise UserError(f"{where}: model '{model}' cannot run task '{task}' ({tentry.kind} task); pick another model")
    return TrialConfig(
        model=model,
        task=task,
        train=build(TrainConfig, split["train"], where),
        model_cfg=build(mentry.config, split["model"], where),
        task_cfg=build(tentry.config, split["task"], where),
    )
