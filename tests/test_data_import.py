"""Imported data: the papers' import protocol, refusals of bad files, and cache keys that never mix an imported
split's neighbours into a generated run."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from rirlab.tasks import cache, registry

LISTOPS = registry.get("listops")
SMALL = dict(n_train=300, n_dev=30, n_test=60, n_eval=20)


def _texts(cfg, split) -> set:
    return set(LISTOPS.split_table(cfg, split).column("text").to_pylist())


def test_a_generated_run_after_an_imported_train_shares_no_split_with_it(tmp_path):
    """The issue's sequence: a run with an imported train builds dev/test de-duplicated against that train; a
    later generated run must build its own (before: it read those back, and test rows lay inside its train)."""
    root = str(tmp_path / "cache")
    foreign = LISTOPS.split_table(LISTOPS.config(**SMALL, data_seed=7, cache_dir=str(tmp_path / "other")), "train")
    cache.write_atomic(foreign, cache.imported_path("listops", "train", root))
    with_import = LISTOPS.config(**SMALL, imported=["train"], cache_dir=root)
    for split in ("dev", "test"):
        _texts(with_import, split)
    generated = LISTOPS.config(**SMALL, cache_dir=root)
    got = {s: _texts(generated, s) for s in ("train", "dev", "test")}
    assert not got["train"] & got["test"] and not got["train"] & got["dev"] and not got["dev"] & got["test"]
    fresh = LISTOPS.config(**SMALL, cache_dir=str(tmp_path / "fresh"))  # what a clean cache builds
    for split in ("dev", "test"):
        assert got[split] == _texts(fresh, split)
    assert len(list((tmp_path / "cache" / "listops").glob("test-*.parquet"))) == 2  # one per run, each its own key


def test_the_key_of_a_generated_split_follows_the_imported_content(tmp_path):
    root = str(tmp_path)
    table = LISTOPS.split_table(LISTOPS.config(**SMALL, data_seed=3, cache_dir=str(tmp_path / "g")), "dev")
    params = {"n": 1}
    cache.write_imported("listops", "train", table, {"protocol": "as-is"}, root)
    k1 = cache.key_params("listops", params, ["train"], root)
    assert k1 != params and cache.key_params("listops", params, [], root) == params
    cache.write_imported("listops", "train", table.slice(1), {"protocol": "as-is"}, root)
    assert cache.key_params("listops", params, ["train"], root) != k1
    record = cache.imported_record("listops", "train", root)
    assert record["rows"] == table.num_rows - 1 and record["protocol"] == "as-is"
    assert pq.read_metadata(record["path"]).num_rows == record["rows"]
