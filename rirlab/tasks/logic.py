"""Logical inference (Bowman, Manning & Potts, 2015): loader, labeler, generator and splits.

Format, one pair per line: ``RELATION<TAB>premise<TAB>hypothesis``. Formulas are
fully parenthesised over the variables a-f: ``x``, ``( not F )``,
``( F ( and G ) )``, ``( F ( or G ) )``. Seven relations between the sets of
worlds (assignments of the six variables) where P and H hold:
``=`` P = H, ``<`` P strictly inside H, ``>`` H strictly inside P,
``^`` disjoint and exhaustive, ``|`` disjoint, ``v`` exhaustive, ``#`` none of these
(tested in this order; the labeler reproduces all 249,069 labels of the
distributed files).

The number of operators N of a pair is the larger of its two formulas' operator
counts (that is how the distributed ``trainN``/``testN`` files are split; the
other formula has 0..N operators). Splits (RIR Table 3, dynamic-halt Table 2):
``train``/``dev`` mix N = 0..6 in the proportions of the real train files;
``ops_7`` .. ``ops_11`` hold exactly N operators; ``ops_12`` holds N >= 12 (:data:`OPS_12`; 12..18 in the
real ``test12``), which is what that file is.

Generator: the process of the authors' public script (``propositionallogic/generate_neg_set_data.py`` in
sleepinyourhat/vector-entailment), whose traces the real files carry: over all 249,069 pairs, no pair uses
more than 4 distinct variables, and/or never nests more than 3 deep, no ``not`` sits on a ``not``, no
formula is a tautology or a contradiction, and no formula is deeper than 7. A pair draws a random
:data:`SUBSET` (4) of the six variables; each formula, from the top: a node is ``and``/``or`` with
probability :data:`P_BINARY` (4/9: the script's operator list, two and, two or, five none) while fewer
than :data:`BINARY_LEVELS` (3: its length budget 12 halves to 6, 3, 1) and/or levels lie above it, else a
variable of the subset; then a ``not`` goes over the node with probability :data:`P_NOT` (1/3). Depth is at
most 2 * 3 + 1 = :data:`MAX_DEPTH` by construction. A pair whose formula is a tautology or a contradiction
is skipped; N files the pair by min(N, 12). The generator samples this process exactly given N, without
rejection on N: the operator-count distribution of each level is computed (``_tables``), the two sizes are
drawn from their joint distribution given max = N, and each formula is built top-down with every choice
weighted by the probability of completing it with the remaining operators. Nothing is fitted, and the
real files' profile follows: the other formula's count (0/1/2 operators: 0.370/0.226/0.070 before the
skip; train12: 0.405/0.242/0.064), P(N | N >= 12) (of test12's 853: 469/232/100/37/12/3/1, real
451/243/105/38/10/5/1), the share of ``not`` growing with N (at most 7 and/or fit, so larger N takes more
``not``: 0.47 at N = 7 to 0.52 at 12), the depth profile and the relation shares (no thinning). The real
``trainN`` is the first 85% of the distinct pairs of the script's stream for that N; the generated files at
N <= 4, where the stream repeats pairs, are therefore drawn from the first :data:`TRAIN_SIZES` [N] distinct pairs
(``generate``'s ``pool``; de-duplication at that size drops 'not' among operators at N = 1 from 0.47 to the
real 0.270). Train and dev are cut from those files as the papers' protocol cuts the real ones (every 10th
pair to dev: 121,977 train and 13,552 dev pairs at the defaults; ``_train_dev``).

Model tokens keep the parentheses, as the original loaders feed them
(``keep_parens``, default True); ``keep_parens=False`` drops them
(``( not ( d ( or f ) ) )`` -> ``not d or f``). ``rirlab data stats logic
--split ops_12 --compare`` checks a split against the real files' statistics
(:mod:`rirlab.tasks.targets`).
"""

from __future__ import annotations

import functools
import itertools
import random
from collections import Counter
from typing import Iterator, Optional

