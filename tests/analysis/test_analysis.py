"""Analysis layer on real MLflow stores (sqlite, written through MlflowClient like `rirlab sweep` does):
aggregation over seeds, row naming, incomplete cells, paper reference rows, golden Markdown/LaTeX,
Parquet export, plots."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from rirlab.analysis import tables as T
from rirlab.analysis.layouts import ablation_rows
from rirlab.analysis.plots import pareto_front
from rirlab.analysis.runs import load_sweep
from tests.helpers.analysis_store import make_sweep
from tests.helpers.cli import invoke as cli

GOLDEN_SPEC = {"name": "golden", "task": "toy_task", "model": "rir_grc",
               "search": {"chunk_size": {"grid": [10, 30]}, "beam_size": {"grid": [5, 7]}}, "seeds": 2}


def _g(chunk, beam, seed, a=None, b=None, status="FINISHED", reason=None):
    metrics = {} if a is None else {"a/accuracy": a, "b/accuracy": b, "dev/accuracy": a - 1,
                                    "time_per_step_ms": 10.0 * chunk / beam, "peak_mem_mb": 100.0 + chunk * beam}
    hist = {} if a is None else {"dev/accuracy": [(50, a / 2), (100, a - 5)], "train/loss": [(50, 2.0), (100, 1.0 + seed)]}
    return {"swept": {"chunk_size": chunk, "beam_size": beam, "seed": seed}, "metrics": metrics, "history": hist,
            "status": status, "reason": reason}


GOLDEN_RUNS = [_g(10, 5, 0, 50, 40), _g(10, 5, 1, 60, 44), _g(10, 7, 0, 61, 50), _g(10, 7, 1, 65, 50),
               _g(30, 5, 0, 70, 80), _g(30, 5, 1, status="FAILED", reason="Traceback ...\nRuntimeError: boom")]

ABL_SPEC = {"name": "abl", "task": "listops", "model": "rir_ebt_grc", "seeds": 3,
            "variants": [{"name": "RIR-EBT-GRC", "set": {}}, {"name": "\u2212S4D", "set": {"s4d": False}},
                         {"name": "(chunk 10)", "set": {"chunk_size": 10}}]}


def _a(variant, seed, test=None, l2=None, status="FINISHED", early=False):
    metrics = {} if test is None else {"test/accuracy": test, "len_200_300/accuracy": l2 if l2 is not None else test}
    return {"swept": {"variant": variant, "seed": seed}, "metrics": metrics, "status": status, "early_stopped": early}


ABL_RUNS = [_a("RIR-EBT-GRC", 0, 90, 80), _a("RIR-EBT-GRC", 1, 92, 81), _a("RIR-EBT-GRC", 2, 97, 85),
            _a("\u2212S4D", 0, 99), _a("\u2212S4D", 1, 98),
            _a("(chunk 10)", 0, status="FAILED"), _a("(chunk 10)", 0, 10, early=True),
            _a("(chunk 10)", 1, 40), _a("(chunk 10)", 2, 50)]


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    uri, spec = make_sweep(root, GOLDEN_SPEC, GOLDEN_RUNS)
    return uri, spec, root


@pytest.fixture(scope="module")
def abl(tmp_path_factory):
    root = tmp_path_factory.mktemp("abl")
    uri, spec = make_sweep(root, ABL_SPEC, ABL_RUNS)
    return uri, spec, root


GOLDEN_MD = """\
| configuration | a | b |
|:---|---:|---:|
| chunk 10, beam 5 | 55.00 ± 7.07 [−8.53, 118.53] | 42.00 ± 2.83 [16.59, 67.41] |
| chunk 10, beam 7 | 63.00 ± 2.83 [37.59, 88.41] | 50.00 ± 0.00 [50.00, 50.00] |
| chunk 30, beam 5 | 70.00 (n=1) | 80.00 (n=1) |
| chunk 30, beam 7 | — | — |

