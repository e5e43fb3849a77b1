"""Driver faults for the resume tests (tests/e2e/test_driver_resume.py), loaded through $RIRLAB_PLUGINS (set only
in the driver's environment: Ray workers never see them):

- $RIRLAB_TEST_KILL_AFTER_COMPLETE: the driver and its local Ray die by SIGKILL right after the first trial's
  completion reached MLflow, before Ray Tune could snapshot its state again.
- $RIRLAB_TEST_KILL_AT_STEP=N: the driver and its local Ray die by SIGKILL right after the callback took the first
  result of step N or later (with $RIRLAB_LOG_FLUSH_S large, the results since the last checkpoint still unwritten).
- $RIRLAB_TEST_INTERRUPT_IN_PARENT: a real SIGINT (Ctrl-C) reaches the driver right after MLflow created the
  sweep's parent run, while its spec params and artifacts are still being written.
"""

from __future__ import annotations

import os
import signal

if os.environ.get("RIRLAB_TEST_KILL_AFTER_COMPLETE"):
    from rirlab.sweeps.record import callback

    _complete = callback.MLflowTrialCallback.on_trial_complete

    def _complete_then_die(self, iteration, trials, trial, **info):
        _complete(self, iteration, trials, trial, **info)
        os.killpg(os.getpgid(0), signal.SIGKILL)  # the whole session: the driver and its local Ray at once

    callback.MLflowTrialCallback.on_trial_complete = _complete_then_die


if os.environ.get("RIRLAB_TEST_INTERRUPT_IN_PARENT"):
    from rirlab.sweeps.record import tracker

    _start_parent = tracker.Tracker.start_parent

    def _start_parent_then_ctrl_c(self, *args, **kwargs):
        run_id = _start_parent(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # delivered before the next bytecode: inside the parent's creation
        return run_id

    tracker.Tracker.start_parent = _start_parent_then_ctrl_c


if os.environ.get("RIRLAB_TEST_KILL_AT_STEP"):
    from rirlab.sweeps.record import callback

    _result = callback.MLflowTrialCallback.on_trial_result
    _at = int(os.environ["RIRLAB_TEST_KILL_AT_STEP"])

    def _result_then_die(self, iteration, trials, trial, result, **info):
        _result(self, iteration, trials, trial, result, **info)
        if int(result.get("step", 0)) >= _at:
            os.killpg(os.getpgid(0), signal.SIGKILL)

    callback.MLflowTrialCallback.on_trial_result = _result_then_die