import pyarrow as pa
from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks import cache, summary
from rirlab.tasks.base import MAX_NESTING, PAD, Task, collate_pair, split_validator
from rirlab.tasks.registry import register

VARS = "abcdef"
RELATIONS = ("=", "<", ">", "^", "|", "v", "#")
VOCAB = [PAD, *VARS, "not", "and", "or", "(", ")"]
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}
_ALL = (1 << 64) - 1  # every one of the 2^6 worlds
_VAR_WORLDS = {v: sum(1 << w for w in range(64) if (w >> i) & 1) for i, v in enumerate(VARS)}

# the original process (module docstring): an and/or node with probability 4/9, a not over each node with 1/3,
# and/or nested at most 3 levels (max length 12 halved to 6, 3, then 1: a variable), variables from a random 4 of 6
P_BINARY = 4 / 9
P_NOT = 1 / 3
BINARY_LEVELS = 3
SUBSET = 4
MAX_DEPTH = 2 * BINARY_LEVELS + 1  # 7: each and/or level and the variable under a not; the real files' deepest
MAX_OPS = 2 ** BINARY_LEVELS - 1 + 2 ** (BINARY_LEVELS + 1) - 1  # 22: seven and/or, a not over each of 15 nodes
# the original files N by min(N, 12): test12 holds N = 12.. (up to 18 in the real one); ops_12 draws N >= 12
OPS_12 = range(12, MAX_OPS + 1)
# train/dev at N <= 4 come from the first TRAIN_SIZES[N] distinct pairs (generate's pool): the stream repeats
# pairs there (79,200 draws for train1's 2,319, 32,058 for train4's 30,373); at N >= 5 it does not (34,224 for
# train5's 34,152), so a pool would change nothing but the time
POOL_MAX_OPS = 4
# real train0..train6 sizes; test7..test12 sizes
TRAIN_SIZES = (30, 2319, 12451, 23252, 30373, 34152, 32952)
TEST_SIZES = {7: 4707, 8: 3347, 9: 2230, 10: 1444, 11: 864, 12: 853}
# the papers' protocol (the authors' process_proplog.py): train0..train6 concatenated in order, every 10th pair is
# dev, the rest train: 135,529 pairs -> 121,977 train + 13,552 dev
DEV_EVERY = 10
DEV_SIZE = sum(TRAIN_SIZES) // DEV_EVERY
TRAIN_SIZE = sum(TRAIN_SIZES) - DEV_SIZE
SPLITS = {f"ops_{n}": str(n) for n in TEST_SIZES}
ALL_SPLITS = ("train", "dev", *SPLITS)


# --- parsing and labelling ---

def parse(text: str):
    """Formula text -> tree: a variable name, ("not", F) or (op, F, G). ValueError when malformed or nested
    deeper than MAX_NESTING. A loop with an explicit stack: no recursion, so depth cannot crash it."""
    toks = text.split()
    n, i = len(toks), 0
    # open constructs, innermost last: ["not"], ["bin"] (left operand next), ["bin", left, op] (right next)
    stack: list[list] = []

    def close(i: int) -> int:
        if i >= n or toks[i] != ")":
            raise ValueError("missing ')'")
        return i + 1

    while True:
        if i >= n:
            raise ValueError("formula ends early")
        t = toks[i]
        if t == "(":
            if len(stack) >= MAX_NESTING:
                raise ValueError(f"formula nested deeper than {MAX_NESTING} levels (the logic data nests at most "
                                 f"about 20); is this a logic file?")
            stack.append(["not"] if i + 1 < n and toks[i + 1] == "not" else ["bin"])
            i += 2 if stack[-1] == ["not"] else 1
            continue
        if t not in _VAR_WORLDS:
            raise ValueError(f"unexpected token {t!r}" if t in ("not", "and", "or", ")") else f"unknown token {t!r}")
        value, i = t, i + 1
        while stack:  # ``value`` is a complete formula: finish the constructs it completes
            frame = stack[-1]
            if frame[0] == "not":
                stack.pop()
                value, i = ("not", value), close(i)
            elif len(frame) == 1:  # a left operand: its operator follows, then the right operand
                if i + 1 >= n or toks[i] != "(" or toks[i + 1] not in ("and", "or"):
                    raise ValueError("expected '( and' or '( or' after a left operand")
                frame += [value, toks[i + 1]]
                i += 2
                break
            else:
                stack.pop()
                value, i = (frame[2], frame[1], value), close(close(i))
        else:
            if i != n:
                raise ValueError(f"extra tokens after the formula: {' '.join(toks[i:i + 3])!r}")
            return value


