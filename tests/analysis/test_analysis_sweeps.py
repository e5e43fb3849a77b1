"""Which sweep a table shows (issue 17 item 6), `rirlab runs` (the sweeps of a spec), and the read-only commands'
handling of a missing store and an unwritable --out (issue 18): one line, exit 2, no empty mlruns.db created; an
--out that is the store, its artifacts or the spec is refused the same way, nothing written (issue 52 item 1)."""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from rirlab import contract
from tests.helpers.analysis_store import make_sweep
from tests.helpers.cli import invoke as cli

SPEC = {"name": "two", "task": "listops", "model": "rir_ebt_grc",
        "search": {"chunk_size": {"grid": [10, 30]}}, "seeds": 3}


def _run(chunk, seed, acc, status="FINISHED"):
    return {"swept": {"chunk_size": chunk, "seed": seed}, "status": status,
            "metrics": {"test/accuracy": acc, "dev/accuracy": acc, "time_per_step_ms": 5.0 * chunk,
                        "peak_mem_mb": 10.0 + chunk}}


def add_sweep(uri, experiment, runs, quick=True, overrides=None, seeds=1):
    """A second sweep (parent + children) in an existing experiment, as `rirlab sweep --quick --set ...` records."""
    client = MlflowClient(uri)
    exp_id = client.get_experiment_by_name(experiment).experiment_id
    tags = {contract.SWEEP_TAG: contract.PARENT, contract.SPEC_HASH: "q" * 12, contract.QUICK: str(quick),
            contract.OVERRIDES: json.dumps(overrides or {}), contract.SEEDS: str(seeds), contract.METRIC: "dev/accuracy"}
    pid = client.create_run(exp_id, run_name="second", tags=tags).info.run_id
    for r in runs:
        trial = contract.TrialRecord.of(r["swept"], {})
        rid = client.create_run(exp_id, run_name=trial.name, tags={contract.PARENT_RUN_ID: pid, **trial.tags("k")}).info.run_id
        client.log_param(rid, "batch_size", 32)
        client.log_batch(rid, metrics=[Metric(k, float(v), int(time.time() * 1000), 100) for k, v in r["metrics"].items()])
        client.set_terminated(rid, r["status"])
    client.set_terminated(pid, "FINISHED")
    return pid


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """A full sweep (3 seeds), then a later quick one with --set (1 seed, one failed trial)."""
    root = tmp_path_factory.mktemp("two")
    full = [_run(c, s, 80 + c / 10 + s) for c in (10, 30) for s in range(3)]
    uri, spec = make_sweep(root, SPEC, full)
    time.sleep(0.01)
    quick = add_sweep(uri, "two", [_run(10, 0, 40.0), _run(30, 0, 45.5), _run(30, 1, 0, status="FAILED")],
                      overrides={"steps": 5})
    first = [r for r in MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("two").experiment_id],
                                                      filter_string=contract.parent_filter()) if r.info.run_id != quick]
    return uri, spec, root, first[0].info.run_id, quick


def test_table_names_its_sweep_and_says_there_are_others(two):
    uri, spec, _, full, quick = two
    r = cli("tables", spec, "--tracking-uri", uri)
    assert r.exit_code == 0, r.output
    assert f"sweep {quick} (spec hash qqqqqqqqqqqq, quick, --set steps=5, " in r.stdout
    assert "'two' has 2 sweeps; this is the latest" in r.stderr and "--latest-full" in r.stderr
    assert "| chunk 10 | 40.00 (n=1) |" in r.stdout and "± 0" not in r.stdout  # one seed: n, not ± 0


def test_latest_full_and_run_pick_a_sweep(two):
    uri, spec, _, full, quick = two
    r = cli("tables", spec, "--tracking-uri", uri, "--latest-full")
    assert r.exit_code == 0, r.output
    assert f"sweep {full} (spec hash 000000000000, full, " in r.stdout and "| chunk 10 | 82.00 ± 1.00 [79.52, 84.48] |" in r.stdout
    assert "2 sweeps" not in r.stderr
    r = cli("tables", spec, "--tracking-uri", uri, "--run", quick)
    assert r.exit_code == 0 and f"sweep {quick}" in r.stdout
    bad = cli("tables", spec, "--tracking-uri", uri, "--run", "0123abc")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "is not a sweep of 'two'" in bad.stderr


