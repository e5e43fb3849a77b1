"""A new SQLite store is a copy of an empty template of this MLflow's schema kept in the data cache (building one runs
all of MLflow's migrations: seconds per new store): the copy is the schema MLflow builds and MLflow works in it; a
template of another MLflow, of another schema revision or a damaged one is never copied; without a writable cache
the store is built in place (sweeps/record/store.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rirlab.sweeps.record import store


def _schema(db: Path) -> tuple:
    """Every table, index and trigger with its definition, and the schema revision. (A definition's lines sorted:
    MLflow's migrations write a table's constraints in an order that varies from one build to the next.)"""
    con = sqlite3.connect(db)
    try:
        tables = sorted((kind, name, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                        for kind, name, sql in con.execute("SELECT type, name, sql FROM sqlite_master"))
        return tables, con.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        con.close()


@pytest.fixture
def builds(monkeypatch):
    """The schema builds that run (``store._build``: MLflow's migrations), counted."""
    calls = []
    real = store._build

    def counted(tmp, source=None):
        calls.append(tmp)
        real(tmp, source)

    monkeypatch.setattr(store, "_build", counted)
    return calls


def _templates(cache: Path) -> list:
    return sorted(p.name for p in (cache / store.TEMPLATES).iterdir())


def test_new_stores_are_copies_of_one_template_with_mlflows_schema_and_mlflow_works_in_them(tmp_path, cache, builds):
    store.check_store(f"sqlite:///{tmp_path / 'a.db'}", create=True)
    store.check_store(f"sqlite:///{tmp_path / 'b.db'}", create=True)
    assert len(builds) == 1  # the template, built once; both stores copied from it
    (template,) = _templates(cache)
    assert template.startswith("empty-mlflow") and template.endswith(f"-{store._latest_revision()}.db")

    store._build(tmp_path / "built.db")  # what creating a store ran before the template
    assert _schema(tmp_path / "a.db") == _schema(tmp_path / "b.db") == _schema(tmp_path / "built.db")
    client = MlflowClient(f"sqlite:///{tmp_path / 'b.db'}")
    run = client.create_run(client.create_experiment("x"))
    client.log_metric(run.info.run_id, "dev/accuracy", 51.0, step=3)
    client.set_terminated(run.info.run_id)
    got = client.get_run(run.info.run_id)
    assert got.info.status == "FINISHED" and got.data.metrics == {"dev/accuracy": 51.0}
    assert sorted(e.name for e in client.search_experiments()) == ["Default", "x"]
    assert _templates(cache) == [template]  # the template holds no run: a copy, not the store itself


def test_a_template_of_another_revision_or_damaged_is_built_again_and_another_mlflow_names_another(
        tmp_path, cache, builds, monkeypatch):
    store.check_store(f"sqlite:///{tmp_path / 'first.db'}", create=True)
    template = cache / store.TEMPLATES / _templates(cache)[0]
    con = sqlite3.connect(template)
    con.execute("UPDATE alembic_version SET version_num = 'a8c4a736bde6'")  # an earlier MLflow's schema, same name
    con.commit()
    con.close()
    store.check_store(f"sqlite:///{tmp_path / 'stale.db'}", create=True)
    assert len(builds) == 2 and store._verify_sqlite(tmp_path / "stale.db") is None  # current, not the stale copy

    template.write_bytes(b"SQLite format 3\x00" + b"\x00" * 4000)  # damaged
    store.check_store(f"sqlite:///{tmp_path / 'damaged.db'}", create=True)
    assert len(builds) == 3 and store._verify_sqlite(tmp_path / "damaged.db") is None

    import mlflow

    monkeypatch.setattr(mlflow, "__version__", "99.0.0")  # an upgraded MLflow: its own template, never this one
    store.check_store(f"sqlite:///{tmp_path / 'upgraded.db'}", create=True)
    assert len(builds) == 4 and len(_templates(cache)) == 2
    assert not [p for p in (cache / store.TEMPLATES).iterdir() if p.name.endswith(".new")]


def test_without_a_writable_cache_the_store_is_built_in_place(tmp_path, monkeypatch, builds):
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path / "not-a-dir"))  # mkdir of the templates' folder fails
    store.check_store(f"sqlite:///{tmp_path / 'm.db'}", create=True)
    assert store._verify_sqlite(tmp_path / "m.db") is None
    assert len(builds) == 1 and not (tmp_path / "not-a-dir").stat().st_size  # built in place, the file untouched
