"""A tiny RIR-EBT-GRC (S4D, beam alignment, chunks of 6 so the outer recursion runs) learns short ListOps on CPU."""

from __future__ import annotations

from tests.helpers.models import learns_listops


def test_tiny_rir_ebt_grc_learns_listops_above_majority():
    # expressions of 13-40 tokens: 2-7 chunks each; about 30 s on a busy 2-core CPU, dev accuracy about 0.27
    acc, majority = learns_listops("rir_ebt_grc", 250, n=2500, n_train=2000, max_args=4, max_depth=4, min_len=13,
                                   max_len=40, hidden_size=32, beam_size=3, chunk_size=6, d_s=16, dropout=0.0)
    assert acc > majority + 0.08, (acc, majority)  # majority about 0.13