def test_latest_full_when_every_sweep_is_quick(tmp_path):
    uri, spec = make_sweep(tmp_path, {**SPEC, "name": "q"}, [_run(10, 0, 50)])
    MlflowClient(uri).set_tag(MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name("q").experiment_id], contract.parent_filter())[0].info.run_id,
        contract.QUICK, "True")
    r = cli("tables", spec, "--tracking-uri", uri, "--latest-full")
    assert r.exit_code == 2 and "has no full sweep" in r.stderr


def test_runs_lists_every_sweep_newest_first(two):
    uri, spec, _, full, quick = two
    r = cli("runs", spec, "--tracking-uri", uri)
    assert r.exit_code == 0, r.output
    rows = [line for line in r.stdout.splitlines() if line.startswith(f"| {quick}") or line.startswith(f"| {full}")]
    assert rows[0].startswith(f"| {quick} |") and rows[1].startswith(f"| {full} |")
    assert "| quick, --set steps=5 | qqqqqqqqqqqq | FINISHED | 2 | 0 | 1 | 0 | dev/accuracy 45.50 (chunk_size=30,seed=0) |" \
        in rows[0]
    assert "| full | 000000000000 | FINISHED | 6 | 0 | 0 | 0 | dev/accuracy 85.00 (chunk_size=30,seed=2) |" in rows[1]
    csv = cli("runs", "--experiment", "two", "--tracking-uri", uri, "--format", "csv")
    assert csv.exit_code == 0 and csv.stdout.startswith("parent_run,date,profile,spec_hash,status,finished,stopped_early,failed")


def test_row_labels_round_swept_values(tmp_path):
    spec = {"name": "lr", "task": "listops", "model": "rir_ebt_grc", "algorithm": "random", "num_samples": 2,
            "search": {"lr": {"loguniform": [1e-5, 1e-2]}}}
    runs = [{"swept": {"lr": lr, "seed": 0}, "metrics": {"test/accuracy": 50}} for lr in (0.000123456789, 0.00123449)]
    uri, path = make_sweep(tmp_path, spec, runs)
    r = cli("tables", path, "--tracking-uri", uri)
    assert r.exit_code == 0, r.output
    assert "| lr 0.0001235 |" in r.stdout and "| lr 0.001234 |" in r.stdout


# ---------------------------------------------------------------- issue 18: missing store, unwritable --out

@pytest.mark.parametrize("args", [["tables", "--experiment", "x"], ["runs", "--experiment", "x"],
                                  ["export", "--experiment", "x", "--out", "o.parquet"],
                                  ["plot", "pareto", "--experiment", "x", "--out", "p.png"],
                                  ["plot", "curves", "--experiment", "x", "--out", "c.png"]])
