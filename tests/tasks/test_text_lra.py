"""LRA defaults as the authors' public preprocessing (JRC1995/BeamRecursionFamily: process_IMDB_lra.py and
process_AAN_lra.py cut each text at ``[0:4096]`` bytes) and LRA's input pipeline (Image dev = ``train[90%:]``,
never the test set)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from pydantic import ValidationError

from rirlab.config import build
from rirlab.errors import UserError
from rirlab.tasks import registry as tasks
from tests.helpers.text import write

pytestmark = pytest.mark.usefixtures("cache")  # the data cache of each test alone


def rows(task, root, split, **kw):
    t = tasks.get(task)
    return t.rows_of(t.split_table(build(t.config, {"data_dir": str(root), **kw}, task), split))


def test_text_and_retrieval_cut_at_the_authors_4096_bytes(tmp_path):
    long = "x" * 5000
    for sub in ("neg", "pos"):
        write(tmp_path / f"aclImdb/test/{sub}/0_5.txt", long)
    assert [len(ids) for _, ids in rows("lra_text", tmp_path, "test")] == [4096, 4096]
    write(tmp_path / "lra_release/tsv_data/new_aan_pairs.test.tsv", f"1\ta\tb\t{long}\tshort\n")
    [(y, a, b)] = rows("lra_retrieval", tmp_path, "test")
    assert (y, len(a), len(b)) == (1, 4096, 5)
    assert [len(ids) for _, ids in rows("lra_text", tmp_path, "test", max_len=4000)] == [4000, 4000]  # LRA's own


def test_image_dev_is_the_last_tenth_of_training_never_the_test_set(tmp_path):
    def batch(labels):
        data = np.zeros((len(labels), 3072), np.uint8)
        data[:, 0] = labels
        return pickle.dumps({b"labels": [y % 10 for y in labels], b"data": data})

    for i in range(1, 6):
        write(tmp_path / f"cifar-10-batches-py/data_batch_{i}", batch(list(range(10 * (i - 1), 10 * i))))
    # no test_batch: dev does not read it. From tfds train[90%:] on these 50 images in file order: the last 5
    first = [int(p[0]) for _, p in rows("lra_image", tmp_path, "dev")]
    assert len(first) == 5 and len(rows("lra_image", tmp_path, "train")) == 45
    with pytest.raises((UserError, ValidationError), match="dev_holdout"):
        build(tasks.get("lra_image").config, {"dev_holdout": 0}, "lra_image")
