"""The config layer: a key name means one thing across training, model and task configs; resolve, build, --set."""

from __future__ import annotations

from typing import Optional

import pytest
from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab import config
from rirlab.config import STRICT, TrainConfig, build, parse_overrides
from rirlab.trial import resolve
from rirlab.errors import UserError
from rirlab.models import registry as models
from rirlab.tasks import registry as tasks
from rirlab.tasks.listops import ListOps


@pytest.fixture
def registries():
    """Both registries loaded (every built-in claimed its keys); entries a test adds are removed afterwards."""
    models.names(), tasks.names()
    before = {k: list(v) for k, v in config._claims.items()}
    added = []
    yield added
    for reg, name in added:
        if name in reg.entries:
            reg.remove(name)
    assert config._claims == before  # cleaned up: no claim of a throwaway class is left


def add_model(added, name, cfg):
    added.append((models._REGISTRY, name))
    models.register(name, cfg)(lambda cfg, info: None)


def add_task(added, name, cfg):
    added.append((tasks._REGISTRY, name))
    tasks.register(type(f"Task_{name}", (ListOps,), {"name": name, "config": cfg}))


def test_builtin_configs_claim_disjoint_keys(registries):
    owners = {key: {g for g, _, _ in claims} for key, claims in config._claims.items()}
    assert all(len(groups) == 1 for groups in owners.values()), {k: g for k, g in owners.items() if len(g) > 1}
    assert {"lr", "seed", "steps"} <= {k for k, g in owners.items() if g == {"train"}}
    assert {"hidden_size", "chunk_size"} <= {k for k, g in owners.items() if g == {"model"}}
    assert {"n_train", "data_seed", "eval_splits"} <= {k for k, g in owners.items() if g == {"task"}}


@dataclass(config=STRICT)
class UsesLr:
    """A model config that reuses a training key."""

    hidden_size: int = Field(8, ge=1)
    lr: float = 0.1


@dataclass(config=STRICT)
class UsesHiddenSize:
    """A task config that reuses a model key."""

    hidden_size: int = 4


@dataclass(config=STRICT)
class HiddenSizeIsText:
    hidden_size: str = "big"


@dataclass(config=STRICT)
class OptionalHiddenSize:
    hidden_size: Optional[int] = None
    fresh_key_xyz: int = 1


def test_a_model_config_with_a_training_key_is_refused_naming_both_classes(registries):
    with pytest.raises(UserError) as err:
        add_model(registries, "tmp_uses_lr", UsesLr)
    msg = str(err.value)
    assert "'lr'" in msg and "UsesLr (model config of 'tmp_uses_lr')" in msg and "TrainConfig (training config)" in msg
    assert "rename" in msg and "\n" not in msg
    assert "tmp_uses_lr" not in models._REGISTRY.entries and "UsesLr" not in repr(config._claims)


def test_a_task_config_with_a_model_key_is_refused(registries):
    with pytest.raises(UserError, match=r"config key 'hidden_size' is a field of both UsesHiddenSize \(task config "
                                        r"of 'tmp_task'\) and \w+ \(model config of '\w+'\).*rename"):
        add_task(registries, "tmp_task", UsesHiddenSize)
    assert "tmp_task" not in tasks._REGISTRY.entries


def test_a_model_key_with_another_type_is_refused_and_optional_is_the_same_type(registries):
    with pytest.raises(UserError, match=r"config key 'hidden_size' is str in HiddenSizeIsText .* but int in "
                                        r"\w+ \(model config of '\w+'\).*rename it"):
        add_model(registries, "tmp_text", HiddenSizeIsText)
    add_model(registries, "tmp_optional", OptionalHiddenSize)  # None = "the default": same meaning as int
    assert ("model", OptionalHiddenSize, "tmp_optional") in config._claims["fresh_key_xyz"]
    with pytest.raises(UserError, match="'fresh_key_xyz' is a field of both UsesFresh"):
        add_task(registries, "tmp_fresh", dataclass(config=STRICT)(type("UsesFresh", (), {
            "__annotations__": {"fresh_key_xyz": "int"}, "fresh_key_xyz": 2})))