def test_no_store_is_one_line_and_creates_nothing(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = cli(*args)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: no MLflow store at ") and r.stderr.count("\n") == 1, r.stderr
    assert str(tmp_path / "mlruns.db") in r.stderr
    assert not (tmp_path / "mlruns.db").exists() and not (tmp_path / "mlartifacts").exists()


def test_tables_of_a_spec_without_a_store_print_the_layout_and_create_nothing(tmp_path, monkeypatch, two):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = cli("tables", two[1], "--reference", "rir:table5")
    assert r.exit_code == 0, r.output
    assert "| chunk 30 |" in r.stdout and "no MLflow store at" in r.stderr
    assert not (tmp_path / "mlruns.db").exists()


@pytest.mark.parametrize("cmd", [["tables", "SPEC"], ["plot", "pareto", "SPEC"], ["plot", "curves", "SPEC"],
                                 ["export", "--experiment", "two"]])
@pytest.mark.parametrize("where", ["file/x.out", "missing/x.out", "."])
def test_unwritable_out_is_one_line(cmd, where, two, tmp_path):
    uri, spec, *_ = two
    (tmp_path / "file").write_text("a file, not a directory")
    out = tmp_path / where
    args = [spec if a == "SPEC" else a for a in cmd] + ["--tracking-uri", uri, "--out", out]
    r = cli(*args)
    if cmd[0] == "export" and where == "missing/x.out":  # export creates the folders of its output
        assert r.exit_code == 0 and out.is_file(), r.output
        return
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    if where == ".":  # click's own check of a dir_okay=False path: its usage message
        assert "is a directory" in r.stderr
        return
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "--out" in r.stderr, r.stderr


def _files(root):
    """Every file under ROOT with the hash of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("cmd, target", [
    *[(cmd, "mlruns.db") for cmd in (["plot", "curves", "SPEC"], ["importance", "SPEC"],
                                     ["export", "--experiment", "two"])],
    *[(["tables", "SPEC"], target) for target in ("mlruns.db", "absolute", "symlink", "hardlink", "mlruns.db-journal",
                                                  "mlartifacts/two/x.out", "two.yaml")]])
def test_an_out_that_is_the_store_its_artifacts_or_the_spec_is_refused_in_one_line(cmd, target, two, tmp_path,
                                                                                    monkeypatch):
    """`rirlab export --experiment E --out mlruns.db` turned the default store into a Parquet file (every run gone),
    `tables SPEC --out mlruns.db` into text, `tables s.yaml --out s.yaml` overwrote the spec."""
    _, spec, root, *_ = two
    monkeypatch.chdir(root)  # the default store, ./mlruns.db: no --tracking-uri, as in the issue
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = {"absolute": root / "mlruns.db", "symlink": tmp_path / "store.db",
           "hardlink": tmp_path / "store.db"}.get(target, target)
    if target in ("symlink", "hardlink"):
        (os.symlink if target == "symlink" else os.link)(root / "mlruns.db", out)
    before = _files(root)
    r = cli(*[spec if a == "SPEC" else a for a in cmd], "--out", out)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"error: --out {out} is ") and r.stderr.count("\n") == 1, r.stderr
    assert ("the spec" if target == "two.yaml" else "MLflow store") in r.stderr and "choose another" in r.stderr
    assert _files(root) == before


def test_several_runs_read_as_one_table(tmp_path):
    """A row or a seed per sweep (each sweep pinned to its own core, as the results pages' trials run): `--run A
    --run B` lays out the spec's rows once, each cell over the seeds of both sweeps, and names both sweeps."""
    uri, spec = make_sweep(tmp_path, {**SPEC, "name": "split"}, [_run(10, 0, 80.0), _run(30, 0, 70.0)])
    client = MlflowClient(uri)
    (a,) = [r.info.run_id for r in client.search_runs([client.get_experiment_by_name("split").experiment_id],
                                                       filter_string=contract.parent_filter())]
    time.sleep(0.01)
    b = add_sweep(uri, "split", [_run(10, 1, 84.0)], quick=False, overrides={"seed": 1})
    r = cli("tables", spec, "--tracking-uri", uri, "--run", a, "--run", b)
    assert r.exit_code == 0, r.output
    assert "| chunk 10 | 82.00 ± 2.83 [56.59, 107.41] (n=2) |" in r.stdout, r.stdout  # both sweeps' seeds in one cell
    assert "| chunk 30 | 70.00 (n=1) |" in r.stdout
    assert f"sweep {a} (" in r.stdout and f"sweep {b} (" in r.stdout and "--set seed=1" in r.stdout
    assert "3 finished runs" in r.stdout
    alone = cli("tables", spec, "--tracking-uri", uri, "--run", b)
    assert alone.exit_code == 0 and "| chunk 10 | 84.00 (n=1) |" in alone.stdout and f"sweep {a}" not in alone.stdout
    png = tmp_path / "c.png"
    drawn = cli("plot", "curves", spec, "--tracking-uri", uri, "--run", a, "--run", b, "--metric", "dev/accuracy",
                "--out", png)
    assert drawn.exit_code == 0 and "(2 configurations)" in drawn.stdout and png.stat().st_size > 0, drawn.output
    bad = cli("tables", spec, "--tracking-uri", uri, "--run", a, "--run", "0123abc")
    assert bad.exit_code == 2 and "is not a sweep of 'split'" in bad.stderr
