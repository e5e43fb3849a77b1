"""--dry-run: a compact table (one row per trial, one column per swept value) and a compute estimate."""

from __future__ import annotations

import io

import yaml

from sweeps.space import dry_run
from sweeps.spec import load_spec
from tests.conftest import REPO

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


def show(tmp_path, timing, **changes) -> list[str]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**TINY, **changes}, sort_keys=False))
    out = io.StringIO()
    dry_run(load_spec(path), out=out, timing=timing)
    return out.getvalue().splitlines()


def test_dry_run_is_a_table_of_trials_and_swept_values(tmp_path):
    lines = show(tmp_path, False, variants=[{"name": "base", "set": {}}, {"name": "wide", "set": {"hidden_size": 16}}])
    assert lines[0].startswith("tiny: 8 trials (spec hash ")
    assert lines[1].split() == ["#", "variant", "lr", "seed", "steps"]
    rows = [line.split() for line in lines[2:10]]
    assert rows[0] == ["1", "base", "0.003", "0", "40"] and rows[-1] == ["8", "wide", "0.001", "1", "40"]
    assert not any("{" in line for line in lines)  # no JSON dumps of 40-key configs
    assert lines[10].startswith("every trial: task=listops, model=rir_grc") and "lr=" not in lines[10]
    assert lines[11].startswith("compute: 8 trials, 320 training steps in all") and "not measured" in lines[11]


def test_dry_run_estimates_compute_from_a_measured_step(tmp_path):
    est = show(tmp_path, True)[-1]
    assert est.startswith("compute: 4 trials, 160 training steps in all; about ")
    assert "CPU-hours at 1 cpu / 0 gpu per trial" in est and "step time measured here on cpu" in est
    assert "1 model config timed" in est


def test_dry_run_of_an_epoch_recipe_counts_epochs_x_batches(tmp_path):
    fixed = {k: v for k, v in TINY["fixed"].items() if k != "steps"} | {"epochs": 3}
    lines = show(tmp_path, False, fixed=fixed)
    assert lines[2].split()[-1] == str(3 * -(-300 // 16))  # n_train 300, batch 16
