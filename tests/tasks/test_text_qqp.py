"""QQP as the authors' public preprocessing reads it (process_QQP.py of JRC1995/BeamRecursionFamily): questions
``lower().split()``, pairs with a question over 150 tokens dropped from the whole file, then the paraphrase and the
other row numbers each shuffled with ``random.seed(101)``; dev the first of each, test the next, train the rest."""

from __future__ import annotations

import pytest

import csv


from rirlab.config import build
from rirlab.tasks import registry as tasks

pytestmark = pytest.mark.usefixtures("cache")  # the data cache of each test alone


def quora(root):
    with open(root / "quora_duplicate_questions.tsv", "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
        for k in range(21):
            q1 = " ".join(["w"] * 151) if k == 3 else f"What's Q{k}?"
            w.writerow([k, 2 * k, 2 * k + 1, q1, f"Is it Q{k}?", int(k % 2 == 0)])


def rows(root, split, **kw):
    t = tasks.get("qqp")
    c = build(t.config, {"data_dir": str(root), "embeddings": "random", **kw}, "qqp")
    return [(y, " ".join(a), " ".join(b)) for y, a, b in t.rows_of(t.split_table(c, split))]


# Worked out from process_QQP.py on this 21-row file: row 3 (151 tokens) dropped; 20 rows, 10 paraphrases (even k);
# random.seed(101) shuffles of the row numbers put k=12 and k=19 first (dev), k=14 and k=15 next (test). Here a
# split takes 1 of each label (a small file gives a twentieth of its rows per label; the real file 5,000).
AUTHORS_DEV = [(1, "what's q12?", "is it q12?"), (0, "what's q19?", "is it q19?")]
AUTHORS_TEST = [(1, "what's q14?", "is it q14?"), (0, "what's q15?", "is it q15?")]


def test_default_is_the_authors_tokens_filter_and_draw(tmp_path):
    quora(tmp_path)
    assert rows(tmp_path, "dev") == AUTHORS_DEV and rows(tmp_path, "test") == AUTHORS_TEST
    train = rows(tmp_path, "train")
    assert len(train) == 16 and not any(len(a.split()) > 150 for _, a, _ in train)


def test_ptb_tokens_and_no_filter_are_options(tmp_path):
    quora(tmp_path)
    every = rows(tmp_path, "train", tokenizer="ptb", max_question_len=None) + rows(
        tmp_path, "dev", tokenizer="ptb", max_question_len=None) + rows(tmp_path, "test", tokenizer="ptb",
                                                                        max_question_len=None)
    assert len(every) == 21 and (1, "what 's q12 ?", "is it q12 ?") in every


def test_a_paws_file_with_its_header_only_is_one_line_not_a_score_of_nothing(tmp_path):
    """It recorded accuracy=0.0 and loss=0.0 for a split of no example (an SNLI train file whose labels are all
    '-' ended in an IndexError: the same check)."""
    from rirlab.errors import UserError

    quora(tmp_path)
    (tmp_path / "paws_qqp").mkdir()
    (tmp_path / "paws_qqp" / "dev_and_test.tsv").write_text("id\tsentence1\tsentence2\tlabel\n")
    with pytest.raises(UserError, match=r"qqp: split 'paws_qqp' has no example in .*dev_and_test.tsv \(only a header"):
        rows(tmp_path, "paws_qqp")
