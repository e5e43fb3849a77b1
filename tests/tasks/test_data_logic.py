"""Logical inference: labeler vs every real label, parser errors, generator vs the real train files."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from rirlab.tasks import logic

# the distributed files (Bowman, Manning & Potts, 2015): $RIRLAB_LOGIC_DATA, else ../shared beside the checkout
REAL = Path(os.environ.get("RIRLAB_LOGIC_DATA")
            or Path(__file__).resolve().parents[2].parent / "shared" / "data" / "propositional_logic")
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real logic files not found at {REAL} (../shared is absent)")


def real_rows(names):
    return [line.rstrip("\n").split("\t") for n in names for line in open(REAL / n)]


@needs_real
def test_labeler_reproduces_every_real_label():
    files = sorted(p.name for p in REAL.iterdir() if p.name[:4] in ("trai", "test"))
    assert len(files) == 26
    rows = real_rows(files)
    assert len(rows) == 249069
    wrong = [(r, p, h) for r, p, h in rows if logic.label(p, h) != r]
    assert not wrong, wrong[:3]
    assert set(r for r, _, _ in rows) == set(logic.RELATIONS)


def test_parse_rejects_malformed_formulas():
    assert logic.parse("( a ( and ( not b ) ) )") == ("and", "a", ("not", "b"))
    for bad, why in (("( a ( and b )", "missing"), ("( a and b )", "expected"), ("g", "unknown token"),
                     ("a b", "extra tokens"), ("( not )", "unexpected")):
        with pytest.raises(ValueError, match=why):
            logic.parse(bad)
    with pytest.raises(ValueError, match="3 tab-separated"):
        logic.parse_line("=\ta")
    with pytest.raises(ValueError, match="relation"):
        logic.parse_line("?\ta\tb")


def test_relations_on_hand_made_pairs():
    cases = {("a", "a"): "=", ("( a ( and b ) )", "a"): "<", ("a", "( a ( and b ) )"): ">",
             ("a", "( not a )"): "^", ("( a ( and b ) )", "( not a )"): "|", ("( a ( or b ) )", "( not a )"): "v",
             ("a", "b"): "#"}
    for (p, h), rel in cases.items():
        assert logic.label(p, h) == rel


def _summary(rows):
    n = len(rows)
    rel = Counter(r for r, _, _ in rows)
    other = Counter(min(logic.n_ops(p), logic.n_ops(h)) for _, p, h in rows)
    words = Counter(t for _, p, h in rows for t in (p + " " + h).split() if t in ("not", "and", "or"))
    return ({k: rel[k] / n for k in logic.RELATIONS}, {m: other[m] / n for m in (0, 1, 2)},
            words["not"] / sum(words.values()))


@needs_real
def test_generator_matches_the_real_train_distribution(tmp_path):
    """Tolerances: each relation share within 0.02 absolute, other-formula operator shares (m = 0, 1, 2)
    within 0.03, share of 'not' among operators within 0.03, pooled over N = 0..6."""
    cfg = logic.LogicConfig(n_train=12000, n_dev=10, cache_dir=str(tmp_path))
    ours = logic.split_table(cfg, "train")
    ours = list(zip(*(ours.column(c).to_pylist() for c in ("relation", "premise", "hypothesis"))))
    real = real_rows([f"train{n}" for n in range(7)])
    (r_ours, o_ours, n_ours), (r_real, o_real, n_real) = _summary(ours), _summary(real)
    for k in logic.RELATIONS:
        assert abs(r_ours[k] - r_real[k]) <= 0.02, (k, r_ours, r_real)
    for m in o_real:
        assert abs(o_ours[m] - o_real[m]) <= 0.03, (m, o_ours, o_real)
    assert abs(n_ours - n_real) <= 0.03
    ops = Counter(max(logic.n_ops(p), logic.n_ops(h)) for _, p, h in ours)
    assert max(ops) == 6 and ops[6] / len(ours) == pytest.approx(32952 / 135529, abs=0.01)


def test_test_splits_hold_their_operator_counts_within_the_depth_cap_and_pair_batches(tmp_path):
    cfg = logic.LogicConfig(n_train=300, n_dev=30, n_eval=60, eval_splits=["ops_7", "ops_12"], cache_dir=str(tmp_path))
    for n in (7, 12):
        t = logic.split_table(cfg, f"ops_{n}")
        assert t.num_rows == 60
        pairs = list(zip(t.column("premise").to_pylist(), t.column("hypothesis").to_pylist()))
        ns = [max(logic.n_ops(p), logic.n_ops(h)) for p, h in pairs]
        assert set(ns) == {7} if n == 7 else (min(ns) == 12 and max(ns) > 12 and max(ns) <= logic.MAX_OPS), ns
        assert max(logic.depth(logic.parse(f)) for pair in pairs for f in pair) <= logic.MAX_DEPTH
    data = logic.load(cfg)
    assert list(data.eval_splits) == ["dev", "ops_7", "ops_12"]
    b = data.collate(data.eval_splits["ops_12"][:5])
    assert set(b) == {"tokens", "mask", "tokens2", "mask2", "labels"}
    assert "(" in [logic.VOCAB[i] for i in b["tokens"][b["mask"]].tolist()]  # parentheses are tokens by default
    bare = logic.load(logic.LogicConfig(**{**cfg.__dict__, "keep_parens": False}))
    b = bare.collate(bare.eval_splits["ops_12"][:5])
    assert "(" not in [logic.VOCAB[i] for i in b["tokens"][b["mask"]].tolist()]


def _process_formula(rng, d=logic.BINARY_LEVELS, variables="abcd"):
    """The original script's formula process, unconditioned (module docstring): the reference for the sampler."""
    tree = (rng.choice(("and", "or")), _process_formula(rng, d - 1), _process_formula(rng, d - 1)) \
        if d and rng.random() < logic.P_BINARY else rng.choice(variables)
    return ("not", tree) if rng.random() < logic.P_NOT else tree


