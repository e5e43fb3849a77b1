"""`rirlab tables --reference` pairs a row of ours with the published row that describes the same configuration
(model + values, from the trial runs' logged resolved config), never by position or name; every shipped spec
pairs as its comment says; unpaired rows are listed on both sides (issue 17, item 1)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rirlab.analysis import references as refs
from rirlab.cli import main
from tests.helpers.analysis_store import make_sweep, registry_splits

REPO = Path(__file__).resolve().parents[2]


def spec_store(root: Path, name: str, metric_of=lambda i, split: 50.0 + i):
    """A store holding one finished sweep of search_spaces/NAME.yaml: one run (seed 0) per configuration, its
    params the resolved config a real trial logs (model defaults included), a metric per recorded split."""
    from rirlab.trial import resolve
    from rirlab.sweeps.spec.trials import expand
    from rirlab.sweeps.spec.schema import read_spec

    raw = yaml.safe_load((REPO / "search_spaces" / f"{name}.yaml").read_text())
    raw.pop("quick", None)
    spec = read_spec(REPO / "search_spaces" / f"{name}.yaml")
    splits = registry_splits(spec.task)
    runs = []
    for i, t in enumerate(x for x in expand(spec) if x.swept["seed"] == spec.seed_list[0]):
        runs.append({"swept": t.swept, "params": resolve(t.config).flat(),
                     "metrics": {f"{s}/accuracy": metric_of(i, s) for s, _ in splits}})
    return make_sweep(root, raw, runs)


def table(uri, spec, *args):
    r = CliRunner().invoke(main, ["tables", str(spec), "--tracking-uri", uri, *map(str, args)])
    assert r.exit_code == 0, r.output
    return r.stdout


def pairs(stdout: str) -> dict[str, str]:
    """{our row label: the paper row under it (or '' for none)} from a Markdown table."""
    body = [line.split(" | ")[0][2:] for line in stdout.splitlines() if line.startswith("| ")][1:]
    out: dict[str, str] = {}
    for i, label in enumerate(body):
        if not label.startswith("paper: "):
            nxt = body[i + 1] if i + 1 < len(body) else ""
            out[label] = nxt[len("paper: "):] if nxt.startswith("paper: ") else ""
    return out


def test_chunk_beam_rows_pair_by_chunk_and_beam(tmp_path):
    """The issue's case: the first grid point (chunk 10, beam 5) is not the paper's RIR-EBT-GRC (chunk 30,
    beam 7); our chunk 20 with beam 5 is not the paper's "(chunk 20)" (beam 7)."""
    uri, spec = spec_store(tmp_path, "chunk_beam")
    out = table(uri, spec, "--reference", "rir:table5")
    assert pairs(out) == {"chunk 10, beam 5": "", "chunk 10, beam 7": "(chunk 10)",
                          "chunk 20, beam 5": "", "chunk 20, beam 7": "(chunk 20)",
                          "chunk 30, beam 5": "(beam 5)", "chunk 30, beam 7": "RIR-EBT-GRC"}, out
    assert "rows of ours no published row describes: chunk 10, beam 5; chunk 20, beam 5" in out
    assert ("published rows (table5) with no row of ours: RIR-GRC; RIR-CRvNN; RIR-OM; –S4D; –Beam Align; "
            "+Random Align; +RIR inference") in out


def test_chunk_beam_pairs_the_same_before_any_run(tmp_path):
    """No run yet: the spec's values over the reference's defaults of the model give the same pairs."""
    uri, _ = make_sweep(tmp_path, {"name": "other", "task": "listops", "model": "rir_ebt_grc"}, [])
    out = table(uri, REPO / "search_spaces" / "chunk_beam.yaml", "--reference", "rir:table5")
    assert pairs(out)["chunk 30, beam 7"] == "RIR-EBT-GRC" and pairs(out)["chunk 20, beam 5"] == ""


