"""Batches as a pure function of (seed, step), DataLoader workers, and `rirlab data` end to end."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from rirlab.trial import resolve
from rirlab.tasks import cache, listops
from rirlab.tasks.base import collate_classify
from rirlab.tasks.batching import BatchPlan, loader
from rirlab.train import Trainer


def test_bucketed_plan_is_deterministic_covers_each_epoch_and_cuts_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 500, size=1000)
    a, b = BatchPlan(lengths, 32, seed=3, bucket_factor=8), BatchPlan(lengths, 32, seed=3, bucket_factor=8)
    steps = [a.indices(s) for s in range(a.batches_per_epoch * 2)]
    assert [b.indices(s) for s in reversed(range(len(steps)))] == steps[::-1]  # order of calls does not matter
    for epoch in range(2):
        flat = sorted(i for s in steps[epoch * a.batches_per_epoch:(epoch + 1) * a.batches_per_epoch] for i in s)
        assert flat == list(range(1000))
    plain = BatchPlan(lengths, 32, seed=3)

    def waste(plan):
        return sum(32 * lengths[plan.indices(s)].max() - lengths[plan.indices(s)].sum() for s in range(31))

    assert waste(a) < 0.3 * waste(plain)
    assert BatchPlan(lengths, 32, seed=4, bucket_factor=8).indices(0) != steps[0]


def pool_runs(plan, epoch):
    """The epoch's steps cut into runs of bucket_factor steps from the epoch's start, each run's rows as a set."""
    e0, f, per = epoch * plan.batches_per_epoch, plan.bucket_factor, plan.batches_per_epoch
    return [set().union(*(plan.indices(e0 + s) for s in range(i, min(i + f, per)))) for i in range(0, per, f)]


def test_pools_order_trains_a_length_sorted_pool_before_the_next_as_the_authors_trainer():
    """batch_order "pools" (the authors' collater and trainer): each run of 5 steps from an epoch's start is one pool
    of 5 x 32 rows of the epoch's shuffle, cut by length into batches whose lengths do not overlap, in a random
    order within the pool. "shuffled" mixes pools across the epoch, so its runs of 5 steps are not pools."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 100, size=1000)
    pools, shuffled = (BatchPlan(lengths, 32, seed=5, bucket_factor=5, order=o) for o in ("pools", "shuffled"))
    assert pools.batches_per_epoch == 32
    for epoch in range(2):
        runs = pool_runs(pools, epoch)
        assert [len(r) for r in runs] == [160] * 6 + [40]  # 1,000 rows: six full pools and the rest
        assert set().union(*runs) == set(range(1000))
        for i in range(0, 32, 5):
            batches = [pools.indices(epoch * 32 + s) for s in range(i, min(i + 5, 32))]
            spans = sorted((lengths[b].min(), lengths[b].max()) for b in batches)
            assert all(hi <= lo for (_, hi), (lo, _) in zip(spans, spans[1:]))  # a length-sorted pool, cut
        # the pool's batches are not always trained shortest first: their order within the pool is drawn
    firsts = [[lengths[pools.indices(e * 32 + s)].max() for s in range(5)] for e in range(6)]
    assert any(f != sorted(f) for f in firsts)
    assert any(len(r) != 160 for r in pool_runs(shuffled, 0)[:6])
    # both orders train the same batches in an epoch, as sets of rows
    assert sorted(map(sorted, (pools.indices(s) for s in range(32)))) == \
        sorted(map(sorted, (shuffled.indices(s) for s in range(32))))
    assert BatchPlan(lengths, 32, seed=5, bucket_factor=5, order="pools").indices(33) == pools.indices(33)


def test_the_paper_recipe_trains_in_the_authors_pool_order():
    base = {"model": "rir_grc", "task": "listops", "hidden_size": 16, "n_train": 400, "n_dev": 20,
            "n_test": 20, "n_eval": 20, "batch_size": 16}
    assert resolve({**base, "recipe": "paper"}).train.batch_order == "pools"
    assert resolve({**base, "recipe": "adamw"}).train.batch_order == "shuffled"
    plan = Trainer(resolve({**base, "recipe": "paper"})).plan
    assert (plan.order, plan.bucket_factor) == ("pools", 5)
    assert Trainer(resolve({**base, "recipe": "paper", "batch_order": "shuffled"})).plan.order == "shuffled"


def test_pools_sort_a_pair_task_by_both_sentences_as_the_authors_collater():
    """Under "pools" a pair's sort key is len(S1) + len(S2) (the authors' len(sequence_vec), :func:`pool_length`);
    under "shuffled" rirlab's earlier key, the longer sentence. The two keys differ only for pairs."""
    base = {"model": "rir_grc", "task": "logic", "hidden_size": 8, "chunk_size": 4, "n_train": 200, "n_dev": 8,
            "n_eval": 8, "batch_size": 8, "recipe": "paper"}
    pools = Trainer(resolve(base))
    train = pools.data.train
    assert len(train[0]) == 3  # (premise, hypothesis, label)
    summed, longer = [len(a) + len(b) for a, b, _ in train], [max(len(a), len(b)) for a, b, _ in train]
    assert pools.plan.order == "pools" and list(pools.plan.lengths) == summed
    assert summed != longer
    shuffled = Trainer(resolve({**base, "batch_order": "shuffled"}))
    assert list(shuffled.plan.lengths) == longer


