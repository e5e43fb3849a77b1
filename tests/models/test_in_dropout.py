"""``in_dropout``: the dropout on the embedded tokens before the encoder (the papers' code's in_dropout; its logic
configs use 0.4 while the model's own dropout stays 0.1) is its own config value, and unset it is ``dropout``."""

from __future__ import annotations

import pytest
import torch

from rirlab.models import registry
from rirlab.tasks.base import TaskInfo
from rirlab.trial import resolve

SMALL = {"mega": {"num_layers": 1, "mega_z_dim": 8}, "s4d": {"n_layers": 1}, "transformer": {"num_heads": 2}}


def _zeros_reaching_the_encoder(model: torch.nn.Module, batch: dict) -> float:
    """Fraction of the embedded entries (non-pad tokens) that reach the encoder as exact zeros, in training mode."""
    seen = []
    hook = model.encoder.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach()))
    model.train()
    torch.manual_seed(0)
    model(batch)
    hook.remove()
    x = seen[0][batch["mask"]]  # (tokens, D)
    return (x == 0).float().mean().item()


@pytest.mark.parametrize("name", ["ebt_grc", "egt_grc", "om", "mega", "s4d", "transformer"])
def test_in_dropout_is_the_embedding_dropout_and_defaults_to_dropout(name):
    info = TaskInfo(16, 3, "classify")
    tokens = torch.randint(1, 16, (64, 40))
    batch = {"tokens": tokens, "mask": torch.ones_like(tokens, dtype=torch.bool), "labels": torch.zeros(64).long()}
    base = {"model": name, "task": "listops", "hidden_size": 32, "dropout": 0.1, **SMALL.get(name, {})}
    fractions = {}
    for in_dropout in (None, 0.4):
        cfg = resolve({**base, **({} if in_dropout is None else {"in_dropout": in_dropout})}).model_cfg
        model = registry.get(name).build(cfg, info)
        assert model.drop.p == (0.1 if in_dropout is None else 0.4)
        # the encoder's own dropouts keep `dropout`: in_dropout changes the input's only
        inner = {m.p for m in model.encoder.modules() if isinstance(m, torch.nn.Dropout)}
        assert inner <= {0.0, 0.1}
        fractions[in_dropout] = _zeros_reaching_the_encoder(model, batch)
    assert abs(fractions[None] - 0.1) < 0.02 and abs(fractions[0.4] - 0.4) < 0.03, fractions


def test_in_dropout_out_of_range_is_refused_with_the_key():
    from rirlab.errors import UserError

    with pytest.raises((UserError, ValueError), match="in_dropout"):
        resolve({"model": "ebt_grc", "task": "logic", "in_dropout": 1.5})
