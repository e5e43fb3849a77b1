"""QQP: whether two Quora questions are paraphrases (binary sentence-pair classification), with PAWS.

Files under data_dir, as distributed:

- ``quora_duplicate_questions.tsv`` (Quora's first dataset release): header
  ``id qid1 qid2 question1 question2 is_duplicate``, fields quoted where they hold tabs, quotes or newlines;
- ``paws_qqp/dev_and_test.tsv``: PAWS-QQP (Zhang et al., NAACL 2019), which its script builds from QQP, header
  ``id sentence1 sentence2 label``; the script writes Python bytes literals (``b'How ...'``), read back as text;
- ``paws_wiki/test.tsv``: PAWS-Wiki's final test set, same columns.

Protocol (RIR / EBT, "as standard Wang et al."): dev and IID test are 10,000 pairs each, 5,000 paraphrases and
5,000 not, drawn with ``data_seed`` from the file; train is the rest. (A file with fewer than 100,000 rows, a
stand-in, gives a tenth of its rows to each.) Nothing filtered.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.tasks.registry import register
from rirlab.tasks.text import (TextConfig, TextTask, bad, columns, known_splits, label_of, sample_balanced,
                               tokenize, tsv)

LABELS = ("not_duplicate", "duplicate")
FILE_LABELS = {"0": "not_duplicate", "1": "duplicate"}
SPLITS = {"test": "IID", "paws_qqp": "PAWS_QQP", "paws_wiki": "PAWS_Wiki"}
SAMPLE = 10000


def unbytes(text: str) -> str:
    """``b'...'`` (a Python bytes literal, as the PAWS-QQP script writes) -> its text; other text unchanged."""
    if len(text) >= 3 and text[0] == "b" and text[1] in "'\"" and text[-1] == text[1]:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
    return text


def read_pairs(path: Path, quoted: bool, names: dict) -> list:
    rows, cols = [], None
    for no, fields in tsv(path, quoted=quoted):
        if cols is None:
            cols = columns(path, fields, names, no)
            continue
        if len(fields) <= max(cols.values()):
            raise bad(path, no, f"{len(fields)} columns; the header has {max(cols.values()) + 1} or more")
        rows.append((label_of(path, no, LABELS, fields[cols["y"]], FILE_LABELS),
                     tokenize(unbytes(fields[cols["a"]])), tokenize(unbytes(fields[cols["b"]]))))
    if cols is None:
        raise bad(path, 1, "empty file; expected a header line")
    return rows


@dataclass(config=STRICT)
class QQPConfig(TextConfig):
    """QQP with PAWS-QQP and PAWS-Wiki test sets (RIR Table 7, EBT Table 3)."""

    eval_splits: list[str] = Field(default_factory=lambda: list(SPLITS))

    _known = known_splits("qqp", SPLITS)


@register
class QQP(TextTask):
    """QQP: paraphrase detection of question pairs, with PAWS-QQP/PAWS-Wiki (the user's quora_duplicate_questions.tsv)"""

    name, config, kind = "qqp", QQPConfig, "pair"
    labels = LABELS
    splits = tuple(SPLITS.items())
    files = {"train": "quora_duplicate_questions.tsv", "paws_qqp": "paws_qqp/dev_and_test.tsv",
             "paws_wiki": "paws_wiki/test.tsv"}
    needs = {"train": ("train",), "dev": ("train",), "test": ("train",), "paws_qqp": ("paws_qqp",),
             "paws_wiki": ("paws_wiki",)}
    quick = {"generated": True}
    # the authors' vocabulary (rirlab.tasks.text): the whole Quora file and both PAWS sets, words seen 6+ times
    vocab_splits, min_count = ("train", "dev", "test", "paws_qqp", "paws_wiki"), 6

    def protocol(self, cfg, split: str) -> dict:
        return {"data_seed": cfg.data_seed, "sample": SAMPLE} if split in ("train", "dev", "test") else {}

    def read_split(self, cfg, root: Path, split: str) -> list:
        if split in ("paws_qqp", "paws_wiki"):
            return read_pairs(root / self.files[split], False,
                              {"a": ("sentence1",), "b": ("sentence2",), "y": ("label",)})
        rows = read_pairs(root / self.files["train"], True,
                          {"a": ("question1",), "b": ("question2",), "y": ("is_duplicate",)})
        n = SAMPLE if len(rows) >= 10 * SAMPLE else max(2, len(rows) // 10)
        rng = random.Random(cfg.data_seed)
        dev, rest = sample_balanced(rows, n, rng, (0, 1))
        test, train = sample_balanced(rest, n, rng, (0, 1))
        return {"train": train, "dev": dev, "test": test}[split]

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.qqp(root, seed, self.files)
