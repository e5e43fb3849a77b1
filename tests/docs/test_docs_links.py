"""The README and the reference pages stay usable: every relative Markdown link and its #anchor lands on a file and a
heading that exist (pages are moved and renamed; a dead link is the first thing a newcomer hits), the README keeps the
two commands that scripts/setup.sh, scripts/test.sh and .ci/run stand behind, its minimal spec loads, it stays a
short page (the reference lives in docs/), and no page points at a machine path or a folder outside the checkout."""

from __future__ import annotations

import re

import pytest

from tests.helpers.cli import REPO

PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "benchmarks").glob("*.md"),
                REPO / "analysis" / "README.md", REPO / "cluster" / "README.md"])
SETUP_AND_SWEEP = "bash scripts/setup.sh && .venv/bin/rirlab sweep search_spaces/chunk_beam.yaml --quick"
TEST = "bash scripts/test.sh"
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def outside_fences(text: str):
    """The page's lines outside fenced code blocks (a `# comment` in a shell block is no heading, `[x](y)` no link)."""
    fence = None
    for line in text.splitlines():
        mark = re.match(r"^\s*(```+|~~~+)", line)
        if mark:
            fence = None if fence and mark.group(1)[0] == fence else (fence or mark.group(1)[0])
            continue
        if fence is None:
            yield line


def prose_lines(text: str):
    """``outside_fences`` with inline code spans removed."""
    for line in outside_fences(text):
        yield re.sub(r"`[^`]*`", "", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.replace("`", "")).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path) -> set[str]:
    """Every anchor a page has: its headings' slugs (a repeated one numbered as GitHub does) and explicit <a id>s."""
    seen: dict[str, int] = {}
    found = set()
    text = path.read_text(encoding="utf-8")
    for line in outside_fences(text):
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            found.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return found | set(ANCHOR.findall(text))


def broken_links(page) -> list[str]:
    bad = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:: not ours to check offline
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{target}: no such file {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                bad.append(f"{target}: {dest.name} has no heading with anchor #{fragment}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page):
    assert page.is_file(), f"{page.relative_to(REPO)} is missing"
    bad = broken_links(page)
    assert not bad, f"{page.relative_to(REPO)}: " + "; ".join(bad)


def test_the_link_check_catches_a_missing_file_and_a_missing_anchor(tmp_path):
    """The check above would pass on anything if it parsed no link: a page with one good and two dead links."""
    (tmp_path / "other.md").write_text("# A heading: with `code`, punctuation\n\n```\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading-with-code-punctuation) [gone](missing.md) [no anchor](other.md#not-a-heading)"
                    "\n`[in code](nowhere.md)` [web](https://example.org/x.md)\n")
    bad = broken_links(page)
    assert len(bad) == 2 and "missing.md" in bad[0] and "#not-a-heading" in bad[1], bad


def code_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)]


def test_the_readme_keeps_the_two_commands_that_setup_tests_and_ci_stand_behind():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = code_blocks(readme)
    assert SETUP_AND_SWEEP in blocks and TEST in blocks, blocks
    assert (REPO / "search_spaces" / "chunk_beam.yaml").is_file() and (REPO / "scripts" / "setup.sh").is_file()
    assert f"exec {TEST}" in (REPO / ".ci" / "run").read_text(), ".ci/run no longer runs the README's test command"


def test_the_readmes_minimal_spec_loads_with_and_without_quick(tmp_path):
    from rirlab.sweeps.spec.load import load_spec

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    spec = re.search(r"^## A minimal spec\n+```yaml\n(.*?)^```", readme, re.S | re.M)
    assert spec, "the README has no yaml block under '## A minimal spec'"
    path = tmp_path / "minimal.yaml"
    path.write_text(spec.group(1))
    assert load_spec(path).spec.name == load_spec(path, quick=True).spec.name == "my_chunk_sweep"


def test_the_readme_stays_a_short_page():
    """Reference material goes to docs/ (the README was 22k characters of reference prose before issue 48)."""
    size = len((REPO / "README.md").read_text(encoding="utf-8"))
    assert size < 6000, f"README.md is {size} characters: move reference material into docs/ and link it"


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent.name != "cluster"],
                         ids=[str(p.relative_to(REPO)) for p in PAGES if p.parent.name != "cluster"])
def test_no_page_points_at_a_machine_path_or_outside_the_checkout(page):
    """A clone has no ../shared and no /work: papers are cited by title, venue and arXiv id."""
    text = page.read_text(encoding="utf-8")
    found = [bad for bad in ("../shared", "/work/", "/home/") if bad in text]
    assert not found, f"{page.relative_to(REPO)} mentions {found}"
