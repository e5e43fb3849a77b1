"""SST5 as the authors' public preprocessing reads it (process_SST5.py of JRC1995/BeamRecursionFamily: torchtext's
SST with ``train_subtrees=True`` and ``lower=True``, tokens = the tree's leaves split on spaces)."""

from __future__ import annotations

import pytest

from rirlab.config import build
from rirlab.tasks import registry as tasks

pytestmark = pytest.mark.usefixtures("cache")  # the data cache of each test alone


TRAIN = "(3 (2 It) (4 (2 -LRB-) (3 Good)))\n(0 (0 Bad) (2 .))\n"
SENT = "(4 (2 A) (4 (4 Fine) (2 -RRB-)))\n"

# Worked out from the authors' code: every node of every training tree (nltk Tree.subtrees(): root, then pre-order),
# leaves joined and re-split, lower-cased; 2 trees of 3 and 2 words -> 5 + 3 = 8 examples (2n-1 each)
AUTHORS_TRAIN = [("3", "it -lrb- good"), ("2", "it"), ("4", "-lrb- good"), ("2", "-lrb-"), ("3", "good"),
                 ("0", "bad ."), ("0", "bad"), ("2", ".")]
AUTHORS_DEV = [("4", "a fine -rrb-")]  # dev and test: the root sentence only


def rows(root, split, **kw):
    t = tasks.get("sst5")
    for name, text in (("train", TRAIN), ("dev", SENT), ("test", SENT)):
        (root / "trees").mkdir(exist_ok=True)
        (root / f"trees/{name}.txt").write_text(text)
    c = build(t.config, {"data_dir": str(root), "embeddings": "random", **kw}, "sst5")
    return [(t.labels[r[0]], " ".join(r[1])) for r in t.rows_of(t.split_table(c, split))]


def test_default_trains_on_every_labelled_phrase_lower_cased_with_ptb_brackets(tmp_path):
    assert rows(tmp_path, "train") == AUTHORS_TRAIN
    assert rows(tmp_path, "dev") == AUTHORS_DEV and rows(tmp_path, "test") == AUTHORS_DEV


def test_sentences_only_cased_and_restored_brackets_are_options(tmp_path):
    assert rows(tmp_path, "train", train_phrases=False, lowercase=False, brackets="restore") == [
        ("3", "It ( Good"), ("0", "Bad .")]
    assert rows(tmp_path, "dev", brackets="restore") == [("4", "a fine )")]
