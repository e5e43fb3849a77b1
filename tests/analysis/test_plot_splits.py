"""`rirlab plot splits`: each seed on each test split beside the paper's mean ± std, from the committed records of
the EBT Table 4 logic page (docs/results/ebt_table4_logic.md), whose seeds' cells the page also lists by hand."""

from __future__ import annotations

import pytest

from tests.helpers.cli import REPO, invoke

SPEC = REPO / "search_spaces" / "ebt_table4_logic.yaml"
RECORDS = [REPO / "docs" / "results" / f"ebt_table4_logic_{name}.parquet"
           for name in ("egt_grc_seed1", "egt_grc_seed2", "ebt_grc_seed0")]


def test_each_seed_and_the_paired_paper_row_make_a_panel():
    from rirlab.analysis import tables as T
    from rirlab.analysis.plots import split_panels

    from rirlab.cli.analysis import _sweep

    _, sw = _sweep(str(SPEC), None, None, (), records=[str(r) for r in RECORDS])
    grid = T.ablation(sw.runs, spec=sw.spec, n_expected=sw.n_expected, reference="ebt_nlp:table4_logic",
                      splits=sw.splits)
    panels = {p["label"]: p for p in split_panels(grid)}
    assert sorted(panels) == ["EBT-GRC", "EGT-GRC"]  # the rows with runs; GT-GRC, OM, ... have none
    egt = panels["EGT-GRC"]
    assert egt["columns"] == ["10", "11", "12"]
    assert egt["seeds"]["1"]["10"] == pytest.approx(72.09, abs=0.005)  # the page's hand table, seed by seed
    assert egt["seeds"]["2"]["12"] == pytest.approx(79.48, abs=0.005)
    assert egt["paper"] == "paper: EGT-GRC" and egt["paper_cells"]["10"] == pytest.approx((75.79, 6.10))
    assert list(panels["EBT-GRC"]["seeds"]) == ["0"]


def test_the_command_draws_a_panel_per_configuration(tmp_path):
    out = tmp_path / "splits.png"
    args = [a for r in RECORDS for a in ("--records", str(r))]
    r = invoke("plot", "splits", str(SPEC), *args, "--reference", "ebt_nlp:table4_logic", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "(2 configurations)" in r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
