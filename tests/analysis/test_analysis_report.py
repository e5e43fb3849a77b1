"""The parent run's report (issue 17 item 8, the analysis part): ``rirlab.analysis.report.log_parent_report`` logs the
sweep's table (Markdown + CSV) and its Pareto plot to the parent run, and never raises, also for a sweep with
failed trials, one whose trials all failed, and one whose runs logged a single metric."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from rirlab.analysis.report import log_parent_report
from rirlab import contract
from tests.helpers.analysis_store import make_sweep

SPEC = {"name": "rep", "task": "listops", "model": "rir_ebt_grc", "search": {"chunk_size": {"grid": [10, 30]}},
        "seeds": 2}


def _run(chunk, seed, acc=None, status="FINISHED", only_dev=False):
    if acc is None:
        metrics = {}
    elif only_dev:
        metrics = {"dev/accuracy": acc}
    else:
        metrics = {"test/accuracy": acc, "len_200_300/accuracy": acc - 10, "dev/accuracy": acc,
                   "time_per_step_ms": 40.0 * chunk, "peak_mem_mb": 10.0 * chunk}
    return {"swept": {"chunk_size": chunk, "seed": seed}, "metrics": metrics, "status": status,
            "reason": "RuntimeError: boom" if status == "FAILED" else None}


def _parent(uri, name):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    return client, client.search_runs([exp.experiment_id], contract.parent_filter())[0].info.run_id


def _artifacts(client, run_id):
    return sorted(f.path for f in client.list_artifacts(run_id, "report"))


def _text(client, run_id, path, tmp):
    return Path(client.download_artifacts(run_id, path, str(tmp))).read_text()


def test_report_with_a_failed_trial(tmp_path):
    runs = [_run(10, 0, 60), _run(10, 1, 62), _run(30, 0, 80), _run(30, 1, status="FAILED")]
    uri, _ = make_sweep(tmp_path, SPEC, runs)
    client, pid = _parent(uri, "rep")
    log_parent_report(uri, pid)
    assert _artifacts(client, pid) == ["report/pareto.png", "report/table.csv", "report/table.md"]
    md = _text(client, pid, "report/table.md", tmp_path / "a")
    assert "| chunk 10 | 61.00 ± 1.41 [48.29, 73.71] |" in md and "| chunk 30 | 80.00 (n=1) |" in md
    assert f"sweep {pid} (" in md and "3 finished runs; 1 failed" in md
    csv = _text(client, pid, "report/table.csv", tmp_path / "b")
    assert csv.splitlines()[0].startswith("configuration,kind,") and "chunk 30,ours,test,near-IID,1,80.0," in csv
    png = Path(client.download_artifacts(pid, "report/pareto.png", str(tmp_path / "c"))).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "3 finished runs; 1 failed; 0 stopped early (not counted)  \n" in md  # footer: a line each in Markdown


def test_the_parent_opens_on_its_description_best_trial_table_and_pareto_plot(tmp_path):
    """Issue 54 item 2: the parent's note (its page's description, Markdown) is the report, under the description."""
    uri, _ = make_sweep(tmp_path, SPEC, [_run(10, 0, 60), _run(30, 0, 80)])
    client, pid = _parent(uri, "rep")
    best = client.search_runs([client.get_run(pid).info.experiment_id], "attributes.run_name = 'chunk_size=30,seed=0'")[0]
    client.set_tag(pid, contract.NOTE, "Chunk sizes of RIR-EBT-GRC.")
    client.set_tag(pid, contract.BEST_TRIAL, "chunk_size=30,seed=0")
    client.set_tag(pid, contract.BEST_RUN_ID, best.info.run_id)
    client.log_metric(pid, contract.BEST_PREFIX + "dev/accuracy", 80.0)
    for _ in range(2):  # a second report (a resumed sweep) replaces the first, under the same description
        log_parent_report(uri, pid)
    note = client.get_run(pid).data.tags[contract.NOTE]
    assert note.startswith("Chunk sizes of RIR-EBT-GRC.\n") and note.count("<!-- rirlab report -->") == 1, note
    assert f"**Best trial**: [chunk_size=30,seed=0](#/experiments/" in note and "dev/accuracy 80.00" in note
    assert "| chunk 30 | 80.00 (n=1) |" in note and "2 finished runs; 0 failed" in note
    assert f"![Pareto plot](get-artifact?path=report/pareto.png&run_uuid={pid})" in note


def test_report_when_every_trial_failed(tmp_path, capsys):
    uri, _ = make_sweep(tmp_path, {**SPEC, "name": "dead"}, [_run(10, 0, status="FAILED"), _run(30, 0, status="FAILED")])
    client, pid = _parent(uri, "dead")
    log_parent_report(uri, pid)  # no exception
    assert _artifacts(client, pid) == ["report/pareto.txt", "report/table.csv", "report/table.md"]
    assert "0 finished runs; 2 failed" in _text(client, pid, "report/table.md", tmp_path / "a")
    assert "no Pareto plot: no finished runs" in _text(client, pid, "report/pareto.txt", tmp_path / "b")


def test_report_of_a_sweep_with_one_metric(tmp_path):
    uri, _ = make_sweep(tmp_path, {**SPEC, "name": "one"}, [_run(10, 0, 50, only_dev=True), _run(30, 0, 70, only_dev=True)],
                        splits=None)
    client, pid = _parent(uri, "one")
    log_parent_report(uri, pid)
    assert _artifacts(client, pid) == ["report/pareto.txt", "report/table.csv", "report/table.md"]
    assert "| chunk 30 |" in _text(client, pid, "report/table.md", tmp_path / "a")


def test_report_of_an_unknown_run_warns(tmp_path, capsys):
    uri, _ = make_sweep(tmp_path, {**SPEC, "name": "x"}, [])
    log_parent_report(uri, "0" * 32)
    assert "warning: sweep report: cannot read sweep" in capsys.readouterr().err