def test_a_task_key_with_another_type_is_refused(registries):
    text_n_train = dataclass(config=STRICT)(type("TextNTrain", (), {"__annotations__": {"n_train": "str"},
                                                                    "n_train": "many"}))
    with pytest.raises(UserError, match=r"config key 'n_train' is str in TextNTrain \(task config of 'tmp_t'\) but "
                                        r"int in \w+Config \(task config of '\w+'\)"):
        add_task(registries, "tmp_t", text_n_train)


def test_one_class_under_two_names_is_one_claim(registries):
    add_model(registries, "tmp_a", OptionalHiddenSize)
    add_model(registries, "tmp_b", OptionalHiddenSize)
    models._REGISTRY.remove("tmp_a")
    assert ("model", OptionalHiddenSize, "tmp_a") in config._claims["fresh_key_xyz"]  # tmp_b still uses it


def test_a_config_class_annotations_are_read_once_however_many_classes_share_its_keys(registries, monkeypatch):
    # hidden_size is a field of most model configs: registering one more compares its type with each of theirs
    # (every process that loads the registries did this ~3,000 times, a second of CPU)
    read = []
    get_type_hints = config.typing.get_type_hints
    monkeypatch.setattr(config.typing, "get_type_hints", lambda cls, *a, **kw: read.append(cls) or
                        get_type_hints(cls, *a, **kw))
    shares = dataclass(config=STRICT)(type("SharesHiddenSize", (), {"__annotations__": {"hidden_size": "int"},
                                                                    "hidden_size": 3}))
    add_model(registries, "tmp_shares", shares)
    assert len([c for _, c, _ in config._claims["hidden_size"]]) > 3
    assert read.count(shares) == 1 and len(read) == len(set(read)), read


def test_resolve_routes_each_key_to_its_owner():
    cfg = resolve({"model": "rir_grc", "task": "logic", "lr": 0.01, "chunk_size": 4, "n_dev": 7}, where="t")
    assert cfg.train.lr == 0.01 and cfg.model_cfg.chunk_size == 4 and cfg.task_cfg.n_dev == 7
    assert cfg.flat()["n_dev"] == 7 and cfg.flat()["model"] == "rir_grc"
    with pytest.raises(UserError, match=r"t: unknown parameter 'chunk_sise' .*did you mean chunk_size\?"):
        resolve({"model": "rir_grc", "task": "logic", "chunk_sise": 4}, where="t")


def test_build_names_an_unknown_key_and_a_bad_value():
    with pytest.raises(UserError, match=r"x: unknown parameter 'stepz' \(did you mean steps\?\); TrainConfig has seed"):
        build(TrainConfig, {"stepz": 3}, "x")
    with pytest.raises(UserError, match=r"x: steps=0 is invalid: .*greater than or equal to 1"):
        build(TrainConfig, {"steps": 0}, "x")


def test_parse_overrides_reads_yaml_scalars():
    assert parse_overrides(["a=20", "b=true", "c=[x, y]", "d=", "e = 0.5"]) == {
        "a": 20, "b": True, "c": ["x", "y"], "d": "", "e": 0.5}
    with pytest.raises(UserError, match="expected key=value"):
        parse_overrides(["chunk_size"])


def test_a_number_beyond_64_bits_is_refused_naming_the_set():
    """--set steps=99999999999999999999999 was accepted (and overflowed later, in torch or MLflow)."""
    with pytest.raises(UserError, match=r"--set 'steps=99999999999999999999999': the number is beyond 64 bits"):
        parse_overrides(["steps=99999999999999999999999"])
    with pytest.raises(UserError, match="beyond 64 bits"):
        parse_overrides(["seeds=[1, -99999999999999999999999]"])
    assert parse_overrides([f"steps={2**63 - 1}"]) == {"steps": 2**63 - 1}
