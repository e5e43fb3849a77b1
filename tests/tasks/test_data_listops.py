"""ListOps data: solver vs an independent evaluator, split constraints, determinism, the Parquet cache."""

from __future__ import annotations

import re
import time

import pytest

from rirlab.trial import resolve
from rirlab.errors import UserError
from rirlab.tasks import cache, listops

SMALL = dict(n_train=300, n_dev=40, n_test=40, n_eval=25, iid_pool=500)
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
    ood = set()
    for split in listops.ALL_SPLITS:
        table = listops.split_table(cfg, split)
        texts = table.column("text").to_pylist()
        assert len(set(texts)) == len(texts), split  # each split is a set, like the original files
        if split not in ("train", "dev", "test"):
            assert not (set(texts) & ood), split  # long expressions never repeat across splits
            ood |= set(texts)
        spec = listops.SPLITS.get(split)
        max_args, max_depth = (spec[1] or 5, spec[2] or 20) if spec else (5, 20)
        lo, hi = (spec[3], spec[4]) if spec else (1, 100 if split == "train" else 10**6)
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
    assert max(len(listops.tokenize(t)) for t in listops.split_table(cfg, "dev").column("text").to_pylist()) > 100


def _features(tree):
    toks = listops.tree_tokens(tree)
    depth, counts = listops.shape(toks)
    return len(toks), depth, counts[-1]  # counts[-1]: the root's argument count


def test_size_model_samples_the_generator_conditioned_on_length_exactly():
    """SizeModel vs plain rejection from the original generator on a range where rejection is cheap:
    mean length, mean depth and the root's argument-count shares agree within 4 standard errors."""
    import random

    import numpy as np

    max_args, max_depth, lo, hi, n = 4, 5, 15, 40, 3000
    rng = random.Random(0)
    rejected = []
    while len(rejected) < n:
        tree = listops.random_tree(rng, max_args, max_depth)
        if lo <= len(listops.tree_tokens(tree)) <= hi:
            rejected.append(_features(tree))
    model = listops.size_model(max_args, max_depth, hi)
    sizes = rng.choices(range(lo, hi + 1), model.lengths(lo, hi), k=n)
    sampled = [_features(model.tree(rng, s)) for s in sizes]
    assert all(f[0] == s for f, s in zip(sampled, sizes))
    for i in (0, 1):
        a, b = np.array([f[i] for f in rejected]), np.array([f[i] for f in sampled])
        assert abs(a.mean() - b.mean()) <= 4 * np.sqrt((a.var() + b.var()) / n), i
    for k in range(2, max_args + 1):
        pa, pb = np.mean([f[2] == k for f in rejected]), np.mean([f[2] == k for f in sampled])
        assert abs(pa - pb) <= 4 * np.sqrt(2 * pa * (1 - pa) / n), (k, pa, pb)
    with pytest.raises(ValueError, match="no tree"):
        listops.size_model(5, 20, 3).lengths(2, 3)  # no tree has 2 or 3 tokens


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


def test_length_windows_exclude_their_ends_as_the_original_scripts(cfg):
    """latent-treelstm make_data.py keeps MIN < len < MAX; LRA listops.py 500 < len < 2000: the split named
    200-300 never holds a tree of 200 or 300 tokens (the inclusive window let 47 of 2,000 through)."""
    for split in ("len_200_300", "len_500_600", "len_900_1000", "lra"):
        lo, hi = (500, 2000) if split == "lra" else map(int, split.split("_")[1:])
        lengths = [len(listops.tokenize(t)) for t in listops.split_table(cfg, split).column("text").to_pylist()]
        assert lo < min(lengths) and max(lengths) < hi, (split, min(lengths), max(lengths))
    edge = listops.generate(400, 5, 5, 20, *listops.SPLITS["len_200_300"][3:5], steered=True)
    lengths = {len(listops.tokenize(t)) for t, _ in edge}
    assert 201 in lengths and max(lengths) >= 290  # the window is still reached up to its ends


def test_dev_and_train_are_cut_from_one_file_and_share_no_row(tmp_path):
    """The papers' protocol cuts dev (first lines, unfiltered) and train (the rest, <= 100 tokens) from one
    file: no dev row is in train (a dev drawn on its own shared 57 of 1,000 rows with train)."""
    cfg = listops.ListOpsConfig(n_train=20000, n_dev=1000, cache_dir=str(tmp_path))
    train = set(listops.split_table(cfg, "train").column("text").to_pylist())
    dev = listops.split_table(cfg, "dev").column("text").to_pylist()
    assert len(train) == 20000 and len(dev) == 1000 and not train & set(dev)
    assert any(len(listops.tokenize(t)) > 100 for t in dev)  # dev is unfiltered
