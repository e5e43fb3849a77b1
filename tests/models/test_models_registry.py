"""What the registry entries declare for the trainer, the bench and the dry run: optimiser groups from the modules'
marks (rirlab.optim.mark_group), the dev metric of ``select_by: auto``, the auxiliary-loss weight, RIR Table 1 rows
and settings, the memory lower bound's width, and the catalogue generated from them (``rirlab models``)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rirlab.trial import resolve
from rirlab.models import registry
from rirlab.train import Trainer

TINY = {"task": "listops", "hidden_size": 16, "batch_size": 16, "n_train": 64, "n_dev": 32, "n_test": 32,
        "eval_splits": ["test"], "num_threads": 1, "device": "cpu"}
SMALL = {"s4d": {"n_layers": 2}, "mega": {"num_layers": 2, "mega_z_dim": 8},
         "rir_ebt_grc": {"chunk_size": 6, "d_s": 8, "s4d": True}, "ebt_grc": {"d_s": 8}}
S4D_LEAVES = ("log_dt", "c", "b", "log_a_real", "a_imag")  # S4DKernel's parameters


def expected_groups(model, t) -> list[tuple[list[int], float, float]]:
    """(param ids, lr, weight_decay) per group, from the recipe's fields: when the cap is on and the model has S4D
    layers, their kernel parameters and D (by name: ``<layer>.kernel.<leaf>``, ``<layer>.d``) first with lr
    min(s4d_lr_cap, lr), then everything else with lr and weight_decay; otherwise one group."""
    named = list(model.named_parameters())
    layers = {n[: -len(".kernel.log_dt")] for n, _ in named if n.endswith(".kernel.log_dt")}

    def in_s4d(name: str) -> bool:
        owner, leaf = name.rsplit(".", 1)
        return owner in layers and leaf == "d" or owner.endswith(".kernel") and owner[: -len(".kernel")] in layers \
            and leaf in S4D_LEAVES

    s4d = [id(p) for n, p in named if in_s4d(n)]
    if not (t.s4d_lr_cap and s4d):
        return [([id(p) for _, p in named], t.lr, t.weight_decay)]
    wd = t.weight_decay if t.s4d_weight_decay is None else t.s4d_weight_decay
    return [(s4d, min(t.s4d_lr_cap, t.lr), wd), ([id(p) for _, p in named if id(p) not in s4d], t.lr, t.weight_decay)]


@pytest.mark.parametrize("model", ["s4d", "mega", "rir_ebt_grc", "ebt_grc"])
@pytest.mark.parametrize("train", [{"recipe": "paper", "lr": 3e-3, "s4d_weight_decay": 0.0},
                                   {"recipe": "paper", "lr": 5e-4},
                                   {"recipe": "adamw", "lr": 3e-3}])
def test_optimiser_groups_are_the_recipes(model, train):
    trainer = Trainer(resolve({"model": model, **TINY, **SMALL[model], **train}))
    got = [([id(p) for p in g["params"]], g["lr"], g["weight_decay"]) for g in trainer.opt.param_groups]
    assert got == expected_groups(trainer.model, trainer.cfg.train)
    if model in ("s4d", "rir_ebt_grc") and train["recipe"] == "paper":
        assert len(got) == 2 and got[0][1] == min(1e-3, train["lr"]) and got[0][0]  # the S4D group exists


def test_s4d_group_marks_survive_pickling_and_to():
    import pickle

    model = registry.get("s4d").build(resolve({"model": "s4d", **TINY}).model_cfg, _info())
    from rirlab.optim import marked

    n = len(marked(model, "s4d"))
    assert n == 2 * 4 * (len(S4D_LEAVES) + 1)  # 4 layers x 2 directions x (kernel + D)
    assert len(marked(model.to("cpu"), "s4d")) == n and len(marked(pickle.loads(pickle.dumps(model)), "s4d")) == n


def _info():
    from rirlab.tasks.base import TaskInfo

    return TaskInfo(16, 10, "classify")


def test_selection_metric_and_aux_loss_are_declared_by_the_models():
    from rirlab.train import selection_metric

    for name in ("rir_ebt_grc", "rir_grc", "s4d", "mega"):  # the papers' code's save_by "accuracy"
        assert registry.get(name).select_by == selection_metric(name, "auto") == "accuracy", name
    for name in ("ebt_grc", "bbt_grc", "bt_grc", "bt_grc_os", "rnn_grc", "om", "crvnn", "rir_om", "rir_crvnn",
                 "gt_grc", "egt_grc", "gau", "egt_gau", "ebt_gau", "transformer", "ut", "gut", "tlb", "gutlb"):
        assert selection_metric(name, "auto") == "loss", name
    halting = {n for n in registry.names() if registry.get(n).aux_loss_key}
    assert {"ut", "gut", "gutlb"} <= halting and not halting & {"tlb", "transformer", "rir_ebt_grc"}
    assert all(registry.get(n).aux_loss_key == "halt_loss_weight" for n in ("ut", "gut", "gutlb"))
    trainer = Trainer(resolve({"model": "gut", **TINY, "num_heads": 2, "max_layers": 2, "halt_loss_weight": 0.25}))
    assert trainer.aux_loss_weight == 0.25
    assert Trainer(resolve({"model": "tlb", **TINY, "num_heads": 2})).aux_loss_weight == 0.0


def test_register_refuses_keys_its_config_lacks():
    from rirlab.models.registry import register
    from rirlab.models.rir_grc import RIRGRCConfig

    with pytest.raises(ValueError, match="not a field of RIRGRCConfig"):
        register("x_grc", RIRGRCConfig, aux_loss_key="halt_loss_weight")
    with pytest.raises(ValueError, match="select_by"):
        register("x_grc", RIRGRCConfig, select_by="last")


def test_table1_rows_and_settings():
    from rirlab.bench.base import TABLE1_ROWS, BenchOptions
    from rirlab.bench.table1 import table1_models

    names, notes = table1_models(BenchOptions())
    assert names == ["rnn_grc", "mega", "s4d", "bbt_grc", "rir_grc", "om", "crvnn", "bt_grc", "bt_grc_os", "ebt_grc",
                     "rir_ebt_grc"] and not notes  # RIR Table 1, in its row order
    assert [registry.get(n).table1_row for n in names] == list(range(1, TABLE1_ROWS + 1))
    assert {n: dict(registry.get(n).table1_settings) for n in names if registry.get(n).table1_settings} == \
        {"crvnn": {"crvnn_halt": "full_loop"}}


# hidden_size x beam_size at the model's defaults (beam 1 where the config has none): the pre-flight bound's width
WIDTH = {"bbt_grc": 128, "bt_grc": 128 * 5, "bt_grc_os": 128 * 5, "crvnn": 128, "ebt_gau": 300 * 5, "ebt_grc": 128 * 5,
         "egt_gau": 300, "egt_grc": 128, "gau": 300, "gt_grc": 128, "gut": 512, "gutlb": 512, "mega": 80, "om": 128,
         "rir_crvnn": 128, "rir_ebt_grc": 128 * 7, "rir_grc": 128, "rir_om": 128, "rnn_grc": 128, "s4d": 128,
         "tlb": 512, "transformer": 512, "ut": 512}


def test_memory_width_is_hidden_times_beam():
    from rirlab.config import build

    for name, width in WIDTH.items():
        entry = registry.get(name)
        cfg = build(entry.config, {}, "test")
        assert entry.memory_width(cfg) == int(cfg.hidden_size) * int(getattr(cfg, "beam_size", 1)), name
        assert entry.memory_width(cfg) == width, (name, entry.memory_width(cfg))


def test_memory_estimate_numbers():
    from rirlab.sweeps.spec.load import BYTES_PER_PARAM, memory_estimate_gb

    for name, extra, width in (("rir_ebt_grc", {"beam_size": 3}, 16 * 3), ("s4d", {}, 16), ("gut", {}, 16)):
        resolved = resolve({"model": name, **TINY, "batch_size": 8, "max_train_len": 50, **extra})
        params = sum(p.numel() for p in registry.get(name).build(resolved.model_cfg, _info()).parameters())
        assert memory_estimate_gb(resolved) == (params * BYTES_PER_PARAM + 8 * 50 * width * 4 * 2) / 2**30, name


def test_rirlab_models_prints_every_model_with_its_doc():
    from rirlab.cli.catalog import first_paragraph, list_models

    out = CliRunner().invoke(list_models).output
    for name in registry.names():
        doc = first_paragraph(registry.get(name).doc)
        assert doc and any(line.startswith(f"{name} ") and line.endswith(doc) for line in out.splitlines()), name
    assert "selects by dev accuracy; RIR Table 1 row 11" in out and "Table 1 with crvnn_halt=full_loop" in out


SMALLEST = {**SMALL, "gut": {"num_heads": 2, "max_layers": 2}, "ut": {"num_heads": 2, "max_layers": 2},
            "gutlb": {"num_heads": 2, "max_layers": 2}, "tlb": {"num_heads": 2}, "transformer": {"num_heads": 2}}


@pytest.mark.parametrize("name", registry.names())
def test_every_model_trains_on_a_batch_of_one_token_sequences(name):
    """A training batch in which nothing composes: one logic pair of two single variables (a batch of one, or the
    last batch of an epoch). Every model gives a finite loss and finite gradients; EGT-GRC's fused backward raised
    here (no scorer row to sum)."""
    import math

    from rirlab.tasks.batching import example_length

    cfg = {"model": name, "task": "logic", "hidden_size": 16, "batch_size": 1, "n_train": 200, "n_dev": 8, "n_eval": 8,
           "eval_splits": ["ops_10"], "num_threads": 1, "device": "cpu", **SMALLEST.get(name, {})}
    trainer = Trainer(resolve(cfg))
    shortest = min(trainer.data.train, key=example_length)
    assert example_length(shortest) == 1
    trainer.model.train()
    total, *_ = trainer.loss_of(trainer.to_device(trainer.data.collate([shortest])))
    total.backward()
    assert math.isfinite(float(total.detach()))
    grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert grads and all(bool(g.isfinite().all()) for g in grads)
