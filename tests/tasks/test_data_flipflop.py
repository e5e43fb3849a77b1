"""Flip-flop: every read target is the last written bit; loss positions; LM batches."""

from __future__ import annotations

import numpy as np
import torch

from rirlab.models import registry
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
    dev = data.eval_splits["dev"]  # 4 of the training setting (length 64), then 4 of each test setting
    assert [len(x) for x, _ in dev] == [64] * 4 + [512] * 12 + [1024] * 12 and ff.FlipFlop().split_rows(cfg, "dev") == 28
    b = data.collate(dev[4:5] + dev[-1:] + data.train[:2])
    assert b["labels"].shape == b["tokens"].shape == (4, 1024)
    assert (b["labels"][~b["mask"]] == ff.NO_LOSS).all()
    reads = b["tokens"] == ff.R
    assert set(b["labels"][reads].tolist()) == {0, 1} and (b["labels"][~reads] == ff.NO_LOSS).all()
    assert data.num_classes == 2  # read_target "bit": the bit, the code's two classes
    again = ff.split_table(cfg, "train")
    assert np.array_equal(np.stack([x for x, _ in ff.examples(again)]), np.stack([x for x, _ in data.train]))


def test_dev_holds_the_training_setting_first_then_the_test_settings_in_the_codes_order(tmp_path):
    """The dynamic-halt code's dev: 1,000 sequences at the training setting, then 512_08, 512_01, 512_98, 1024_08,
    1024_01, 1024_98 (process_flipflop.py's "mixed"), so batches of its dev_batch_size 16 never mix lengths."""
    cfg = ff.FlipFlopConfig(n_train=10, n_dev=300, train_len=64, cache_dir=str(tmp_path))
    rows = [t for t in ff.to_lines(ff.split_table(cfg, "dev"))]
    assert len(rows) == 7 * 300
    parts = [[line.split()[0::2] for line in rows[k * 300:(k + 1) * 300]] for k in range(7)]
    shares = [sum(t.count("i") for t in part) / sum(len(t) - 2 for t in part) for part in parts[1:]]
    assert [len(part[0]) for part in parts[1:]] == [256] * 3 + [512] * 3
    assert all(abs(got - want) < 0.02 for got, (want, _) in zip(shares, ff.DEV_ORDER)), shares
    train_part = parts[0]
    assert {len(t) for t in train_part} == {32}
    ignore = sum(t.count("i") for t in train_part) / sum(len(t) - 2 for t in train_part)  # first w, last r fixed
    assert abs(ignore - 0.8) < 0.02
    again = ff.split_table(ff.FlipFlopConfig(n_train=10, n_dev=300, train_len=64, train_p_ignore=0.5,
                                             cache_dir=str(tmp_path)), "dev")
    other = [line.split()[0::2] for line in list(ff.to_lines(again))[:300]]
    assert abs(sum(t.count("i") for t in other) / sum(len(t) - 2 for t in other) - 0.5) < 0.02


# the dynamic-halt code's flipflop_collater (dev, batch 2) on the stored rows below in its data format
# (process_flipflop.py: vocab2idx w 0, i 1, r 2, "0" 3, "1" 4; loss mask on the bit after each read)
STORED = [[1, 5, 2, 5, 3, 5, 2, 5], [1, 4, 3, 4, 1, 5, 3, 4, 2, 5, 2, 5]]  # w 1 r 1 i 1 r 1 / w 0 i 0 w 1 ...
CODE_TOKENS = [[1, 0, 4, 2, 4, 1, 4, 2, 1, 1, 1, 1], [1, 0, 3, 1, 3, 0, 4, 1, 3, 2, 4, 2]]  # sequences_vec
CODE_LOSS_MASK = [[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]]
CODE_LABELS = [[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]]  # 0 where not a read
CODE_INPUT_MASK = [[1] * 8 + [0] * 4, [1] * 12]


def test_code_input_layout_is_the_codes_collater(tmp_path):
    """Issue 31 item 1: the code's model reads [SOS] + x[:-1] in its vocabulary (SOS = PAD = 1, the id of "i"), the
    label of a read at the position after it, the batch padded with 1; its embedding's padding_idx 0 is "w", whose
    row is drawn and never trained. input_layout "code" (default) gives its batch; "plain" (rirlab before) does not."""
    table = ff.to_table([np.array(r, np.int8) for r in STORED])
    data = ff.load(ff.FlipFlopConfig(n_train=4, n_dev=1, n_eval=1, train_len=8, cache_dir=str(tmp_path)))
    assert data.vocab == ["w", "i", "r", "0", "1"] and data.num_classes == 2 and data.info.pad_is_token
    b = data.collate(ff.examples(table))
    assert b["tokens"].tolist() == CODE_TOKENS and b["mask"].long().tolist() == CODE_INPUT_MASK
    loss = torch.tensor(CODE_LOSS_MASK, dtype=torch.bool)
    assert (b["labels"][loss] == torch.tensor(CODE_LABELS)[loss]).all() and (b["labels"][~loss] == ff.NO_LOSS).all()
    plain = ff.collate_lm(ff.examples(table, input_layout="plain"))["tokens"]
    assert plain[1].tolist() == STORED[1] and plain.tolist() != CODE_TOKENS
    assert ff.FlipFlopConfig().input_layout == "code"

    entry = registry.get("transformer")
    model = entry.build(entry.config(hidden_size=8, num_heads=2, num_layers=1), data.info)
    w = model.embed.weight
    assert model.embed.padding_idx == 0 and w[0].abs().min() > 0  # "w": drawn (N(0, 0.02^2)), not zeroed
    model(b).logits.sum().backward()
    assert w.grad[0].abs().max() == 0 and w.grad[1:].abs().sum() > 0  # and frozen, as padding_idx in the code
