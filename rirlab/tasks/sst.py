"""SST5 (Socher et al., EMNLP 2013): fine-grained 5-way sentiment of whole sentences, the original splits.

Files: the Stanford Sentiment Treebank's PTB-tree release (``trainDevTestTrees_PTB.zip`` unpacks to
``trees/{train,dev,test}.txt``), one sentence per line as a labelled binary tree,
``(3 (2 It) (4 (2 's) (3 good)))``. The label is the root's (0 very negative .. 4 very positive); the tokens are
the leaves, ``-LRB-``/``-RRB-`` read back as brackets. Phrase labels are not used (RIR / EBT report sentence
accuracy, "the original splits"). Nothing filtered.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.tasks.registry import register
from rirlab.tasks.text import TextConfig, TextTask, bad, known_splits, read_lines

LABELS = ("0", "1", "2", "3", "4")
SPLITS = {"test": "IID"}
_TREE_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_LEAF = {"-LRB-": "(", "-RRB-": ")"}


def parse_tree(text: str) -> tuple[int, list[str]]:
    """(root label, leaves) of a PTB sentiment tree; ValueError saying why when malformed."""
    toks = _TREE_TOKEN.findall(text)
    if len(toks) < 4 or toks[0] != "(":
        raise ValueError("not a PTB tree: expected '(LABEL ...)'")
    depth, leaves, i = 0, [], 0
    root = toks[1]
    while i < len(toks):
        t = toks[i]
        if t == "(":
            if i + 1 >= len(toks) or toks[i + 1] not in LABELS:
                raise ValueError(f"node label {toks[i + 1] if i + 1 < len(toks) else 'missing'!r} is not 0-4")
            depth, i = depth + 1, i + 2
            continue
        if t == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("')' without matching '('")
            if depth == 0 and i != len(toks) - 1:
                raise ValueError("text after the tree's closing ')'")
        else:
            leaves.append(_LEAF.get(t, t))
        i += 1
    if depth:
        raise ValueError(f"{depth} unclosed '('")
    if not leaves:
        raise ValueError("a tree without words")
    return LABELS.index(root), leaves


@dataclass(config=STRICT)
class SST5Config(TextConfig):
    """SST5: sentence-level fine-grained sentiment (RIR Table 6, EBT supplement Table 4)."""

    eval_splits: list[str] = Field(default_factory=lambda: list(SPLITS))

    _known = known_splits("sst5", SPLITS)


@register
class SST5(TextTask):
    """SST5: 5-way fine-grained sentiment of sentences (the user's SST PTB-tree files)"""

    name, config, kind = "sst5", SST5Config, "classify"
    labels = LABELS
    splits = tuple(SPLITS.items())
    files = {"train": "trees/train.txt", "dev": "trees/dev.txt", "test": "trees/test.txt"}
    needs = {"train": ("train",), "dev": ("dev",), "test": ("test",)}
    quick = {"generated": True}

    def read_split(self, cfg, root: Path, split: str) -> list:
        path = root / self.files[split]
        rows = []
        for no, line in read_lines(path):
            if not line.strip():
                continue
            try:
                rows.append(parse_tree(line))
            except ValueError as err:
                raise bad(path, no, str(err)) from None
        return rows

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.sst(root, seed, self.files)
