"""ListOps (Nangia & Bowman, 2018): generator, solver, tokenizer and the papers' splits.

Generator of the original: every node is an operator with probability 0.25
(else a digit 0-9), an operator takes 2..max_args arguments uniformly, a node at
max depth is forced to be a digit; operators MIN, MAX, MED (integer part of the
median), SM (sum mod 10); the data set is de-duplicated. Text format:
``LABEL<TAB>`` then the fully bracketed token sequence, e.g. ``( ( ( [MAX 2 ) 9 ) ] )``.

Length is counted in model tokens: operators, digits and ``]``; the
parentheses of the binarised text format are not tokens (``[MAX 2 9 ]`` has
length 4). Depth is the operator nesting depth (a bare digit has depth 0,
``[MAX 2 9 ]`` depth 1; the generator's ``max_depth`` 20 allows operator depth 19).

Splits (RIR Table 2, EBT supplement §2), in the papers' column order:

=============  ===========  ========  =========  ==========  ==========================
name           paper label  max_args  max_depth  length      generator
=============  ===========  ========  =========  ==========  ==========================
train / dev    --           5         20         <= 100      original, rejection
test           near-IID     5         20         <= 1000     original (unfiltered)
len_200_300    200-300      5         20         200-300     size-steered
len_500_600    500-600      5         20         500-600     size-steered
len_900_1000   900-1000     5         20         900-1000    size-steered
args_10        args 10      10        20         100-1000    size-steered
args_15        args 15      15        20         100-1000    size-steered
lra            LRA          10        10         500-2000    size-steered
=============  ===========  ========  =========  ==========  ==========================

Size-steered generation (:func:`sized_tree`) draws a target length uniformly in
the bin and grows a tree of exactly that many tokens: each argument is a digit
with probability 0.75 when the remaining budget allows it, otherwise an
operator subtree whose size is drawn uniformly among the sizes that keep the
rest feasible under the depth limit. No rejection, so 900-1000 costs about as
much per token as 200-300. Its trees are not distributed exactly like the
original generator conditioned on length (they are as deep as the budget
forces); that is the price of not rejection-sampling.

Imported files (``rirlab data import listops FILE --split NAME``) replace the
generated split NAME when NAME is listed in the ``imported`` config field.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from typing import Iterator, Optional

import pyarrow as pa
from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks import cache, summary
from rirlab.tasks.base import MAX_NESTING, PAD, Task, collate_classify, split_validator
from rirlab.tasks.registry import register

OPS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
VOCAB = [PAD, *OPS, END, *(str(d) for d in range(10))]
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}

# name -> (paper label, max_args, max_depth, min_len, max_len, steered); train/dev/test use the config's settings
SPLITS = {
    "test": ("near-IID", None, None, 1, 1000, False),
    "len_200_300": ("200-300", 5, 20, 200, 300, True),
    "len_500_600": ("500-600", 5, 20, 500, 600, True),
    "len_900_1000": ("900-1000", 5, 20, 900, 1000, True),
    "args_10": ("args 10", 10, 20, 100, 1000, True),
    "args_15": ("args 15", 15, 20, 100, 1000, True),
    "lra": ("LRA", 10, 10, 500, 2000, True),
}
ALL_SPLITS = ("train", "dev", *SPLITS)


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
    """A random ListOps tree of the original generator: an int leaf or (op, [children])."""
    if depth < max_depth and rng.random() < p_op:
        n = rng.randint(2, max_args)
        return (rng.choice(OPS), [random_tree(rng, max_args, max_depth, depth + 1, p_op) for _ in range(n)])
    return rng.randint(0, 9)


def _caps(max_args: int, max_depth: int) -> list[int]:
    """cap[d]: the most tokens a subtree rooted at generator depth d can have (cap[max_depth] = 1)."""
    cap = [1] * (max_depth + 2)
    for d in range(max_depth - 1, 0, -1):
        cap[d] = 2 + max_args * cap[d + 1]
    return cap


def _fits(total: int, n: int, cap: int) -> bool:
    """Can ``n`` subtrees of at most ``cap`` tokens have ``total`` tokens? (sizes are 1 or >= 4)."""
    return total == n or n + 3 <= total <= n * cap


def sized_tree(rng: random.Random, size: int, max_args: int, max_depth: int, p_op: float = 0.25):
    """A random tree with exactly ``size`` tokens and depth <= ``max_depth`` (see module docstring)."""
    cap = _caps(max_args, max_depth)
    if not _fits(size, 1, cap[1]):
        raise ValueError(f"no ListOps tree has {size} tokens with max_args={max_args}, max_depth={max_depth}")

    def build(t: int, d: int):
        if t == 1:
            return rng.randint(0, 9)
        c = cap[d + 1]
        k = rng.choice([k for k in range(2, max_args + 1) if _fits(t - 2, k, c)])
        sizes, rest = [], t - 2
        for i in range(k):
            r = k - i - 1  # arguments still to size after this one
            if r == 0:
                s = rest
            elif _fits(rest - 1, r, c) and rng.random() >= p_op:
                s = 1
            else:
                lo, hi = max(4, rest - r * c), min(c, rest - r - 3)
                options = [(lo, hi)] if lo <= hi else []
                if 4 <= rest - r <= c:  # every later argument a digit
                    options.append((rest - r, rest - r))
                if options:
                    a, b = rng.choice(options) if len(options) == 1 or rng.random() < 0.9 else options[-1]
                    s = rng.randint(a, b)
                else:
                    s = 1
            sizes.append(s)
            rest -= s
        rng.shuffle(sizes)
        return (rng.choice(OPS), [build(s, d + 1) for s in sizes])

    return build(size, 1)


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


def shape(tokens: list[str]) -> tuple[int, list[int]]:
    """(operator depth, argument count of every operator) of a well-formed token sequence."""
    depth, best, counts, open_ = 0, 0, [], []
    for tok in tokens:
        if tok in OPS:
            if open_:
                open_[-1] += 1
            open_.append(0)
            depth += 1
            best = max(best, depth)
        elif tok == END:
            counts.append(open_.pop())
            depth -= 1
        elif open_:
            open_[-1] += 1
    return best, counts


def generate(n: int, seed: int, max_args: int = 5, max_depth: int = 20, min_len: int = 1,
             max_len: Optional[int] = None, exclude: Optional[set] = None, steered: bool = False) -> list[tuple[str, int]]:
    """``n`` distinct (text, label) examples whose token length lies in [min_len, max_len].

    ``steered``: draw a target length uniformly in [min_len, max_len] and grow a tree of that size
    (:func:`sized_tree`); otherwise sample the original generator and reject lengths outside the range.
    """
    rng = random.Random(seed)
    seen = set(exclude or ())
    out = []
    for _ in _attempts(n):
        if steered:
            tree = sized_tree(rng, rng.randint(min_len, max_len), max_args, max_depth)
        else:
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


# --- files in the standard text format ---

def parse_line(line: str) -> tuple[str, int]:
    """``LABEL<TAB>TEXT`` -> (text, label); ValueError with the reason when malformed."""
    cols = line.rstrip("\n").split("\t")
    if len(cols) != 2:
        raise ValueError(f"expected 2 tab-separated columns (LABEL, TEXT), got {len(cols)}")
    label, text = cols
    if not (label.isdigit() and len(label) == 1):
        if text.strip().isdigit() and len(text.strip()) == 1:  # LRA order: TEXT<TAB>LABEL
            label, text = text.strip(), label
        else:
            raise ValueError(f"label {label!r} is not a digit 0-9")
    depth = ops = 0
    for tok in text.split():
        depth += (tok == "(") - (tok == ")")
        ops += (tok in OPS) - (tok == END)
        if depth < 0:
            raise ValueError("')' without matching '('")
        if ops > MAX_NESTING:
            raise ValueError(f"operators nested deeper than {MAX_NESTING} levels (ListOps data nests at most 20); "
                             f"is this a ListOps file?")
    if depth:
        raise ValueError(f"{depth} unclosed '('")
    solve(tokenize(text))  # raises on unknown tokens or bad operator structure
    return text, int(label)


def is_header(line: str) -> bool:
    return line.strip().lower() in ("source\ttarget", "target\tsource")


def to_table(examples: list[tuple[str, int]]) -> pa.Table:
    return pa.table({
        "text": pa.array([t for t, _ in examples], pa.string()),
        "label": pa.array([y for _, y in examples], pa.int8()),
        "ids": pa.array([[TOKEN_ID[t] for t in tokenize(x)] for x, _ in examples], pa.list_(pa.int8())),
    })


def to_lines(table: pa.Table) -> Iterator[str]:
    for text, label in zip(table.column("text").to_pylist(), table.column("label").to_pylist()):
        yield f"{label}\t{text}"


def labels_of(table: pa.Table) -> list[int]:
    return table.column("label").to_pylist()


# --- config, splits and loader ---

@dataclass(config=STRICT)
class ListOpsConfig:
    """ListOps settings (train: lengths <= 100, max_args 5, depth <= 20; test splits of RIR Table 2)."""

    n_train: int = Field(90000, ge=1)
    n_dev: int = Field(1000, ge=1)
    n_test: int = Field(2000, ge=1)  # near-IID test split
    n_eval: int = Field(2000, ge=1)  # each generalisation split (length, arguments, LRA)
    max_args: int = Field(5, ge=2)
    max_depth: int = Field(20, ge=1)
    max_train_len: int = Field(100, ge=1)
    data_seed: int = Field(1234, ge=0)
    eval_splits: list[str] = Field(default_factory=lambda: list(SPLITS))  # test splits to evaluate (dev always)
    imported: list[str] = Field(default_factory=list)  # splits read from `rirlab data import` instead of generated
    cache_dir: Optional[str] = None  # default $RIRLAB_CACHE, else ~/.cache/rirlab

    _known = split_validator("ListOps", SPLITS, ALL_SPLITS)


def split_params(cfg: ListOpsConfig, split: str) -> dict:
    """Every parameter the split's bytes depend on (its cache key)."""
    core = {"n_train": cfg.n_train, "max_args": cfg.max_args, "max_depth": cfg.max_depth,
            "max_train_len": cfg.max_train_len, "data_seed": cfg.data_seed, "version": 1}
    if split == "train":
        return core
    if split == "dev":
        return {**core, "n_dev": cfg.n_dev}
    if split == "test":
        return {**core, "n_dev": cfg.n_dev, "n_test": cfg.n_test}
    _, max_args, max_depth, lo, hi, _ = SPLITS[split]
    return {"n": cfg.n_eval, "max_args": max_args, "max_depth": max_depth, "lo": lo, "hi": hi,
            "seed": cfg.data_seed, "version": 1}


