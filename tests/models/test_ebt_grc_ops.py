"""EBT-GRC's training step dispatches a bounded number of ATen ops (issue 57 item 3): on a GPU the step is
launch-bound, so its op count is its time there. A count, never a time: the same on any machine for one torch version
and seed.

Non-RIR EBT-GRC merges once per token, over the whole sequence: at 1 x 200, 199 merge steps, 136 of them wider than
the merge table's TABLE_MAX (64), where a merge step's gather indices are computed, as in the benchmark's 1 x 1800
(benchmarks/README.md, "Ops per training step"). The beam searches' counts move by a few ops with the trees picked.
"""

from __future__ import annotations

from tests.helpers.models import training_step_ops

# counted at 10,908 (2026-12-05, 3,324 of them views; 13,479 with the wide steps' indices built from aranges per step,
# the right pairs' view and the chosen log-probability per step); ~6% headroom
MAX_OPS = 11_600


def test_ebt_grc_training_step_op_count_does_not_regress():
    ops = training_step_ops("ebt_grc", batch=1, length=200)
    # the counter saw the whole step (the search, its hand-written backward, AdamW), not a fraction of it
    assert ops.by_name["topk"] >= 199 and ops.by_name["put_"] >= 199 and ops.by_name["_fused_adamw_"] == 1
    assert ops.total <= MAX_OPS, (f"{ops.total} ATen ops per ebt_grc training step at 1 x 200 (bound {MAX_OPS}); "
                                  f"most dispatched: {ops.by_name.most_common(12)}")
