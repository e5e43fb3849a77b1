"""The shipped BeamRecursionFamily specs carry the settings of the authors' public code, which produced the published
numbers of "Recursion in Recursion" (RIR, arXiv:2311.04449) and "Efficient Beam Tree Recursion" (EBT, arXiv:2307.10779):
JRC1995/BeamRecursionFamily, configs/<dataset>_configs.py, where configs/configLoader.py gives the pair (dataset,
model) the class ``<model>_config``. Each row (spec, variant, key, value, source "configs/<file>.py:<class>") is
asserted against the resolved trial config of that variant.

:data:`CODE` (tests/specs/authors_configs.yaml) mirrors the config files: per file, class -> [parent class, {rirlab key:
value the class itself sets}], so a variant's rows are its class's values with inheritance, each citing the class that
sets it. Their keys in rirlab's names: in_dropout (None in rirlab = dropout), dropout, save_by -> select_by (rirlab's
``auto``: the model's own, rirlab.train.selection_metric), train_batch_size -> micro_batch_size (rirlab's None or a
value >= batch_size = the whole batch), dev_batch_size -> eval_batch_size, max_grad_norm -> grad_clip (None -> 0),
bucket_size_factor -> bucket_factor, scheduler ReduceLROnPlateau -> scheduler plateau (scheduler_patience,
scheduler_reduce_factor -> plateau_patience, plateau_factor), cosine / linearWarmup -> scheduler schedule with lr_decay
cosine / linear, model_chunk_size -> chunk_size, pre_SSM -> s4d, s4_dropout -> s4d_dropout, norm (skip -> none) ->
s4d_norm of the RIR models' S4D pre-chunk layer, RBA False -> alignment string_it, RBA_random -> alignment random,
memory_slots, memory_dropout -> om_slots, om_memory_dropout, layers -> n_layers (S4DStack), MEGA's num_encoder_layers,
z_dim, hidden_dim, ffn_hidden_dim, n_dim, attention_dropout, hidden_dropout -> num_layers, mega_z_dim, mega_v_dim
(rirlab's None = 2 x hidden_size), mega_ffn_dim (same), mega_ema_dim, mega_attn_dropout, mega_act_dropout, betas, eps ->
adam_beta1, adam_beta2, adam_eps. A row applies where the variant's model has the key (rirlab's RIR-GRC has no beam, its
S4D stack no s4d_dropout: its dropout is that), and the s4d_* rows only where our model runs the S4D layer (whether it
does is the code's pre_SSM row).

Training length: the code trains ``epochs`` epochs; S4DStack and MEGA also set training_steps, the length of their lr
schedule. rirlab trains by steps (steps, epochs None) where the spec follows the schedule: MEGA, 90,000 steps (on
logical inference the code's 60 epochs are 114,000 steps, the last 24,000 at lr 0; on ListOps-O it stops at its 60
epochs, about 84,400 steps, with the lr at 6% of its peak), and ListOps-O S4D, 60,000 steps (the code's 40 epochs are
72,000, past the end of its cosine's period, after which the lr rises again). Elsewhere the code's epochs end first and
rirlab trains those, its cosine ending with them.

Left out, as rirlab has no key for them: out_dropout where it differs from dropout (SST5, IMDB: 0.4; rirlab's head uses
dropout, 0.2 there), classifier_mlp False (a single linear head: S4D and MEGA on ListOps-O and the LRA single-sequence
tasks, and the LRA Text RvNN rows; a pair task's head is always the MLP), the S4D stack's norm "batch" and prenorm,
initial_transform False (no linear map after frozen GloVe; rirlab always has one), batch_pair for the non-RIR pair
models, the pool of a length bucket (train_batch_size x bucket_size_factor there, batch_size x bucket_factor here),
MEGA's warmup_init_lr 1e-7 and the cosine's eta_min 1e-6 (rirlab: 0). Models without a class in a file (GT-GRC anywhere;
BT-GRC OS on ListOps-O and logic: BT_GRC_config; BT-GRC and BT-GRC OS on SST5, IMDB and MNLI) take that file's
BiRecurrentGRC_config (or BT_GRC_config) settings.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from rirlab.train import selection_metric
from rirlab.trial import resolve
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import REPO

# per configs/<file>_configs.py of JRC1995/BeamRecursionFamily: class -> [parent class, {rirlab key: value it sets}]
CODE = yaml.safe_load((Path(__file__).parent / "authors_configs.yaml").read_text(encoding="utf-8"))

BI = "BiRecurrentGRC"
# spec -> (the code's config file, {variant: its config class, without "_config"})
SPECS = {
    "rir_table2": ("listopsc", {"MEGA": "MEGA", "S4D": "S4DStack", "BB-Tree GRC": "BalancedTreeGRC", "RIR-GRC": "HGRC",
                                "OM": "OM", "CRvNN": "CRvNN", "BT-GRC OS": "BT_GRC", "EBT-GRC": "EBT_GRC",
                                "RIR-EBT-GRC": "HEBT_GRC", "-S4D": "HEBT_GRC_noSSM", "-Beam Align": "HEBT_GRC_noRBA"}),
    "rir_ablation": ("listopsc", {"RIR-EBT-GRC": "HEBT_GRC", "-S4D": "HEBT_GRC_noSSM", "-Beam Align": "HEBT_GRC_noRBA",
                                  "+Random Align": "HEBT_GRC_random", "+RIR inference": "HEBT_GRC",  # a CLI flag there
                                  "beam 5": "HEBT_GRC_small", "chunk 20": "HEBT_GRC_chunk20",
                                  "chunk 10": "HEBT_GRC_chunk10", "RIR-GRC": "HGRC", "RIR-CRvNN": "HCRvNN",
                                  "RIR-OM": "HOM"}),
    "chunk_beam": ("listopsc", {"": "HEBT_GRC"}),  # every grid point; its swept chunk_size and beam_size left out
    "ebt_table2": ("listopsc", {"GT-GRC": BI, "EGT-GRC": "EGT_GRC", "OM": "OM", "CRvNN": "CRvNN", "BT-GRC": "BT_GRC",
                                "BT-GRC OS": "BT_GRC", "EBT-GRC": "EBT_GRC", "-Slice": "EBT_GRC"}),
    "rir_table3": ("proplogic", {"MEGA": "MEGA", "S4D": "S4DStack", "BBT-GRC": "BalancedTreeGRC", "RIR-GRC": "HGRC",
                                 "OM": "OM", "BT-GRC OS": "BT_GRC", "EBT-GRC": "EBT_GRC", "RIR-EBT-GRC": "HEBT_GRC"}),
    "ebt_table4_logic": ("proplogic", {"GT-GRC": BI, "EGT-GRC": "EGT_GRC", "CRvNN": "CRvNN", "OM": "OM",
                                       "BT-GRC": "BT_GRC", "BT-GRC OS": "BT_GRC", "EBT-GRC": "EBT_GRC"}),
    **{name: (cfg, {"S4D": "S4DStack", "BBT-GRC": "BalancedTreeGRC", "RIR-GRC": "HGRC", "RIR-EBT-GRC": "HEBT_GRC",
                    "-S4D": "HEBT_GRC_noSSM"})
       for name, cfg in (("rir_table4_lra_listops", "listops_lra"), ("rir_table4_lra_retrieval", "AAN_lra"),
                         ("rir_table4_lra_text", "IMDB_lra"))},
    **{f"{kind}_{task}": (cfg, {"CRvNN": "CRvNN", "OM": "OM", "BT-GRC": BI, "BT-GRC OS": BI, "EBT-GRC": "EBT_GRC",
                                **({"BBT-GRC": "BalancedTreeGRC", "RIR-GRC": "HGRC", "RIR-EBT-GRC": "HEBT_GRC"}
                                   if kind == "rir_table6" else {"GT-GRC": BI, "EGT-GRC": "EGT_GRC"})})
       for kind in ("rir_table6", "ebt_table4") for task, cfg in (("sst5", "SST5"), ("imdb", "IMDB"))},
    **{f"{kind}_{task}": (cfg, {"CRvNN": "CRvNN", "OM": "OM", "BT-GRC": bt, "BT-GRC OS": bt_os, "EBT-GRC": "EBT_GRC",
                                **({"BBT-GRC": "BalancedTreeGRC", "RIR-GRC": "HGRC", "RIR-EBT-GRC": "HEBT_GRC"}
                                   if kind == "rir_table7" else {})})
       for kind in ("rir_table7", "ebt_table3")
       for task, cfg, bt, bt_os in (("snli", "SNLI", "BT_GRC", "BT_GRC_OS"), ("mnli", "MNLIdev", BI, BI),
                                    ("qqp", "QQP", "BT_GRC", "BT_GRC_OS"))},
    **{f"ebt_table3_gau_{task}": (cfg, {"GAU": "GAU_IN", "EGT-GAU": "EGT_GAU_IN", "EBT-GAU": "EBT_GAU_IN"})
       for task, cfg in (("snli", "SNLI"), ("mnli", "MNLIdev"), ("qqp", "QQP"))},
}
del SPECS["rir_table7_mnli"][1]["BT-GRC"]  # RIR Table 7 prints no BT-GRC row on MNLI
SWEPT = {"chunk_beam": {"chunk_size", "beam_size"}}


def code_values(dataset: str, klass: str) -> dict:
    """{rirlab key: (value, "configs/<file>.py:<class>")} of a config class with what it inherits."""
    chain, name = [], f"{klass}_config"
    while name is not None:
        parent, values = CODE[dataset][name]
        chain.append((name, values))
        name = parent
    out = {}
    for name, values in reversed(chain):  # the derived class sets its values after super().__init__()
        out.update({k: (v, f"configs/{dataset}_configs.py:{name}") for k, v in values.items()})
    return out


def ours(cfg: dict, key: str):
    """What the resolved trial config means for ``key`` in the code's terms (module doc)."""
    if key == "in_dropout":
        return cfg["dropout"] if cfg["in_dropout"] is None else cfg["in_dropout"]
    if key == "micro_batch_size":
        micro = cfg["micro_batch_size"]
        return cfg["batch_size"] if micro is None or micro >= cfg["batch_size"] else micro
    if key == "select_by":
        return selection_metric(cfg["model"], cfg["select_by"])
    if key in ("mega_v_dim", "mega_ffn_dim"):
        return cfg[key] or 2 * cfg["hidden_size"]
    return cfg[key]