def split_table(cfg: ListOpsConfig, split: str) -> pa.Table:
    """One split as a table (text, label, ids), from the cache when it is there."""
    if split not in ALL_SPLITS:
        raise UserError(f"listops: unknown split '{split}'; choose from {', '.join(ALL_SPLITS)}")

    def build() -> pa.Table:
        seed = cfg.data_seed + ALL_SPLITS.index(split)
        if split in ("train", "dev", "test"):
            exclude: set = set()
            for earlier in ALL_SPLITS[: ALL_SPLITS.index(split)]:
                exclude |= set(split_table(cfg, earlier).column("text").to_pylist())
            if split == "test":
                return to_table(generate(cfg.n_test, seed, cfg.max_args, cfg.max_depth, max_len=1000, exclude=exclude))
            n = cfg.n_train if split == "train" else cfg.n_dev
            return to_table(generate(n, seed, cfg.max_args, cfg.max_depth, max_len=cfg.max_train_len, exclude=exclude))
        _, max_args, max_depth, lo, hi, _ = SPLITS[split]
        return to_table(generate(cfg.n_eval, seed, max_args, max_depth, lo, hi, steered=True))

    return cache.load_split("listops", split, split_params(cfg, split), build, cfg.imported, cfg.cache_dir)


def examples(table: pa.Table) -> list:
    return list(zip(cache.id_lists(table.column("ids")), table.column("label").to_pylist()))


