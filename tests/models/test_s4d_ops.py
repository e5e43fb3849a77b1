"""S4D's training step dispatches a bounded number of ATen ops (issue 57 item 3): on a GPU the step is launch-bound, so
its op count is its time there. A count, never a time: the same on any machine for one torch version and seed.

The count does not depend on the batch size or (for the S4D kernel's block-power trick) much on the length, so the
step at 2 x 100 tracks the benchmark's figures (benchmarks/README.md, "Ops per training step") in a second.
"""

from __future__ import annotations

from tests.helpers.models import training_step_ops

# counted at 1,340 (2026-12-05, 560 of them views; 2,284 with autograd through the complex kernel and the FFTs,
# 136 `_conj` and 152 `clone` of them); ~10% headroom
MAX_OPS = 1_470


def test_s4d_training_step_op_count_does_not_regress():
    ops = training_step_ops("s4d")
    # the counter saw the whole step (forward, the FFT convolutions' backward, AdamW), not a fraction of it
    assert ops.by_name["_fft_r2c"] > 0 and ops.by_name["bmm"] > 0 and ops.by_name["_fused_adamw_"] == 1
    assert ops.total <= MAX_OPS, (f"{ops.total} ATen ops per s4d training step at 2 x 100 (bound {MAX_OPS}); "
                                  f"most dispatched: {ops.by_name.most_common(12)}")