@functools.lru_cache(maxsize=None)
def trial_configs(spec: str) -> dict[str, dict]:
    """{variant (a grid point's swept values where the spec has no variants): resolved flat config} (first seed)."""
    loaded = load_spec(REPO / "search_spaces" / f"{spec}.yaml")
    out = {}
    for t in [*expand(loaded.spec), *(ev.record for ev in loaded.evaluations)]:  # evaluation-only rows too
        name = t.swept.get("variant", ",".join(f"{k}={v}" for k, v in t.swept.items() if k != "seed"))
        out.setdefault(name, resolve(t.config).flat())
    return out


def rows(spec: str, variant: str) -> list[tuple]:
    """(spec, variant, key, value, source) of every code value the variant's model has a key for."""
    dataset, classes = SPECS[spec]
    klass = classes["" if spec in SWEPT else variant]
    code = code_values(dataset, klass)
    cfg = trial_configs(spec)[variant]
    with_s4d = cfg.get("s4d", True)  # the s4d_* rows only where our model runs the layer (the s4d row: the code's)
    return [(spec, variant, key, value, source) for key, (value, source) in code.items()
            if key in cfg and key not in SWEPT.get(spec, ()) and (with_s4d or not key.startswith("s4d_"))]


VARIANTS = [(spec, variant) for spec in SPECS for variant in trial_configs(spec)]


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_every_variant_has_its_config_class(spec):
    dataset, classes = SPECS[spec]
    assert spec in SWEPT or set(classes) == set(trial_configs(spec)), spec
    for klass in classes.values():
        assert f"{klass}_config" in CODE[dataset], (spec, klass)


@pytest.mark.parametrize("spec,variant", VARIANTS, ids=[f"{s}:{v}" for s, v in VARIANTS])
def test_variant_carries_the_authors_config(spec, variant):
    cfg = trial_configs(spec)[variant]
    table = rows(spec, variant)
    assert len(table) >= 15, table  # the training keys at least
    wrong = [(key, value, source, ours(cfg, key)) for _, _, key, value, source in table if ours(cfg, key) != value]
    assert not wrong, f"{spec} {variant}: (key, the code's value, source, ours) {wrong}"


RANGER_EPS = 1e-8  # optimizers/ranger.py: Ranger(..., eps=1e-8); agents/*_agent.py construct it with lr and weight decay


RANGER_VARIANTS = [(s, v) for s, v in VARIANTS if trial_configs(s)[v].get("optimizer") == "ranger"]


@pytest.mark.parametrize("spec,variant", RANGER_VARIANTS, ids=[f"{s}:{v}" for s, v in RANGER_VARIANTS])
def test_a_ranger_variant_steps_with_the_ranger_class_eps(spec, variant):
    assert trial_configs(spec)[variant]["ranger_eps"] == RANGER_EPS, (spec, variant)