@register
class ListOps(Task):
    """ListOps-O: 10-way classification of nested list operations"""

    name, config, kind = "listops", ListOpsConfig, "classify"
    vocab, num_classes, collate = VOCAB, 10, staticmethod(collate_classify)
    quick = {"n_train": 2000, "n_dev": 200, "n_test": 200, "n_eval": 50,
             "eval_splits": ["test", "len_200_300", "args_10"]}
    splits = tuple((split, spec[0]) for split, spec in SPLITS.items())
    split_table = staticmethod(split_table)
    parse_line, is_header = staticmethod(parse_line), staticmethod(is_header)
    to_lines, to_table = staticmethod(to_lines), staticmethod(to_table)

    def examples(self, cfg: ListOpsConfig, table: pa.Table) -> list:
        return examples(table)

    def verify(self, row: tuple[str, int]) -> list[str]:
        want = solve(tokenize(row[0]))
        return [] if want == row[1] else [f"label {row[1]}, solver says {want}"]

    def stats(self, rows: list[tuple[str, int]]) -> dict:
        """Token lengths, operator depth, arguments per operator, label shares."""
        toks = [tokenize(text) for text, _ in rows]
        lengths = [len(t) for t in toks]
        shapes = [shape(t) for t in toks]
        return {"count": len(rows),
                "length": summary.distribution(lengths),
                "share_len_le_100": round(sum(n <= 100 for n in lengths) / max(1, len(rows)), 4),
                "depth": summary.histogram(d for d, _ in shapes),
                "args_per_operator": summary.histogram(a for _, counts in shapes for a in counts),
                "max_args_per_example": summary.histogram(max(c, default=0) for _, c in shapes),
                "labels": summary.shares(Counter(y for _, y in rows))}

    # --- import protocol and provenance (rirlab data import, MLflow dataset inputs) ---

    def import_protocol(self, split: str, rows: list) -> tuple[str, dict[str, list]]:
        """A training file (``--split train``) is split as the papers do: dev = its first 1,000 lines,
        unfiltered; train = the rest with at most 100 tokens. Any other split is stored as it is."""
        if split != "train":
            return "as-is", {split: rows}
        return import_train(rows)

    def split_params(self, cfg: ListOpsConfig, split: str) -> dict:
        return split_params(cfg, split)

    def split_rows(self, cfg: ListOpsConfig, split: str) -> int:
        return {"train": cfg.n_train, "dev": cfg.n_dev, "test": cfg.n_test}.get(split, cfg.n_eval)