def worlds(tree) -> int:
    """Truth table of a formula as a 64-bit mask: bit w set iff the formula holds in world w (no recursion)."""
    values: list[int] = []
    todo = [(tree, False)]
    while todo:
        node, ready = todo.pop()
        if isinstance(node, str):
            values.append(_VAR_WORLDS[node])
        elif not ready:
            todo.append((node, True))
            todo.extend((child, False) for child in reversed(node[1:]))
        elif node[0] == "not":
            values.append(_ALL & ~values.pop())
        else:
            b, a = values.pop(), values.pop()
            values.append(a & b if node[0] == "and" else a | b)
    return values[0]


def relation_of(p: int, h: int) -> str:
    """The relation between two truth tables (module docstring)."""
    if p == h:
        return "="
    if p & ~h & _ALL == 0:
        return "<"
    if h & ~p & _ALL == 0:
        return ">"
    if p & h == 0:
        return "^" if p | h == _ALL else "|"
    if p | h == _ALL:
        return "v"
    return "#"


def label(premise: str, hypothesis: str) -> str:
    return relation_of(worlds(parse(premise)), worlds(parse(hypothesis)))


def n_ops(text: str) -> int:
    return sum(t in ("not", "and", "or") for t in text.split())


def text_of(tree) -> str:
    if isinstance(tree, str):
        return tree
    if tree[0] == "not":
        return f"( not {text_of(tree[1])} )"
    return f"( {text_of(tree[1])} ( {tree[0]} {text_of(tree[2])} ) )"


def depth(tree) -> int:
    """Operator nesting depth of a parsed formula (a variable has depth 0)."""
    if isinstance(tree, str):
        return 0
    return 1 + max(depth(t) for t in tree[1:])


# --- generation ---

def _tables() -> tuple[list[list[float]], list[list[float]]]:
    """(core, full)[d][k]: P(a formula at binary level d has k operators), before and after its optional ``not``
    (level 0: a variable; level d: and/or of two level d-1 formulas with probability P_BINARY, else a variable)."""
    core: list[list[float]] = [[1.0]]
    full: list[list[float]] = []
    for d in range(BINARY_LEVELS + 1):
        if d:
            below = full[d - 1]
            pair = [sum(below[i] * below[k - i] for i in range(max(0, k - len(below) + 1), min(k, len(below) - 1) + 1))
                    for k in range(2 * len(below) - 1)]
            core.append([1 - P_BINARY] + [P_BINARY * p for p in pair])
        c = core[d] + [0.0]
        full.append([(1 - P_NOT) * c[k] + P_NOT * (c[k - 1] if k else 0.0) for k in range(len(c))])
    return core, full


_CORE, _FULL = _tables()
_SPLITS: dict[tuple[int, int], tuple[range, list[float]]] = {}


def _split(d: int, j: int) -> tuple[range, list[float]]:
    """Cumulative weights of the left side's operator count when an and/or at level d holds j operators."""
    if (d, j) not in _SPLITS:
        below, cum, acc = _FULL[d - 1], [], 0.0
        for i in range(j):
            acc += below[i] * below[j - 1 - i] if i < len(below) and j - 1 - i < len(below) else 0.0
            cum.append(acc)
        _SPLITS[d, j] = range(j), cum
    return _SPLITS[d, j]


