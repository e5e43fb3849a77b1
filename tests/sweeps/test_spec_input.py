"""Hostile spec files and --set values end in one line ``error: ...`` and exit code 2, before anything starts."""

from __future__ import annotations

import pytest

from tests.helpers.cli import REPO, invoke

TINY = (REPO / "tests" / "specs" / "tiny.yaml").read_text()


def code_and_output(*args):
    result = invoke(*args)
    return result.exit_code, result.output


def refused(*args) -> str:
    code, out = code_and_output(*args)
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2, out
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    assert "Traceback" not in out and "/work" not in out.replace(str(REPO), "REPO")
    return lines[0]


def spec_file(tmp_path, text: str, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_duplicate_key_is_refused_naming_both_lines(tmp_path):
    # last-wins would have run 4,000,000 steps
    path = spec_file(tmp_path, TINY + "fixed: {steps: 4000000}\n")
    msg = refused("sweep", path, "--dry-run")
    first = TINY.splitlines().index("fixed:") + 1
    assert "'fixed' is given twice" in msg and f"first at line {first}" in msg and f"{path}:{TINY.count(chr(10)) + 1}:" in msg


def test_duplicate_key_inside_a_section_is_refused(tmp_path):
    path = spec_file(tmp_path, TINY.replace("  steps: 40\n", "  steps: 40\n  steps: 400\n"))
    assert "'steps' is given twice" in refused("sweep", path, "--dry-run")


def test_non_utf8_spec_is_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: tiny\n# caf\xe9\n")
    assert "not UTF-8" in refused("sweep", path, "--dry-run")


def test_directory_as_spec_is_not_file_not_found(tmp_path):
    from pathlib import Path

    from rirlab.errors import UserError
    from rirlab.sweeps.spec.lines import load_with_lines

    with pytest.raises(UserError, match="is a directory"):
        load_with_lines(Path(tmp_path))
    code, out = code_and_output("sweep", tmp_path, "--dry-run")
    assert code == 2 and "not found" not in out and "directory" in out


def test_yaml_alias_bomb_is_refused_without_expanding(tmp_path):
    levels = ["  l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    levels += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    text = TINY.replace("fixed:\n", "fixed:\n" + "\n".join(levels) + "\n")  # 10^9 values once expanded
    assert len(text) - len(TINY) < 1000
    path = spec_file(tmp_path, text)
    msg = refused("sweep", path, "--dry-run")
    assert "aliases" in msg and str(path) in msg


@pytest.mark.parametrize("value, says", [("k=[1,2", "not valid YAML"), ("k=!!python/object:os.system {}", "not valid YAML"),
                                         ("=3", "key before '=' is empty")])
def test_bad_set_value_is_one_line_naming_set(value, says):
    msg = refused("sweep", REPO / "tests" / "specs" / "tiny.yaml", "--dry-run", "--set", value)
    assert says in msg and "--set" in msg and "tiny.yaml:" not in msg


def load(tmp_path, text=TINY, quick=False, **overrides):
    from rirlab.sweeps.spec.load import load_spec

    return load_spec(spec_file(tmp_path, text), quick=quick, overrides=overrides)


def test_set_seed_runs_that_seed(tmp_path):
    from rirlab.sweeps.spec.trials import expand

    trials = expand(load(tmp_path, seed=3).spec)
    assert sorted(t.config["seed"] for t in trials) == [3, 3] and all(t.swept["seed"] == 3 for t in trials)


def test_set_variant_runs_those_rows_only(tmp_path):
    from rirlab.sweeps.spec.trials import expand

    rows = TINY + "variants:\n  - {name: a, set: {}}\n  - {name: b, set: {lr: 0.5}}\n  - {name: c, set: {lr: 0.2}}\n"
    assert {t.swept["variant"] for t in expand(load(tmp_path, rows, variant="b").spec)} == {"b"}
    both = expand(load(tmp_path, rows, variant=["c", "a"]).spec)
    one = expand(load(tmp_path, rows, variant="a").spec)
    assert {t.swept["variant"] for t in both} == {"a", "c"} and len(both) == 2 * len(one)


def test_set_reaches_spec_level_fields(tmp_path):
    spec = load(tmp_path, seeds=3, num_samples=4, max_concurrent=1, algorithm="random",
                **{"resources.cpu": 2, "scheduler": {"type": "asha"}}).spec
    assert (spec.seed_list, spec.num_samples, spec.max_concurrent, spec.algorithm) == ([0, 1, 2], 4, 1, "random")
    assert (spec.resources.cpu, spec.scheduler.type) == (2, "asha")
    assert "seeds" not in spec.fixed and "resources.cpu" not in spec.fixed


@pytest.mark.parametrize("field, value, default, read", [("reuse_workers", "true", False, True),
                                                         ("keep_checkpoints", 0, 1, 0)])
def test_how_trials_run_is_settable_and_no_part_of_the_spec_hash(tmp_path, field, value, default, read):
    """How trials run (in which worker, how many checkpoints stay on disk), not what they compute: --resume of a
    sweep with it changed is the same sweep."""
    plain = load(tmp_path)
    changed = load(tmp_path, **{field: value})
    assert (getattr(plain.spec, field), getattr(changed.spec, field)) == (default, read)
    assert plain.hash == changed.hash
    assert load(tmp_path, TINY + f"{field}: {value}\n").hash == plain.hash  # in the file as by --set
    assert load(tmp_path, max_concurrent=1).hash != plain.hash  # (a field that counts changes it)


def test_set_steps_goes_to_the_budget_when_the_spec_budgets_steps(tmp_path):
    from rirlab.sweeps.spec.trials import expand

    loaded = load(tmp_path, TINY + "budget: {steps: 30}\n", steps=7)
    assert {t.config["steps"] for t in expand(loaded.spec)} == {7}


@pytest.mark.parametrize("text, overrides, says", [
    (TINY, {"seeds": True}, "seeds: Input should be a valid integer"),
    (TINY, {"seeds": [1, 1]}, "seed 1 is listed twice"),
    (TINY, {"resources.cpus": 2}, "unknown key 'cpus' (did you mean cpu?)"),
    (TINY, {"search": {}}, "cannot be replaced"),
    (TINY, {"seed": 1, "seeds": 2}, "keep one"),
    (TINY, {"variant": "a"}, "has no variants"),
    (TINY + "variants:\n  - {name: RIR-GRC, set: {}}\n", {"variant": "RIR-GR"}, "did you mean RIR-GRC"),
    (TINY + "variants:\n  - {name: a, set: {}}\n  - {name: b, set: {lr: 0.5}}\n",
     {"lr": 0.1}, "variant 'b' sets lr itself"),
    (TINY.replace("  steps: 40\n", "  epochs: 2\n"), {"steps": 5}, "overrides steps"),
    (TINY.replace("  steps: 40\n", "  epochs: 1\n"), {"budget.steps": 20}, "budget.steps would change nothing"),
    (TINY, {"optuna.sampler": "random"}, "optuna: settings have no effect under algorithm: grid"),
    (TINY, {"optuna.sampler": "tpe"}, "optuna: settings have no effect under algorithm: grid"),  # the default's
    (TINY, {"num_samples": 5}, "num_samples has no effect under algorithm: grid"),  # issue 54 item 8
])
def test_override_that_cannot_take_effect_is_refused(tmp_path, text, overrides, says):
    from rirlab.errors import UserError

    with pytest.raises(UserError, match="--set") as err:
        load(tmp_path, text, **overrides)
    assert says in str(err.value)


@pytest.mark.parametrize("text, says", [
    (TINY.replace("seeds: 2", "seeds: [0, 0]"), "seed 0 is listed twice"),
    (TINY.replace("seeds: 2", "seeds: true"), "seeds: Input should be a valid integer"),
    (TINY + "num_samples: true\n", "num_samples: Input should be a valid integer"),
    (TINY + "budget: {steps: true}\n", "budget.steps: Input should be a valid integer"),
    (TINY.replace("  steps: 40", "  steps: true"), "steps: True is not a number"),
    (TINY.replace("  steps: 40", "  epochs: true"), "epochs: True is not a number"),
    (TINY.replace("{grid: [0.003, 0.001]}", "{grid: [0.003, 0.001], when: {modle: rir_grc}}"),
     "names 'modle', which no trial sets (did you mean model?)"),
    (TINY.replace("{grid: [0.003, 0.001]}", "{grid: [0.003, 0.001], when: {model: bbt_grc}}"), "holds in no trial"),
    (TINY.replace("metric: dev/accuracy", "metric: dev/acc"), "(did you mean dev/accuracy?)"),
    (TINY.replace("metric: dev/accuracy", "metric: len_200_300/accuracy"), None),
    (TINY.replace("seeds: 2", "seeds: 1000000000"), "2,000,000,000 trials"),
    (TINY.replace("  steps: 40", "  steps: 40\n  seed: 3"), "seed in fixed would be ignored"),
    (TINY.replace("name: tiny", "name: '..'"), "name: '..' names a folder, not a sweep"),
    (TINY.replace("name: tiny", "name: '.'"), "name: '.' names a folder, not a sweep"),
    (TINY.replace("name: tiny", "name: " + "x" * 300), "name: String should match pattern"),
    (TINY.replace("name: tiny", "name: tiny.v2"), None),
    (TINY + "num_samples: 3\n", "num_samples has no effect under algorithm: grid"),
    (TINY + "optuna: {sampler: tpe}\n", "optuna: settings have no effect under algorithm: grid"),
    (TINY + "variants: [{name: \"two\\nlines\", set: {}}]\n", "variants.0.name: String should match pattern"),
    (TINY + "variants: [{name: " + "v" * 101 + ", set: {}}]\n", "variants.0.name: String should have at most 100"),
])
def test_silently_accepted_values_are_refused(tmp_path, text, says):
    from rirlab.errors import UserError

    if says is None:  # controls: valid specs load
        load(tmp_path, text)
        return
    with pytest.raises(UserError) as err:
        load(tmp_path, text)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_metric_of_an_evaluated_split_is_accepted_and_one_not_evaluated_is_refused(tmp_path):
    from rirlab.errors import UserError

    load(tmp_path, TINY.replace("metric: dev/accuracy", "metric: test/loss"))
    text = TINY.replace("metric: dev/accuracy", "metric: args_10/accuracy").replace("  n_test: 50", "  n_test: 50\n  eval_splits: [test]")
    with pytest.raises(UserError, match="args_10/accuracy' is not reported"):
        load(tmp_path, text)


def test_when_may_name_the_variant(tmp_path):
    from rirlab.sweeps.spec.trials import expand

    text = TINY.replace("{grid: [0.003, 0.001]}", "{grid: [0.003, 0.001], when: {variant: b}}") + \
        "variants:\n  - {name: a, set: {}}\n  - {name: b, set: {hidden_size: 16}}\n"
    trials = expand(load(tmp_path, text).spec)
    assert len(trials) == (1 + 2) * 2 and all(("lr" in t.swept) == (t.variant == "b") for t in trials)


def test_trial_cap_counts_before_expanding_and_can_be_raised(tmp_path, monkeypatch):
    import time

    from rirlab.errors import UserError

    grid = ", ".join(str(i) for i in range(1, 1001))
    big = TINY.replace("  chunk_size: 5\n", "").replace("{grid: [0.003, 0.001]}", f"{{grid: [{grid}]}}\n  chunk_size: {{grid: [{grid}]}}")
    t0 = time.time()
    with pytest.raises(UserError, match=r"2,000,000 trials .* max_trials: N in the spec \(or \$RIRLAB_MAX_TRIALS=N\)"):
        load(tmp_path, big)
    assert time.time() - t0 < 5
    small = TINY.replace("seeds: 2", "seeds: 6")
    monkeypatch.setenv("RIRLAB_MAX_TRIALS", "10")
    with pytest.raises(UserError, match="limit of 10"):
        load(tmp_path, small)
    load(tmp_path, small + "max_trials: 12\n")  # the spec's own limit wins


def test_quick_without_a_quick_block_is_refused(tmp_path):
    msg = refused("sweep", spec_file(tmp_path, TINY), "--dry-run", "--quick")
    assert "no quick: block" in msg and "drop --quick" in msg


def test_trial_names_are_short_rounded_and_name_the_variant_alone():
    from rirlab.contract import trial_name

    assert trial_name({"variant": "-S4D", "chunk_size": 20, "seed": 1}) == "-S4D,chunk_size=20,seed=1"
    assert trial_name({"lr": 0.0012345678901, "dropout": 0.1, "seed": 0}) == "lr=0.001235,dropout=0.1,seed=0"


@pytest.mark.parametrize("key, value", [("beam_size", 10**6), ("hidden_size", 10**6)])
def test_sizes_that_cannot_fit_are_refused_with_the_estimate(tmp_path, key, value):
    from rirlab.errors import UserError

    text = TINY.replace("model: rir_grc", "model: rir_ebt_grc")
    with pytest.raises(UserError, match=rf"--set {key}: .* needs at least [\d,.]+ GB, more than this machine's memory"):
        load(tmp_path, text, **{key: value})
    load(tmp_path, text, beam_size=7)  # the usual sizes load


def test_memory_limit_can_name_bigger_nodes(tmp_path, monkeypatch, capsys):
    from rirlab.errors import UserError

    text = TINY.replace("model: rir_grc", "model: rir_ebt_grc")
    monkeypatch.setenv("RIRLAB_MEMORY_GB", "0.0001")
    with pytest.raises(UserError, match=r"\$RIRLAB_MEMORY_GB"):
        load(tmp_path, text)
    monkeypatch.setenv("RIRLAB_MEMORY_GB", "100000")
    load(tmp_path, text, beam_size=1000)
    assert "warning" not in capsys.readouterr().err


def test_optuna_settings_are_validated_before_anything_starts(tmp_path):
    from rirlab.errors import UserError

    text = TINY.replace("{grid: [0.003, 0.001]}", "{uniform: [0.001, 0.003]}") + "algorithm: optuna\n"
    with pytest.raises(UserError, match="--set optuna.storage: 'foo://x' is not a database URL"):
        load(tmp_path, text, **{"optuna.storage": "foo://x"})
    with pytest.raises(UserError, match="optuna.sampler"):
        load(tmp_path, text, **{"optuna.sampler": "bogus"})
    assert load(tmp_path, text + "optuna: {sampler: qmc, study_name: s1}\n").spec.optuna.sampler == "qmc"
    assert load(tmp_path, text, **{"optuna.sampler": "random"}).spec.optuna.sampler == "random"  # --set reaches it


def test_a_recorded_grid_spec_reads_back(tmp_path):
    """The parent's record of the spec is a full dump (num_samples, optuna: all set): analysis reads it back."""
    from rirlab.analysis.runs import spec_of

    spec = load(tmp_path).spec
    assert spec_of(spec.model_dump(mode="json")) == spec
