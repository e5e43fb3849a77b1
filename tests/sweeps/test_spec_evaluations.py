"""Evaluation-only rows (a variant with ``evaluates: ROW``): checked up front, planned as one evaluation per trial of
the row they name, trained never, shown by the dry run and laid out by the table in spec order."""

from __future__ import annotations

import pytest
import yaml

from rirlab.errors import UserError
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import REPO, invoke

QUICK = {"hidden_size": 16, "steps": 4, "batch_size": 4, "n_train": 16, "n_dev": 8, "n_test": 8, "iid_pool": 200,
         "eval_splits": ["test"], "num_threads": 1}


def write(tmp_path, variants, seeds=2, **extra):
    path = tmp_path / "ev.yaml"
    path.write_text(yaml.safe_dump({"name": "ev", "task": "listops", "model": "rir_ebt_grc", "fixed": QUICK,
                                    "variants": variants, "seeds": seeds, **extra}, sort_keys=False))
    return path


ROWS = [{"name": "RIR-EBT-GRC", "set": {}}, {"name": "-S4D", "set": {"s4d": False}},
        {"name": "+RIR inference", "evaluates": "RIR-EBT-GRC", "set": {"inference": "rir"}}]


def test_an_evaluation_row_trains_nothing_and_tests_each_seed_of_its_row(tmp_path):
    plan = SweepPlan.of(load_spec(write(tmp_path, ROWS)))
    assert [t.name for t in plan.trials] == ["RIR-EBT-GRC,seed=0", "RIR-EBT-GRC,seed=1", "-S4D,seed=0", "-S4D,seed=1"]
    assert [(e.record.name, e.source.name) for e in plan.evaluations] == [
        ("+RIR inference,seed=0", "RIR-EBT-GRC,seed=0"), ("+RIR inference,seed=1", "RIR-EBT-GRC,seed=1")]
    ev = plan.evaluations[0]
    assert ev.changed == {"inference": "rir"}  # the source's config, the evaluation key changed, nothing else
    assert {k: v for k, v in ev.record.config.items() if k != "inference"} == \
        {k: v for k, v in ev.source.config.items() if k != "inference"}
    assert [r.model_cfg.inference for r in plan.evaluated] == ["rir", "rir"]
    assert "+RIR inference" not in plan.param_space()["variant"].categories  # no Tune trial of it


@pytest.mark.parametrize("row, says", [
    ({"name": "x", "evaluates": "RIR-EBT-GRX", "set": {}}, "evaluates 'RIR-EBT-GRX', which is not a variant"),
    ({"name": "x", "evaluates": "RIR-EBT-GRC", "set": {"lr": 0.1}}, "sets lr, which changes training"),
    ({"name": "x", "evaluates": "+RIR inference", "set": {}}, "which is evaluation-only itself"),
])
def test_a_bad_evaluation_row_is_refused_in_one_line_before_anything_runs(tmp_path, row, says):
    with pytest.raises(UserError) as err:
        load_spec(write(tmp_path, [*ROWS, row]))
    assert says in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_setting_the_model_does_not_have_is_refused_at_its_row(tmp_path):
    rows = [{"name": "OM", "set": {"model": "om"}}, {"name": "OM rir", "evaluates": "OM", "set": {"inference": "rir"}}]
    with pytest.raises(UserError) as err:
        load_spec(write(tmp_path, rows))
    assert "inference" in str(err.value)


def test_the_evaluation_row_alone_trains_nothing_and_needs_trials_trained_before(tmp_path):
    spec = write(tmp_path, ROWS)
    plan = SweepPlan.of(load_spec(spec, overrides={"variant": "+RIR inference"}))
    assert plan.trials == () and [e.source.name for e in plan.evaluations] == ["RIR-EBT-GRC,seed=0", "RIR-EBT-GRC,seed=1"]
    # the task's splits and their paper labels are recorded for it too: a table of the evaluation row alone showed
    # the splits by name in alphabetical order (args_10, ..., test) instead of Table 5's columns
    assert [label for _, label in plan.splits][:4] == ["near-IID", "200-300", "500-600", "900-1000"]
    store = tmp_path / "empty.db"  # no trial of RIR-EBT-GRC trained there: refused before Ray starts or a store is made
    r = invoke("sweep", spec, "--set", "variant=+RIR inference", "--tracking-uri", f"sqlite:///{store}")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 2, r.output  # the banner, then the one line
    assert "evaluates the weights of trial RIR-EBT-GRC,seed=0, which this sweep does not train" in r.output
    assert "--set 'variant=[RIR-EBT-GRC,+RIR inference]'" in r.output and not store.exists()  # quoted: a shell takes it


def test_the_dry_run_lists_the_evaluations_and_the_weights_they_test(tmp_path):
    r = invoke("sweep", write(tmp_path, ROWS), "--dry-run", "--set", "steps=2")
    assert r.exit_code == 0, r.output
    assert "ev: 4 trials" in r.output
    assert ("then 2 evaluation(s), row +RIR inference: the trained weights of RIR-EBT-GRC,seed=0, RIR-EBT-GRC,seed=1 "
            "evaluated with inference=rir (no training)") in r.output


def test_specs_without_evaluation_rows_keep_their_hash(tmp_path):
    """The field is new: sweeps recorded before it must still be found by --resume (the hash is how)."""
    spec = REPO / "search_spaces" / "rir_table2.yaml"
    loaded = load_spec(spec, overrides={"variant": "RIR-EBT-GRC", "seed": 0, "num_threads": 1, "resources.cpu": 1})
    assert loaded.hash == "33bf6ea03849"  # the running RIR-EBT-GRC seed 0 sweep (docs/results), recorded by ae464f5


def test_table5_spec_evaluates_rir_inference_on_the_rir_ebt_grc_weights():
    loaded = load_spec(REPO / "search_spaces" / "rir_ablation.yaml")
    names = {t.variant for t in expand(loaded.spec)}
    assert "+RIR inference" not in names and "RIR-EBT-GRC" in names
    assert {(e.record.variant, e.source.variant) for e in loaded.evaluations} == {("+RIR inference", "RIR-EBT-GRC")}
    assert len(loaded.evaluations) == 3  # one per seed


def test_the_table_lays_the_evaluation_row_out_in_spec_order(tmp_path):
    r = invoke("tables", write(tmp_path, ROWS), "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}")
    assert r.exit_code == 0, r.output
    rows = [line.split("|")[1].strip() for line in r.output.splitlines() if line.startswith("| ")][1:]
    assert rows == ["RIR-EBT-GRC", "-S4D", "+RIR inference"]