load = ListOps().load  # load(cfg) -> TaskData, for callers that hold the module (tests, notebooks)


# --- the papers' import protocol (rirlab data import listops FILE --split train) ---

IMPORT_DEV_LINES = 1000  # dev = the training file's first 1,000 lines (RIR / BT-Cell supplements)
IMPORT_MAX_TOKENS = 100  # train = the rest with at most 100 tokens (parentheses are not tokens)


def import_train(rows: list) -> tuple[str, dict[str, list]]:
    """(file, line, (text, label)) rows of a training file -> the papers' train and dev."""
    if len(rows) <= IMPORT_DEV_LINES:
        where = rows[0][0] if rows else "the files"
        raise UserError(f"{where}: {len(rows)} examples, but the papers' protocol takes the first {IMPORT_DEV_LINES} "
                        f"as dev and trains on the rest; give the full training file, or --as-is to store it as train")
    dev = rows[:IMPORT_DEV_LINES]
    train = [r for r in rows[IMPORT_DEV_LINES:] if len(tokenize(r[2][0])) <= IMPORT_MAX_TOKENS]
    dropped = len(rows) - IMPORT_DEV_LINES - len(train)
    if not train:
        raise UserError(f"{rows[0][0]}: no example after the first {IMPORT_DEV_LINES} has <= {IMPORT_MAX_TOKENS} "
                        f"tokens, so the papers' train would be empty; --as-is stores the file unfiltered")
    return (f"papers' protocol: dev = first {IMPORT_DEV_LINES} lines (unfiltered), train = the other "
            f"{len(rows) - IMPORT_DEV_LINES} with <= {IMPORT_MAX_TOKENS} tokens ({dropped} longer ones dropped)"), \
        {"train": train, "dev": dev}
