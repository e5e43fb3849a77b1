"""IMDB (Maas et al., ACL 2011): binary sentiment of movie reviews, with the contrast and counterfactual sets.

Files (as their publishers distribute them, under data_dir):

- ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``: one review per file (``aclImdb_v1.tar.gz``);
- ``contrast-sets/IMDb/data/{dev,test}_contrast.tsv``: the contrast sets of Gardner et al. (Findings of EMNLP
  2020), header ``Sentiment<TAB>Text``, labels ``Positive``/``Negative``;
- ``counterfactually-augmented-data/sentiment/new/test.tsv``: the counterfactual (revised) test set of Kaushik
  et al. (ICLR 2020), header ``Sentiment<TAB>Text``.

Splits (RIR Table 6 / EBT supplement Table 4 columns): ``test`` IID (aclImdb test), ``contrast`` Cont.
(test_contrast.tsv), ``counterfactual`` Count.; ``contrast_dev`` (dev_contrast.tsv) as an extra. The papers
take train / dev from "Ray Chowdhury and Caragea" (BT-Cell, ICML 2023) without printing the dev split; ours:
dev = 1,000 positive + 1,000 negative reviews of aclImdb/train drawn with ``data_seed``, train = the other
23,000. HTML line breaks (``<br />``) become spaces before tokenising. Nothing filtered.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks.registry import register
from rirlab.tasks.text import (TextConfig, TextTask, bad, columns, expect, known_splits, label_of, read_text,
                               sample_balanced, tokenize, tsv)

LABELS = ("negative", "positive")
SPLITS = {"test": "IID", "contrast": "Cont.", "counterfactual": "Count.", "contrast_dev": "Cont. dev"}
FILE_LABELS = {"Negative": "negative", "Positive": "positive"}
DEV_PER_LABEL = 1000
_BR = re.compile(r"<br\s*/?>", re.I)
_NAME = re.compile(r"^(\d+)_(\d+)\.txt$")


def review_tokens(text: str) -> list[str]:
    return tokenize(_BR.sub(" ", text))


def read_folder(folder: Path) -> list:
    """(label, tokens) of every review of ``aclImdb/<split>``: neg then pos, by review id."""
    rows = []
    for y, sub in enumerate(("neg", "pos")):
        d = expect("imdb", folder.parent.parent, f"{folder.parent.name}/{folder.name}/{sub}")
        names = []
        for p in d.iterdir():
            m = _NAME.match(p.name)
            if not m:
                continue  # urls_*.txt and other files are not reviews
            names.append((int(m[1]), p))
        if not names:
            raise UserError(f"{d}: no review files <id>_<rating>.txt (aclImdb holds one review per file)")
        rows += [(y, review_tokens(read_text(p))) for _, p in sorted(names)]
    return rows


def read_sentiment_tsv(path: Path) -> list:
    """(label, tokens) of a contrast / counterfactual TSV with a ``Sentiment<TAB>Text`` header."""
    rows, cols = [], None
    for no, fields in tsv(path):
        if cols is None:
            cols = columns(path, fields, {"label": ("sentiment", "label"), "text": ("text", "review")}, no)
            continue
        if len(fields) <= max(cols.values()):
            raise bad(path, no, f"{len(fields)} columns; the header has {max(cols.values()) + 1} or more")
        rows.append((label_of(path, no, LABELS, fields[cols["label"]], FILE_LABELS), review_tokens(fields[cols["text"]])))
    if cols is None:
        raise bad(path, 1, "empty file; expected a Sentiment<TAB>Text header")
    return rows


@dataclass(config=STRICT)
class IMDBConfig(TextConfig):
    """IMDB sentiment with contrast and counterfactual test sets (RIR Table 6, EBT supplement Table 4)."""

    eval_splits: list[str] = Field(default_factory=lambda: ["test", "contrast", "counterfactual"])

    _known = known_splits("imdb", SPLITS)


@register
class IMDB(TextTask):
    """IMDB: binary sentiment of movie reviews, with contrast and counterfactual sets (the user's aclImdb files)"""

    name, config, kind = "imdb", IMDBConfig, "classify"
    labels = LABELS
    splits = tuple(SPLITS.items())
    files = {"train": "aclImdb/train", "test": "aclImdb/test",
             "contrast": "contrast-sets/IMDb/data/test_contrast.tsv",
             "contrast_dev": "contrast-sets/IMDb/data/dev_contrast.tsv",
             "counterfactual": "counterfactually-augmented-data/sentiment/new/test.tsv"}
    needs = {"train": ("train",), "dev": ("train",), "test": ("test",), "contrast": ("contrast",),
             "contrast_dev": ("contrast_dev",), "counterfactual": ("counterfactual",)}
    quick = {"generated": True}

    def protocol(self, cfg, split: str) -> dict:
        return {"data_seed": cfg.data_seed, "dev_per_label": DEV_PER_LABEL} if split in ("train", "dev") else {}

    def read_split(self, cfg, root: Path, split: str) -> list:
        if split in ("train", "dev"):
            rows = read_folder(root / self.files["train"])
            per = min(DEV_PER_LABEL, min(sum(r[0] == y for r in rows) for y in (0, 1)) // 10 or 1)
            dev, train = sample_balanced(rows, 2 * per, random.Random(cfg.data_seed), (0, 1))
            return train if split == "train" else dev
        if split == "test":
            return read_folder(root / self.files["test"])
        return read_sentiment_tsv(root / self.files[split])

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.imdb(root, seed, self.files)
