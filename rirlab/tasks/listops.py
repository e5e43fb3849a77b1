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

Splits (RIR Table 2, EBT supplement §2), in the papers' column order, each drawn
from its original generator with that generator's parameters:

=============  ===========  ========  =========  ==========  ==========================================
name           paper label  max_args  max_depth  length      original generator
=============  ===========  ========  =========  ==========  ==========================================
train          --           5         20         <= 100      ListOps train file but its first lines, filtered
dev            --           5         20         any         ListOps train file, first lines, unfiltered
test           near-IID     5         20         <= 1000     ListOps test file (10,000 rows)
len_200_300    200-300      5         20         201-299     ListOps + rejection (Havrylov et al. 2019)
len_500_600    500-600      5         20         501-599     same
len_900_1000   900-1000     5         20         901-999     same
args_10        args 10      10        9          100-1000    BT-Cell ``make_ood_10arg_data.py``
args_15        args 15      15        9          100-1000    BT-Cell ``make_ood_15arg_data.py``
lra            LRA          10        10         501-1999    LRA ``listops.py`` (500 < length < 2000)
=============  ===========  ========  =========  ==========  ==========================================

(BT-Cell: *Beam Tree Recursive Cells*, ICML 2023; LRA: Tay et al., 2021.) Every
split is de-duplicated within itself, as the original files are sets. The length windows exclude their
ends, as the original scripts do (latent-treelstm ``make_data.py``: ``MIN < len < MAX``; LRA ``listops.py``:
``500 < len < 2000``): the split named 200-300 holds 201..299 tokens. The
original files were written from a Python set of generator draws, so a file's
first lines are a random sample of the whole set, and de-duplication thins the
few short expressions (10 of length 1, 400 of length 4) by the set's size: the
original test file has 4.7% of rows of length <= 5, the share of a set of about
90,000 draws (a set of 10,000 has 14.7%). Train and dev are cut from one generated
training file, as the papers cut the real one (``import_train``): a de-duplicated set of draws just large
enough for the cut, dev = ``n_dev`` random rows of it (a set's first lines), train = ``n_train`` of the
others with at most ``max_train_len`` tokens; so dev and train share no row. test is ``n_test`` random rows of
its own de-duplicated set of ``iid_pool`` (90,000) draws, and may repeat train's short expressions, as the
original test file does (678 of its 10,000 rows are in the real train file).

The generators all reject trees outside the length range. Where that range is
rare (900-1000 tokens: one tree in 74,000) the split is ``steered``: the same
distribution is sampled length first, by dynamic programming over the
generator's probabilities (:class:`SizeModel`): draw the length ``n`` with its
probability under the generator restricted to the range, then the root's
argument count and each argument's size in turn with their probabilities given
the sizes still to fill. That is exact (the original generator conditioned on
the length, not an approximation) and costs about 5 ms per 1000-token tree.
``rirlab data stats listops --split NAME --compare`` checks a split against the
statistics of its original generator (:mod:`rirlab.tasks.targets`).

Imported files (``rirlab data import listops FILE --split NAME``) replace the
generated split NAME when NAME is listed in the ``imported`` config field.
"""

from __future__ import annotations

import functools
import random
import statistics
from collections import Counter
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks import cache, summary
from rirlab.tasks.base import MAX_NESTING, PAD, Task, collate_classify, scaled_lengths, split_validator
from rirlab.tasks.registry import register

OPS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
VOCAB = [PAD, *OPS, END, *(str(d) for d in range(10))]
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}

# name -> (paper label, max_args, max_depth, min_len, max_len, steered): the parameters of the split's original
# generator (module docstring); steered: sampled length-first by SizeModel rather than by rejection.
# train/dev/test use the config's max_args/max_depth.
SPLITS = {
    "test": ("near-IID", None, None, 1, 1000, False),
    "len_200_300": ("200-300", 5, 20, 201, 299, True),  # 200 < length < 300, as the original script
    "len_500_600": ("500-600", 5, 20, 501, 599, True),
    "len_900_1000": ("900-1000", 5, 20, 901, 999, True),
    "args_10": ("args 10", 10, 9, 100, 1000, True),
    "args_15": ("args 15", 15, 9, 100, 1000, True),
    "lra": ("LRA", 10, 10, 501, 1999, True),
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


class SizeModel:
    """Token-count distribution of the original generator's subtrees, for sampling it conditioned on length.

    ``size[d][n]``: probability that a subtree the generator starts at depth ``d`` (root 1, a node at
    ``max_depth`` is a digit) has ``n`` tokens; ``sums[d][k][m]``: probability that ``k`` independent such
    subtrees have ``m`` tokens together (``k``-fold convolution). Both exact up to ``max_len`` tokens.
    """

    def __init__(self, max_args: int, max_depth: int, max_len: int, p_op: float = 0.25):
        self.max_args, self.max_depth, self.max_len = max_args, max_depth, max_len
        n = max_len + 1
        self.size: list = [None] * (max_depth + 1)
        self.sums: list = [None] * (max_depth + 1)
        for d in range(max_depth, 0, -1):
            p = np.zeros(n)
            p[1] = 1.0 if d == max_depth else 1 - p_op
            if d < max_depth and n > 3:  # operator: 2 tokens ([OP and ]) plus k children, k uniform in 2..max_args
                children = sum(self.sums[d + 1][k] for k in range(2, max_args + 1))
                p[3:] += p_op / (max_args - 1) * children[1:n - 2]
            sums = [None, p]
            for _ in range(2, max_args + 1):
                sums.append(np.convolve(sums[-1], p)[:n])
            self.size[d], self.sums[d] = p, sums

    def lengths(self, lo: int, hi: int) -> np.ndarray:
        """P(length = n | lo <= length <= hi) for n = lo..hi."""
        w = self.size[1][lo:hi + 1]
        if not w.sum() > 0:
            raise ValueError(f"the generator makes no tree of {lo}..{hi} tokens "
                             f"(max_args={self.max_args}, max_depth={self.max_depth})")
        return w / w.sum()

    def tree(self, rng: random.Random, size: int, depth: int = 1):
        """A tree of the original generator conditioned on having exactly ``size`` tokens."""
        if size == 1:
            return rng.randint(0, 9)
        sums = self.sums[depth + 1]
        m = size - 2  # tokens of the children
        k = 2 + _draw(rng, np.array([sums[k][m] for k in range(2, self.max_args + 1)]))
        sizes = []
        for r in range(k - 1, 0, -1):  # r children still to size after this one; each has >= 1 token
            # P(this child has s tokens | the k children have m) ~ size[s] * sums[r][m - s], s = 1..m-r
            w = self.size[depth + 1][1:m - r + 1] * sums[r][m - 1:r - 1:-1]
            s = 1 + _draw(rng, w)
            sizes.append(s)
            m -= s
        sizes.append(m)
        return (rng.choice(OPS), [self.tree(rng, s, depth + 1) for s in sizes])


def _draw(rng: random.Random, weights: np.ndarray) -> int:
    """Index i with probability weights[i] / sum(weights)."""
    c = np.cumsum(weights)
    return min(int(np.searchsorted(c, rng.random() * c[-1], side="right")), len(c) - 1)


@functools.lru_cache(maxsize=8)
def size_model(max_args: int, max_depth: int, max_len: int) -> SizeModel:
    return SizeModel(max_args, max_depth, max_len)


def tree_tokens(tree) -> list[str]:
    if isinstance(tree, int):
        return [str(tree)]
    op, children = tree
    out = [op]
    for c in children:
        out += tree_tokens(c)
    return out + [END]


def tree_text(tree) -> str:
    """The binarised, fully bracketed text of the original data: ( ( ( [MAX 2 ) 9 ) ] ) (:func:`bracketed`)."""
    return bracketed(tree_tokens(tree))


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


def bracketed(tokens: list[str]) -> str:
    """The binarised, fully bracketed text of a well-formed token sequence, built without recursion (any nesting
    depth): an operator with arguments a1..ak is ( ... ( ( OP a1 ) a2 ) ... ak ) closed by ( ... ] )."""
    stack = [""]  # open operators' text so far; the bottom collects the whole expression
    for tok in tokens:
        if tok in OPS:
            stack.append(tok)
            continue
        child = f"( {stack.pop()} {END} )" if tok == END else tok
        stack[-1] = f"( {stack[-1]} {child} )" if len(stack) > 1 else child
    return stack[0]


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
    """``n`` distinct (text, label) examples of the original generator with token length in [min_len, max_len].

    Both ways draw from the same distribution, the original generator conditioned on the length range
    (and, through de-duplication, on being distinct): ``steered=False`` rejects the generator's trees outside
    the range (cheap when most trees fall inside, e.g. train's <= 100); ``steered=True`` (needs ``max_len``)
    draws the length from :class:`SizeModel` and then a tree of exactly that length, for ranges the
    generator rarely reaches (900-1000 tokens: 1 tree in 74,000).
    """
    rng = random.Random(seed)
    seen = set(exclude or ())
    out = []
    if steered:
        model = size_model(max_args, max_depth, max_len)
        cum = np.cumsum(model.lengths(min_len, max_len))
    for _ in _attempts(n):
        if steered:
            size = min_len + min(int(np.searchsorted(cum, rng.random(), side="right")), len(cum) - 1)
            tree = model.tree(rng, size)
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
    tokens = tokenize(text)
    solve(tokens)  # raises on unknown tokens or bad operator structure
    if "(" in text and " ".join(text.split()) != bracketed(tokens):
        raise ValueError("the parentheses are not the ListOps binary bracketing (each '( ... )' holds exactly two "
                         "items, as in ( ( ( [MAX 2 ) 9 ) ] )), which the original tokenisers parse; is this a "
                         "ListOps file?")
    return " ".join(text.split()), int(label)


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
    n_test: int = Field(10000, ge=1)  # near-IID test split: the original test file's size (short rows: cheap)
    iid_pool: int = Field(90000, ge=1)  # dev/test: random rows of a de-duplicated draw of this many (module doc)
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
    """Every parameter the split's bytes depend on (its cache key); version 2: the originals' generators."""
    shared = {"max_args": cfg.max_args, "max_depth": cfg.max_depth, "data_seed": cfg.data_seed}
    if split in ("train", "dev"):  # cut from one generated file: each depends on both counts
        return {"n_train": cfg.n_train, "n_dev": cfg.n_dev, **shared, "max_train_len": cfg.max_train_len,
                "version": 3}
    if split == "test":
        return {"n_test": cfg.n_test, **shared, "iid_pool": cfg.iid_pool, "version": 2}
    _, max_args, max_depth, lo, hi, _ = SPLITS[split]
    return {"n": cfg.n_eval, "max_args": max_args, "max_depth": max_depth, "lo": lo, "hi": hi,
            "seed": cfg.data_seed, "version": 3}


def split_table(cfg: ListOpsConfig, split: str) -> pa.Table:
    """One split as a table (text, label, ids), from the cache when it is there."""
    if split not in ALL_SPLITS:
        raise UserError(f"listops: unknown split '{split}'; choose from {', '.join(ALL_SPLITS)}")

    def build() -> pa.Table:
        seed = cfg.data_seed + ALL_SPLITS.index(split)
        # each file is its own de-duplicated draw, as the original files are: test may share (short)
        # expressions with train, as the original test file and train file do; train and dev are one file
        if split in ("train", "dev"):  # one generation makes both: store the other one too
            return cache.one_of_pair("listops", split, dict(zip(("train", "dev"), map(to_table, train_dev(cfg)))),
                                     lambda s: split_params(cfg, s), cfg.imported, cfg.cache_dir)
        if split == "test":  # random lines of a de-duplicated file of iid_pool rows (module docstring)
            pool = generate(max(cfg.n_test, cfg.iid_pool), seed, cfg.max_args, cfg.max_depth,
                            max_len=SPLITS["test"][4])
            return to_table(random.Random(seed).sample(pool, cfg.n_test))
        _, max_args, max_depth, lo, hi, steered = SPLITS[split]
        return to_table(generate(cfg.n_eval, seed, max_args, max_depth, lo, hi, steered=steered))

    return cache.load_split("listops", split, split_params(cfg, split), build, cfg.imported, cfg.cache_dir)


def train_dev(cfg: ListOpsConfig) -> tuple[list, list]:
    """(train, dev) cut from one generated training file as the papers cut the real one (``import_train``): the
    file is a de-duplicated set of the generator's draws, grown until it holds ``n_train + n_dev`` rows of at most
    ``max_train_len`` tokens; dev = ``n_dev`` random rows of it (unfiltered: the first lines of a file written from
    a set), train = ``n_train`` of the other rows with at most ``max_train_len`` tokens. No row is in both."""
    rng = random.Random(cfg.data_seed + ALL_SPLITS.index("train"))
    rows, seen, short = [], set(), 0
    for _ in _attempts(cfg.n_train + cfg.n_dev):
        tree = random_tree(rng, cfg.max_args, cfg.max_depth)
        text = tree_text(tree)
        if text in seen:
            continue
        seen.add(text)
        toks = tree_tokens(tree)
        rows.append((text, solve(toks), len(toks) <= cfg.max_train_len))
        short += rows[-1][2]
        if short >= cfg.n_train + cfg.n_dev:
            break
    else:
        raise UserError(f"listops: could not generate {cfg.n_train} distinct training examples of at most "
                        f"{cfg.max_train_len} tokens; lower n_train or raise max_train_len")
    dev_at = set(rng.sample(range(len(rows)), cfg.n_dev))
    dev = [(t, y) for k, (t, y, _) in enumerate(rows) if k in dev_at]
    train = [(t, y) for k, (t, y, ok) in enumerate(rows) if ok and k not in dev_at][:cfg.n_train]
    rng.shuffle(dev)
    return train, dev


def examples(table: pa.Table) -> list:
    return list(zip(cache.id_lists(table.column("ids")), table.column("label").to_pylist()))


@register
class ListOps(Task):
    """ListOps-O: 10-way classification of nested list operations"""

    name, config, kind = "listops", ListOpsConfig, "classify"
    vocab, num_classes, collate = VOCAB, 10, staticmethod(collate_classify)
    quick = {"n_train": 2000, "n_dev": 200, "n_test": 200, "iid_pool": 10000, "n_eval": 50,
             "eval_splits": ["test", "len_200_300", "args_10"]}
    splits = tuple((split, spec[0]) for split, spec in SPLITS.items())
    split_table = staticmethod(split_table)
    parse_line, is_header = staticmethod(parse_line), staticmethod(is_header)
    to_lines, to_table = staticmethod(to_lines), staticmethod(to_table)
    # training lengths (Task.train_lengths) measured on 20,000 distinct draws of :func:`generate` at the defaults
    # (max_args 5, max_depth 20, max_len 100; mean 20 tokens), quantiles at rirlab.tasks.base.LENGTH_Q
    TRAIN_LENGTHS_100 = (1, 5, 7, 12, 25, 49, 67, 92, 100)

    def train_lengths(self, cfg: ListOpsConfig) -> tuple:
        # another max_train_len stretches the measured ones; the other limits' effect is left out (rough)
        return (scaled_lengths(self.TRAIN_LENGTHS_100, cfg.max_train_len / 100),)

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
