"""`rirlab bench` through the real CLI: the step and table1 protocols write the figures they print."""

from __future__ import annotations

import json

from conftest import run_cli


def test_bench_step_reports_median_and_peak_memory(tmp_path):
    out = tmp_path / "step.json"
    proc = run_cli(["bench", "--protocol", "step", "--batch", "3", "--length", "40", "--repeats", "3", "--warmup", "1",
                    "--set", "hidden_size=16", "--set", "chunk_size=6", "--json", out], cwd=tmp_path, check=True)
    r = json.loads(out.read_text())
    assert r["model"] == "rir_ebt_grc" and r["mode"] == "train" and len(r["times_ms"]) == 3
    assert min(r["times_ms"]) <= r["median_ms"] <= max(r["times_ms"]) and r["median_ms"] > 0
    assert r["peak_mem_mb"] >= 0 and f"median {r['median_ms']:.1f} ms" in proc.stdout
    proc = run_cli(["bench", "--protocol", "step", "--mode", "eval", "--inference", "non_rir", "--batch", "1",
                    "--length", "50", "--repeats", "1", "--set", "hidden_size=16", "--json", out], cwd=tmp_path,
                   check=True)
    r = json.loads(out.read_text())
    assert r["mode"] == "eval" and r["inference"] == "non_rir" and r["median_ms"] > 0


def test_bench_table1_has_the_four_length_bins(tmp_path):
    out = tmp_path / "t1.json"
    run_cli(["bench", "--protocol", "table1", "--models", "rir_ebt_grc,bbt_grc", "--samples", "1",
             "--set", "hidden_size=16", "--json", out], cwd=tmp_path, check=True)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["bin"]) for r in rows] == [(m, b) for m in ("rir_ebt_grc", "bbt_grc")
                                                       for b in ("200-250", "500-600", "900-1000", "1500-2000")]
    assert all(r["minutes"] > 0 and r["samples"] == 1 for r in rows)


def test_bench_refuses_an_unknown_field(tmp_path):
    proc = run_cli(["bench", "--set", "no_such_field=1"], cwd=tmp_path)
    assert proc.returncode == 2 and "no_such_field" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
