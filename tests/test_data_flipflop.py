"""Flip-flop: every read target is the last written bit; loss positions; LM batches."""

from __future__ import annotations

import numpy as np

from rirlab.tasks import flipflop as ff


def test_target_after_every_read_is_the_last_written_bit():
    ids = ff.generate(200, 512, 0.8, seed=3)
    labels = ff.targets(ids)
    for row, lab in zip(ids, labels):
        toks = [ff.VOCAB[t] for t in row]
        assert toks[0] == "w" and toks[-2] == "r" and ff.check(toks) == []
        last = None
        for j in range(0, len(toks), 2):
            if toks[j] == "w":
                last = row[j + 1]
            if toks[j] == "r":
                assert row[j + 1] == last and lab[j] == last
            else:
                assert lab[j] == ff.NO_LOSS
        assert (lab[1::2] == ff.NO_LOSS).all()
    share_i = (ids[:, 2:-2:2] == ff.I).mean()
    assert abs(share_i - 0.8) < 0.01


def test_check_finds_a_wrong_read_and_rejects_structure_errors():
    assert ff.check("w 1 i 0 r 0".split()) == [(5, 1, 0)]
    for bad in ("w 1 r", "x 1 r 1", "w 2 r 2", "r 1 w 1"):
        try:
            ff.check(bad.split())
        except ValueError:
            continue
        raise AssertionError(bad)


def test_splits_lengths_and_lm_batches(tmp_path):
    cfg = ff.FlipFlopConfig(n_train=50, n_dev=4, n_eval=8, train_len=64, eval_splits=["p0.98_len1024"],
                            cache_dir=str(tmp_path))
    data = ff.load(cfg)
    assert data.kind == "lm" and list(data.eval_splits) == ["dev", "p0.98_len1024"]
    assert {len(x) for x, _ in data.eval_splits["p0.98_len1024"]} == {1024}
    assert sorted({len(x) for x, _ in data.eval_splits["dev"]}) == [512, 1024] and len(data.eval_splits["dev"]) == 24
    b = data.collate(data.eval_splits["dev"][:1] + data.eval_splits["dev"][-1:] + data.train[:2])
    assert b["labels"].shape == b["tokens"].shape == (4, 1024)
    assert (b["labels"][~b["mask"]] == ff.NO_LOSS).all()
    reads = b["tokens"] == ff.R
    assert (b["labels"][reads] >= ff.ZERO).all() and (b["labels"][~reads] == ff.NO_LOSS).all()
    again = ff.split_table(cfg, "train")
    assert np.array_equal(np.stack([x for x, _ in ff.examples(again)]), np.stack([x for x, _ in data.train]))