def _formula(rng: random.Random, k: int, variables, d: int) -> tuple[str, int]:
    """(text, truth table) of :func:`random_formula`'s formula, built together (no tree, no second pass)."""
    core, full = _CORE[d], _FULL[d]
    negate = k > 0 and rng.random() * full[k] < P_NOT * core[k - 1]
    j = k - negate
    if j == 0:
        v = rng.choice(variables)
        text, mask = v, _VAR_WORLDS[v]
    else:
        sides, cum = _split(d, j)
        left = rng.choices(sides, cum_weights=cum)[0]
        (a, ma), (b, mb) = _formula(rng, left, variables, d - 1), _formula(rng, j - 1 - left, variables, d - 1)
        if rng.random() < 0.5:
            text, mask = f"( {a} ( and {b} ) )", ma & mb
        else:
            text, mask = f"( {a} ( or {b} ) )", ma | mb
    return (f"( not {text} )", _ALL & ~mask) if negate else (text, mask)


def random_formula(rng: random.Random, k: int, variables=VARS, d: int = BINARY_LEVELS):
    """A formula of the original process (module docstring) at and/or level ``d``, given that it has exactly
    ``k`` operators: each choice (``not`` or none, variable or and/or, how the remaining operators split
    between the two sides) is drawn with its probability under the process given the count, so the result
    is distributed as the process's formulas of ``k`` operators. No rejection; depth <= 2 d + 1."""
    if not 0 <= k < len(_FULL[d]) or _FULL[d][k] == 0:
        raise ValueError(f"no formula of {k} operators within {d} and/or levels")
    return parse(_formula(rng, k, variables, d)[0])


@functools.lru_cache(maxsize=None)
def _pair_sizes(ns: tuple[int, ...]) -> tuple[list[tuple[int, int]], list[float]]:
    """The two formulas' operator counts (independent under the process) given that the larger is in ``ns``."""
    f = _FULL[BINARY_LEVELS]
    sizes = [(a, b) for a in range(len(f)) for b in range(len(f)) if max(a, b) in ns]
    return sizes, list(itertools.accumulate(f[a] * f[b] for a, b in sizes))


def _draw(rng: random.Random, ns: tuple[int, ...]) -> tuple[str, str, str]:
    """(relation, premise, hypothesis) of the original process given that N is in ``ns``."""
    sizes, cum = _pair_sizes(ns)
    while True:  # the original skips a pair when either formula is a tautology or a contradiction
        a, b = rng.choices(sizes, cum_weights=cum)[0]
        variables = rng.sample(VARS, SUBSET)
        p, wp = _formula(rng, a, variables, BINARY_LEVELS)
        if wp in (0, _ALL):
            continue
        h, wh = _formula(rng, b, variables, BINARY_LEVELS)
        if wh not in (0, _ALL):
            return relation_of(wp, wh), p, h


def _ns(ops) -> tuple[int, ...]:
    return (ops,) if isinstance(ops, int) else tuple(ops)


def random_pair(rng: random.Random, ops) -> tuple[str, str]:
    """A (premise, hypothesis) pair of the original process whose larger formula has ``ops`` operators (an
    int, or several N such as :data:`OPS_12`): both formulas over one random :data:`SUBSET`-variable subset."""
    return _draw(rng, _ns(ops))[1:]


