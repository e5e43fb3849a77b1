"""RIR-EBT-GRC's training step dispatches a bounded number of ATen ops (issue 57): on a GPU the step is launch-bound,
so its op count is its time there. A count, never a time: the same on any machine for one torch version and seed.

The step at batch 2 x length 100 has the chunk layout of the benchmark's 128 x 100 (chunks 30, 30, 30, 10, then one
chunk of 4: 29 + 3 merge steps), and the count does not depend on the batch size, so it tracks the benchmark's
figure (benchmarks/README.md, "Ops per training step") in a second.
"""

from __future__ import annotations

from tests.helpers.models import training_step_ops

# counted at 2,577 (2026-12-06 after the backward's bookkeeping cut; 2,619 before it, after the RNN and wide-merge
# work; 2,884 before that, 3,680 before issue 57's merge-step work); ~10% headroom
MAX_OPS = 2_840


def test_rir_ebt_grc_training_step_op_count_does_not_regress():
    ops = training_step_ops("rir_ebt_grc")
    # the counter saw the whole step (forward, the fused search's backward, AdamW), not a fraction of it
    assert ops.by_name["addmm"] > 0 and ops.by_name["put_"] > 0 and ops.by_name["_fused_adamw_"] == 1
    assert ops.total <= MAX_OPS, (f"{ops.total} ATen ops per rir_ebt_grc training step at 2 x 100 (bound {MAX_OPS}); "
                                  f"most dispatched: {ops.by_name.most_common(12)}")
