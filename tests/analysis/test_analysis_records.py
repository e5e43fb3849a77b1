"""`rirlab tables|plot|importance --records FILE`: a sweep read back from `rirlab export` files prints what its
MLflow store printed, after the store is gone, and seeds of one row exported from several stores fill one cell."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.analysis.test_analysis import ABL_RUNS, ABL_SPEC, GOLDEN_RUNS, GOLDEN_SPEC, _check_png
from tests.helpers.analysis_store import make_sweep
from tests.helpers.cli import invoke as cli


def _export(uri, experiment, out, *args):
    r = cli("export", "--experiment", experiment, "--tracking-uri", uri, "--out", out, *args)
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The golden and ablation sweeps, their tables and curves printed from the store, then exported and the store
    deleted."""
    root = tmp_path_factory.mktemp("records")
    out = {}
    for name, spec_d, runs in (("golden", GOLDEN_SPEC, GOLDEN_RUNS), ("abl", ABL_SPEC, ABL_RUNS)):
        store = root / name
        store.mkdir()
        uri, spec = make_sweep(store, spec_d, runs)
        args = ["--reference", "rir", "--stat", "mean"] if name == "abl" else []
        table = cli("tables", spec, "--tracking-uri", uri, *args)
        assert table.exit_code == 0, table.output
        path = _export(uri, spec_d["name"], root / f"{name}.parquet")
        kept = root / f"{name}.yaml"
        shutil.copy(spec, kept)
        shutil.rmtree(store)  # the store and its artifacts are gone: only the files remain
        out[name] = (kept, path, table.stdout, args)
    return out


@pytest.mark.parametrize("name", ["golden", "abl"])
def test_records_print_the_stores_table_after_the_store_is_gone(exported, name):
    spec, path, table, args = exported[name]
    r = cli("tables", spec, "--records", path, *args)
    assert r.exit_code == 0, r.output
    assert r.stdout == table  # cells, footer (the sweep's id, spec hash, date, status), failures: all the same
    assert "sweep " in r.stdout and ("55.00 ± 7.07" in r.stdout or "93.00 ± 3.61" in r.stdout)


def test_records_of_another_experiment_beside_them_are_not_read(exported):
    spec, path, table, _ = exported["golden"]
    r = cli("tables", spec, "--records", path, "--records", exported["abl"][1])
    assert r.exit_code == 0 and r.stdout == table, r.output


def test_records_draw_curves_from_the_history_file(exported, tmp_path):
    spec, path, _, _ = exported["golden"]
    r = cli("plot", "curves", spec, "--records", path, "--metric", "dev/accuracy", "--out", tmp_path / "c.png")
    assert r.exit_code == 0 and "(3 configurations)" in r.output, r.output
    _check_png(tmp_path / "c.png")
    r = cli("plot", "pareto", spec, "--records", path, "--out", tmp_path / "p.png")
    assert r.exit_code == 0 and "(3 configurations)" in r.output, r.output
    # without its history file the runs file still makes tables, but has no curve to draw
    bare = tmp_path / "bare.parquet"
    shutil.copy(path, bare)
    r = cli("plot", "curves", spec, "--records", bare, "--metric", "dev/accuracy", "--out", tmp_path / "d.png")
    assert r.exit_code == 2 and "no history file" in r.output and "bare.history.parquet" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("evaluator", ["mdi", "fanova"])
def test_records_rank_parameters_as_the_store_did(tmp_path, evaluator):
    """The seeded forests of MDI and fANOVA depend on the order of their rows: the store's search order and the
    export's gave 0.515 and 0.533 for one parameter before the runs were put in one order."""
    uri, spec = make_sweep(tmp_path, GOLDEN_SPEC, GOLDEN_RUNS)
    store = cli("importance", spec, "--tracking-uri", uri, "--evaluator", evaluator)
    assert store.exit_code == 0, store.output
    r = cli("importance", spec, "--records", _export(uri, "golden", tmp_path / "g.parquet"), "--evaluator", evaluator)
    assert r.exit_code == 0 and r.stdout == store.stdout, (store.output, r.output)


