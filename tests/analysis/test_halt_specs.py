"""The dynamic-halt specs and their published numbers ("Investigating Recurrent Transformers with Dynamic Halt",
arXiv:2402.00976): every halting spec dry-runs through the CLI, every published row of ``analysis/references/
halt.yaml`` finds a row of ours in the spec it belongs to (by ``rirlab.analysis.references``' own matching), and the
specs carry the paper's public code's settings the issue lists."""

from __future__ import annotations

import pandas as pd
import pytest

from rirlab.analysis import references as refs
from rirlab.analysis.layouts import ablation_rows
from rirlab.analysis.tables import our_configs
from rirlab.sweeps.spec.load import load_spec
from tests.helpers.cli import REPO, sqlite_uri

LRA = [f"halt_table4_lra_{t}" for t in ("listops", "text", "retrieval", "image")]
SPECS = ["halting", "gut_ablation", "flipflop", "halt_logic", *LRA]
# reference table -> the specs whose rows it is printed beside (the comment at the top of halt.yaml)
TABLE_SPECS = {"table1": ["gut_ablation", "halting"], "table2": ["halt_logic"],
               "table3_median": ["flipflop"], "table3_mean": ["flipflop"],
               **{name.removeprefix("halt_"): [name] for name in LRA}}
# specs whose every row is a paper row (variants named after the paper's rows); halting is a beta grid
FULLY_MATCHED = ["gut_ablation", "halt_logic", "flipflop", *LRA]


def spec_path(name: str):
    return REPO / "search_spaces" / f"{name}.yaml"


def our_rows(name: str, quick: bool = False):
    spec = load_spec(spec_path(name), quick=quick).spec
    return spec, ablation_rows(spec, [])


def matched(table_ref: str, name: str, quick: bool = False) -> dict[str, str]:
    """{paper row name: our row label} for one reference table (as ``--reference halt:<table>``)."""
    tables = refs.load(table_ref)
    spec, rows = our_rows(name, quick)
    out = {}
    for i, paper in sorted(refs.pair(tables, our_configs(pd.DataFrame(), rows, tables, spec.model)).paper.items()):
        out.setdefault(paper.name, rows[i].label)
    return out


def test_every_table_is_assigned_to_specs():
    assert {t.id for t in refs.load("halt")} == set(TABLE_SPECS)


@pytest.mark.parametrize("table_id", sorted(TABLE_SPECS))
def test_every_published_row_finds_a_row_of_ours(table_id):
    (table,) = refs.load(f"halt:{table_id}")
    found: dict[str, str] = {}
    for name in TABLE_SPECS[table_id]:
        spec, _ = our_rows(name)
        assert spec.task == table.task, f"{name}.yaml is task {spec.task}, table {table_id} is {table.task}"
        found.update(matched(f"halt:{table_id}", name))
    missing = [r.name for r in table.rows if r.model and r.name not in found]  # rows without a model: copied
    assert not missing, f"{table_id}: no row of ours for {missing} (ours matched: {found})"


@pytest.mark.parametrize("name", FULLY_MATCHED)
def test_every_row_of_ours_has_a_paper_row_under_the_whole_reference(name):
    """``rirlab tables SPEC --reference halt`` (all tables of the task): no row in 'no paper row for'."""
    spec, rows = our_rows(name)
    tables = refs.for_task(refs.load("halt"), spec.task, [], {})
    unmatched = [rows[i].label for i in refs.pair(tables, our_configs(pd.DataFrame(), rows, tables, spec.model)).ours_unpaired]
    assert not unmatched


def test_halting_grid_rows_for_ut_and_gut_are_the_papers_beta():
    _, rows = our_rows("halting")
    by_label = {r.label: r for r in rows}
    for paper_name, model in (("UT", "ut"), ("GUT", "gut")):
        label = matched("halt:table1", "halting")[paper_name]
        values = by_label[label].values
        assert values["model"] == model and values["halt_loss_weight"] == 0.1, (paper_name, label, values)


@pytest.mark.parametrize("name", SPECS)
def test_reference_columns_are_our_split_names(name):
    from rirlab.tasks import registry as tasks

    spec, _ = our_rows(name)
    ours = {s for s, _ in tasks.get(spec.task).splits}
    for t in refs.for_task(refs.load("halt"), spec.task, sorted(ours), {}):
        assert set(t.columns) <= ours, f"{t.id}: {sorted(set(t.columns) - ours)} are not {spec.task} splits"


