"""LRA tasks (ListOps, Text, Retrieval, Image) on fixture files in the LRA release's / CIFAR's formats."""

from __future__ import annotations

import os
import pickle
import re

import numpy as np
import pytest

from rirlab.config import build
from rirlab.errors import UserError
from rirlab.tasks import registry as tasks


pytestmark = pytest.mark.usefixtures("cache")  # the data cache of each test its own: tests/conftest.py


def cfg(task, root, **kw):
    return build(tasks.get(task).config, {"data_dir": str(root), **kw}, task)


def rows(task, c, split):
    t = tasks.get(task)
    return t.rows_of(t.split_table(c, split))


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    return path


def test_lra_listops_source_target_without_parentheses(tmp_path):
    write(tmp_path / "lra_release/listops-1000/basic_test.tsv",
          "Source\tTarget\n( ( ( [MAX 2 ) 9 ) ] )\t9\n( ( ( [SM 4 ) 7 ) ] )\t1\n")  # LRA's to_string
    t = tasks.get("lra_listops")
    got = rows("lra_listops", cfg("lra_listops", tmp_path), "test")
    assert [(y, [t.vocab[i] for i in ids]) for y, ids in got] == [(9, ["[MAX", "2", "9", "]"]), (1, ["[SM", "4", "7", "]"])]
    path = write(tmp_path / "lra_release/listops-1000/basic_val.tsv", "Source\tTarget\n( ( ( [SM 4 ) 7 ) ] )\tx\n")
    with pytest.raises(UserError, match="^" + re.escape(f"{path}:2: label 'x' is not a digit")):
        rows("lra_listops", cfg("lra_listops", tmp_path), "dev")


def test_lra_text_reads_utf8_bytes_truncated(tmp_path):
    for sub, text in (("neg", "Bad.<br />"), ("pos", "Caf\u00e9 great")):
        write(tmp_path / f"aclImdb/test/{sub}/0_5.txt", text)
    got = rows("lra_text", cfg("lra_text", tmp_path, max_len=5), "test")
    assert got == [(0, [b + 1 for b in b"Bad.<"]), (1, [b + 1 for b in "Caf\u00e9".encode()])]  # é: 2 bytes


def test_lra_retrieval_pairs_and_bad_label(tmp_path):
    path = write(tmp_path / "lra_release/tsv_data/new_aan_pairs.test.tsv",
                 '1\taan/a.txt\taan/b.txt\tDoc "one"\tDoc two\n0.0\tx\ty\tA\tB\n')
    assert rows("lra_retrieval", cfg("lra_retrieval", tmp_path), "test") == [
        (1, [b + 1 for b in b'Doc "one"'], [b + 1 for b in b"Doc two"]), (0, [66], [67])]
    write(path, "2\tx\ty\tA\tB\n")
    with pytest.raises(UserError, match="new_aan_pairs.test.tsv:1: unknown label '2'"):
        rows("lra_retrieval", cfg("lra_retrieval", tmp_path), "test")


def test_lra_image_grayscale_sequences_and_only_cifar_pickles(tmp_path):
    data = np.zeros((2, 3072), np.uint8)
    data[0, :1024], data[1, 1024:2048] = 255, 100  # pure red; green 100
    write(tmp_path / "cifar-10-batches-py/test_batch", pickle.dumps({b"labels": [3, 7], b"data": data}))
    got = rows("lra_image", cfg("lra_image", tmp_path), "test")
    assert [y for y, _ in got] == [3, 7] and len(got[0][1]) == 1024
    assert got[0][1][0] == int(0.2989 * 255.5) + 1 and got[1][1][5] == int(0.5870 * 100 / 255 * 255.5) + 1

    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    write(tmp_path / "cifar-10-batches-py/test_batch", pickle.dumps({b"labels": [1], b"data": Evil()}))
    with pytest.raises(UserError, match="test_batch:1: not a CIFAR-10 python batch"):
        rows("lra_image", cfg("lra_image", tmp_path), "test")


@pytest.mark.parametrize("task", ["lra_listops", "lra_text", "lra_retrieval", "lra_image"])
def test_generated_stand_in_loads(task):
    data = tasks.get(task).load(build(tasks.get(task).config, {"generated": True}, task))
    assert data.embeddings is None and len(data.train) > 10 and set(data.eval_splits) == {"dev", "test"}
    assert data.collate(data.train[:4])["labels"].shape == (4,)


def test_lra_image_dev_holdout_cuts_the_last_training_images(tmp_path):
    """dev_holdout (the dynamic-halt code's tfds train[:90%] / train[90%:]): dev is the last fraction of the
    training images in file order, train the rest, test untouched."""
    def batch(labels):
        data = np.zeros((len(labels), 3072), np.uint8)
        data[:, 0] = labels  # pixel 0 tells the images apart
        return pickle.dumps({b"labels": [y % 10 for y in labels], b"data": data})

    for i in range(1, 6):
        write(tmp_path / f"cifar-10-batches-py/data_batch_{i}", batch(list(range(10 * (i - 1), 10 * i))))
    write(tmp_path / "cifar-10-batches-py/test_batch", batch([7, 8]))

    def first_pixels(split, **kw):
        return [int(p[0]) for _, p in rows("lra_image", cfg("lra_image", tmp_path, **kw), split)]

    every = first_pixels("train") + first_pixels("dev")
    held = {s: first_pixels(s, dev_holdout=0.1) for s in ("train", "dev", "test")}
    assert len(every) == 50 and held["train"] == every[:45] and held["dev"] == every[45:]
    assert held["test"] == first_pixels("test") and first_pixels("dev") == held["dev"]  # 0.1 is the default
    with pytest.raises(UserError, match="dev_holdout"):
        cfg("lra_text", tmp_path, dev_holdout=0.1)  # only the Image task has it
