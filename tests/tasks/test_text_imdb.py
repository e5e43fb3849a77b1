"""IMDB as the authors' public preprocessing reads it (process_IMDB.py of JRC1995/BeamRecursionFamily): train on
reviews of <= 200 tokens, dev = the 201..300-token training reviews then dev_original.tsv twice, IID test = test
reviews of <= 200 tokens, ``<br />`` deleted (not a space), lower-cased; the full-length protocol as an option."""

from __future__ import annotations

import pytest

from rirlab.config import build
from rirlab.tasks import registry as tasks
from tests.helpers.text import write

pytestmark = pytest.mark.usefixtures("cache")  # the data cache of each test alone


def words(n):
    return " ".join(["w"] * n)


def corpus(root):
    train = {"pos/0_8.txt": "Good.<br /><br />Fine film", "pos/1_9.txt": words(250),
             "neg/2_1.txt": words(350), "neg/3_2.txt": "Bad film .", "neg/4_1.txt": words(200),
             "neg/5_3.txt": words(201), "neg/6_2.txt": words(300)}
    for rel, text in train.items():
        write(root / "aclImdb/train" / rel, text)
    write(root / "aclImdb/test/pos/0_7.txt", "Great<BR />film")
    write(root / "aclImdb/test/neg/1_1.txt", words(250))
    write(root / "contrast-sets/IMDb/data/dev_original.tsv", "Sentiment\tText\nNegative\tMeh.<br />Bad\n")


def rows(root, split, **kw):
    t = tasks.get("imdb")
    c = build(t.config, {"data_dir": str(root), "embeddings": "random", **kw}, "imdb")
    out = []
    for y, toks in t.rows_of(t.split_table(c, split)):
        out.append((t.labels[y], " ".join(toks) if len(toks) < 20 else len(toks)))
    return out


# Worked out from the authors' code: lengths 2, 3, 200 train; 201, 300, 250 dev (neg then pos here, by review id),
# then dev_original.tsv's row twice; 350 dropped; "<br />" deleted joins "good." and "fine" into one token
AUTHORS = {
    "train": [("negative", "bad film ."), ("negative", 200), ("positive", "good.fine film")],
    "dev": [("negative", 201), ("negative", 300), ("positive", 250), ("negative", "meh.bad"), ("negative", "meh.bad")],
    "test": [("positive", "greatfilm")],
    "test_full": [("negative", 250), ("positive", "greatfilm")],
}


def test_default_is_the_authors_length_protocol(tmp_path):
    corpus(tmp_path)
    for split, want in AUTHORS.items():
        assert rows(tmp_path, split) == want, split


def test_full_length_protocol_and_spaced_breaks_are_options(tmp_path):
    corpus(tmp_path)
    kw = {"length_protocol": "full", "html_breaks": "space"}
    train, dev = rows(tmp_path, "train", **kw), rows(tmp_path, "dev", **kw)
    assert len(train) + len(dev) == 7 and ("positive", "good . fine film") in train + dev
    assert rows(tmp_path, "test_full", **kw) == [("negative", 250), ("positive", "great film")]
    (tmp_path / "contrast-sets/IMDb/data/dev_original.tsv").unlink()  # not read by the full-length protocol
    assert len(rows(tmp_path, "dev", data_seed=3, **kw)) == 2