@pytest.mark.parametrize("name", SPECS)
def test_quick_profile_rows_still_match(name):
    """The quick profile keeps at least one published row per table, so `--quick` sweeps show the paper."""
    for table_id, names in TABLE_SPECS.items():
        if name in names:
            assert matched(f"halt:{table_id}", name, quick=True), (name, table_id)


def trial_configs(name: str, quick: bool = False) -> dict[str, dict]:
    from rirlab.sweeps.spec.trials import expand

    spec = load_spec(spec_path(name), quick=quick).spec
    return {t.swept.get("variant", str(t.swept)): t.config for t in expand(spec)}


def test_paper_code_settings():
    """The settings of the paper's public code the issue lists (d_ff = ff_mult x hidden_size)."""
    for name in ("halting", "gut_ablation"):
        for cfg in trial_configs(name).values():
            assert cfg["ff_mult"] * cfg.get("hidden_size", 512) == 1024
            assert (cfg["batch_size"], cfg["weight_decay"], cfg["grad_clip"], cfg["adam_beta2"]) == (32, 0.1, 1.0, 0.98)
            assert (cfg["epochs"], cfg["early_stop_patience"], cfg["lr_decay"]) == (100, 10, "root_warmup")
            assert cfg["select_by"] == "accuracy"  # the code tests the best-dev checkpoint (save_by accuracy)
    abl = trial_configs("gut_ablation")
    assert (abl["TLB"]["lr"], abl["TLB"]["warmup_steps"], abl["TLB"]["chunk_size"], abl["TLB"]["memory_slots"]) \
        == (0.0125, 8000, 20, 20)
    assert (abl["GUT"]["lr"], abl["GUT"]["warmup_steps"], abl["GUT"]["max_layers"]) == (0.05, 1000, 10)

    ff = trial_configs("flipflop")
    for cfg in ff.values():
        assert (cfg["batch_size"], cfg["lr"], cfg["warmup_steps"], cfg["lr_decay"], cfg["epochs"]) \
            == (16, 0.0003, 50, "one_cycle", 1)
        assert (cfg["dev_every"], cfg["select_by"]) == (1000, "accuracy")  # the code: dev every 16,000 sequences
        assert (cfg["weight_decay"], cfg["grad_clip"], cfg["eval_batch_size"]) == (0.1, 1.0, 16)  # dev_batch_size
    assert (ff["UT"]["max_layers"], ff["GUT"]["max_layers"], ff["GUTLB"]["max_layers"]) == (10, 20, 10)
    assert (ff["TLB"]["num_layers"], ff["TLB"]["memory_layers"], ff["GUTLB"]["memory_layers"]) == (3, 2, 2)
    assert ff["TLB"]["chunk_size"] == ff["GUTLB"]["chunk_size"] == 100  # the code; Appendix A says 10
    assert ff["TLB FR"]["num_chunks"] == 5

    lg = trial_configs("halt_logic")
    for v, cfg in lg.items():
        assert (cfg["batch_size"], cfg["lr"], cfg["warmup_steps"], cfg["ff_mult"]) == (256, 0.0007, 4000, 2)
        assert (cfg["dropout"], cfg["attn_dropout"]) == (0.2, 0.5)
        if "halt_loss_weight" in cfg:
            assert cfg["halt_loss_weight"] == 0, v
        assert cfg["select_by"] == "accuracy"
    assert lg["UT"]["max_layers"] == lg["GUT"]["max_layers"] == 15 and lg["GUTLB"]["max_layers"] == 5
    assert (lg["TLB"]["chunk_size"], lg["TLB"]["memory_slots"], lg["Transformer"]["num_layers"]) == (10, 10, 4)


# The code's LRA configs (listops_lra, IMDB_lra, AAN_lra, cifar10_lra_sparse): (d, heads, d_ff, lr, warm-up,
# batch, epochs, patience) of its Transformer, then (layers or upper bound) per row, then TLB (chunk, slots, lr).
LRA_CODE = {
    "listops": ((512, 8, 1024, 0.05, 1000, 32, 100, 10), {"Transformer": 4, "UT": 10, "GUT": 10, "GUTLB": 5},
                (100, 100, 0.0125)),
    "text": ((256, 4, 1024, 0.05, 8000, 32, 100, 10), {"Transformer": 4, "UT": 10, "GUT": 10, "GUTLB": 2},
             (10, 10, 0.025)),
    "retrieval": ((128, 4, 512, 0.05, 8000, 32, 50, 5), {"Transformer": 4, "UT": 10, "GUT": 10, "GUTLB": 2},
                  (100, 10, 0.025)),
    "image": ((128, 8, 128, 0.0005, 175, 256, 200, 100), {"Transformer": 1, "UT": 3, "GUT": 3, "GUTLB": 2},
              (32, 5, 0.001)),
}