def test_loader_with_workers_yields_the_batches_of_batch_at():
    examples = [([1 + (i % 7)] * (1 + i % 13), i % 10) for i in range(200)]
    plan = BatchPlan([len(x) for x, _ in examples], 16, seed=1, bucket_factor=4)
    got = list(loader(examples, collate_classify, plan, start=5, stop=20, num_workers=2))
    assert len(got) == 15
    for step, batch in zip(range(5, 20), got):
        want = collate_classify([examples[j] for j in plan.indices(step)])
        assert all(torch_equal(batch[k], want[k]) for k in want)


def torch_equal(a, b):
    return a.shape == b.shape and bool((a == b).all())


def _build(root):
    cfg = listops.ListOpsConfig(n_train=200, n_dev=20, n_test=20, n_eval=20, cache_dir=root)
    return listops.split_table(cfg, "len_500_600").num_rows


def test_concurrent_builders_of_one_split_leave_one_complete_file(tmp_path):
    with ProcessPoolExecutor(2) as pool:
        assert list(pool.map(_build, [str(tmp_path)] * 4)) == [20] * 4
    files = list((tmp_path / "listops").iterdir())
    assert len(files) == 1 and files[0].suffix == ".parquet"


def test_generate_verify_stats(cli, tmp_path):
    out = tmp_path / "len.tsv"
    r = cli("data", "generate", "listops", "--split", "len_200_300", "--set", "n_eval=30", "--out", out)
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert len(lines) == 30
    assert cli("data", "verify", "listops", out).exit_code == 0
    label, text = lines[3].split("\t")
    lines[3] = f"{(int(label) + 1) % 10}\t{text}"
    out.write_text("\n".join(lines) + "\n")
    r = cli("data", "verify", "listops", out)
    assert r.exit_code == 1 and f"{out}:4: label" in r.output
    r = cli("data", "stats", "listops", out, "--json")
    s = json.loads(r.output)
    assert s["count"] == 30 and 200 <= s["length"]["min"] <= s["length"]["max"] <= 300 and s["share_len_le_100"] == 0
    bad = tmp_path / "bad.tsv"
    bad.write_text("3\t[MAX 3 ]\n3\t( [MAX 3 1 ]\n")
    r = cli("data", "verify", "listops", bad)
    assert r.exit_code == 2 and f"{bad}:2: 1 unclosed '('" in r.output


def test_import_replaces_a_generated_split_in_a_trial(cli, tmp_path):
    src = tmp_path / "mine.tsv"
    src.write_text("9\t( ( ( [MAX 2 ) 9 ) ] )\n2\t( ( ( [MIN 2 ) 9 ) ] )\n")
    r = cli("data", "import", "listops", src, "--split", "test")
    assert r.exit_code == 0, r.output
    assert cache.imported_path("listops", "test").exists()
    flat = {"model": "bbt_grc", "task": "listops", "hidden_size": 8, "n_train": 50, "n_dev": 10,
            "eval_splits": ["test"], "imported": ["test"], "steps": 1}
    data = Trainer(resolve(flat)).data
    assert [y for _, y in data.eval_splits["test"]] == [9, 2]
    assert cli("data", "import", "logic", src, "--split", "ops_7").exit_code == 2  # wrong format for logic
