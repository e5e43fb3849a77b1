"""The published results pages (docs/results/*.md): data with their provenance, not run in CI. Each page names
the spec that produced it, which must exist and load, and holds the `rirlab tables` Markdown table, which must
parse (every row as wide as its header, every cell of ours a number, a number ± std, or empty)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.cli import REPO

RESULTS = REPO / "docs" / "results"
PAGES = sorted(p for p in RESULTS.glob("*.md") if p.name != "README.md")
NUM = r"\d+(\.\d+)?"
INTERVAL = rf" \[−?{NUM}, −?{NUM}\]"  # the cell's 95% interval
OURS = re.compile(rf"^(—|{NUM}( ± {NUM})?({INTERVAL})?( \(n=\d+\))?)$")  # rirlab.analysis.tables.fmt_cell
TEST = rf"; (p {NUM}|p < 0\.001), (consistent|above|below)|; untested: [^)]+"  # rirlab.analysis.tables.fmt_paper
PAPER = re.compile(rf"^(—|{NUM}( ± {NUM})?( \(Δ [+−]{NUM}({TEST})?\))?)$")  # a published cell, Δ = ours − paper


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of a page: rows of stripped cells, the separator row dropped."""
    out, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            out.append([r for r in current if not all(set(c) <= set(":- ") and c for c in r)])
            current = []
    return out


def test_there_are_results_pages_and_the_readme_links_them():
    assert PAGES, "docs/results/ holds no results page"
    readme = (REPO / "README.md").read_text()
    for page in PAGES:
        assert f"docs/results/{page.name}" in readme, f"README does not link {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_a_results_page_names_a_spec_that_loads_and_its_table_parses(page):
    from rirlab.sweeps.spec.load import load_spec

    text = page.read_text()
    specs = sorted(set(re.findall(r"search_spaces/[\w.-]+\.yaml", text)))
    assert specs, f"{page.name} names no spec"
    for spec in specs:
        assert (REPO / spec).is_file(), f"{page.name}: {spec} does not exist"
        load_spec(REPO / spec)  # raises a UserError when the spec no longer validates
    assert re.search(r"\bcommit\b [0-9a-f]{7,40}", text), f"{page.name} names no commit"
    found = tables(text)
    assert found, f"{page.name} holds no table"
    header, *rows = found[0]
    assert rows, f"{page.name}: the table has no row"
    assert any(not r[0].startswith("paper: ") for r in rows), f"{page.name}: no row of ours"
    for row in rows:
        assert len(row) == len(header), (page.name, header, row)
        form = PAPER if row[0].startswith("paper: ") else OURS
        for cell in row[1:]:
            assert form.match(cell), (page.name, row[0], cell)


def records_commands(text: str) -> list[list[str]]:
    """The `rirlab tables ... --records FILE ...` commands of a page (continued lines joined), as argument lists."""
    import shlex

    joined = re.sub(r"\\\n\s*", " ", text)
    return [shlex.split(m)[2:] for m in re.findall(r"^rirlab tables [^\n]*--records [^\n]*$", joined, re.M)]


RECORDS = sorted(p for p in RESULTS.glob("*.parquet") if not p.name.endswith(".history.parquet"))


@pytest.mark.parametrize("record", RECORDS, ids=[p.stem for p in RECORDS])
def test_a_committed_record_prints_its_pages_table(record):
    """A sweep's record committed beside a results page (`rirlab export`): the page shows the command that prints
    its table from the record alone, and that command, run now with no store, prints the table the page holds."""
    from tests.helpers.cli import invoke

    rel = f"docs/results/{record.name}"
    commands = [(page, c) for page in PAGES for c in records_commands(page.read_text()) if rel in c]
    assert commands, f"no results page prints a table from {rel} (`rirlab tables SPEC --records {rel}`)"
    for page, args in commands:
        r = invoke("tables", *[str(REPO / a) if a.endswith((".yaml", ".parquet")) else a for a in args])
        assert r.exit_code == 0, r.output
        table = [line for line in r.stdout.splitlines() if line.startswith("|")]
        lines = page.read_text().splitlines()
        assert any(lines[i : i + len(table)] == table for i in range(len(lines))), (page.name, table)


@pytest.mark.parametrize("record", RECORDS, ids=[p.stem for p in RECORDS])
def test_a_committed_record_holds_no_machine_path(record):
    """A published record is exported with `--redact`: no local path or user name of the machine that ran it."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(record).metadata
    assert meta.get(b"rirlab.redacted") == b"paths", f"re-export {record.name} with `rirlab export ... --redact`"
    text = b" ".join(meta.values()).decode()
    assert not re.search(r"sqlite:////|\"/(home|work|tmp|root|Users|srv|mnt)/", text), record.name
