"""Flip-flop: every read target is the last written bit; loss positions; LM batches."""

from __future__ import annotations

import numpy as np

from rirlab.tasks import flipflop as ff


def test_target_after_every_read_is_the_last_written_bit():
    ids = ff.generate(200, 512, 0.8, seed=3)
    labels, tokens = ff.targets(ids), ff.targets(ids, "token")
    assert ((labels == tokens - ff.ZERO) | (labels == ff.NO_LOSS) & (tokens == ff.NO_LOSS)).all()
    for row, lab in zip(ids, tokens):
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
    dev = data.eval_splits["dev"]  # 4 of each test setting, then 4 of the training setting (length 64)
    assert [len(x) for x, _ in dev] == [512] * 12 + [1024] * 12 + [64] * 4 and ff.FlipFlop().split_rows(cfg, "dev") == 28
    b = data.collate(dev[:1] + dev[-5:-4] + data.train[:2])
    assert b["labels"].shape == b["tokens"].shape == (4, 1024)
    assert (b["labels"][~b["mask"]] == ff.NO_LOSS).all()
    reads = b["tokens"] == ff.R
    assert set(b["labels"][reads].tolist()) == {0, 1} and (b["labels"][~reads] == ff.NO_LOSS).all()
    assert data.num_classes == 2  # read_target "bit": the bit, the code's two classes
    again = ff.split_table(cfg, "train")
    assert np.array_equal(np.stack([x for x, _ in ff.examples(again)]), np.stack([x for x, _ in data.train]))


def test_dev_holds_the_training_setting_as_its_seventh_part(tmp_path):
    """The dynamic-halt code's dev: the six test settings and 1,000 sequences more at the training setting."""
    cfg = ff.FlipFlopConfig(n_train=10, n_dev=300, train_len=64, cache_dir=str(tmp_path))
    rows = [t for t in ff.to_lines(ff.split_table(cfg, "dev"))]
    assert len(rows) == 7 * 300
    train_part = [line.split()[0::2] for line in rows[6 * 300:]]
    assert {len(t) for t in train_part} == {32}
    ignore = sum(t.count("i") for t in train_part) / sum(len(t) - 2 for t in train_part)  # first w, last r fixed
    assert abs(ignore - 0.8) < 0.02
    again = ff.split_table(ff.FlipFlopConfig(n_train=10, n_dev=300, train_len=64, train_p_ignore=0.5,
                                             cache_dir=str(tmp_path)), "dev")
    other = [line.split()[0::2] for line in list(ff.to_lines(again))[6 * 300:]]
    assert abs(sum(t.count("i") for t in other) / sum(len(t) - 2 for t in other) - 0.5) < 0.02
