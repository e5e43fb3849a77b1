"""The read-only commands import only what they need (issue 50 item 2): `--help`, `models`, `tasks`, `runs` and
`tables`, each run as a user runs it (a fresh interpreter), leave torch, Ray and Optuna unimported; `--help` and the
two listings also MLflow and pandas. A regression (a top-level import of a heavy module in a command's path) fails
here rather than as a slower command. `models` and `tasks` print from a cache of their lines keyed by a hash of the
package's files (rirlab/cli/catalog.py); the unit tests below check when the cache is read and when it is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rirlab.cli import catalog
from tests.helpers.cli import REPO

HEAVY = {"torch", "ray", "optuna"}
HEAVIER = HEAVY | {"mlflow", "pandas"}  # what --help and the listings need neither

# the command in a fresh interpreter, as the console script runs it; at exit, the top-level packages it imported
PROBE = """
import atexit, json, sys
out = sys.argv[1]
sys.argv = ["rirlab", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted({m.split(".")[0] for m in sys.modules}))))
from rirlab.cli import main
main()
"""

SPEC = {"name": "readonly", "task": "listops", "model": "rir_ebt_grc", "search": {"chunk_size": {"grid": [10, 20]}},
        "seeds": 1}


def probe(tmp_path, *args) -> tuple[subprocess.CompletedProcess, set[str]]:
    out = tmp_path / f"modules-{os.getpid()}-{len(list(tmp_path.glob('modules-*')))}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RIRLAB_PLUGINS")}
    env["RIRLAB_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *map(str, args)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, set(json.loads(out.read_text()))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from tests.helpers.analysis_store import make_sweep

    root = tmp_path_factory.mktemp("readonly")
    return make_sweep(root, SPEC, [{"swept": {"chunk_size": c, "seed": 0}, "metrics": {"dev/accuracy": c}}
                                   for c in (10, 20)])


def test_help_imports_neither_torch_nor_mlflow_nor_pandas(tmp_path):
    proc, modules = probe(tmp_path, "--help")
    assert "Typical session" in proc.stdout
    assert not modules & HEAVIER, sorted(modules & HEAVIER)


@pytest.mark.parametrize("command", ["models", "tasks"])
def test_a_listing_reads_its_cache_without_torch_and_prints_the_same_lines(tmp_path, command):
    first, modules = probe(tmp_path, command)  # an empty cache: the live registry (torch), then written
    assert "torch" in modules and list((tmp_path / "cache" / "catalogue").glob(f"{command}-*.json"))
    again, modules = probe(tmp_path, command)
    assert again.stdout == first.stdout and ("rir_ebt_grc " in again.stdout if command == "models"
                                             else "listops " in again.stdout)
    assert not modules & HEAVIER, sorted(modules & HEAVIER)


@pytest.mark.parametrize("command", ["runs", "tables"])
def test_reading_a_store_imports_neither_torch_nor_ray_nor_optuna(tmp_path, store, command):
    uri, spec = store
    proc, modules = probe(tmp_path, command, spec, "--tracking-uri", uri)
    assert ("1 sweep of 'readonly'" in proc.stdout) if command == "runs" else ("2 finished runs" in proc.stdout)
    assert "mlflow" in modules  # the probe saw the command read the store
    assert not modules & HEAVY, sorted(modules & HEAVY)


# --- when the listing cache is read ---

def _cached(tmp_path, monkeypatch, lines) -> None:
    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path))
    monkeypatch.delenv("RIRLAB_PLUGINS", raising=False)
    folder = catalog.cache_folder()
    folder.mkdir(parents=True)
    (folder / f"models-{catalog.source_hash()}.json").write_text(json.dumps(lines))


def test_the_cache_of_this_source_is_read(tmp_path, monkeypatch):
    _cached(tmp_path, monkeypatch, ["from the cache"])
    assert catalog.listing("models", "not.imported.registry", lambda: ["live"]) == ["from the cache"]


def test_a_cache_of_another_source_is_ignored(tmp_path, monkeypatch):
    _cached(tmp_path, monkeypatch, ["from the cache"])
    other = catalog.cache_folder() / "models-0123456789abcdef0123.json"
    (catalog.cache_folder() / f"models-{catalog.source_hash()}.json").rename(other)
    assert catalog.listing("models", "not.imported.registry", lambda: ["live"]) == ["live"]
    assert catalog.listing("models", "not.imported.registry", lambda: ["other"]) == ["live"]  # written, then read
    assert other.exists()  # another install's (kept: two used in turn do not evict each other)


def test_only_the_newest_caches_of_other_sources_are_kept(tmp_path, monkeypatch):
    _cached(tmp_path, monkeypatch, ["x"])
    folder = catalog.cache_folder()
    (folder / f"models-{catalog.source_hash()}.json").unlink()
    others = [folder / f"models-{i:020d}.json" for i in range(catalog.KEEP + 3)]
    for age, path in enumerate(others):
        path.write_text("[]")
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
    catalog.listing("models", "not.imported.registry", lambda: ["live"])
    kept = sorted(p.name for p in folder.glob("models-*.json"))
    assert kept == sorted([f"models-{catalog.source_hash()}.json"] + [p.name for p in others[-(catalog.KEEP - 1):]])


def test_a_corrupt_cache_is_read_live(tmp_path, monkeypatch):
    _cached(tmp_path, monkeypatch, ["x"])
    (catalog.cache_folder() / f"models-{catalog.source_hash()}.json").write_text("{not json")
    assert catalog.listing("models", "not.imported.registry", lambda: ["live"]) == ["live"]


def test_plugins_or_an_imported_registry_are_read_live(tmp_path, monkeypatch):
    """Plugins' code is not in the hash, and entries registered in this process are not in any cache."""
    _cached(tmp_path, monkeypatch, ["from the cache"])
    assert catalog.listing("models", "json", lambda: ["live"]) == ["live"]  # a module this process has imported
    monkeypatch.setenv("RIRLAB_PLUGINS", "my_models")
    assert catalog.listing("models", "not.imported.registry", lambda: ["live"]) == ["live"]


def test_an_edited_file_changes_the_hash(tmp_path, monkeypatch):
    """The hash covers the package's files: a copy of the package with one model file changed hashes differently."""
    import shutil

    copy = tmp_path / "rirlab"
    shutil.copytree(REPO / "rirlab", copy, ignore=shutil.ignore_patterns("__pycache__"))
    fake = copy / "cli" / "catalog.py"
    monkeypatch.setattr(catalog, "__file__", str(fake))
    before = catalog.source_hash()
    (copy / "models" / "rir_grc.py").write_text((copy / "models" / "rir_grc.py").read_text() + "\n# edited\n")
    assert catalog.source_hash() != before


def test_data_dir_now_is_the_tasks_own(monkeypatch, tmp_path):
    from rirlab.tasks.text import data_root

    for value in (str(tmp_path / "d"), "~/somewhere", None):
        if value is None:
            monkeypatch.delenv("RIRLAB_DATA", raising=False)
        else:
            monkeypatch.setenv("RIRLAB_DATA", value)
        assert catalog.data_root_now() == data_root(None)