def test_formulas_given_their_operator_count_follow_the_unconditioned_process():
    """random_formula(k) is the process conditioned on k operators: its shapes match the process's draws of
    k operators (share of 'not', depth), and the computed size distribution matches the draws' sizes."""
    import random

    rng = random.Random(5)
    drawn = [_process_formula(rng) for _ in range(30000)]
    sizes = Counter(logic.n_ops(logic.text_of(t)) for t in drawn)
    for k in range(6):
        assert sizes[k] / len(drawn) == pytest.approx(logic._FULL[logic.BINARY_LEVELS][k], abs=0.01), k
    for k in (4, 7):
        ref = [t for t in drawn if logic.n_ops(logic.text_of(t)) == k][:1500]
        ours = [logic.random_formula(rng, k, "abcd") for _ in range(len(ref))]
        for stat in (lambda t: logic.text_of(t).split().count("not") / k, lambda t: logic.depth(t) / 7):
            a, b = sum(map(stat, ref)) / len(ref), sum(map(stat, ours)) / len(ours)
            assert abs(a - b) < 0.03, (k, a, b)
        assert max(logic.depth(t) for t in ours) <= logic.MAX_DEPTH


def test_generated_pairs_carry_the_real_files_traces():
    """As every real pair: at most 4 variables, no 'not' over a 'not', no tautology or contradiction."""
    for rel, p, h in logic.generate(300, 9, seed=3):
        assert len({t for t in (p + " " + h).split() if t in logic.VARS}) <= logic.SUBSET
        assert "not ( not" not in p + h
        assert all(logic.worlds(logic.parse(f)) not in (0, logic._ALL) for f in (p, h))
        assert rel == logic.label(p, h) and max(logic.n_ops(p), logic.n_ops(h)) == 9


def _not_shares(rows, n):
    """Per pair of exactly n operators: the share of 'not' among its operators."""
    out = []
    for _, p, h in rows:
        if max(logic.n_ops(p), logic.n_ops(h)) == n:
            words = [t for t in f"{p} {h}".split() if t in ("not", "and", "or")]
            out.append(words.count("not") / len(words))
    return out


def test_dev_is_carved_from_the_train_files_every_tenth_pair(tmp_path):
    """The papers' protocol (process_proplog.py): train0..train6 -> every 10th pair dev. At the defaults the sizes
    are the real ones (135,529 = 121,977 + 13,552), and dev is distributed like train at every N; a dev drawn
    after train in one stream was not at small N ('not' share at N = 1: 0.058 against train's 0.27)."""
    cfg = logic.LogicConfig(cache_dir=str(tmp_path))
    train, dev = (logic.split_table(cfg, s) for s in ("train", "dev"))
    assert (train.num_rows, dev.num_rows) == (121977, 13552) == (cfg.n_train, cfg.n_dev)
    rows = {s: list(zip(*(t.column(c).to_pylist() for c in ("relation", "premise", "hypothesis"))))
            for s, t in (("train", train), ("dev", dev))}
    assert not {(p, h) for _, p, h in rows["train"]} & {(p, h) for _, p, h in rows["dev"]}
    for n in (1, 2, 3, 6):
        a, b = _not_shares(rows["train"], n), _not_shares(rows["dev"], n)
        assert len(b) == pytest.approx(len(a) / 9, rel=0.05), (n, len(a), len(b))
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        va = sum((x - ma) ** 2 for x in a) / (len(a) - 1)
        vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1)
        assert abs(ma - mb) / ((va / len(a) + vb / len(b)) ** 0.5) < 4, (n, ma, mb)  # Welch t
    small = logic.LogicConfig(n_train=300, n_dev=50, cache_dir=str(tmp_path))
    assert [logic.split_table(small, s).num_rows for s in ("train", "dev")] == [300, 50]