def test_seeds_exported_from_two_stores_fill_one_cell(tmp_path):
    """The case of a row whose seeds ran on machines that were lost one after another: each sweep exported from its
    own store; read together they give the cells of all seeds, as one store holding both would."""
    both = tmp_path / "both"
    both.mkdir()
    uri, spec = make_sweep(both, GOLDEN_SPEC, GOLDEN_RUNS)
    whole = cli("tables", spec, "--tracking-uri", uri)
    files = []
    for seed in (0, 1):
        store = tmp_path / f"seed{seed}"
        store.mkdir()
        part_uri, _ = make_sweep(store, GOLDEN_SPEC, [r for r in GOLDEN_RUNS if r["swept"]["seed"] == seed])
        files += ["--records", _export(part_uri, "golden", tmp_path / f"seed{seed}.parquet")]
    r = cli("tables", spec, *files)
    assert r.exit_code == 0, r.output
    cells = lambda text: [line for line in text.splitlines() if line.startswith("| chunk")]  # noqa: E731
    assert cells(r.stdout) == cells(whole.stdout) and "55.00 ± 7.07" in r.stdout  # seeds 0 and 1 of one cell
    assert r.stdout.count("\nsweep ") == 2  # the footer names both sweeps
    one = cli("tables", spec, *files[2:], "--run", _parents(tmp_path / "seed1.parquet")[0])
    assert one.exit_code == 0 and "chunk 10, beam 5 | 60.00 (n=1)" in one.stdout, one.output


def _parents(path) -> list:
    import json

    return [s["run_id"] for s in json.loads(pq.read_schema(path).metadata[b"rirlab.sweeps"])["sweeps"]]


def test_bad_records_are_one_line_and_exit_2(exported, tmp_path):
    spec, path, _, _ = exported["golden"]
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("not a parquet file\n")
    old = tmp_path / "old.parquet"  # an export from before the sweeps were recorded in it
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({k: v for k, v in table.schema.metadata.items()
                                                  if k != b"rirlab.sweeps"}), old)
    cases = [(["--records", tmp_path / "none.parquet"], "no records file"),
             (["--records", not_parquet], "is not a readable Parquet file"),
             (["--records", old], "has no record of its sweeps"),
             (["--records", path, "--tracking-uri", "sqlite:///x.db"], "drop --tracking-uri"),
             (["--records", path, "--run", "0" * 32], "is not a sweep of 'golden' in the records file"),
             (["--records", path, "--experiment", "abl"], "not 'abl'")]
    for args, words in cases:
        r = cli("tables", *([] if "--experiment" in args else [spec]), *args)
        assert r.exit_code == 2 and words in r.output, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "x.db").exists()


def test_damaged_records_are_one_line_naming_what_is_wrong(exported, tmp_path):
    """Wrong sweeps metadata, a metric column of strings, a swept value that is not JSON: four tracebacks before;
    an infinite metric, a cell reading "inf"."""
    import json

    import pyarrow as pa

    spec, path, _, _ = exported["golden"]
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    metric = next(c for c in table.column_names if c.startswith("metric."))
    swept = table.column_names.index("swept")
    damaged = {
        "meta_list": (table.replace_schema_metadata({**meta, b"rirlab.sweeps": json.dumps({"sweeps": [1]})}),
                      "has no record of its sweeps"),
        "meta_text": (table.replace_schema_metadata({**meta, b"rirlab.sweeps": b'{"sweeps": "x"}'}),
                      "has no record of its sweeps"),
        "metric": (table.set_column(table.column_names.index(metric), metric,
                                    pa.array(["x"] * len(table))), f"column {metric} holds values that are not numbers"),
        "swept": (table.set_column(swept, "swept", pa.array(["{not json"] * len(table))),
                  "column swept holds a value that is not a JSON object"),
        # issue 53 item 8: an infinite metric printed as a table cell ("inf")
        "inf": (table.set_column(table.column_names.index(metric), metric,
                                 pa.array([float("inf")] + table.column(metric).to_pylist()[1:], pa.float64())),
                f"column {metric} holds an infinite value")}
    for name, (bad, words) in damaged.items():
        pq.write_table(bad, tmp_path / f"{name}.parquet")
        r = cli("tables", spec, "--records", tmp_path / f"{name}.parquet")
        assert r.exit_code == 2 and words in r.output, (name, r.output[-2000:])
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_export_records_the_device_and_every_sweep(exported):
    _, path, _, _ = exported["golden"]
    t = pq.read_table(path)
    assert t.schema.field("device").type == pa.string()
    assert len(_parents(path)) == 1 and set(t.column("parent_id").to_pylist()) == set(_parents(path))