def generate(n_pairs: int, ops, seed: int, exclude: Optional[set] = None,
             pool: int = 0) -> list[tuple[str, str, str]]:
    """``n_pairs`` distinct (relation, premise, hypothesis) triples with ``ops`` operators (int, or a range of N:
    ops_12 takes :data:`OPS_12`), the first distinct ones of a stream of the original process.

    ``pool``: when larger than ``n_pairs``, the first ``pool`` distinct pairs are drawn and ``n_pairs`` of them
    returned at random. The real train files are the first distinct pairs of a stream (of their own size:
    :data:`TRAIN_SIZES`); at small N that stream repeats pairs often, so de-duplicating the real file's count
    of pairs is what gives its statistics (e.g. 'not' among operators: 0.270 at N = 1, 0.47 in the first 300).
    """
    rng = random.Random(seed)
    ns = _ns(ops)
    seen = set(exclude or ())
    want = max(n_pairs, pool)
    out = []
    for _ in range(200 * want + 20000):
        rel, p, h = _draw(rng, ns)
        if (p, h) in seen:
            continue
        seen.add((p, h))
        out.append((rel, p, h))
        if len(out) == want:
            break
    return out if len(out) <= n_pairs else rng.sample(out, n_pairs)  # small N: fewer exist (N = 0 has 36)


# --- files ---

def parse_line(line: str) -> tuple[str, str, str]:
    cols = line.rstrip("\n").split("\t")
    if len(cols) != 3:
        raise ValueError(f"expected 3 tab-separated columns (RELATION, premise, hypothesis), got {len(cols)}")
    rel, p, h = cols
    if rel not in RELATIONS:
        raise ValueError(f"relation {rel!r} is not one of {' '.join(RELATIONS)}")
    for side, text in (("premise", p), ("hypothesis", h)):
        try:
            parse(text)
        except ValueError as err:
            raise ValueError(f"{side}: {err}") from None
    return rel, p, h


def to_table(rows: list[tuple[str, str, str]]) -> pa.Table:
    return pa.table({"relation": pa.array([r for r, _, _ in rows], pa.string()),
                     "premise": pa.array([p for _, p, _ in rows], pa.string()),
                     "hypothesis": pa.array([h for _, _, h in rows], pa.string())})


def to_lines(table: pa.Table) -> Iterator[str]:
    for r, p, h in zip(*(table.column(c).to_pylist() for c in ("relation", "premise", "hypothesis"))):
        yield f"{r}\t{p}\t{h}"


# --- config, splits and loader ---

@dataclass(config=STRICT)
class LogicConfig:
    """Logical inference settings (train on N <= 6 operators, test on N = 7..12; RIR Table 3)."""

    # train + dev pairs make the pool of train0..train6 (N = 0..6 in the real files' proportions); dev is carved
    # from it evenly (every 10th pair at the defaults, as the papers' protocol: _train_dev)
    n_train: int = Field(TRAIN_SIZE, ge=1)
    n_dev: int = Field(DEV_SIZE, ge=1)
    n_eval: Optional[int] = Field(None, ge=1)  # per test split; default the real test files' sizes
    train_max_ops: int = Field(6, ge=0, le=6)
    data_seed: int = Field(1234, ge=0)
    keep_parens: bool = True  # parentheses are tokens, as in the original loaders; False drops them
    eval_splits: list[str] = Field(default_factory=lambda: list(SPLITS))
    imported: list[str] = Field(default_factory=list)
    cache_dir: Optional[str] = None

    _known = split_validator("logic", SPLITS, ALL_SPLITS)


def split_params(cfg: LogicConfig, split: str) -> dict:
    core = {"n_train": cfg.n_train, "n_dev": cfg.n_dev, "train_max_ops": cfg.train_max_ops,
            "data_seed": cfg.data_seed, "version": 4}
    return core if split in ("train", "dev") else {**core, "n": cfg.n_eval or TEST_SIZES[int(split[4:])]}