median ± sample std (ddof 1) over seeds [95% interval of the mean: Student t over the n seeds (n − 1 df) of √(sd²/n + se²); se = the test split's binomial standard error √(p(1 − p)/N) at the mean, the same examples for every seed; one seed: mean ± 1.96 se]
N not recorded (a, b): those intervals count the seeds alone
the spec runs 2 seeds per configuration; a cell of fewer says n=
5 finished runs; 1 failed; 0 stopped early (not counted)
failed: chunk_size=30,beam_size=5,seed=1: RuntimeError: boom
"""

GOLDEN_TEX = r"""\begin{tabular}{lrr}
\toprule
configuration & a & b \\
\midrule
chunk 10, beam 5 & 55.00 $\pm$ 7.07 [$-$8.53, 118.53] & 42.00 $\pm$ 2.83 [16.59, 67.41] \\
chunk 10, beam 7 & 63.00 $\pm$ 2.83 [37.59, 88.41] & 50.00 $\pm$ 0.00 [50.00, 50.00] \\
chunk 30, beam 5 & 70.00 (n=1) & 80.00 (n=1) \\
chunk 30, beam 7 & --- & --- \\
\bottomrule
\end{tabular}
% median $\pm$ sample std (ddof 1) over seeds [95\% interval of the mean: Student t over the n seeds (n $-$ 1 df) of √(sd²/n + se²); se = the test split's binomial standard error √(p(1 $-$ p)/N) at the mean, the same examples for every seed; one seed: mean $\pm$ 1.96 se]
% N not recorded (a, b): those intervals count the seeds alone
% the spec runs 2 seeds per configuration; a cell of fewer says n=
% 5 finished runs; 1 failed; 0 stopped early (not counted)
% failed: chunk\_size=30,beam\_size=5,seed=1: RuntimeError: boom
"""


def test_golden_markdown_and_latex(golden):
    uri, spec, _ = golden
    md = cli("tables", spec, "--tracking-uri", uri)
    assert md.exit_code == 0, md.output
    about = re.compile(r"(% )?sweep [0-9a-f]{32} \(spec hash 0{12}, full, [0-9-]+ [0-9:]+ UTC, FINISHED\)\n")
    assert about.sub("", md.stdout) == GOLDEN_MD and about.search(md.stdout)  # the footer names the sweep
    tex = cli("tables", spec, "--tracking-uri", uri, "--format", "latex")
    assert about.sub("", tex.stdout) == GOLDEN_TEX
    csv = cli("tables", spec, "--tracking-uri", uri, "--format", "csv")
    lines = csv.stdout.splitlines()  # a line per cell, a column per quantity
    assert lines[0] == "configuration,kind,split,column,n,centre,mean,sd,examples,split_se,ci_low,ci_high,ci"
    assert lines[1].startswith("\"chunk 10, beam 5\",ours,a,a,2,55.0,55.0,7.07106781") and lines[1].endswith(",t")
    assert lines[5] == "\"chunk 30, beam 5\",ours,a,a,1,70.0,70.0,,,,,,"  # one seed, no N: no spread, no interval


def test_cells_equal_hand_computed_median_mean_std(abl):
    uri, _, _ = abl
    sw = load_sweep(MlflowClient(uri), "abl")
    assert sw.n_expected == 3 and sw.spec.variants[1].name == "\u2212S4D"
    rows = ablation_rows(sw.spec, list(sw.runs["swept"]))
    assert [r.label for r in rows] == ["RIR-EBT-GRC", "\u2212S4D", "(chunk 10)"]
    done = T.usable(sw.runs)
    med = dict((rc.row.label, rc.cells) for rc in T.row_cells(done, rows, ["test", "len_200_300"], "median", "accuracy"))
    mean = dict((rc.row.label, rc.cells) for rc in T.row_cells(done, rows, ["test", "len_200_300"], "mean", "accuracy"))
    base = med["RIR-EBT-GRC"]["test"]
    assert base.centre == 92.0 and base.n == 3
    assert math.isclose(base.sd, float(np.std([90, 92, 97], ddof=1)), rel_tol=1e-12)  # the sample std (issue 54)
    assert math.isclose(mean["RIR-EBT-GRC"]["test"].centre, 93.0, rel_tol=1e-12)
    assert med["RIR-EBT-GRC"]["len_200_300"].centre == 81.0
    assert (med["\u2212S4D"]["test"].centre, med["\u2212S4D"]["test"].n) == (98.5, 2)
    # the FAILED run and the early-stopped run (test=10) are left out of (chunk 10)
    assert (med["(chunk 10)"]["test"].centre, med["(chunk 10)"]["test"].n) == (45.0, 2)
    assert math.isclose(mean["(chunk 10)"]["test"].sd, math.sqrt(50.0), rel_tol=1e-12)


def test_ablation_with_paper_reference_rows(abl):
    uri, spec, _ = abl
    r = cli("tables", spec, "--tracking-uri", uri, "--reference", "rir")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("| RIR-EBT-GRC |"))
    assert lines[i].startswith("| RIR-EBT-GRC | 92.00 ± 3.61 [84.04, 101.96] | 81.00 ± 2.65 [75.43, 88.57] |")
    untested = "untested: no std published"  # RIR Table 5 prints no std: nothing to test against
    assert lines[i + 1].startswith(f"| paper: RIR-EBT-GRC | 99.72 (Δ \u22127.72; {untested}) | 99.15 (Δ \u221218.15; ")
    s4d = lines.index(next(line for line in lines if line.startswith("| \u2212S4D |")))
    assert "98.50 ± 0.71 [92.15, 104.85] (n=2)" in lines[s4d] and f"99.78 (Δ \u22121.28; {untested})" in lines[s4d + 1]
    c10 = lines.index(next(line for line in lines if line.startswith("| (chunk 10) |")))
    assert "45.00 ± 7.07 [\u221218.53, 108.53] (n=2)" in lines[c10]
    assert lines[c10 + 1].startswith("| paper: (chunk 10) | 89.64 (Δ \u221244.64; ")
    assert "untested cells: no std published" in r.stdout
    assert "7 finished runs; 1 failed; 1 stopped early (not counted)" in r.stdout
    assert "RIR Table 5" in r.stdout


def test_reference_layout_without_any_runs(abl, tmp_path):
    sets = {"RIR-EBT-GRC": {}, "\u2212S4D": {"s4d": False}, "\u2212Beam Align": {"alignment": "string_it"},
            "+Random Align": {"alignment": "random"}, "+RIR inference": {"inference": "rir"}, "beam 5": {"beam_size": 5},
            "chunk 20": {"chunk_size": 20}, "chunk 10": {"chunk_size": 10}}
    names = list(sets)
    spec = {"name": "table5", "task": "listops", "model": "rir_ebt_grc", "seeds": 3,
            "variants": [{"name": n, "set": s} for n, s in sets.items()]}
    import yaml

    path = tmp_path / "t5.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    r = cli("tables", path, "--tracking-uri", abl[0], "--reference", "rir")  # a store without this experiment
    assert r.exit_code == 0, r.output
    body = [line for line in r.stdout.splitlines() if line.startswith("| ")][1:]
    assert [b.split(" | ")[0][2:7] for b in body[1::2]] == ["paper"] * len(names)
    assert [b.split(" | ")[0][2:] for b in body[0::2]] == names
    for value in ("99.72", "98.83", "99.14", "87.53", "99.40", "98.90", "89.64", "61.65", "33.25"):
        assert value in r.stdout
    assert "no runs recorded yet" in r.stdout and "no sweep of 'table5'" in r.stderr


def test_repo_ablation_spec_prints_table5_layout(golden):
    spec = Path(__file__).resolve().parents[2] / "search_spaces" / "rir_ablation.yaml"
    r = cli("tables", spec, "--tracking-uri", golden[0], "--reference", "rir")
    assert r.exit_code == 0, r.output
    assert "| paper" in r.stdout and "99.72" in r.stdout


def test_compare_to_prints_each_rows_difference_from_the_base_row(abl):
    """Issue 49 item 3: --compare-to ROW adds each other row's difference with its interval (Welch where the rows ran
    different seeds); an unknown ROW is one line naming the rows, exit 2."""
    uri, spec, _ = abl
    r = cli("tables", spec, "--tracking-uri", uri, "--compare-to", "RIR-EBT-GRC")
    assert r.exit_code == 0, r.output
    assert "| \u2212S4D \u2212 RIR-EBT-GRC | +5.50 [\u22122.88, 13.88] (welch, p 0.11) |" in r.stdout
    assert "each row's difference from it [95% interval]: paired by seed" in r.stdout
    bad = cli("tables", spec, "--tracking-uri", uri, "--compare-to", "S4D")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "rows: RIR-EBT-GRC; \u2212S4D; (chunk 10)" in bad.stderr


def test_pivot_of_two_swept_axes(golden):
    uri, spec, _ = golden
    r = cli("tables", spec, "--tracking-uri", uri, "--layout", "pivot", "--rows", "chunk_size", "--cols", "beam_size")
    assert r.exit_code == 0, r.output
    assert "| chunk 10 | 55.00 ± 7.07 [\u22128.53, 118.53] | 63.00 ± 2.83 [37.59, 88.41] |" in r.stdout
    assert "| chunk 30 | 70.00 (n=1) | — |" in r.stdout
    assert r.stdout.startswith("| chunk_size / beam_size | beam 5 | beam 7 |")


def test_user_errors_exit_2(golden):
    uri, spec, _ = golden
    assert cli("tables", "--tracking-uri", uri).exit_code == 2
    bad = cli("tables", spec, "--tracking-uri", uri, "--reference", "rri")
    assert bad.exit_code == 2 and "unknown reference 'rri'" in bad.output and "rir" in bad.output
    assert cli("export", "--experiment", "nope", "--tracking-uri", uri, "--out", "x.parquet").exit_code == 2


def test_refused_export_writes_nothing_and_its_run_id_cannot_widen_the_search(golden, tmp_path):
    """`--run "x' OR '1'='1"` was pasted into MLflow's filter string; a refused export created its --out folders."""
    uri, _, _ = golden
    out = tmp_path / "new" / "dir" / "x.parquet"
    r = cli("export", "--experiment", "golden", "--tracking-uri", uri, "--run", "x' OR '1'='1", "--out", out)
    assert r.exit_code == 2 and "is not an MLflow run id" in r.output, r.output
    r = cli("export", "--experiment", "nope", "--tracking-uri", uri, "--out", out)
    assert r.exit_code == 2 and not (tmp_path / "new").exists()


def test_tables_out_on_a_full_disk_leaves_no_truncated_file(golden, tmp_path, monkeypatch):
    import errno
    import pathlib

    uri, spec, _ = golden
    out = tmp_path / "t.md"
    out.write_text("the table of yesterday\n")

    def full_disk(self, text, *a, **k):
        with open(self, "w") as f:
            f.write(text[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    r = cli("tables", spec, "--tracking-uri", uri, "--out", out)
    assert r.exit_code == 2 and "No space left on device" in r.output, r.output
    assert out.read_text() == "the table of yesterday\n" and sorted(p.name for p in tmp_path.iterdir()) == ["t.md"]


def test_parquet_round_trip(golden, tmp_path):
    uri, _, _ = golden
    out = tmp_path / "runs.parquet"
    r = cli("export", "--experiment", "golden", "--tracking-uri", uri, "--out", out)
    assert r.exit_code == 0, r.output
    t = pq.read_table(out)
    assert t.num_rows == len(GOLDEN_RUNS)  # trial runs only, not the sweep's parent
    types = {f.name: str(f.type) for f in t.schema}
    assert types["param.chunk_size"] == "int64" and types["param.lr"] == "double"
    assert types["param.model"] == "string" and types["param.use_flag"] == "bool"
    assert types["metric.a/accuracy"] == "double" and types["start_time"] == "timestamp[ms]"
    df = t.to_pandas()
    assert set(df["status"]) == {"FINISHED", "FAILED"} and df["parent_id"].nunique() == 1
    assert df["failure_reason"].notna().sum() == 1
    for run in GOLDEN_RUNS:
        row = df[df["run_name"] == ",".join(f"{k}={v}" for k, v in run["swept"].items())].iloc[0]
        assert row["param.chunk_size"] == run["swept"]["chunk_size"]
        for k, v in run["metrics"].items():
            assert row[f"metric.{k}"] == v
    h = pq.read_table(tmp_path / "runs.history.parquet").to_pandas()
    assert len(h) == sum(len(run["metrics"]) + sum(len(p) for p in run["history"].values()) for run in GOLDEN_RUNS)
    first = df[df["run_name"] == "chunk_size=10,beam_size=5,seed=0"]["run_id"].iloc[0]
    dev = h[(h["run_id"] == first) & (h["key"] == "dev/accuracy")].sort_values("step")
    assert list(dev["step"]) == [50, 100, 1000] and list(dev["value"]) == [25.0, 45.0, 49.0]


def _check_png(path: Path):
    import matplotlib.image as mpimg

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 300
    assert len(np.unique(img.reshape(-1, img.shape[-1])[::7], axis=0)) > 20  # not a blank or single-colour image


def test_pareto_and_curves_plots(golden, tmp_path):
    uri, spec, _ = golden
    r = cli("plot", "pareto", spec, "--tracking-uri", uri, "--out", tmp_path / "p.png")
    assert r.exit_code == 0, r.output
    assert "(3 configurations)" in r.output
    _check_png(tmp_path / "p.png")
    r = cli("plot", "curves", spec, "--tracking-uri", uri, "--metric", "dev/accuracy", "--out", tmp_path / "c.png")
    assert r.exit_code == 0, r.output
    _check_png(tmp_path / "c.png")
    assert cli("plot", "curves", spec, "--tracking-uri", uri, "--metric", "nope", "--out", tmp_path / "d.png").exit_code == 2


def test_pareto_front():
    pts = [(1.0, 50.0), (2.0, 60.0), (3.0, 55.0), (0.5, 40.0), (2.0, 58.0)]
    assert pareto_front(pts) == [3, 0, 1]


# ---------------------------------------------------------------- the contract and the import boundary

def test_older_parent_without_split_record_prints_split_names(tmp_path):
    uri, spec = make_sweep(tmp_path, {**ABL_SPEC, "name": "abl_old"}, ABL_RUNS[:3], splits=None)
    r = cli("tables", spec, "--tracking-uri", uri)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("| configuration | len_200_300 | test |")  # split names, sorted: no registry needed
    assert "| RIR-EBT-GRC | 81.00 ± 2.65 [75.43, 88.57] | 92.00 ± 3.61 [84.04, 101.96] |" in r.stdout


def test_recorded_split_labels_give_the_columns_and_their_order(tmp_path):
    uri, spec = make_sweep(tmp_path, {**ABL_SPEC, "name": "abl_labels"}, ABL_RUNS[:3],
                           splits=[("len_200_300", "200-300"), ("test", "near-IID")])
    r = cli("tables", spec, "--tracking-uri", uri)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("| configuration | 200-300 | near-IID |")
    assert "| RIR-EBT-GRC | 81.00 ± 2.65 [75.43, 88.57] | 92.00 ± 3.61 [84.04, 101.96] |" in r.stdout
    sw = load_sweep(MlflowClient(uri), "abl_labels")
    assert sw.splits == [("len_200_300", "200-300"), ("test", "near-IID")]


HEAVY = ("torch", "ray", "rirlab.models", "rirlab.tasks", "rirlab.train")  # (--where parses as --set does: rirlab.config)
PROBE = """
import sys
from rirlab.cli import main
try:
    main(sys.argv[1:], prog_name="rirlab")
except SystemExit as stop:
    code = stop.code
print("HEAVY", sorted(m for m in {heavy!r} if m in sys.modules))
sys.exit(code)
"""


@pytest.mark.parametrize("store, args", [("golden", []),
                                         ("golden", ["--layout", "pivot", "--rows", "chunk_size", "--cols", "beam_size"]),
                                         ("abl", ["--format", "latex", "--reference", "rir"])])
def test_rirlab_tables_imports_no_torch(request, store, args):
    """`rirlab tables` reads MLflow through the contract module only: no torch, Ray, model or task registry."""
    import os
    import subprocess
    import sys

    uri, spec, root = request.getfixturevalue(store)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), "tables", str(spec), "--tracking-uri", uri,
                           *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "55.00 ± 7.07" in proc.stdout or "92.00 $\\pm$ 3.61" in proc.stdout  # the table itself printed
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []", proc.stdout[-500:]


def test_analysis_imports_only_the_contract_of_this_project():
    """analysis/ imports, from this project, only the MLflow contract, the torch-free spec schema, trial
    expansion and search-algorithm registry (to lay out a table before any run exists), the error and key-matching helpers and the redaction of
    passwords and paths (`rirlab export --redact`; re only), and the store read below MLflow's client
    (rirlab.store_reads), besides itself."""
    import ast

    allowed = {"rirlab.contract", "rirlab.errors", "rirlab.config", "rirlab.redact", "rirlab.sweeps.spec.schema",
               "rirlab.sweeps.spec.trials", "rirlab.sweeps.algorithms", "rirlab.store_reads"}
    for path in sorted((Path(__file__).resolve().parents[2] / "analysis").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] if node.module not in ("rirlab", "rirlab.sweeps") else \
                    [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in ("sweeps", "rirlab") and not name.startswith("rirlab.analysis"):
                    assert name in allowed, f"{path.name} imports {name}"


def test_analysis_reaches_below_mlflows_client_only_through_store_reads():
    """MLflow's private client attributes are read in one torch-free helper (rirlab.store_reads, which imports
    nothing at module level), listed where rirlab.compat documents the project's pinned MLflow internals."""
    import ast

    import rirlab.compat.mlflow as compat_mlflow
    import rirlab.store_reads as store_reads

    repo = Path(__file__).resolve().parents[2]
    for path in sorted((repo / "analysis").glob("*.py")):
        assert "_tracking_client" not in path.read_text(), f"{path.name}: use rirlab.store_reads"
    tree = ast.parse(Path(store_reads.__file__).read_text())
    imported = {a.name if isinstance(n, ast.Import) else n.module for n in tree.body
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert imported <= {"__future__", "typing"}, imported
    assert "rirlab.store_reads.metric_history_bulk" in " ".join(compat_mlflow.__doc__.split())


def test_the_cli_offers_the_statistics_analysis_computes():
    """The CLI spells --stat's choices and default (it imports analysis only inside commands): they must be
    rirlab.analysis.stats' own."""
    from rirlab.analysis.stats import CIS, CORRECTIONS, DEFAULT_CI, DEFAULT_STAT, STATS
    from rirlab.cli.analysis import CI_CHOICES, CI_DEFAULT, CORRECTION_CHOICES, STAT_CHOICES, STAT_DEFAULT

    assert STAT_CHOICES == STATS and STAT_DEFAULT == DEFAULT_STAT
    assert (CI_CHOICES, CI_DEFAULT, CORRECTION_CHOICES) == (CIS, DEFAULT_CI, CORRECTIONS)


def test_latex_escapes_every_special_character_once():
    """A variant named 'k=$5$ {fast} ~x^2' broke the LaTeX ($ opened math mode); escaping in sequence also escaped
    the $ of its own $\\pm$ again."""
    from rirlab.analysis.tables import latex_escape

    assert latex_escape("k=$5$ {fast} ~x^2 & 50%_a#") == \
        r"k=\$5\$ \{fast\} \textasciitilde{}x\textasciicircum{}2 \& 50\%\_a\#"
    assert latex_escape("55.00 ± 5.00 \\") == r"55.00 $\pm$ 5.00 \textbackslash{}"
