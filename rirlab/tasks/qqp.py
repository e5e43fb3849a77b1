"""QQP: whether two Quora questions are paraphrases (binary sentence-pair classification), with PAWS.

Files under data_dir, as distributed:

- ``quora_duplicate_questions.tsv`` (Quora's first dataset release): header
  ``id qid1 qid2 question1 question2 is_duplicate``, fields quoted where they hold tabs, quotes or newlines;
- ``paws_qqp/dev_and_test.tsv``: PAWS-QQP (Zhang et al., NAACL 2019), which its script builds from QQP, header
  ``id sentence1 sentence2 label``; the script writes Python bytes literals (``b'How ...'``);
- ``paws_wiki/test.tsv``: PAWS-Wiki's final test set, same columns.

Protocol (RIR / EBT, "as standard Wang et al."): dev and IID test are 10,000 pairs each, 5,000 paraphrases and
5,000 not; train is the rest. (A file with fewer than 100,000 rows, a stand-in, gives a tenth of its rows to each.)

The defaults are what the authors' public preprocessing does (``process_QQP.py`` of JRC1995/BeamRecursionFamily,
the code behind the published numbers):

- ``tokenizer`` (default ``split``): the question lower-cased (``lowercase``) and split on white space, so
  punctuation stays on its word (``what's`` one token, ``?`` glued to the last word); ``ptb`` uses
  :func:`rirlab.tasks.treebank.tokenize` (NLTK's ``word_tokenize``). PAWS sets are tokenised the same way.
- ``max_question_len`` (default 150): pairs with a question of more than 150 tokens are dropped from the whole
  Quora file before dev and test are drawn; null keeps every pair.
- the draw: the row numbers of the paraphrases and of the others are each shuffled with Python's
  ``random.Random(data_seed)`` (paraphrases first); dev takes the first 5,000 of each, test the next 5,000, train
  the rest. ``data_seed`` defaults to 101, the authors' seed, which gives their dev and test rows.
- ``paws_format`` (default ``authors``): the PAWS files read as the authors' ``csv.reader`` reads them (a field
  that opens with ``"`` is quoted: the quotes go, tabs and newlines inside stay; a quote after its closing one is
  kept as text) and the bytes literals kept as written, so ``b'how`` is a token (usually ``<unk>``); ``decoded``
  (rirlab before): quotes are plain characters and a literal is decoded to its text.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks.registry import register
from rirlab.tasks.base import clipped_lengths
from rirlab.tasks.text import TextConfig, TextTask, bad, columns, keep_short, label_of, tsv
from rirlab.tasks.treebank import tokenize

LABELS = ("not_duplicate", "duplicate")
FILE_LABELS = {"0": "not_duplicate", "1": "duplicate"}
SPLITS = {"test": "IID", "paws_qqp": "PAWS_QQP", "paws_wiki": "PAWS_Wiki"}
SAMPLE = 10000
AUTHORS_SEED = 101  # process_QQP.py's random.seed
MAX_QUESTION_LEN = 150  # process_QQP.py's filter_size


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


def split_words(text: str) -> list[str]:
    return text.split()


def read_pairs(path: Path, quoted: bool, names: dict, tokens=tokenize, literals=unbytes, strict: bool = True) -> list:
    rows, cols = [], None
    for no, fields in tsv(path, quoted=quoted, strict=strict):
        if cols is None:
            cols = columns(path, fields, names, no)
            continue
        if len(fields) <= max(cols.values()):
            raise bad(path, no, f"{len(fields)} columns; the header has {max(cols.values()) + 1} or more")
        rows.append((label_of(path, no, LABELS, fields[cols["y"]], FILE_LABELS),
                     tokens(literals(fields[cols["a"]])), tokens(literals(fields[cols["b"]]))))
    if cols is None:
        raise bad(path, 1, "empty file; expected a header line")
    return rows


@dataclass(config=STRICT)
class QQPConfig(TextConfig, task="qqp", splits=SPLITS):
    """QQP with PAWS-QQP and PAWS-Wiki test sets (RIR Table 7, EBT Table 3)."""

    data_seed: int = Field(AUTHORS_SEED, ge=0)  # 101: the authors' dev and test rows
    tokenizer: Literal["split", "ptb"] = "split"  # white space (the authors' code) or rirlab's PTB-style tokenize
    max_question_len: Optional[int] = Field(MAX_QUESTION_LEN, ge=1)  # longer pairs dropped (the authors'); null: none
    paws_format: Literal["authors", "decoded"] = "authors"  # PAWS as csv.reader reads it, literals kept (module doc)


@register
class QQP(TextTask):
    """QQP: paraphrase detection of question pairs, with PAWS-QQP/PAWS-Wiki (the user's quora_duplicate_questions.tsv)"""

    name, config, kind, labels = "qqp", QQPConfig, "pair", LABELS
    version = 2  # 2: ``ptb`` is word_tokenize's rules (rirlab.tasks.treebank)
    files = {"train": "quora_duplicate_questions.tsv", "paws_qqp": "paws_qqp/dev_and_test.tsv",
             "paws_wiki": "paws_wiki/test.tsv"}
    needs = {"train": ("train",), "dev": ("train",), "test": ("train",), "paws_qqp": ("paws_qqp",),
             "paws_wiki": ("paws_wiki",)}
    # the authors' vocabulary (rirlab.tasks.text): the whole Quora file and both PAWS sets, words seen 6+ times
    vocab_splits, min_count = ("train", "dev", "test", "paws_qqp", "paws_wiki"), 6
    # training lengths (Task.train_lengths; no data here to measure): rough quantiles at LENGTH_Q after the
    # published statistics, each question of a pair: mean 12 tokens, a few very long ones
    TRAIN_LENGTHS = (1, 6, 8, 11, 15, 21, 26, 40, 270)

    def train_lengths(self, cfg) -> tuple:
        return (clipped_lengths(self.TRAIN_LENGTHS, cfg.max_train_len),) * 2

    def protocol(self, cfg, split: str) -> dict:
        out = {"tokenizer": cfg.tokenizer}
        if split in ("paws_qqp", "paws_wiki"):
            out["paws_format"] = cfg.paws_format
        if split in ("train", "dev", "test"):
            out.update(data_seed=cfg.data_seed, sample=SAMPLE, max_question_len=cfg.max_question_len)
        return out

    def read_split(self, cfg, root: Path, split: str) -> list:
        tokens = split_words if cfg.tokenizer == "split" else tokenize
        if split in ("paws_qqp", "paws_wiki"):
            authors = cfg.paws_format == "authors"
            return read_pairs(root / self.files[split], authors, {"a": ("sentence1",), "b": ("sentence2",),
                              "y": ("label",)}, tokens, str if authors else unbytes, strict=not authors)
        rows = read_pairs(root / self.files["train"], True,
                          {"a": ("question1",), "b": ("question2",), "y": ("is_duplicate",)}, tokens)
        rows = keep_short(rows, cfg.max_question_len)
        per = SAMPLE // 2 if len(rows) >= 10 * SAMPLE else max(1, len(rows) // 20)
        rng = random.Random(cfg.data_seed)
        dup = [i for i, r in enumerate(rows) if r[0] == 1]
        other = [i for i, r in enumerate(rows) if r[0] == 0]
        rng.shuffle(dup)
        rng.shuffle(other)
        if min(len(dup), len(other)) < 2 * per:
            raise UserError(f"qqp: {len(dup)} paraphrase and {len(other)} other pairs in {self.files['train']}; dev "
                            f"and test need {2 * per} of each; is the file complete?")
        part = {"dev": slice(0, per), "test": slice(per, 2 * per), "train": slice(2 * per, None)}[split]
        return [rows[i] for i in dup[part] + other[part]]

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.qqp(root, seed, self.files)