# spec -> (reference, {our row: published row}) for every shipped spec; a row left out pairs with none
SHIPPED = {
    "rir_ablation": ("rir:table5", {"RIR-EBT-GRC": "RIR-EBT-GRC", "-S4D": "–S4D", "-Beam Align": "–Beam Align",
                                    "+Random Align": "+Random Align", "+RIR inference": "+RIR inference",
                                    "beam 5": "(beam 5)", "chunk 20": "(chunk 20)", "chunk 10": "(chunk 10)",
                                    "RIR-GRC": "RIR-GRC", "RIR-CRvNN": "RIR-CRvNN", "RIR-OM": "RIR-OM"}),
    "rir_table2": ("rir:table2", {n: n for n in ["MEGA", "S4D", "BB-Tree GRC", "RIR-GRC", "OM", "CRvNN", "BT-GRC OS",
                                                 "EBT-GRC", "RIR-EBT-GRC"]} | {"-S4D": "–S4D", "-Beam Align": "–Beam Align"}),
    "rir_table3": ("rir:table3", {n: n for n in ["MEGA", "S4D", "BBT-GRC", "RIR-GRC", "OM", "BT-GRC OS", "EBT-GRC",
                                                 "RIR-EBT-GRC"]}),
    "ebt_table2": ("ebt", {n: n for n in ["GT-GRC", "EGT-GRC", "OM", "CRvNN", "BT-GRC", "BT-GRC OS", "EBT-GRC"]}
                   | {"-Slice": "EBT-GRC –Slice"}),
    "gut_ablation": ("halt:table1", {n: n for n in ["GUT", "GUT−Global Halt", "GUT−Gate", "GUT−Transition", "TLB",
                                                    "GUTLB", "Transformer", "UT"]}),
    "halting": ("halt:table1", {"ut, halt loss weight 0.1": "UT", "gut, halt loss weight 0.1": "GUT"}),
    "halt_logic": ("halt:table2", {n: n for n in ["Transformer", "UT", "GUT", "GUT−Transition", "TLB", "GUTLB"]}),
    "flipflop": ("halt:table3_median", {n: n for n in ["Transformer", "UT", "GUT", "TLB", "GUTLB", "TLB FR"]}),
    **{f"halt_table4_lra_{t}": (f"halt:table4_lra_{t}", {n: n for n in ["Transformer", "UT", "GUT", "TLB", "GUTLB"]})
       for t in ("listops", "text", "retrieval", "image")},
    "chunk_beam": ("rir:table5", {"chunk 10, beam 7": "(chunk 10)", "chunk 20, beam 7": "(chunk 20)",
                                  "chunk 30, beam 5": "(beam 5)", "chunk 30, beam 7": "RIR-EBT-GRC"}),
}


def test_every_shipped_spec_is_listed():
    """Every spec of the ListOps / logic / flip-flop tables; the text-task specs (RIR Tables 4, 6, 7 and EBT
    Tables 3-4, read from the user's files) pair in tests/analysis/test_data_nlp_specs.py."""
    from tests.helpers.nlp_specs import SPECS as TEXT_SPECS

    assert set(SHIPPED) == {p.stem for p in (REPO / "search_spaces").glob("*.yaml")} - set(TEXT_SPECS)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_spec_pairs_with_its_published_rows(name, tmp_path):
    reference, expected = SHIPPED[name]
    uri, spec = spec_store(tmp_path, name)
    got = pairs(table(uri, spec, "--reference", reference))
    assert {k: v for k, v in got.items() if v} == expected, got


def test_flipflop_columns_are_the_papers_six(tmp_path):
    uri, spec = spec_store(tmp_path, "flipflop")
    header = table(uri, spec, "--reference", "halt").splitlines()[0]
    assert header.count(" | ") == 6 and "Δ" in table(uri, spec, "--reference", "halt")


def test_a_published_row_that_fits_several_rows_says_so(tmp_path):
    """Two of ours differ only in a value the published row does not state (lr): both get it, and the footer
    says why."""
    spec = {"name": "lrs", "task": "listops", "model": "rir_ebt_grc", "search": {"lr": {"grid": [0.001, 0.0003]}}}
    runs = [{"swept": {"lr": lr, "seed": 0}, "params": {"chunk_size": 30, "beam_size": 7, "s4d": True,
                                                       "alignment": "beam", "inference": "non_rir"},
             "metrics": {"test/accuracy": 90}} for lr in (0.001, 0.0003)]
    uri, path = make_sweep(tmp_path, spec, runs)
    out = table(uri, path, "--reference", "rir:table5")
    assert pairs(out) == {"lr 0.001": "RIR-EBT-GRC", "lr 0.0003": "RIR-EBT-GRC"}
    assert "published row RIR-EBT-GRC fits several rows of ours (lr 0.001; lr 0.0003)" in out


def test_a_logged_value_that_differs_from_the_spec_wins(tmp_path):
    """The pairing reads the resolved config the runs logged: a run that actually ran beam 5 is the paper's
    "(beam 5)" row even though nothing in the spec says beam 5 (the model default moved)."""
    spec = {"name": "moved", "task": "listops", "model": "rir_ebt_grc", "variants": [{"name": "base", "set": {}}]}
    runs = [{"swept": {"variant": "base", "seed": 0}, "params": {"chunk_size": 30, "beam_size": 5, "s4d": True,
                                                                  "alignment": "beam", "inference": "non_rir"},
             "metrics": {"test/accuracy": 90}}]
    uri, path = make_sweep(tmp_path, spec, runs)
    assert pairs(table(uri, path, "--reference", "rir:table5")) == {"base": "(beam 5)"}