def _texts(path) -> str:
    """Every string a records file holds (schema metadata and string columns, its history file's too), one text."""
    parts = []
    for p in (path, path.with_name(path.stem + ".history.parquet")):
        t = pq.read_table(p)
        parts += [v.decode() for v in (t.schema.metadata or {}).values()]
        parts += [str(v) for c in t.columns if pa.types.is_string(c.type) for v in c.to_pylist() if v is not None]
    return "\n".join(parts)


def test_redacted_records_hold_no_local_path_and_print_the_same_table(tmp_path):
    import copy

    from mlflow.tracking import MlflowClient

    from rirlab import contract

    store = tmp_path / "store"
    store.mkdir()
    runs = copy.deepcopy(GOLDEN_RUNS)
    runs[0]["params"] = {"cache_dir": str(tmp_path / "cache" / "logic")}
    runs[-1]["reason"] = f'Traceback:\n  File "{tmp_path}/rirlab/train.py", line 3\nRuntimeError: boom'
    uri, spec = make_sweep(store, GOLDEN_SPEC, runs)
    client = MlflowClient(uri)
    pid = next(r.info.run_id for r in client.search_runs([client.get_experiment_by_name("golden").experiment_id])
               if contract.is_parent(r.data.tags))
    client.set_tag(pid, contract.TUNE_PATH, str(tmp_path / "runs" / "golden-0a1b2c"))
    client.set_tag(pid, "mlflow.user", "alice")
    table = cli("tables", spec, "--tracking-uri", uri)
    plain = _texts(_export(uri, "golden", tmp_path / "plain.parquet"))
    public = _export(uri, "golden", tmp_path / "public.parquet", "--redact")
    shutil.rmtree(store / "mlartifacts")
    (store / "mlruns.db").unlink()

    text = _texts(public)
    assert str(tmp_path) in plain and "alice" in plain  # without --redact: the store, the folders, the user
    assert str(tmp_path) not in text and "/cache/" not in text and "alice" not in text
    # what stays: each path's last component, the store's file name, the error
    for kept in ("golden-0a1b2c", "sqlite:///mlruns.db", '"train.py", line 3', "RuntimeError: boom"):
        assert kept in text, kept
    assert pq.read_table(public).column("param.cache_dir").to_pylist()[0] == "logic"
    assert pq.read_schema(public).metadata[b"rirlab.redacted"] == b"paths"
    r = cli("tables", spec, "--records", public)
    assert r.exit_code == 0 and r.stdout == table.stdout, r.output


@pytest.mark.parametrize("text, public", [
    ("/home/me/runs/sweep-1", "sweep-1"), ("sqlite:////home/me/results.db", "sqlite:///results.db"),
    ("file:///home/me/mlruns", "file:///mlruns"), ("~/data/logic/test10", "test10"),
    ('File "/srv/rirlab/train.py", line 3', 'File "train.py", line 3'),
    ("postgresql://me:secret@db.lab:5432/mlflow", "postgresql://me:***@db.lab:5432/mlflow"),
    ("http://mlflow.lab:5000/api/2.0", "http://mlflow.lab:5000/api/2.0"),  # a URL is not a local path
    ("search_spaces/ebt_table4_logic.yaml", "search_spaces/ebt_table4_logic.yaml"), ("1/2", "1/2")])
def test_redact_path_cuts_local_folders_only(text, public):
    from rirlab.redact import redact_path

    assert redact_path(text) == public


def test_every_export_masks_the_stores_password(tmp_path):
    """A server store's URI is recorded in the runs file; its password is not, with or without --redact."""
    from mlflow.tracking import MlflowClient

    from rirlab.analysis.export import export_runs

    store = tmp_path / "store"
    store.mkdir()
    uri, _ = make_sweep(store, GOLDEN_SPEC, GOLDEN_RUNS)

    class ServerClient:  # the sqlite store's runs, behind a URI with credentials (a tracking server's)
        tracking_uri = "http://alice:s3cret@mlflow.lab:5000"

        def __getattr__(self, name):
            return getattr(MlflowClient(uri), name)

    for redact in (False, True):
        out = tmp_path / f"runs{redact}.parquet"
        export_runs(ServerClient(), "golden", out, history=False, redact=redact)
        assert pq.read_schema(out).metadata[b"rirlab.tracking_uri"] == b"http://alice:***@mlflow.lab:5000"


