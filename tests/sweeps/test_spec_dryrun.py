"""--dry-run: a compact table (one row per trial, one column per swept value) and a compute estimate."""

from __future__ import annotations

import io

import pytest
import yaml

from rirlab.sweeps.plan.dryrun import dry_run
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.spec.load import load_spec
from tests.helpers.cli import REPO

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


def show(tmp_path, timing, **changes) -> list[str]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**TINY, **changes}, sort_keys=False))
    out = io.StringIO()
    dry_run(SweepPlan.of(load_spec(path)), out=out, timing=timing)
    return out.getvalue().splitlines()


def test_dry_run_is_a_table_of_trials_and_swept_values(tmp_path):
    lines = show(tmp_path, False, variants=[{"name": "base", "set": {}}, {"name": "wide", "set": {"hidden_size": 16}}])
    assert lines[0].startswith("tiny: 8 trials (spec hash ")
    assert lines[1].split() == ["#", "variant", "lr", "seed", "steps"]
    rows = [line.split() for line in lines[2:10]]
    assert rows[0] == ["1", "base", "0.003", "0", "40"] and rows[-1] == ["8", "wide", "0.001", "1", "40"]
    assert not any("{" in line for line in lines)  # no JSON dumps of 40-key configs
    assert lines[10].startswith("every trial: task=listops, model=rir_grc") and "lr=" not in lines[10]
    assert lines[11] == "row wide: hidden_size=16"
    assert lines[12].startswith("compute: 8 trials, 320 training steps in all") and "not measured" in lines[12]


def test_every_trial_names_only_what_every_row_shares(tmp_path):
    """Issue 54 item 7: variants that set the model are not listed under the spec's own model."""
    lines = show(tmp_path, False, seeds=1, variants=[{"name": "EBT", "set": {"model": "rir_ebt_grc"}},
                                                      {"name": "GRC", "set": {"model": "rir_grc", "hidden_size": 12}}])
    (every,) = [line for line in lines if line.startswith("every trial:")]
    assert "model=" not in every and "hidden_size=" not in every and "task=listops" in every, every
    assert "row EBT: model=rir_ebt_grc" in lines and "row GRC: model=rir_grc, hidden_size=12" in lines, lines


def test_dry_run_estimates_compute_from_a_measured_step(tmp_path):
    lines = show(tmp_path, True)
    (est,) = [line for line in lines if line.startswith("compute:")]
    assert est.startswith("compute: 4 trials, 160 training steps in all; ")
    assert "CPU-hours at 1 cpu / 0 gpu per trial" in est and "step time measured here on cpu" in est
    assert "every distinct model config timed (1)" in est
    assert lines[-2] == "  early stopping: none: every trial runs all its steps"
    assert lines[-1].startswith("  on a GPU: not projected: no `rirlab bench --device cuda --json` figures")


def test_every_distinct_model_config_is_timed_and_the_estimate_is_a_range(tmp_path, monkeypatch):
    """Six model configs (issue 33 item 4: one of six was timed); repeated timings that differ give a range of
    hours, not one figure that swings between two dry runs. Steps are not run (a fake clock)."""
    import rirlab.sweeps.plan.dryrun as space

    spread = iter([10.0, 10.0, 8.0, 12.0] * 100)  # per config: the ladder's last timing, then the repeats

    def fake_measure(model, opt, batch, resolved, device, clock=None):
        return next(spread)

    monkeypatch.setattr(space, "_measure", fake_measure)
    monkeypatch.setattr(space, "TIMING_MAX_BATCH", 1)  # one batch size: batch 1 only, then the repeats
    lines = show(tmp_path, True, seeds=1, search={"hidden_size": {"grid": [4, 8, 12, 16, 20, 24]}},
                 fixed={**TINY["fixed"], "batch_size": 1})
    (est,) = [line for line in lines if line.startswith("compute:")]
    assert "every distinct model config timed (6)" in est, est
    assert " to " in est.split("of trial time")[0] and "fastest and slowest of 3 timings" in est, est


def test_a_config_not_timed_is_named(tmp_path, monkeypatch):
    import rirlab.sweeps.plan.dryrun as space

    monkeypatch.setattr(space, "TIMING_MAX_S", 0.0)  # the timing budget is spent after the first config
    lines = show(tmp_path, True, seeds=1, search={"hidden_size": {"grid": [4, 8]}})
    (est,) = [line for line in lines if line.startswith("compute:")]
    assert "1 of 2 distinct model configs timed, not timed" in est and "#2 (rir_grc)" in est, est


