"""IMDB (Maas et al., ACL 2011): binary sentiment of movie reviews, with the contrast and counterfactual sets.

Files (as their publishers distribute them, under data_dir):

- ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``: one review per file (``aclImdb_v1.tar.gz``);
- ``contrast-sets/IMDb/data/{dev,test}_contrast.tsv``: the contrast sets of Gardner et al. (Findings of EMNLP
  2020), header ``Sentiment<TAB>Text``, labels ``Positive``/``Negative``;
- ``contrast-sets/IMDb/data/dev_original.tsv``: the original reviews the contrast dev set was written from
  (same header), part of the authors' dev split;
- ``counterfactually-augmented-data/sentiment/new/test.tsv``: the counterfactual (revised) test set of Kaushik
  et al. (ICLR 2020), header ``Sentiment<TAB>Text``.

Splits (RIR Table 6 / EBT supplement Table 4 columns): ``test`` IID, ``contrast`` Cont. (test_contrast.tsv),
``counterfactual`` Count.; ``test_full`` (IID, full length: all 25,000 aclImdb test reviews) and ``contrast_dev``
(dev_contrast.tsv) as extras.

Two choices change results; the defaults are what the authors' public preprocessing does (``process_IMDB.py`` of
the repository JRC1995/BeamRecursionFamily, the code behind the published numbers; the papers only cite BT-Cell,
ICML 2023, for the split):

- ``length_protocol`` (default ``authors``): train = the aclImdb/train reviews of at most 200 tokens; dev = the
  aclImdb/train reviews of 201 to 300 tokens, then the rows of dev_original.tsv, twice (their script reads that
  file two times; kept, it weighs the dev score); the IID ``test`` = the aclImdb/test reviews of at most 200
  tokens (longer ones are dropped). ``full`` (the full-length protocol; report its test as ``test_full``): dev =
  1,000 positive + 1,000 negative reviews of aclImdb/train drawn with ``data_seed``, train = the other 23,000.
- ``html_breaks`` (default ``remove``): ``<br>``, ``</br>`` and ``<br />`` are deleted, joining the words on
  either side (the authors' code); ``space`` puts a space there instead.

Token counts are of :func:`rirlab.tasks.treebank.tokenize`, NLTK's ``word_tokenize`` as the authors count them,
without its downloaded sentence model (a period after a rare abbreviation may differ, so a review near 200 or 300
tokens may rarely fall on the other side).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Literal

from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks.registry import register
from rirlab.tasks.base import clipped_lengths
from rirlab.tasks.text import (TextConfig, TextTask, bad, columns, expect, label_of, read_text, sample_balanced,
                               tsv)
from rirlab.tasks.treebank import tokenize

LABELS = ("negative", "positive")
SPLITS = {"test": "IID", "contrast": "Cont.", "counterfactual": "Count.", "test_full": "IID (full length)",
          "contrast_dev": "Cont. dev"}
FILE_LABELS = {"Negative": "negative", "Positive": "positive", "negative": "negative", "positive": "positive"}
DEV_PER_LABEL = 1000
TRAIN_MAX, DEV_MAX = 200, 300  # the authors' protocol: train / IID test <= 200 tokens, dev 201..300
_BR = re.compile(r"<br\s*/?>", re.I)
_BR_AUTHORS = [re.compile(re.escape(b), re.I) for b in ("<br>", "</br>", "<br />")]  # deleted in this order
_NAME = re.compile(r"^(\d+)_(\d+)\.txt$")


def review_tokens(text: str, html_breaks: str = "space") -> list[str]:
    if html_breaks == "remove":
        for br in _BR_AUTHORS:
            text = br.sub("", text)
        return tokenize(text)
    return tokenize(_BR.sub(" ", text))


def review_files(task: str, root: Path, rel: str) -> list[tuple[int, Path]]:
    """(label, file) of every review of the aclImdb folder ``root / rel`` (``aclImdb/train``): neg (0) then pos
    (1), by review id. Files not named ``<id>_<rating>.txt`` (``urls_*.txt``, an editor's backup, a note) are not
    reviews and are skipped, here and in LRA Text (rirlab.tasks.lra)."""
    out = []
    for y, sub in enumerate(("neg", "pos")):
        d = expect(task, root, f"{rel}/{sub}")
        names = sorted((int(m[1]), p) for p in d.iterdir() if (m := _NAME.match(p.name)))
        if not names:
            raise UserError(f"{d}: no review files <id>_<rating>.txt (aclImdb holds one review per file)")
        out += [(y, p) for _, p in names]
    return out


def read_folder(folder: Path, html_breaks: str = "space") -> list:
    """(label, tokens) of every review of ``aclImdb/<split>``: neg then pos, by review id."""
    files = review_files("imdb", folder.parent.parent, f"{folder.parent.name}/{folder.name}")
    return [(y, review_tokens(read_text(p), html_breaks)) for y, p in files]


def read_sentiment_tsv(path: Path, html_breaks: str = "space") -> list:
    """(label, tokens) of a contrast / counterfactual TSV with a ``Sentiment<TAB>Text`` header."""
    rows, cols = [], None
    for no, fields in tsv(path):
        if cols is None:
            cols = columns(path, fields, {"label": ("sentiment", "label"), "text": ("text", "review")}, no)
            continue
        if len(fields) <= max(cols.values()):
            raise bad(path, no, f"{len(fields)} columns; the header has {max(cols.values()) + 1} or more")
        rows.append((label_of(path, no, LABELS, fields[cols["label"]], FILE_LABELS),
                     review_tokens(fields[cols["text"]], html_breaks)))
    if cols is None:
        raise bad(path, 1, "empty file; expected a Sentiment<TAB>Text header")
    return rows


@dataclass(config=STRICT)
class IMDBConfig(TextConfig, task="imdb", splits=SPLITS, default=("test", "contrast", "counterfactual")):
    """IMDB sentiment with contrast and counterfactual test sets (RIR Table 6, EBT supplement Table 4)."""

    length_protocol: Literal["authors", "full"] = "authors"  # module docstring; authors' = the published numbers
    html_breaks: Literal["remove", "space"] = "remove"  # <br /> deleted (the authors' code) or a space


@register
class IMDB(TextTask):
    """IMDB: binary sentiment of movie reviews, with contrast and counterfactual sets (the user's aclImdb files)"""

    name, config, kind, labels = "imdb", IMDBConfig, "classify", LABELS
    version = 2  # 2: word_tokenize's rules (rirlab.tasks.treebank)
    # training lengths (Task.train_lengths; no data here to measure): rough quantiles at LENGTH_Q after the
    # published statistics: reviews of mean ~290 tokens, a long tail
    TRAIN_LENGTHS = (10, 120, 150, 215, 350, 570, 760, 1200, 2800)
    files = {"train": "aclImdb/train", "test": "aclImdb/test",
             "contrast": "contrast-sets/IMDb/data/test_contrast.tsv",
             "contrast_dev": "contrast-sets/IMDb/data/dev_contrast.tsv",
             "dev_original": "contrast-sets/IMDb/data/dev_original.tsv",
             "counterfactual": "counterfactually-augmented-data/sentiment/new/test.tsv"}
    needs = {"train": ("train",), "dev": ("train", "dev_original"), "test": ("test",), "test_full": ("test",),
             "contrast": ("contrast",), "contrast_dev": ("contrast_dev",), "counterfactual": ("counterfactual",)}
    vocab_splits, min_count = ("train", "test"), 5  # the authors' vocabulary (rirlab.tasks.text)

    def train_lengths(self, cfg) -> tuple:
        return (clipped_lengths(self.TRAIN_LENGTHS, cfg.max_train_len),)

    def split_needs(self, cfg, split: str) -> tuple:
        if split == "dev" and cfg.length_protocol != "authors":
            return ("train",)  # the full-length dev is drawn from aclImdb/train alone
        return super().split_needs(cfg, split)

    def protocol(self, cfg, split: str) -> dict:
        out = {"html_breaks": cfg.html_breaks}
        if split in ("train", "dev"):
            out["length_protocol"] = cfg.length_protocol
            if cfg.length_protocol == "full":
                out.update(data_seed=cfg.data_seed, dev_per_label=DEV_PER_LABEL)
        return out

    def read_split(self, cfg, root: Path, split: str) -> list:
        br = cfg.html_breaks
        if split in ("train", "dev") and cfg.length_protocol == "authors":
            rows = read_folder(root / self.files["train"], br)
            if split == "train":
                return [r for r in rows if len(r[1]) <= TRAIN_MAX]
            original = read_sentiment_tsv(root / self.files["dev_original"], br)
            return [r for r in rows if TRAIN_MAX < len(r[1]) <= DEV_MAX] + original + original
        if split in ("train", "dev"):
            rows = read_folder(root / self.files["train"], br)
            per = min(DEV_PER_LABEL, min(sum(r[0] == y for r in rows) for y in (0, 1)) // 10 or 1)
            dev, train = sample_balanced(rows, 2 * per, random.Random(cfg.data_seed), (0, 1))
            return train if split == "train" else dev
        if split in ("test", "test_full"):
            rows = read_folder(root / self.files["test"], br)
            return [r for r in rows if len(r[1]) <= TRAIN_MAX] if split == "test" else rows
        return read_sentiment_tsv(root / self.files[split], br)

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.imdb(root, seed, self.files)
