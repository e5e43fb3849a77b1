"""Long Range Arena (Tay et al., ICLR 2021, arXiv:2011.04006) tasks read from the user's LRA release files, with
LRA's preprocessing: ListOps, Text (IMDB bytes), Retrieval (AAN document pairs, bytes) and Image (sequential
CIFAR-10). RIR Table 4 reports ListOps, Text and Retrieval; Image is the extra the RIR paper mentions
(sequential CIFAR). The papers train these with trainable random embeddings (no GloVe).

Files under data_dir:

- ``lra_release/listops-1000/basic_{train,val,test}.tsv``: header ``Source<TAB>Target``; tokens as the ListOps
  task reads them (operators, digits, ``]``; the binarising parentheses are not tokens), at most 2,000;
- ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt`` (other files skipped, as IMDB): Text reads the reviews as
  UTF-8 bytes, truncated to 4,096 (the authors' public preprocessing, ``process_IMDB_lra.py`` of
  JRC1995/BeamRecursionFamily, which produced the published numbers; LRA's own pipeline cuts at 4,000:
  ``--set max_len=4000``); LRA's byte-level IMDB, no HTML clean-up; dev = test = the aclImdb test set, as LRA's
  pipeline and the authors' code evaluate on the test split;
- ``lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv``: Retrieval, no header, columns
  ``label id1 id2 text1 text2``; each document as bytes truncated to 4,096 (the authors' ``process_AAN_lra.py``;
  LRA: 4,000) (a sentence-pair task);
- ``cifar-10-batches-py/{data_batch_1..5,test_batch}``: Image, CIFAR-10's python pickles; each image to
  grayscale as LRA (``tf.image.rgb_to_grayscale``: 0.2989 R + 0.5870 G + 0.1140 B, back to 8 bits) and read
  row by row as 1,024 pixel tokens; test = test_batch. Dev is never the test set: ``dev_holdout`` (default
  0.1) holds the last 10% of the training images (in file order: the second half of data_batch_5) out as dev,
  train the other 45,000, as LRA's input pipeline and the authors' code (tfds ``train[:90%]`` /
  ``train[90%:]``); tfds orders CIFAR-10 by its own key hash, so the 5,000 images are not the same ones, and
  only which images select the checkpoint differs.

Token ids: 0 padding, byte / pixel value + 1 (ListOps: the ListOps task's vocabulary).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks import listops
from rirlab.tasks.base import PAD, clipped_lengths, constant_lengths
from rirlab.tasks.imdb import review_files  # the same reviews as the IMDB task reads
from rirlab.tasks.registry import register
from rirlab.tasks.text import TextTask, bad, clip, columns, known_splits, read_text, tsv

BYTES = [PAD, *(f"b{v:02x}" for v in range(256))]  # id = byte + 1


@dataclass(config=STRICT)
class LRAConfig:
    """An LRA task read from the user's files (``max_len``: LRA's maximum length unless set)."""

    data_dir: Optional[str] = None
    generated: bool = False
    max_len: Optional[int] = Field(None, ge=1)
    data_seed: int = Field(1234, ge=0)
    cache_dir: Optional[str] = None
    eval_splits: list[str] = Field(default_factory=lambda: ["test"])

    _known = known_splits("lra", ("test",))


@dataclass(config=STRICT)
class LRAImageConfig(LRAConfig):
    """LRA Image; ``dev_holdout``: the fraction of the training images held out as dev (module doc); never 0,
    which would select the checkpoint on the test images."""

    dev_holdout: float = Field(0.1, gt=0, lt=1)


def to_bytes(text: str, n: int) -> list[int]:
    return [b + 1 for b in text.encode("utf-8")[:n]]


class LRATask(TextTask):
    """Rows hold token ids (``ids`` / ``ids2``) and the vocabulary is fixed; no pretrained embeddings."""

    config = LRAConfig
    splits = (("test", "test"),)
    COLUMNS, VALUES = ("ids", "ids2"), pa.int16()
    max_len: int = 0
    vocab = BYTES

    # training lengths (Task.train_lengths; no data here to measure): rough quantiles at LENGTH_Q after the
    # published statistics, in the task's tokens (bytes / pixels), one per sequence of an example, before
    # the task's length (max_len) clips them
    TRAIN_LENGTHS: tuple = ()

    def length(self, cfg) -> int:
        return cfg.max_len or self.max_len

    def train_lengths(self, cfg) -> tuple:
        return tuple(clipped_lengths(q, self.length(cfg)) for q in self.TRAIN_LENGTHS)

    def protocol(self, cfg, split: str) -> dict:
        return {"max_len": self.length(cfg)}


    def vocabulary(self, cfg, train):
        return list(self.vocab), None

    def encode(self, table: pa.Table, ids: dict) -> list:
        return [(*(list(x) or [1] for x in r[1:]), r[0]) for r in self.rows_of(table)]

    def to_lines(self, table: pa.Table) -> Iterator[str]:
        for row in self.rows_of(table):
            yield "\t".join([self.labels[row[0]], *(" ".join(map(str, x)) for x in row[1:])])

    def parse_line(self, line: str) -> tuple:
        cols = line.rstrip("\n").split("\t")
        want = 3 if self.kind == "pair" else 2
        if len(cols) != want or cols[0] not in self.labels:
            raise ValueError(f"expected {want} tab-separated columns, LABEL ({', '.join(self.labels)}) then token ids")
        try:
            return (self.labels.index(cols[0]), *([int(t) for t in c.split()] for c in cols[1:]))
        except ValueError:
            raise ValueError("token ids must be integers") from None


@register
class LRAListOps(LRATask):
    """LRA ListOps: 10-way nested list operations, up to 2,000 tokens (the user's lra_release basic_*.tsv)"""

    name, kind = "lra_listops", "classify"
    labels = tuple(str(d) for d in range(10))
    vocab = listops.VOCAB
    max_len = 2000
    TRAIN_LENGTHS = ((500, 560, 650, 850, 1150, 1500, 1700, 1900, 2000),)  # 500 to 2,000 tokens
    files = {"train": "lra_release/listops-1000/basic_train.tsv", "dev": "lra_release/listops-1000/basic_val.tsv",
             "test": "lra_release/listops-1000/basic_test.tsv"}
    needs = {s: (s,) for s in files}

    def read_split(self, cfg, root: Path, split: str) -> list:
        path, rows, cols = root / self.files[split], [], None
        for no, fields in tsv(path, quoted=False):
            if cols is None:
                cols = columns(path, fields, {"x": ("source",), "y": ("target",)}, no)
                continue
            try:
                text, label = listops.parse_line(f"{fields[cols['y']]}\t{fields[cols['x']]}")
            except (ValueError, IndexError) as err:
                raise bad(path, no, str(err) or "missing column") from None
            rows.append((label, [listops.TOKEN_ID[t] for t in listops.tokenize(text)][: self.length(cfg)]))
        return rows

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.lra_listops(root, seed, self.files)


@register
class LRAText(LRATask):
    """LRA Text: binary IMDB sentiment at byte level, up to 4,096 bytes (the user's aclImdb folder)"""

    name, kind = "lra_text", "classify"
    labels = ("negative", "positive")
    max_len = 4096  # the authors' code (LRA: 4,000)
    TRAIN_LENGTHS = ((50, 530, 700, 980, 1600, 2600, 3400, 5800, 13700),)  # the IMDB reviews as bytes
    files = {"train": "aclImdb/train", "test": "aclImdb/test"}
    needs = {"train": ("train",), "dev": ("test",), "test": ("test",)}

    def read_split(self, cfg, root: Path, split: str) -> list:
        files = review_files(self.name, root, self.files["train" if split == "train" else "test"])
        return [(y, to_bytes(read_text(p), self.length(cfg))) for y, p in files]

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.imdb(root, seed, {**self.files, "contrast": "unused/c.tsv", "contrast_dev": "unused/d.tsv",
                                  "counterfactual": "unused/e.tsv"})


@register
class LRARetrieval(LRATask):
    """LRA Retrieval: whether two AAN papers cite each other, bytes, up to 4,096 each (new_aan_pairs.*.tsv)"""

    name, kind = "lra_retrieval", "pair"
    labels = ("0", "1")
    max_len = 4096  # the authors' code (LRA: 4,000)
    TRAIN_LENGTHS = ((400, 2000, 3200, 5000, 8000, 12000, 15000, 25000, 60000),) * 2  # AAN papers, mostly > 4,000
    files = {"train": "lra_release/tsv_data/new_aan_pairs.train.tsv",
             "dev": "lra_release/tsv_data/new_aan_pairs.eval.tsv",
             "test": "lra_release/tsv_data/new_aan_pairs.test.tsv"}
    needs = {s: (s,) for s in files}

    def read_split(self, cfg, root: Path, split: str) -> list:
        path, rows, n = root / self.files[split], [], self.length(cfg)
        for no, fields in tsv(path, quoted=False):
            if len(fields) < 5:
                raise bad(path, no, f"{len(fields)} columns; expected label, id1, id2, text1, text2")
            label = fields[0].strip()
            if label in ("0.0", "1.0"):
                label = label[0]
            if label not in self.labels:
                raise bad(path, no, f"unknown label {clip(fields[0])}; expected 0 or 1")
            rows.append((int(label), to_bytes(fields[3], n), to_bytes(fields[4], n)))
        return rows

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.lra_retrieval(root, seed, self.files)


class _Unpickler(pickle.Unpickler):
    """CIFAR-10's python pickles hold dicts of bytes, lists and numpy arrays: nothing else is loaded."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a CIFAR-10 batch")
        return super().find_class(module, name)


FIX = "give the python batches of cifar-10-python.tar.gz as distributed"


def check_batch(path: Path, data: np.ndarray, labels: list) -> None:
    """UserError naming the first image whose label is not an integer 0-9 or whose pixels are not integers 0-255
    (a relabelled, normalised or foreign batch: read as CIFAR-10 it would wrap or stop in a traceback)."""
    for i, y in enumerate(labels):
        if isinstance(y, bool) or not isinstance(y, (int, np.integer)) or not 0 <= y < 10:
            raise UserError(f"{path}:1: image {i} has label {y!r:.60}; CIFAR-10 labels are the integers 0-9 "
                            f"({FIX})")
    if data.dtype.kind not in "iu":
        raise UserError(f"{path}:1: pixels of type {data.dtype}; CIFAR-10 pixels are integers 0-255 (uint8) ({FIX})")
    wrong = (data < 0) | (data > 255)  # (N, 3072)
    if wrong.any():
        i, j = (int(k) for k in np.argwhere(wrong)[0])
        raise UserError(f"{path}:1: image {i} has a pixel of {data[i, j]} (value {j} of 3072); CIFAR-10 pixels are "
                        f"0-255 ({FIX})")


def grayscale(data: np.ndarray) -> np.ndarray:
    """(N, 3072) uint8 CIFAR rows (R, G, B planes of 32x32) -> (N, 1024) uint8, as tf.image.rgb_to_grayscale."""
    rgb = data.reshape(-1, 3, 1024).astype(np.float32) / 255.0  # (N, 3, 1024)
    gray = np.tensordot(np.array([0.2989, 0.5870, 0.1140], np.float32), rgb, axes=([0], [1]))  # (N, 1024)
    return np.clip(gray * 255.5, 0, 255).astype(np.uint8)


@register
class LRAImage(LRATask):
    """LRA Image: sequential grayscale CIFAR-10, 1,024 pixels per image (the user's cifar-10-batches-py)"""

    name, kind = "lra_image", "classify"
    config = LRAImageConfig
    labels = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    max_len = 1024

    def train_lengths(self, cfg) -> tuple:
        return (constant_lengths(self.length(cfg)),)  # 32 x 32 pixels, every image
    files = {**{f"data_batch_{i}": f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)},
             "test_batch": "cifar-10-batches-py/test_batch"}
    _train = tuple(f"data_batch_{i}" for i in range(1, 6))
    needs = {"train": _train, "dev": _train, "test": ("test_batch",)}  # dev: the last training images

    def protocol(self, cfg, split: str) -> dict:
        out = super().protocol(cfg, split)
        return {**out, "dev_holdout": cfg.dev_holdout} if split in ("train", "dev") else out

    def read_split(self, cfg, root: Path, split: str) -> list:
        rows = self._read_batches(cfg, root, self.needs[split])
        if split == "test":
            return rows
        cut = len(rows) - round(len(rows) * cfg.dev_holdout)  # the last fraction, in file order
        return rows[:cut] if split == "train" else rows[cut:]

    def _read_batches(self, cfg, root: Path, keys) -> list:
        rows = []
        for key in keys:
            path = root / self.files[key]
            try:
                with open(path, "rb") as f:
                    batch = _Unpickler(f, encoding="bytes").load()
                data, labels = np.asarray(batch[b"data"]), list(batch[b"labels"])
            except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as err:
                raise UserError(f"{path}:1: not a CIFAR-10 python batch ({type(err).__name__}: {err})") from None
            if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
                raise UserError(f"{path}:1: data of shape {data.shape} with {len(labels)} labels; a CIFAR-10 batch "
                                f"holds (N, 3072) pixels and N labels")
            check_batch(path, data, labels)
            pixels = grayscale(data.astype(np.uint8))[:, : self.length(cfg)].astype(np.int16) + 1
            rows += [(int(y), p) for y, p in zip(labels, pixels)]
        return rows

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.cifar(root, seed, self.files)