@pytest.mark.parametrize("name", refs.available())
def test_reference_defaults_are_our_model_defaults(name):
    """The `defaults:` of a reference file stand in for our models' defaults before any run: they must be equal."""
    from rirlab.models import registry

    for t in refs.load(name):
        for model, values in t.defaults.items():
            cfg = dataclasses.asdict(registry.get(model).config())
            for k, v in values.items():
                assert k in cfg and refs.same_value(str(cfg[k]), v), (name, model, k, v, cfg.get(k))


@pytest.mark.parametrize("name", refs.available())
def test_every_published_row_names_a_registered_model_or_none(name):
    from rirlab.models import registry

    known = set(registry.names())
    for t in refs.load(name):
        for r in t.rows:
            assert r.model is None or r.model in known, (t.id, r.name)


def test_user_facing_analysis_text_cites_papers_not_paths():
    """A clone has no ../shared and no machine paths: the references and the README cite papers by arXiv id."""
    files = [REPO / "analysis" / "README.md", *sorted((REPO / "analysis" / "references").glob("*.yaml"))]
    for path in files:
        text = path.read_text()
        for bad in ("../shared", "/work/", "papers/", "/home/"):
            assert bad not in text, (path.name, bad)
    for path in files[1:]:
        assert "arXiv:" in path.read_text(), path.name


def test_reference_cells_are_compared_with_ours_under_the_reference_tables_statistic(tmp_path):
    """EBT Table 4 reports means of 3 runs: with --reference our cells are means too (92.67, not the median 90),
    the footer says which statistic each side is; --stat still wins when given."""
    from rirlab.trial import resolve
    from rirlab.sweeps.spec.trials import expand
    from rirlab.sweeps.spec.schema import read_spec

    raw = yaml.safe_load((REPO / "search_spaces" / "ebt_table4_logic.yaml").read_text())
    raw.pop("quick", None)
    raw["variants"] = [v for v in raw["variants"] if v["name"] == "EBT-GRC"]
    (tmp_path / "src.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    spec = read_spec(tmp_path / "src.yaml")
    values = {0: 90.0, 1: 88.0, 2: 100.0}
    runs = [{"swept": t.swept, "params": resolve(t.config).flat(),
             "metrics": {f"{s}/accuracy": values[t.swept["seed"]] for s, _ in registry_splits("logic")}}
            for t in expand(spec)]
    uri, path = make_sweep(tmp_path, raw, runs)
    out = table(uri, path, "--reference", "ebt_nlp:table4_logic")
    assert "| EBT-GRC | 92.67 ± 6.43 [76.61, 108.72] |" in out and "| 94.95 ± 0.15 (Δ −2.28; p 0.60, consistent) |" in out
    assert "its cells are means over seeds, ours means" in out and "mean ± sample std (ddof 1) over seeds" in out
    median = table(uri, path, "--reference", "ebt_nlp:table4_logic", "--stat", "median")
    assert "| EBT-GRC | 90.00 ± 6.43 [76.61, 108.72] |" in median and "ours medians" in median, median
    assert "| EBT-GRC | 90.00 ± 6.43 [76.61, 108.72] |" in table(uri, path)  # no reference: the median, as before


def test_splits_neither_we_nor_the_paper_filled_are_not_columns(tmp_path):
    """The real EBT Table 4 run evaluates ops 10-12 of the task's six test splits: the table shows those three,
    not three columns of '—' for 7-9 as well."""
    from rirlab.trial import resolve
    from rirlab.sweeps.spec.trials import expand
    from rirlab.sweeps.spec.schema import read_spec

    raw = yaml.safe_load((REPO / "search_spaces" / "ebt_table4_logic.yaml").read_text())
    raw.pop("quick", None)
    raw["variants"] = [v for v in raw["variants"] if v["name"] in ("EBT-GRC", "OM")]
    raw["seeds"] = 1
    (tmp_path / "src.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    runs = [{"swept": t.swept, "params": resolve(t.config).flat(),
             "metrics": {f"ops_{n}/accuracy": 90.0 + n for n in (10, 11, 12)}} for t in expand(read_spec(tmp_path / "src.yaml"))]
    uri, path = make_sweep(tmp_path, raw, runs)
    out = table(uri, path, "--reference", "ebt_nlp:table4_logic")
    assert out.startswith("| configuration | 10 | 11 | 12 |\n"), out
    assert "| OM | 100.00 (n=1) | 101.00 (n=1) | 102.00 (n=1) |" in out
