"""Provenance of a trial's data: what each task says a config reads, MLflow dataset inputs, the spec hash
following imported content, and the data cache reaching Ray workers."""

from __future__ import annotations

import json

import pytest
import yaml
from mlflow.tracking import MlflowClient

from rirlab.tasks import cache, registry
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.record.tracker import Tracker, worker_env
from tests.helpers.cli import REPO

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())
LISTOPS = registry.get("listops")
SMALL = dict(n_train=200, n_dev=20, n_test=30, n_eval=10, iid_pool=500)  # a small near-IID pool: seconds, not 90,000 draws


def _import_test_split(root, rows: int, seed: int) -> dict:
    table = LISTOPS.split_table(LISTOPS.config(**{**SMALL, "n_test": rows}, data_seed=seed, cache_dir=str(root) + "-g"), "test")
    cache.write_imported("listops", "test", table, {"protocol": "as-is"}, str(root))
    return cache.imported_record("listops", "test", str(root))


@pytest.mark.parametrize("name", registry.names())
def test_every_task_describes_the_splits_a_config_reads_without_generating_them(tmp_path, name):
    task = registry.get(name)
    cfg = task.config(**dict(task.quick), cache_dir=str(tmp_path))
    infos = task.datasets(cfg)
    assert [d.split for d in infos] == ["train", "dev", *cfg.eval_splits]
    assert not (tmp_path / name).exists()  # nothing generated to describe them
    for d in infos:
        assert d.name == f"{name}/{d.split}" and d.source == "generated" and d.params["generator"] == name
        assert d.rows_from in ("config", "unknown") and len(d.digest) == 16
    built = task.split_table(cfg, "dev")
    dev = next(d for d in task.datasets(cfg) if d.split == "dev")
    assert dev.rows == built.num_rows and dev.rows_from == "file"  # read from the cached file's footer
    assert (tmp_path / name / f"dev-{dev.digest}.parquet").exists()  # the digest is the cache key


def test_an_imported_split_is_described_by_its_import_record(tmp_path):
    record = _import_test_split(tmp_path, 12, seed=5)
    cfg = LISTOPS.config(**SMALL, imported=["test"], eval_splits=["test"], cache_dir=str(tmp_path))
    test = {d.split: d for d in LISTOPS.datasets(cfg)}["test"]
    assert test.source == record["path"] and test.digest == record["digest"] and test.rows == 12
    assert test.params["protocol"] == "as-is"
    generated = {d.split: d for d in LISTOPS.datasets(cfg)}["dev"]
    assert generated.params["imported"] == {"test": record["digest"]}  # dev is keyed by what it was built beside


def test_tracker_logs_datasets_as_mlflow_inputs(tmp_path):
    _import_test_split(tmp_path, 12, seed=5)
    cfg = LISTOPS.config(**SMALL, imported=["test"], eval_splits=["test", "args_10"], cache_dir=str(tmp_path))
    from rirlab.sweeps.record.callback import trial_datasets
    from rirlab.trial import resolve

    resolved = resolve({"model": "bbt_grc", "task": "listops", **{k: getattr(cfg, k) for k in
                                                                     ("n_train", "n_dev", "n_test", "n_eval", "imported",
                                                                      "eval_splits", "cache_dir")}})
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = tracker.experiment_id("prov")
    run_id = tracker.client.create_run(exp).info.run_id
    tracker.log_datasets(run_id, trial_datasets(resolved))
    inputs = MlflowClient(tracker.uri).get_run(run_id).inputs.dataset_inputs
    by_name = {i.dataset.name: i for i in inputs}
    assert set(by_name) == {"listops/train", "listops/dev", "listops/test", "listops/args_10"}
    test = by_name["listops/test"]
    assert test.dataset.source_type == "local" and json.loads(test.dataset.source)["uri"].endswith("test.parquet")
    assert json.loads(test.dataset.profile)["rows"] == 12
    assert test.dataset.digest == cache.imported_record("listops", "test", str(tmp_path))["digest"]
    assert {t.key: t.value for t in test.tags}["mlflow.data.context"] == "test"
    train = by_name["listops/train"].dataset
    assert train.source_type == "generated" and json.loads(train.source)["params"]["n_train"] == 200
    assert json.loads(train.profile) == {"rows": 200, "rows_from": "config"}


def test_spec_hash_follows_the_content_of_the_imported_files(tmp_path):
    spec = tmp_path / "s.yaml"
    root = tmp_path / "cache"
    spec.write_text(yaml.safe_dump({**TINY, "fixed": {**TINY["fixed"], "imported": ["test"],
                                                      "cache_dir": str(root)}}, sort_keys=False))
    from rirlab.errors import UserError

    with pytest.raises(UserError, match="rirlab data import listops FILE... --split test"):
        load_spec(spec)
    _import_test_split(root, 12, seed=5)
    h1 = load_spec(spec).hash
    _import_test_split(root, 12, seed=5)
    assert load_spec(spec).hash == h1  # same content, same sweep
    _import_test_split(root, 11, seed=5)
    assert load_spec(spec).hash != h1


def test_worker_env_carries_the_data_cache_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RIRLAB_CACHE", "rel/cache")
    assert worker_env()["RIRLAB_CACHE"] == str(tmp_path / "rel" / "cache")
    monkeypatch.delenv("RIRLAB_CACHE")
    assert "RIRLAB_CACHE" not in worker_env()


def test_two_sweeps_inserting_the_same_dataset_at_once_both_record_it(tmp_path, monkeypatch):
    """The race two sweeps of one spec hit when started together (seen in CI): both pass the store's "is this dataset
    new" check and one insert fails UNIQUE (datasets.experiment_id, name, digest). The tracker calls again, which then
    links the row the other sweep inserted; any other error still propagates."""
    import pytest
    from mlflow.exceptions import MlflowException

    from rirlab.sweeps.record.callback import trial_datasets
    from rirlab.trial import resolve

    cfg = LISTOPS.config(**SMALL, eval_splits=["test"], cache_dir=str(tmp_path))
    resolved = resolve({"model": "bbt_grc", "task": "listops", **{k: getattr(cfg, k) for k in
                                                                     ("n_train", "n_dev", "n_test", "eval_splits",
                                                                      "cache_dir")}})
    datasets = trial_datasets(resolved)
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    ours, other = Tracker(uri), Tracker(uri)
    exp = ours.experiment_id("race")
    run_a, run_b = ours.client.create_run(exp).info.run_id, other.client.create_run(exp).info.run_id
    real = ours.client.log_inputs
    calls = []

    def racing(run_id, datasets=None):
        calls.append(run_id)
        if len(calls) == 1:  # the other sweep's insert lands between our check and our insert
            other.log_datasets(run_b, trial_datasets(resolved))
            raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
                                  "datasets.name, datasets.digest")
        return real(run_id, datasets=datasets)

    monkeypatch.setattr(ours.client, "log_inputs", racing)
    ours.log_datasets(run_a, datasets)
    names = lambda r: sorted(i.dataset.name for i in MlflowClient(uri).get_run(r).inputs.dataset_inputs)  # noqa: E731
    assert len(calls) == 2 and names(run_a) == names(run_b) == ["listops/dev", "listops/test", "listops/train"]
    monkeypatch.setattr(ours.client, "log_inputs", lambda *a, **k: (_ for _ in ()).throw(MlflowException("disk full")))
    with pytest.raises(MlflowException, match="disk full"):
        ours.log_datasets(run_a, datasets)