def test_the_early_stopping_assumption_is_stated(tmp_path):
    lines = show(tmp_path, False, scheduler={"type": "asha", "grace_period": 10, "reduction_factor": 2})
    assert lines[-1].startswith("compute: ")  # (no timing: no early-stopping line either)
    from rirlab.sweeps.plan.dryrun import asha_fraction, early_stopping_note
    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.spec.load import load_spec

    assert asha_fraction(100, 2, 1000) == pytest.approx((100 + 50 + 50 + 50 + 200 / 16) / 1000)
    plan = SweepPlan.of(load_spec(tmp_path / "s.yaml"))
    note = early_stopping_note(plan.spec, plan.resolved, [40] * 4, 2.0)
    assert note.startswith("the hours above count every trial to its last step, an upper bound; ASHA (grace 10")
    # rungs at 10 (all), 20 (half), then 40 (a quarter): (10 + 5 + 5) / 40 of the steps
    assert "keeps 1 in 2 at each rung, the sweep takes about 50% of these steps (about 1.0 h of trial time)" in note


def test_gpu_hours_are_projected_from_bench_figures_where_there_are_some(tmp_path):
    import json

    import rirlab.sweeps.plan.dryrun as space
    from rirlab.sweeps.plan.plan import SweepPlan
    from rirlab.sweeps.spec.load import load_spec

    show(tmp_path, False)
    plan = SweepPlan.of(load_spec(tmp_path / "s.yaml"))
    keys = [str(i) for i in range(len(plan.resolved))]
    shape = space.step_shape(plan.resolved[0])
    timings = {k: space.StepTiming(10.0, ((16, 10.0),), shape) for k in keys}
    first = dict(zip(keys, plan.resolved))
    bench = tmp_path / "bench"
    bench.mkdir()
    none = space.gpu_projection(plan.resolved, [40] * 4, keys, first, timings, 0, root=str(bench))
    assert none.startswith("not projected: no `rirlab bench --device cuda --json` figures (benchmarks/ holds none)")
    (bench / "g.json").write_text(json.dumps({"protocol": "step", "device": "NVIDIA H100", "model": "rir_grc",
                                              "mode": "train", "batch": 16, "length": 10, "median_ms": 3.6}))
    line = space.gpu_projection(plan.resolved, [40] * 4, keys, first, timings, 0.5, root=str(bench))
    tokens = 16 * sum(shape.padded)
    hours = 4 * 40 * 3.6 * tokens / 160 / 3.6e6
    assert line.startswith(f"about {space._duration(hours)} of trial time = {hours * 0.5:,.3g} GPU-hours at 0.5 gpu")
    assert "rir_grc on NVIDIA H100" in line


