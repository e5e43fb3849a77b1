"""A spec with several problems names every one of them, a line each (issue 33 item 10), exit code 2, before
anything starts: field errors (pydantic's, a union's failed branches once) and the spec-wide checks alike."""

from __future__ import annotations

from tests.helpers.cli import REPO, invoke

TINY = (REPO / "tests" / "specs" / "tiny.yaml").read_text()
BASE = "".join(line for line in TINY.splitlines(keepends=True) if not line.startswith(("seeds:", "metric:", "mode:")))


def refused_lines(*args) -> list[str]:
    result = invoke(*args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert lines and all(line.startswith("error: ") for line in lines), result.output
    assert "Traceback" not in result.output
    return lines


def test_every_field_error_of_a_spec_is_a_line_of_its_own(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "seeds: abc\nmode: up\nserch: {}\nscheduler: {type: asha, grace: 3}\n")
    n = BASE.count("\n")
    lines = refused_lines("sweep", path, "--dry-run")
    assert len(lines) == 4, lines  # seeds' two union branches are one problem
    assert f"error: {path}:{n + 1}: seeds: Input should be a valid integer (got 'abc')" in lines
    assert any(line.startswith(f"error: {path}:{n + 2}: mode") and "'max' or 'min'" in line for line in lines)
    assert f"error: {path}:{n + 3}: unknown key 'serch' in the spec (did you mean search?)" in lines
    assert f"error: {path}:{n + 4}: unknown key 'grace' in the spec (did you mean grace_period?)" in lines


def test_every_spec_wide_problem_is_a_line_of_its_own(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "seeds: [1, 1]\nmetric: [dev/accuracy, time_per_step_ms]\nmode: [max, min]\n"
                           "variants: [{name: a, set: {}}, {name: a, set: {}}]\n")
    lines = refused_lines("sweep", path, "--dry-run")
    assert lines == [f"error: {path}: spec: seed 1 is listed twice; every seed must differ (a repeat only reruns a trial)",
                     f"error: {path}: spec: several metrics (multi-objective) need algorithm: optuna",
                     f"error: {path}: spec: variant names must be unique"], lines


def test_every_problem_of_set_overrides_is_a_line_of_its_own():
    lines = refused_lines("sweep", REPO / "tests" / "specs" / "tiny.yaml", "--dry-run", "--set", "seeds=[2, 2]",
                          "--set", "optuna.sampler=random")
    assert lines == ["error: --set spec: seed 2 is listed twice; every seed must differ (a repeat only reruns a trial)",
                     "error: --set spec: optuna: settings have no effect under algorithm: grid; drop them or use "
                     "algorithm: optuna"], lines


def test_one_problem_is_still_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "seeds: 0\n")
    assert refused_lines("sweep", path, "--dry-run") == [
        f"error: {path}: spec: seeds must be >= 1 (a count) or a list of seed values"]


def test_a_spec_may_minimise_the_trials_cpu_time():
    """Issue 33 item 8: the CPU time per step is a metric every trial reports, so a multi-objective spec names it
    (the fair time objective when trials share the cores; docs/metrics.md)."""
    result = invoke("sweep", REPO / "tests" / "specs" / "tiny.yaml", "--dry-run", "--set", "algorithm=optuna",
                    "--set", "metric=[dev/accuracy, cpu_time_per_step_ms]", "--set", "mode=[max, min]")
    assert result.exit_code == 0, result.output
