"""Ray Tune's experiment state is saved on its period, not after every trial checkpoint: given
``CheckpointConfig(num_to_keep=N)`` Tune saved its whole state (every trial so far) after each checkpoint, O(N^2)
bytes over a sweep of N trials (rirlab.compat.ray.state_saved_on_its_period; benchmarks/README.md, "On a quiet
core": 4.1x bare Tune at 1,000 tiny trials with it, 1.6x without)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.sweep_runs import TINY, runs_of, write_spec

# `rirlab sweep` in a process that counts Tune's saves of its experiment state (TuneController.save_to_dir: the
# periodic ones, the forced ones and the last) and writes the count at exit
COUNTED = """
import atexit, sys
from ray.tune.execution.tune_controller import TuneController
out, saves, original = sys.argv.pop(1), [0], TuneController.save_to_dir
def counted(self, *args, **kwargs):
    saves[0] += 1
    return original(self, *args, **kwargs)
TuneController.save_to_dir = counted
atexit.register(lambda: open(out, "w").write(str(saves[0])))
from rirlab.cli import main
main(prog_name="rirlab")
"""


def test_a_checkpoint_every_step_does_not_save_tunes_state_every_step(workdir, new_store):
    new_store(workdir / "mlruns.db")
    steps = 60
    spec = write_spec(workdir / "s.yaml", name="saves", search={}, seeds=1, checkpoint_every=1,
                      fixed={**TINY["fixed"], "steps": steps, "log_every": 1, "eval_every": 30})
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run([sys.executable, "-c", COUNTED, str(workdir / "saves.txt"), "sweep", str(spec),
                           "--no-checkpoint-artifacts"], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    _, _, children = runs_of(workdir / "mlruns.db", "saves")
    assert [r.info.status for r in children] == ["FINISHED"]
    saves = int((workdir / "saves.txt").read_text())
    # a save per checkpoint before (62 here); on Tune's period (5 s, TUNE_GLOBAL_CHECKPOINT_S) a few (3 here)
    assert 1 <= saves < steps // 3, f"Tune saved its experiment state {saves} times for {steps} checkpoints"
