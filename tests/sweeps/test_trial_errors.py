"""A failed trial's reason in one line (sweeps/record/callback.error_line), and the progress line that says it
without --progress trials (sweeps/driver/progress.py)."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rirlab.sweeps.driver.progress import FAILURES_SHOWN, ProgressCallback
from rirlab.sweeps.record.callback import error_line
from rirlab.sweeps.spec.trials import TrialSpace

# the head and tail of the error.txt Ray 2.60 wrote for a trial its memory monitor killed (RAY_memory_usage_threshold
# 0.02, a real sweep on this machine); its last line is general advice
RAY_OOM = """Failure # 1 (occurred at 2026-12-05_01-10-54)
1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 192.0.2.2, ID: 5237fee7) was 5.33GB used / 23.54GB limit (0.226589)
OOM kill reason: Memory usage 5707706368B exceeded threshold of 505524064B (2.0% of 25276203008B limit)
Ray killed 1 worker(s) based on the killing policy
Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/debug-memory.html. Consider provisioning more memory on this node.
"""


def test_a_kill_by_rays_memory_monitor_is_said_with_its_figures_and_what_to_do():
    line = error_line(RAY_OOM)
    assert "\n" not in line
    assert line.startswith("killed by Ray's memory monitor")
    assert "5.33GB of 23.54GB" in line and "2.0%" in line and "RAY_memory_usage_threshold" in line
    assert "max_concurrent" in line and "batch_size" in line


def test_any_other_error_is_its_last_line():
    text = "Failure # 1\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad lr\n"
    assert error_line(text) == "ValueError: bad lr"
    assert error_line("") == "unknown error"


def _trial(tmp_path, i):
    error = tmp_path / f"error{i}.txt"
    error.write_text(RAY_OOM)
    return SimpleNamespace(trial_id=f"t{i}", config={"seed": i}, error_file=str(error), last_result={})


def test_a_trial_that_errs_is_counted_failed_and_said_without_progress_trials(tmp_path):
    out = io.StringIO()
    progress = ProgressCallback("s", FAILURES_SHOWN + 3, "dev/accuracy", "max", TrialSpace(), stream=out)
    trials = [_trial(tmp_path, i) for i in range(FAILURES_SHOWN + 3)]
    for t in trials:
        progress.on_trial_start(0, trials, t)
        progress.on_trial_error(0, trials, t)  # Tune's name for it (a misspelt method was never called)
    text = out.getvalue()
    said = [line for line in text.splitlines() if line.startswith("  trial ")]
    assert len(said) == FAILURES_SHOWN  # the first ones, by name and reason; then a pointer to the rest
    assert said[0].startswith("  trial seed=0: failed (killed by Ray's memory monitor")
    assert "further failures are not listed here" in said[-1]
    assert f"0 finished | {FAILURES_SHOWN + 3} failed" in text.splitlines()[-1]
