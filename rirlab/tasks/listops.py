"""ListOps (Nangia & Bowman, 2018): generator, solver, tokenizer and splits.

Generator of the original: every node is an operator with probability 0.25
(else a digit 0-9), an operator takes 2..max_args arguments uniformly, a node at
max depth is forced to be a digit; operators MIN, MAX, MED (integer part of the
median), SM (sum mod 10). Text format: ``LABEL<TAB>`` then the fully bracketed
token sequence, e.g. ``( ( ( [MAX 2 ) 9 ) ] )``.

Length is counted in model tokens: operators, digits and ``]``; the
parentheses of the binarised text format are not tokens (``[MAX 2 9 ]`` has
length 4).
"""

from __future__ import annotations

import random
import statistics
from typing import Iterator, Optional

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks.base import PAD, TaskData, collate_classify
from rirlab.tasks.registry import register

OPS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
VOCAB = [PAD, *OPS, END, *(str(d) for d in range(10))]
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}


def apply_op(op: str, args: list[int]) -> int:
    if op == "[MIN":
        return min(args)
    if op == "[MAX":
        return max(args)
    if op == "[MED":
        return int(statistics.median(args))
    if op == "[SM":
        return sum(args) % 10
    raise ValueError(f"unknown operator {op!r}")


def random_tree(rng: random.Random, max_args: int, max_depth: int, depth: int = 1, p_op: float = 0.25):
    """A random ListOps tree: an int leaf or (op, [children])."""
    if depth < max_depth and rng.random() < p_op:
        n = rng.randint(2, max_args)
        return (rng.choice(OPS), [random_tree(rng, max_args, max_depth, depth + 1, p_op) for _ in range(n)])
    return rng.randint(0, 9)


def tree_tokens(tree) -> list[str]:
    if isinstance(tree, int):
        return [str(tree)]
    op, children = tree
    out = [op]
    for c in children:
        out += tree_tokens(c)
    return out + [END]


def tree_text(tree) -> str:
    """The binarised, fully bracketed text of the original data: ( ( ( [MAX 2 ) 9 ) ] )."""
    if isinstance(tree, int):
        return str(tree)
    op, children = tree
    s = f"( {op} {tree_text(children[0])} )"
    for c in children[1:]:
        s = f"( {s} {tree_text(c)} )"
    return f"( {s} {END} )"


def tokenize(text: str) -> list[str]:
    """Model tokens of a ListOps string (parentheses dropped)."""
    return [t for t in text.split() if t not in ("(", ")")]


def solve(tokens: list[str]) -> int:
    """Label of a ListOps token sequence, by a stack machine. Raises ValueError if malformed."""
    stack: list[list] = []
    result: Optional[int] = None
    for tok in tokens:
        if tok in OPS:
            stack.append([tok])
        elif tok == END:
            if not stack or len(stack[-1]) < 2:
                raise ValueError("']' closes no operator with arguments")
            op, *args = stack.pop()
            value = apply_op(op, args)
            if stack:
                stack[-1].append(value)
            elif result is None:
                result = value
            else:
                raise ValueError("more than one expression at top level")
        elif tok.isdigit() and len(tok) == 1:
            if stack:
                stack[-1].append(int(tok))
            elif result is None:
                result = int(tok)
            else:
                raise ValueError("more than one expression at top level")
        else:
            raise ValueError(f"unknown token {tok!r}")
    if stack or result is None:
        raise ValueError("unbalanced brackets" if stack else "empty expression")
    return result


def generate(n: int, seed: int, max_args: int = 5, max_depth: int = 20, min_len: int = 1,
             max_len: Optional[int] = None, exclude: Optional[set] = None) -> list[tuple[str, int]]:
    """``n`` distinct (text, label) examples whose token length lies in [min_len, max_len]."""
    rng = random.Random(seed)
    seen = set(exclude or ())
    out = []
    for _ in _attempts(n):
        tree = random_tree(rng, max_args, max_depth)
        toks = tree_tokens(tree)
        if len(toks) < min_len or (max_len is not None and len(toks) > max_len):
            continue
        text = tree_text(tree)
        if text in seen:
            continue
        seen.add(text)
        out.append((text, solve(toks)))
        if len(out) == n:
            return out
    raise UserError(f"listops: could not generate {n} distinct examples of length {min_len}..{max_len}; lower the count")


def _attempts(n: int) -> Iterator[int]:
    return iter(range(1000 * n + 10000))


@dataclass(config=STRICT)
class ListOpsConfig:
    """ListOps generation settings (train: lengths <= 100, max_args 5, depth <= 20)."""

    n_train: int = Field(90000, ge=1)
    n_dev: int = Field(1000, ge=1)
    n_test: int = Field(2000, ge=1)
    max_args: int = Field(5, ge=2)
    max_depth: int = Field(20, ge=1)
    max_train_len: int = Field(100, ge=1)
    data_seed: int = Field(1234, ge=0)


def encode(examples: list[tuple[str, int]]) -> list[tuple[list[int], int]]:
    return [([TOKEN_ID[t] for t in tokenize(text)], label) for text, label in examples]


@register("listops", ListOpsConfig, kind="classify", doc="ListOps-O: 10-way classification of nested list operations",
          quick={"n_train": 2000, "n_dev": 200, "n_test": 200}, splits=(("test", "near-IID"),))
def load(cfg: ListOpsConfig) -> TaskData:
    train = generate(cfg.n_train, cfg.data_seed, cfg.max_args, cfg.max_depth, max_len=cfg.max_train_len)
    seen = {t for t, _ in train}
    dev = generate(cfg.n_dev, cfg.data_seed + 1, cfg.max_args, cfg.max_depth, max_len=cfg.max_train_len, exclude=seen)
    seen |= {t for t, _ in dev}
    test = generate(cfg.n_test, cfg.data_seed + 2, cfg.max_args, cfg.max_depth, exclude=seen)
    return TaskData(
        vocab=VOCAB,
        num_classes=10,
        kind="classify",
        train=encode(train),
        eval_splits={"dev": encode(dev), "test": encode(test)},
        collate=collate_classify,
    )
