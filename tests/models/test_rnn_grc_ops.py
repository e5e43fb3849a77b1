"""RNN-GRC's training step dispatches a bounded number of ATen ops (issue 57 item 3): on a GPU the step is
launch-bound, so its op count is its time there. A count, never a time: the same on any machine for one torch version
and seed.

The recurrence is one step per token (rnn_grc._GRCRecurrence), so the count grows with the length: at 2 x 100 the
step makes 100 compositions, and the bound holds the per-step cost (9 ops forward, 7 backward, no slice or copy per
step) that the benchmark's 1 x 1800 figure multiplies (benchmarks/README.md, "Ops per training step").
"""

from __future__ import annotations

from tests.helpers.models import training_step_ops

# counted at 1,791 (2026-12-05, 200 of them views; 9,138 with a slice per buffer and a copy per saved tensor in every
# step, 5,650 of them views); ~10% headroom
MAX_OPS = 1_970


def test_rnn_grc_training_step_op_count_does_not_regress():
    ops = training_step_ops("rnn_grc")
    # the counter saw the whole step (the recurrence forward, its hand-written backward, AdamW), not a fraction of it
    assert ops.by_name["gelu"] >= 100 and ops.by_name["gelu_backward"] >= 100 and ops.by_name["_fused_adamw_"] == 1
    assert ops.total <= MAX_OPS, (f"{ops.total} ATen ops per rnn_grc training step at 2 x 100 (bound {MAX_OPS}); "
                                  f"most dispatched: {ops.by_name.most_common(12)}")
