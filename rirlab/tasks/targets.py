"""Target statistics of the original data, and the comparison behind `rirlab data stats --split S --compare`.

Every compared statistic is a mean over rows of a per-row value (a share is the mean of a 0/1 value), so
its sampling error is known: a split of ``n`` rows passes a statistic when

    |ours - target| <= 4 * sd * sqrt(1/n + 1/n_target) + FLOOR

with ``sd`` the per-row standard deviation in the target sample and ``n_target`` that sample's size
(4 standard errors of the difference; FLOOR absorbs rounding). Length quantiles are compared as shares:
the target's quantile value ``v`` is stored and the statistic is the share of rows of length <= v.

How the targets in ``targets.json`` were derived (``python -m rirlab.tasks.targets listops|logic [--write]`` derives
them again):

- ListOps: each split's original generator, with the parameters of the public scripts (see
  :mod:`rirlab.tasks.listops`): the ListOps generator (Nangia & Bowman, 2018; max_args 5, max_depth
  20), the argument splits of *Beam Tree Recursive Cells* (ICML 2023; max_args 10/15, max_depth 9,
  100-1000 tokens), the LRA generator (Tay et al., 2021; max_args 10, max_depth 10, 500 < length
  < 2000), the length splits of Havrylov et al. (2019; ListOps generator, rejection on length, the window's
  ends excluded as in latent-treelstm ``make_data.py``: MIN < length < MAX). For those four the shares of rows
  at or below the window's lower end (0) and within its top (1) are compared too.
  dev/test: random rows of a de-duplicated set of 90,000 draws (n_target: the 90,000 rows of one
  such set); the length and argument splits: 10,000 draws of the generator conditioned on length,
  sampled by ``listops.SizeModel``, which ``tests/tasks/test_data_listops.py`` checks against plain
  rejection from the generator. Seed 2024, independent of the splits' data_seed.
- Logic: the distributed files of Bowman, Manning & Potts (2015): train0..train6 pooled for
  train/dev, ``testN`` for ``ops_N``.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path
from typing import Callable

import numpy as np

FLOOR = 0.002


# --- per-row values ---

def listops_values(rows, max_args: int, length_cuts: dict, depth_cut: int) -> dict[str, np.ndarray]:
    """Per-row values of every compared ListOps statistic (rows: (text, label))."""
    from rirlab.tasks import listops

    out: dict[str, list] = {}

    def put(name, value):
        out.setdefault(name, []).append(float(value))

    for text, label in rows:
        toks = listops.tokenize(text)
        depth, counts = listops.shape(toks)
        for q, v in length_cuts.items():
            put(f"length <= {v} ({q})", len(toks) <= v)
        put("depth (mean)", depth)
        put(f"depth >= {depth_cut}", depth >= depth_cut)
        n_ops = max(1, len(counts))
        put("args per operator (mean)", sum(counts) / n_ops if counts else 0)
        put(f"operators with {max_args} args", sum(c == max_args for c in counts) / n_ops)
        leaf = _leaf_counts(toks)
        put(f"leaf operators with {max_args} args", sum(c == max_args for c in leaf) / max(1, len(leaf)))
        for y in range(10):
            put(f"label {y}", label == y)
    return {k: np.asarray(v) for k, v in out.items()}


def _leaf_counts(toks: list[str]) -> list[int]:
    """Argument counts of the operators whose arguments are all digits."""
    from rirlab.tasks import listops

    out, stack = [], []  # stack: [args so far, all digits so far]
    for tok in toks:
        if tok in listops.OPS:
            if stack:
                stack[-1][0] += 1
                stack[-1][1] = False
            stack.append([0, True])
        elif tok == listops.END:
            n, leaf = stack.pop()
            if leaf:
                out.append(n)
        elif stack:
            stack[-1][0] += 1
    return out


def logic_values(rows, ns: tuple, depth_cut: int) -> dict[str, np.ndarray]:
    """Per-row values of every compared logic statistic (rows: (relation, premise, hypothesis))."""
    from rirlab.tasks import logic

    out: dict[str, list] = {}

    def put(name, value):
        out.setdefault(name, []).append(float(value))

    for rel, p, h in rows:
        a, b = logic.n_ops(p), logic.n_ops(h)
        depth = max(logic.depth(logic.parse(p)), logic.depth(logic.parse(h)))
        for n in ns:
            put(f"operators N = {n}", max(a, b) == n)
        put("operators of the other formula (mean)", min(a, b))
        put("other formula has 0 operators", min(a, b) == 0)
        put("depth (mean)", depth)
        put(f"depth >= {depth_cut}", depth >= depth_cut)
        words = (p + " " + h).split()
        ops = sum(t in ("not", "and", "or") for t in words)
        put("'not' among operators", words.count("not") / max(1, ops))
        for r in logic.RELATIONS:
            put(f"relation {r}", rel == r)
    return {k: np.asarray(v) for k, v in out.items()}


# --- targets: task -> split -> {"n": n_target, "args": values() keyword arguments, "stats": {name: [mean, sd]}} ---

TARGETS_FILE = Path(__file__).with_name("targets.json")  # written by ``python -m rirlab.tasks.targets TASK --write``
ROW_VALUES: dict[str, Callable] = {"listops": listops_values, "logic": logic_values}  # task -> its per-row values


@functools.cache
def targets() -> dict[str, dict[str, dict]]:
    return json.loads(TARGETS_FILE.read_text())


def dump(data: dict) -> str:
    """targets.json's text: one line per statistic ([mean, sd] and lists kept on their line)."""
    text = json.dumps(data, indent=1)
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text) + "\n"