@pytest.mark.parametrize("task", sorted(LRA_CODE))
def test_lra_specs_carry_the_codes_lra_settings(task):
    (d, heads, d_ff, lr, warmup, batch, epochs, patience), depth, (chunk, slots, tlb_lr) = LRA_CODE[task]
    cfgs = trial_configs(f"halt_table4_lra_{task}")
    assert sorted(cfgs) == ["GUT", "GUTLB", "TLB", "Transformer", "UT"]
    for row, cfg in cfgs.items():
        assert (cfg["hidden_size"], cfg["num_heads"], cfg["ff_mult"] * cfg["hidden_size"]) == (d, heads, d_ff), row
        assert (cfg["epochs"], cfg["early_stop_patience"], cfg["select_by"]) == (epochs, patience, "accuracy"), row
        assert cfg["eval_batch_size"] == batch, row  # the code's dev_batch_size (its batch_size but TLB's on AAN)
        assert cfg["lr_decay"] == ("cosine" if task == "image" else "root_warmup"), row
        if row in ("TLB", "GUTLB"):
            assert (cfg["chunk_size"], cfg["memory_slots"], cfg["lr"], cfg["memory_layers"]) == (chunk, slots, tlb_lr, 1)
        else:
            assert (cfg["lr"], cfg["warmup_steps"], cfg["batch_size"]) == (lr, warmup, batch), row
        if row in ("UT", "GUT", "GUTLB"):
            assert (cfg["max_layers"], cfg["halt_loss_weight"]) == (depth[row], 0.1), row  # the code's bound 10
    assert cfgs["Transformer"]["num_layers"] == depth["Transformer"]
    assert cfgs["TLB"]["num_layers"] == (1 if task == "image" else 2)
    if task == "image":  # 8 heads of 8 at d = 128, "cls" pooling for Transformer / UT, no clip, 10% dev held out
        assert all(c["head_dim"] == 8 and c["dev_holdout"] == 0.1 and c["grad_clip"] == 0 and c["adam_eps"] == 1e-9
                   for c in cfgs.values())
        assert cfgs["Transformer"]["pooling"] == cfgs["UT"]["pooling"] == "start" and "pooling" not in cfgs["GUT"]
    if task == "retrieval":  # its configs keep PyTorch's betas and give TLB / GUTLB batch 128
        assert {c["adam_beta2"] for c in cfgs.values()} == {0.999}
        assert cfgs["TLB"]["batch_size"] == cfgs["GUTLB"]["batch_size"] == 128
    if task == "text":
        assert {c["max_len"] for c in cfgs.values()} == {4096}  # the code truncates bytes at 4,096 (LRA 4,000)


@pytest.mark.parametrize("name", SPECS)
def test_spec_dry_runs_and_tables_through_the_cli(name, tmp_path, cli):
    """In-process (the CLI's own commands; one spec through a separate process: test_data_nlp_specs.py)."""
    dry = cli("sweep", spec_path(name), "--dry-run")
    assert dry.exit_code == 0, dry.output
    proc = cli("tables", spec_path(name), "--reference", "halt", "--tracking-uri", sqlite_uri(tmp_path / "m.db"))
    assert proc.exit_code == 0, proc.output
    if name in FULLY_MATCHED:
        assert "rows of ours no published row describes" not in proc.stdout, proc.stdout


def test_lra_image_quick_rows_train_on_the_stand_in(tmp_path, monkeypatch):
    """Every row of the LRA Image spec's quick profile trains in-process on the generated CIFAR stand-in: head
    size 8 apart from d, START pooling, the held-out dev and the cosine schedule without gradient clip."""
    from rirlab.sweeps.spec.trials import expand
    from rirlab.train import run_trial

    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path / "cache"))
    spec = load_spec(spec_path("halt_table4_lra_image"), quick=True).spec
    for trial in expand(spec):
        final = run_trial({**trial.config, "max_eval_examples": 8, "max_len": 64})  # 64 of the 1,024 pixels
        assert 0 <= final["dev/accuracy"] <= 100 and 0 <= final["test/accuracy"] <= 100, trial.name
        assert "best/dev_accuracy" in final, trial.name  # select_by accuracy: dev at each epoch end, best kept
