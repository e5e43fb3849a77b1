"""ListOps data: solver vs an independent evaluator, split constraints, determinism, the Parquet cache."""

from __future__ import annotations

import re
import time

import pytest

from rirlab.config import resolve
from rirlab.errors import UserError
from rirlab.tasks import cache, listops

SMALL = dict(n_train=300, n_dev=40, n_test=40, n_eval=25)
_INNER = re.compile(r"\[(MIN|MAX|MED|SM) ((?:\d )+)\]")


def regex_value(tokens: list[str]) -> int:
    """Independent evaluator: rewrite the innermost '[OP d d ... ]' into its value until one digit is left."""
    s = " ".join(tokens) + " "
    while True:
        m = _INNER.search(s)
        if not m:
            break
        args = sorted(int(x) for x in m.group(2).split())
        n = len(args)
        value = {"MIN": args[0], "MAX": args[-1], "SM": sum(args) % 10,
                 "MED": args[n // 2] if n % 2 else (args[n // 2 - 1] + args[n // 2]) // 2}[m.group(1)]
        s = " ".join((s[: m.start()] + f" {value} " + s[m.end():]).split()) + " "
    assert re.fullmatch(r"\d ", s), s
    return int(s[0])


@pytest.fixture
def cfg(tmp_path):
    return listops.ListOpsConfig(**SMALL, cache_dir=str(tmp_path / "cache"))


def test_every_split_respects_its_constraints_and_labels_match_independent_solver(cfg):
    seen = set()
    for split in listops.ALL_SPLITS:
        table = listops.split_table(cfg, split)
        texts = table.column("text").to_pylist()
        assert len(set(texts)) == len(texts) and not (set(texts) & seen), split  # de-duplicated, disjoint
        seen |= set(texts)
        spec = listops.SPLITS.get(split)
        max_args, max_depth = (spec[1] or 5, spec[2] or 20) if spec else (5, 20)
        lo, hi = (spec[3], spec[4]) if spec else (1, 100)
        wide = 0
        for text, label in zip(texts, table.column("label").to_pylist()):
            toks = listops.tokenize(text)
            assert lo <= len(toks) <= hi, (split, len(toks))
            depth, counts = listops.shape(toks)
            assert depth <= max_depth - 1 and max(counts, default=2) <= max_args, split
            wide += max(counts, default=0) > 5
            assert regex_value(toks) == label == listops.solve(toks)
        if split in ("args_10", "args_15", "lra"):
            assert wide >= 0.8 * len(texts), (split, wide)  # unseen argument counts actually occur


def test_sized_tree_hits_the_exact_size_within_the_depth_limit():
    import random

    rng = random.Random(0)
    for size in (1, 4, 5, 7, 57, 300, 999, 1500):
        tree = listops.sized_tree(rng, size, 5, 20 if size < 1500 else 10)
        toks = listops.tree_tokens(tree)
        assert len(toks) == size and listops.shape(toks)[0] <= 19
    with pytest.raises(ValueError):
        listops.sized_tree(rng, 2, 5, 20)  # no tree has 2 tokens


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    lines = {}
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        c = listops.ListOpsConfig(**SMALL, data_seed=seed, cache_dir=str(tmp_path / name))
        lines[name] = "\n".join(listops.to_lines(listops.split_table(c, "len_200_300")))
    assert lines["a"] == lines["b"] != lines["c"]


def test_cached_load_equals_fresh_generation_and_is_fast(cfg, tmp_path):
    fresh = listops.split_table(cfg, "train")
    path = cache.split_path("listops", "train", listops.split_params(cfg, "train"), cfg.cache_dir)
    assert path.exists() and not list(path.parent.glob("*.tmp"))
    t0 = time.perf_counter()
    again = listops.split_table(cfg, "train")
    assert time.perf_counter() - t0 < 1.0
    assert again.equals(fresh)
    other = listops.ListOpsConfig(**{**SMALL, "n_train": 301}, cache_dir=cfg.cache_dir)
    assert cache.split_path("listops", "train", listops.split_params(other, "train"), cfg.cache_dir) != path


def test_cache_root_follows_env_and_config(monkeypatch, tmp_path):
    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path / "env"))
    assert cache.cache_root() == tmp_path / "env"
    assert cache.cache_root(str(tmp_path / "cfg")) == tmp_path / "cfg"


def test_eval_splits_are_validated_and_chosen(cfg, tmp_path):
    with pytest.raises(UserError, match="unknown ListOps split 'len_900'"):
        resolve({"model": "bbt_grc", "task": "listops", "eval_splits": ["len_900"]})
    data = listops.load(listops.ListOpsConfig(**SMALL, eval_splits=["lra"], cache_dir=cfg.cache_dir))
    assert list(data.eval_splits) == ["dev", "lra"]


def test_parse_line_reports_the_reason():
    assert listops.parse_line("7\t( ( ( [MAX 2 ) 7 ) ] )\n") == ("( ( ( [MAX 2 ) 7 ) ] )", 7)
    for bad, why in (("7\t( [MAX 2 7 ]", "unclosed"), ("x\t[MAX 2 7 ]", "not a digit"), ("7", "2 tab-separated"),
                     ("7\t[FOO 2 7 ]", "unknown token"), ("7\t[MAX 2 7", "unbalanced")):
        with pytest.raises(ValueError, match=why):
            listops.parse_line(bad)