def _values(task: str, split: str, rows) -> dict[str, np.ndarray]:
    return ROW_VALUES[task](rows, **targets()[task][split]["args"])


def compare(task: str, split: str, rows) -> list[tuple[str, float, float, float, bool]]:
    """(statistic, ours, target, tolerance, within) for every statistic of the split's target."""
    from rirlab.errors import UserError

    if split not in targets().get(task, {}):
        known = ", ".join(targets().get(task, {})) or "none"
        raise UserError(f"{task}: no target statistics for split '{split}' (known: {known})")
    spec = targets()[task][split]
    values = _values(task, split, rows)
    n = max(1, len(rows))
    out = []
    for name, (mean, sd) in spec["stats"].items():
        ours = float(values[name].mean()) if len(rows) else float("nan")
        tol = 4 * sd * np.sqrt(1 / n + 1 / spec["n"]) + FLOOR
        out.append((name, round(ours, 4), mean, round(float(tol), 4), bool(abs(ours - mean) <= tol)))
    return out


# --- derivation ---

def _summarise(values: dict[str, np.ndarray]) -> dict:
    return {k: (round(float(v.mean()), 4), round(float(v.std()), 4)) for k, v in values.items()}


def derive_listops(split: str, n: int = 10000, seed: int = 2024) -> dict:
    """The target of one ListOps split, from its original generator (module docstring)."""
    from rirlab.tasks import listops

    if split in ("dev", "test"):
        rows = listops.generate(90000, seed, 5, 20, max_len=None if split == "dev" else 1000)
        max_args = 5
    else:
        _, max_args, max_depth, lo, hi, steered = listops.SPLITS[split]
        rows = listops.generate(n, seed, max_args, max_depth, lo, hi, steered=steered)
    lengths = np.array([len(listops.tokenize(t)) for t, _ in rows])
    cuts = {q: int(np.quantile(lengths, float(q[1:]) / 100, method="inverted_cdf"))
            for q in ("q10", "q25", "q50", "q75", "q90")}
    if split in ("dev", "test"):  # the figure for the original test file: 4.7% of length <= 5
        cuts = {"short": 5, **cuts}
    if split.startswith("len_") or split == "lra":  # the window's ends are outside it (lo < length < hi)
        cuts = {"below the window": lo - 1, **cuts, "window top": hi}
    depth_cut = int(np.quantile([listops.shape(listops.tokenize(t))[0] for t, _ in rows], 0.9,
                                method="inverted_cdf"))
    args = {"max_args": max_args, "length_cuts": cuts, "depth_cut": depth_cut}
    return {"n": len(rows), "args": args, "stats": _summarise(listops_values(rows, **args))}


def derive_logic(split: str, root: str) -> dict:
    """The target of one logic split from the distributed files under ``root``."""
    from pathlib import Path

    from rirlab.tasks import logic

    names = [f"train{n}" for n in range(7)] if split in ("train", "dev") else [f"test{split[4:]}"]
    rows = [tuple(line.rstrip("\n").split("\t")) for name in names for line in open(Path(root) / name)]
    ns = tuple(sorted({max(logic.n_ops(p), logic.n_ops(h)) for _, p, h in rows}))
    depths = [max(logic.depth(logic.parse(p)), logic.depth(logic.parse(h))) for _, p, h in rows]
    args = {"ns": ns, "depth_cut": int(np.quantile(depths, 0.9, method="inverted_cdf"))}
    return {"n": len(rows), "args": args, "stats": _summarise(logic_values(rows, **args))}


if __name__ == "__main__":  # python -m rirlab.tasks.targets listops | logic DIR  [--write]
    args = [a for a in sys.argv[1:] if a != "--write"]
    if args[0] == "listops":
        from rirlab.tasks.listops import ALL_SPLITS

        derived = {s: derive_listops(s) for s in ALL_SPLITS[1:]}
    else:
        from rirlab.tasks.logic import ALL_SPLITS

        derived = {s: derive_logic(s, args[1]) for s in ALL_SPLITS[1:]}
    if "--write" in sys.argv:  # replace this task's targets in targets.json
        TARGETS_FILE.write_text(dump({**targets(), args[0]: derived}))
    else:
        print(json.dumps(derived, indent=1))
