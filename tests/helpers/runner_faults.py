"""A driver fault for the runner tests, loaded through $RIRLAB_PLUGINS: with $RIRLAB_TEST_KILL_AFTER_COMPLETE
set (only in the driver's environment: Ray workers never see it), the driver and its local Ray die by SIGKILL
right after the first trial's completion reached MLflow, before Ray Tune could snapshot its state again."""

from __future__ import annotations

import os
import signal

if os.environ.get("RIRLAB_TEST_KILL_AFTER_COMPLETE"):
    from sweeps import callback

    _complete = callback.MLflowTrialCallback.on_trial_complete

    def _complete_then_die(self, iteration, trials, trial, **info):
        _complete(self, iteration, trials, trial, **info)
        os.killpg(os.getpgid(0), signal.SIGKILL)  # the whole session: the driver and its local Ray at once

    callback.MLflowTrialCallback.on_trial_complete = _complete_then_die