def test_dry_run_of_an_epoch_recipe_counts_epochs_x_batches(tmp_path):
    fixed = {k: v for k, v in TINY["fixed"].items() if k != "steps"} | {"epochs": 3}
    lines = show(tmp_path, False, fixed=fixed)
    assert lines[2].split()[-1] == str(3 * -(-300 // 16))  # n_train 300, batch 16


def test_dry_run_of_an_epoch_recipe_over_user_files_does_not_guess_its_steps(tmp_path):
    """A text task's training rows are its files' (no n_train): the steps are unknown until a trial reads them,
    not the 20,000 of the unused ``steps`` default."""
    fixed = {"hidden_size": 8, "chunk_size": 5, "epochs": 1, "batch_size": 32, "data_dir": str(tmp_path / "data"),
             "cache_dir": str(tmp_path / "cache"), "num_threads": 1}
    lines = show(tmp_path, False, task="sst5", fixed=fixed)
    assert lines[2].split()[-2:] == ["1", "epoch"] and not any("20,000" in line for line in lines)
    assert lines[-1].startswith("compute: 4 trials, training steps unknown (epochs over a training split not "
                                "read yet, the user's files")
    assert not (tmp_path / "cache").exists()  # the dry run read nothing and wrote nothing


def _trial(**config):
    from rirlab.trial import resolve

    return resolve({"recipe": "paper", "epochs": 100, **config})


def test_dry_run_times_a_batch_shaped_like_the_tasks_training_batches():
    """The timed batch has the task's kind, vocabulary, classes and typical padded length (not a ListOps
    classify batch of half the maximum length): logic pairs ~20-35 tokens a side at batch 128 in pools of 5,
    every flip-flop sequence train_len long with a label per token, SST with GloVe-sized frozen vectors."""
    from rirlab.tasks import logic
    from rirlab.sweeps.plan.dryrun import step_shape

    shape = step_shape(_trial(task="logic", model="ebt_grc", batch_size=128))
    batch = shape.batch(4)
    assert shape.info.kind == "pair" and shape.info.vocab_size == len(logic.VOCAB) and shape.info.num_classes == 7
    assert set(batch) == {"tokens", "mask", "tokens2", "mask2", "labels"} and batch["labels"].shape == (4,)
    assert all(15 <= n <= 37 for n in shape.padded) and len(shape.padded) == 2
    assert int(batch["tokens"].max()) < len(logic.VOCAB) and batch["mask"][0].all()  # the longest kept, unpadded
    assert (batch["tokens"][~batch["mask"]] == 0).all()

    shape = step_shape(_trial(task="flipflop", model="transformer", recipe="adamw", batch_size=16, train_len=96))
    batch = shape.batch(3)
    assert shape.info.kind == "lm" and shape.padded == (96,) and shape.info.vocab_size == 6
    assert batch["tokens"].shape == batch["labels"].shape == (3, 96) and batch["mask"].all()

    shape = step_shape(_trial(task="sst5", model="rir_grc", batch_size=128))
    assert shape.info.kind == "classify" and shape.info.num_classes == 5 and 20 <= shape.padded[0] <= 56
    assert shape.info.embeddings.shape == (shape.info.vocab_size, 300) and shape.info.vocab_size == 50002


def test_dry_run_extrapolates_a_step_with_a_fixed_cost_to_the_trial_batch(monkeypatch):
    """Timed at batch 1, 2, 8, ... up to the trial's batch (at most TIMING_MAX_BATCH) and extrapolated along the
    line through the two largest: a step of 40 ms plus 0.5 ms per token is 40 + 0.5 x 256 x S ms at batch 256,
    not 256x the batch-1 step. Steps are not run (a fake clock), so the test does not depend on this machine."""
    import rirlab.sweeps.plan.dryrun as space

    calls = []

    def fake_measure(model, opt, batch, resolved, device, clock=None):
        calls.append(tuple(batch["tokens"].shape))
        return 40.0 + 0.5 * batch["tokens"].numel()

    monkeypatch.setattr(space, "_measure", fake_measure)
    trial = _trial(task="listops", model="rir_grc", hidden_size=8, batch_size=256, num_threads=1)
    timing = space._time_step(trial, "cpu", 8.0, threads=1, trial_threads=1)
    length = timing.shape.padded[0]
    assert [n for n, _ in timing.timed] == [1, 2, 8, 32, space.TIMING_MAX_BATCH]
    assert all(s == length for _, s in calls) and 30 <= length <= 100
    assert timing.ms == pytest.approx(40.0 + 0.5 * 256 * length) and timing.scaled


def test_a_busy_machine_is_timed_with_fewer_threads(monkeypatch):
    import os

    from rirlab.sweeps.plan.dryrun import _free_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.9, 0.5, 0.3))  # this process alone
    assert _free_cores() == (2, "")
    monkeypatch.setattr(os, "getloadavg", lambda: (3.2, 3.0, 2.9))  # a 2-thread trial beside it
    assert _free_cores() == (1, "load 3.2 on 2 cores")


def test_gpu_step_time_is_interpolated_between_figures_and_never_below_the_smallest():
    """A GPU step of a small batch is mostly fixed cost (an H100: RIR-EBT-GRC 64 ms at 128 x 100, 171 ms at 128 x
    1000): fewer tokens than the smallest figure keep its time, between two figures the time is interpolated, past
    the largest it grows with the tokens."""
    from rirlab.sweeps.plan.dryrun import step_ms_at

    figs = [{"batch": 128, "length": 1000, "median_ms": 171.0}, {"batch": 128, "length": 100, "median_ms": 64.0}]
    assert step_ms_at(figs, 128 * 33) == 64.0
    assert step_ms_at(figs, 128 * 550) == pytest.approx(64.0 + 107.0 / 2)
    assert step_ms_at(figs, 128 * 2000) == pytest.approx(342.0)
    assert step_ms_at(figs[:1], 128 * 500) == 171.0
