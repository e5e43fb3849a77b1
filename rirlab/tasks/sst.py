"""SST5 (Socher et al., EMNLP 2013): fine-grained 5-way sentiment of whole sentences, the original splits.

Files: the Stanford Sentiment Treebank's PTB-tree release (``trainDevTestTrees_PTB.zip`` unpacks to
``trees/{train,dev,test}.txt``), one sentence per line as a labelled binary tree,
``(3 (2 It) (4 (2 's) (3 good)))``. The label is the root's (0 very negative .. 4 very positive); the tokens are
the leaves. Dev and test are whole sentences (RIR / EBT report sentence accuracy, "the original splits").

Two choices change results; the defaults are what the authors' public preprocessing does (``process_SST5.py`` of
the repository JRC1995/BeamRecursionFamily, which produced the published numbers; it reads the trees with
torchtext's ``SST`` dataset, ``train_subtrees=True``):

- ``train_phrases`` (default true): training examples are every labelled node of every training tree (the
  whole sentence, each phrase and each single word, in pre-order, duplicates kept): 318,582 examples from the
  8,544 training trees. False trains on the 8,544 root sentences only.
- ``brackets`` (default ``ptb``): leaves are kept as the trees spell them, ``-LRB-``/``-RRB-`` (lower-cased,
  ``-lrb-``, with the task's default ``lowercase``); ``restore`` reads them back as ``(`` and ``)``.
Nothing filtered.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.tasks.registry import register
from rirlab.tasks.base import clipped_lengths
from rirlab.tasks.text import TextConfig, TextTask, bad, read_lines

LABELS = ("0", "1", "2", "3", "4")
SPLITS = {"test": "IID"}
_TREE_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_LEAF = {"-LRB-": "(", "-RRB-": ")"}


def parse_nodes(text: str, restore: bool = True) -> list[tuple[int, list[str]]]:
    """(label, leaves) of every node of a PTB sentiment tree, the root first then pre-order (as NLTK's
    ``Tree.subtrees()``); ``restore``: ``-LRB-``/``-RRB-`` read back as brackets. ValueError saying why when
    malformed."""
    toks = _TREE_TOKEN.findall(text)
    if len(toks) < 4 or toks[0] != "(":
        raise ValueError("not a PTB tree: expected '(LABEL ...)'")
    nodes, open_, leaves, i = [], [], [], 0  # open_: indices into nodes of the nodes not yet closed
    while i < len(toks):
        t = toks[i]
        if t == "(":
            if i + 1 >= len(toks) or toks[i + 1] not in LABELS:
                raise ValueError(f"node label {toks[i + 1] if i + 1 < len(toks) else 'missing'!r} is not 0-4")
            open_.append(len(nodes))
            nodes.append([LABELS.index(toks[i + 1]), len(leaves), None])  # label, first leaf, end leaf
            i += 2
            continue
        if t == ")":
            if not open_:
                raise ValueError("')' without matching '('")
            nodes[open_.pop()][2] = len(leaves)
            if not open_ and i != len(toks) - 1:
                raise ValueError("text after the tree's closing ')'")
        else:
            leaves.append(_LEAF.get(t, t) if restore else t)
        i += 1
    if open_:
        raise ValueError(f"{len(open_)} unclosed '('")
    if not leaves:
        raise ValueError("a tree without words")
    return [(y, leaves[a:b]) for y, a, b in nodes]


def parse_tree(text: str, restore: bool = True) -> tuple[int, list[str]]:
    """(root label, leaves) of a PTB sentiment tree; ValueError saying why when malformed."""
    return parse_nodes(text, restore)[0]


@dataclass(config=STRICT)
class SST5Config(TextConfig, task="sst5", splits=SPLITS):
    """SST5: sentence-level fine-grained sentiment (RIR Table 6, EBT supplement Table 4)."""

    train_phrases: bool = True  # every labelled node of the training trees (the authors' code); false: roots only
    brackets: Literal["ptb", "restore"] = "ptb"  # -LRB-/-RRB- as the trees spell them (the authors'), or ( )


@register
class SST5(TextTask):
    """SST5: 5-way fine-grained sentiment of sentences (the user's SST PTB-tree files)"""

    name, config, kind, labels = "sst5", SST5Config, "classify", LABELS
    files = {"train": "trees/train.txt", "dev": "trees/dev.txt", "test": "trees/test.txt"}
    needs = {"train": ("train",), "dev": ("dev",), "test": ("test",)}
    vocab_splits, min_count = ("train", "dev", "test"), 1  # the authors' vocabulary (rirlab.tasks.text)
    # training lengths (Task.train_lengths; no data here to measure): rough quantiles at LENGTH_Q after the
    # published statistics, PTB-style words: sentences of mean 19 tokens, at most 56
    TRAIN_LENGTHS = (2, 8, 12, 18, 25, 32, 36, 45, 56)

    def train_lengths(self, cfg) -> tuple:
        return (clipped_lengths(self.TRAIN_LENGTHS, cfg.max_train_len),)

    def protocol(self, cfg, split: str) -> dict:
        return {"brackets": cfg.brackets, **({"train_phrases": cfg.train_phrases} if split == "train" else {})}

    def read_split(self, cfg, root: Path, split: str) -> list:
        path = root / self.files[split]
        phrases = split == "train" and cfg.train_phrases
        rows = []
        for no, line in read_lines(path):
            if not line.strip():
                continue
            try:
                nodes = parse_nodes(line, cfg.brackets == "restore")
            except ValueError as err:
                raise bad(path, no, str(err)) from None
            rows += nodes if phrases else nodes[:1]
        return rows

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.sst(root, seed, self.files)
