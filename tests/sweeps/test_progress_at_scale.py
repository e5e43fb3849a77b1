"""The sweep's progress line at a thousand trials (issue 50 item 4): counts, the time left and the last few ends,
printed as a summary every so often where the output is no terminal, never a line per trial start and end; a sweep
of a few trials prints as before."""

from __future__ import annotations

import io
import types

import pytest

from rirlab.sweeps.driver import progress as progress_module
from rirlab.sweeps.driver.progress import MANY, SUMMARY_EVERY_S, ProgressCallback, duration
from rirlab.sweeps.spec.trials import TrialSpace


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress_module.time, "time", c)
    return c


def _run(n, clock, trials=False, tty=False, every_s=5.0, fail_every=0):
    out = io.StringIO()
    out.isatty = lambda: tty
    cb = ProgressCallback("big", n, "dev/accuracy", "max", TrialSpace(), stream=out, trials=trials)
    mids = []
    for i in range(n):
        t = types.SimpleNamespace(trial_id=f"t{i}", config={"seed": i}, last_result={}, error_file=None)
        cb.on_trial_start(0, [], t)
        clock.now += every_s
        if fail_every and i % fail_every == 0:
            t.last_result = {"failure_reason": "loss is NaN at step 3"}
        else:
            t.last_result = {"dev/accuracy": float(i % 97), "final": True, "step": 5}
            cb.on_trial_result(0, [], t, t.last_result)
        cb.on_trial_complete(0, [], t)
        cb.on_step_end(0, [])
        if i == n // 2:
            mids.append(cb._line())
    cb.close()
    return out.getvalue(), mids[0]


def test_a_thousand_trials_in_a_log_are_a_summary_every_half_minute_not_a_line_per_start_and_end(clock):
    text, mid = _run(1000, clock)  # 5 s a trial: 5,000 s in all
    lines = text.splitlines()
    status = [ln for ln in lines if ln.startswith("[big ")]
    assert len(status) <= 1000 * 5 / SUMMARY_EVERY_S + 2, len(status)  # before: 2,000 lines, one per start and end
    assert len(lines) <= 4 * len(status)  # each summary: the line and at most 3 ends since the one before
    assert "ended: seed=" in text and "finished: dev/accuracy" in text
    assert status[-1].startswith("[big 83:20] 0 running | 0 pending | 1000 finished | 0 failed | best final "
                                 "dev/accuracy 96.00"), status[-1]
    # halfway: the time left at the rate trials ended (500 left at 5 s each)
    assert "| 499 pending | 501 finished | 0 failed | ETA 41:35" in mid, mid
    assert len(mid) < 200, mid


def test_the_terminals_live_line_stays_one_line_at_a_thousand_trials(clock):
    text, _ = _run(1000, clock, tty=True)
    assert text.count("\n") == 1  # the live line redrawn in place (\r), one newline at the end
    assert all(len(part) < 200 for part in text.split("\r"))


def test_progress_trials_at_a_thousand_trials_lists_ends_not_starts(clock):
    text, _ = _run(1000, clock, trials=True, fail_every=100)
    assert text.count("  trial ") == 1000 and ": running" not in text
    assert text.count("failed (loss is NaN at step 3)") >= 10


def test_a_few_trials_print_as_before(clock):
    text, _ = _run(MANY, clock)
    status = [ln for ln in text.splitlines() if ln.startswith("[big ")]
    assert len(status) == 2 * MANY  # a line at each start and each end, as before
    assert "ended:" not in text
    text, _ = _run(3, clock, trials=True)
    assert text.count(": running") == 3


def test_durations_read_as_clock_times():
    assert duration(75) == "01:15" and duration(3600 * 26 + 61) == "26:01:01"