# ---------------------------------------------------------------- issue 52 items 1-2: the pair of files of an export

@pytest.fixture(scope="module")
def golden_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    return make_sweep(root, GOLDEN_SPEC, GOLDEN_RUNS)


def _bytes(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_an_export_stopped_by_a_full_disk_leaves_the_files_it_would_replace(golden_store, tmp_path, monkeypatch):
    """A full disk while the history was written left the new runs file and no history file (exit 2, one line)."""
    import errno

    uri, _ = golden_store
    _export(uri, "golden", tmp_path / "g.parquet", "--redact")  # the files differ from those of the export below
    before = _bytes(tmp_path)
    write = pq.write_table

    def full_at_the_history(table, where, *args, **kwargs):
        if "history" in str(where):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", full_at_the_history)
    r = cli("export", "--experiment", "golden", "--tracking-uri", uri, "--out", tmp_path / "g.parquet")
    assert r.exit_code == 2 and "No space left on device" in r.stderr and r.stderr.count("\n") == 1, r.output
    assert _bytes(tmp_path) == before  # the old pair, whole; no temporary file left beside it


def test_a_runs_file_beside_another_exports_history_is_refused(golden_store, exported, tmp_path):
    """A kill between the two files' renames (or a copy of one file alone) left a new runs file beside an old history
    file, which `plot curves --records` drew without a word; the history of an export with --no-history is none."""
    uri, _ = golden_store
    spec = exported["golden"][0]
    for name in ("a", "b"):
        _export(uri, "golden", tmp_path / f"{name}.parquet")
    shutil.copy(tmp_path / "b.history.parquet", tmp_path / "a.history.parquet")  # b's history, a's runs
    for cmd in (["tables"], ["plot", "curves"]):
        args = ["--out", tmp_path / "c.png"] if cmd[0] == "plot" else []
        r = cli(*cmd, spec, "--records", tmp_path / "a.parquet", *args)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert f"{tmp_path / 'a.history.parquet'} is not the history of {tmp_path / 'a.parquet'}" in r.stderr
    assert not (tmp_path / "c.png").exists()
    _export(uri, "golden", tmp_path / "b.parquet", "--no-history")  # b.history.parquet: the earlier export's
    r = cli("plot", "curves", spec, "--records", tmp_path / "b.parquet", "--out", tmp_path / "c.png")
    assert r.exit_code == 2 and "b.parquet was exported with --no-history" in r.stderr, r.output
    assert cli("tables", spec, "--records", tmp_path / "b.parquet").exit_code == 0


def test_an_out_that_is_a_records_file_is_refused(exported):
    spec, path, _, _ = exported["golden"]
    before = _bytes(path.parent)
    for out in (path, path.with_name(path.stem + ".history.parquet")):
        r = cli("tables", spec, "--records", path, "--out", out)
        assert r.exit_code == 2 and r.stderr.startswith(f"error: --out {out} is the ") and "records file" in r.stderr
        assert r.stderr.count("\n") == 1, r.stderr
    assert _bytes(path.parent) == before


def test_a_record_carries_each_splits_size_and_reprints_the_intervals(tmp_path):
    """Issue 49 item 4: the trials' ``<split>/examples`` travel in the export, so --records prints the intervals the
    store gave (a one-seed cell: its split's binomial interval, 70% on 500 examples: ±1.96 x 2.05)."""
    runs = [{**r, "metrics": {**r.get("metrics", {}), "a/examples": 500.0}} for r in GOLDEN_RUNS]
    (tmp_path / "s").mkdir()
    uri, spec = make_sweep(tmp_path / "s", GOLDEN_SPEC, runs)
    store = cli("tables", spec, "--tracking-uri", uri)
    path = _export(uri, GOLDEN_SPEC["name"], tmp_path / "r.parquet")
    (tmp_path / "s" / "mlruns.db").unlink()
    r = cli("tables", spec, "--records", path)
    assert r.exit_code == 0 and r.stdout == store.stdout, r.output
    assert "| chunk 30, beam 5 | 70.00 [65.98, 74.02] (n=1) | 80.00 (n=1) |" in r.stdout
    assert "N, test examples a cell's accuracy is computed on: a: 500\n" in r.stdout and "N not recorded (b)" in r.stdout