def _train_dev(cfg: LogicConfig) -> tuple[list, list]:
    """Train and dev as the papers' protocol makes them from the real files: the files train0..train6 are
    generated as the original ones are (per N, the first distinct pairs of the process's stream, their sizes
    :data:`TRAIN_SIZES` scaled to ``n_train + n_dev``), concatenated in order, and dev is carved from them evenly:
    the pair at every k-th position (k = pool // n_dev; 10 at the defaults, as ``process_proplog.py``), the first
    ``n_dev`` of those; every other pair is train. Dev is therefore distributed like train (the same N mix and,
    at each N, the same share of the stream), which a dev drawn after train in one stream is not at small N."""
    sizes = TRAIN_SIZES[: cfg.train_max_ops + 1]
    total, want = sum(sizes), cfg.n_train + cfg.n_dev
    files, seen = [], set()
    for n, size in enumerate(sizes):
        count = max(1, round(want * size / total))
        rows = generate(count, n, cfg.data_seed * 100 + n, exclude=seen, pool=size if n <= POOL_MAX_OPS else 0)
        seen |= {(p, h) for _, p, h in rows}
        files += rows
    every = max(1, len(files) // cfg.n_dev)
    picked = set(range(every - 1, len(files), every)[: cfg.n_dev])
    train = [r for k, r in enumerate(files) if k not in picked]
    dev = [files[k] for k in sorted(picked)]
    rng = random.Random(cfg.data_seed)
    rng.shuffle(train)
    rng.shuffle(dev)
    return train, dev


def split_table(cfg: LogicConfig, split: str) -> pa.Table:
    if split not in ALL_SPLITS:
        raise UserError(f"logic: unknown split '{split}'; choose from {', '.join(ALL_SPLITS)}")

    def build() -> pa.Table:
        if split in ("train", "dev"):  # one generation makes both: store the other one too
            return cache.one_of_pair("logic", split, dict(zip(("train", "dev"), map(to_table, _train_dev(cfg)))),
                                     lambda s: split_params(cfg, s), cfg.imported, cfg.cache_dir)
        n = int(split[4:])
        return to_table(generate(cfg.n_eval or TEST_SIZES[n], OPS_12 if n == 12 else n, cfg.data_seed * 100 + n))

    return cache.load_split("logic", split, split_params(cfg, split), build, cfg.imported, cfg.cache_dir)


def encode(text: str, keep_parens: bool) -> list[int]:
    return [TOKEN_ID[t] for t in text.split() if keep_parens or t not in ("(", ")")]


def examples(table: pa.Table, keep_parens: bool) -> list:
    rows = zip(*(table.column(c).to_pylist() for c in ("relation", "premise", "hypothesis")))
    return [(encode(p, keep_parens), encode(h, keep_parens), RELATIONS.index(r)) for r, p, h in rows]


@register
class Logic(Task):
    """Logical inference: 7-way relation between two propositional formulas"""

    name, config, kind = "logic", LogicConfig, "pair"
    vocab, num_classes, collate = VOCAB, len(RELATIONS), staticmethod(collate_pair)
    quick = {"n_train": 2000, "n_dev": 200, "n_eval": 100, "eval_splits": ["ops_7", "ops_10", "ops_12"]}
    splits = tuple(SPLITS.items())
    split_table = staticmethod(split_table)
    parse_line = staticmethod(parse_line)
    to_lines, to_table = staticmethod(to_lines), staticmethod(to_table)
    # training lengths (Task.train_lengths) of each formula of a pair, measured on the cached default training
    # split (121,977 pairs, train_max_ops 6; mean 13.5 tokens with parentheses, 5.2 without), at LENGTH_Q
    TRAIN_LENGTHS = (1, 1, 4, 13, 22, 28, 28, 31, 37)
    TRAIN_LENGTHS_NO_PARENS = (1, 1, 2, 5, 8, 10, 10, 11, 13)

    def train_lengths(self, cfg: LogicConfig) -> tuple:
        return (self.TRAIN_LENGTHS if cfg.keep_parens else self.TRAIN_LENGTHS_NO_PARENS,) * 2

    def examples(self, cfg: LogicConfig, table: pa.Table) -> list:
        return examples(table, cfg.keep_parens)

    def verify(self, row: tuple[str, str, str]) -> list[str]:
        want = label(row[1], row[2])
        return [] if want == row[0] else [f"relation {row[0]}, labeler says {want}"]

    def stats(self, rows: list[tuple[str, str, str]]) -> dict:
        """Tokens without parentheses, operators N of the larger and of the other formula, relation shares."""
        ops = [(n_ops(p), n_ops(h)) for _, p, h in rows]
        words = Counter(t for _, p, h in rows for t in (p + " " + h).split() if t in ("not", "and", "or"))
        return {"count": len(rows),
                "length": summary.distribution(sum(t not in ("(", ")") for t in (p + " " + h).split())
                                               for _, p, h in rows),
                "operators_N": summary.histogram(max(a, b) for a, b in ops),
                "operators_other_formula": summary.histogram(min(a, b) for a, b in ops),
                "operator_shares": summary.shares(words),
                "relations": summary.shares(Counter(r for r, _, _ in rows))}

    # --- import protocol and provenance (rirlab data import, MLflow dataset inputs) ---

    def import_protocol(self, split: str, rows: list) -> tuple[str, dict[str, list]]:
        """The papers' splits (BT-Cell / EBT / RIR, after Tran et al.): files train0..train6 given as
        ``--split train`` become train and dev, every 10th pair (in file order) to dev; a file given as ``ops_N``
        must hold pairs of exactly N operators (ops_12: 12 or more, as test12 does)."""
        return import_protocol(split, rows)

    def split_params(self, cfg: LogicConfig, split: str) -> dict:
        return split_params(cfg, split)

    def split_rows(self, cfg: LogicConfig, split: str) -> int:
        if split in ("train", "dev"):
            return cfg.n_train if split == "train" else cfg.n_dev
        return cfg.n_eval or TEST_SIZES[int(split[4:])]


load = Logic().load  # load(cfg) -> TaskData, for callers that hold the module (tests, notebooks)


# --- the papers' import protocol (rirlab data import logic train0 ... train6 --split train) ---

IMPORT_DEV_EVERY = DEV_EVERY  # every 10th pair of train0..train6, counted across the files in order, is dev
IMPORT_TRAIN_MAX_OPS = 6  # the papers train on N <= 6 operators


def pair_ops(row: tuple[str, str, str]) -> int:
    """N of a pair: the larger of its two formulas' operator counts."""
    return max(n_ops(row[1]), n_ops(row[2]))


def import_protocol(split: str, rows: list) -> tuple[str, dict[str, list]]:
    """(file, line, row) triples given as ``split`` -> the papers' splits (Logic.import_protocol)."""
    if split == "train":
        for path, no, row in rows:
            if pair_ops(row) > IMPORT_TRAIN_MAX_OPS:
                raise UserError(f"{path}:{no}: a pair with {pair_ops(row)} operators; the papers train on "
                                f"train0..train{IMPORT_TRAIN_MAX_OPS} (N <= {IMPORT_TRAIN_MAX_OPS}); import those, "
                                f"or pass --as-is")
        dev = rows[IMPORT_DEV_EVERY - 1::IMPORT_DEV_EVERY]
        train = [r for k, r in enumerate(rows, 1) if k % IMPORT_DEV_EVERY]
        if not dev:
            raise UserError(f"{rows[0][0]}: {len(rows)} pairs, fewer than the {IMPORT_DEV_EVERY} the papers' protocol "
                            f"needs to take one for dev; give train0..train{IMPORT_TRAIN_MAX_OPS}, or pass --as-is")
        return (f"papers' protocol: every {IMPORT_DEV_EVERY}th pair of the files, in the order given, is dev "
                f"({len(dev)}), the other {len(train)} are train"), {"train": train, "dev": dev}
    if split in SPLITS:
        want, last = int(split[4:]), max(TEST_SIZES)
        for path, no, row in rows:
            n = pair_ops(row)
            if n != want and not (want == last and n > last):
                raise UserError(f"{path}:{no}: a pair with {n} operators in split {split} "
                                f"(test{want}: {'>= ' if want == last else ''}{want}); is this test{want}? "
                                f"--as-is imports it anyway")
        return f"papers' test{want} file: every pair has {'>= ' if want == last else ''}{want} operators", {split: rows}
    return "as-is", {split: rows}
