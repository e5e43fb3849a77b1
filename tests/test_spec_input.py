"""Hostile spec files and --set values end in one line ``error: ...`` and exit code 2, before anything starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rirlab.cli import main
from tests.conftest import REPO

TINY = (REPO / "tests" / "specs" / "tiny.yaml").read_text()


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def refused(*args) -> str:
    code, out = cli(*args)
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2, out
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    assert "Traceback" not in out and "/work" not in out.replace(str(REPO), "REPO")
    return lines[0]


def spec_file(tmp_path, text: str, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_duplicate_key_is_refused_naming_both_lines(tmp_path):
    # last-wins would have run 4,000,000 steps
    path = spec_file(tmp_path, TINY + "fixed: {steps: 4000000}\n")
    msg = refused("sweep", path, "--dry-run")
    assert "'fixed' is given twice" in msg and "first at line 5" in msg and f"{path}:{TINY.count(chr(10)) + 1}:" in msg


def test_duplicate_key_inside_a_section_is_refused(tmp_path):
    path = spec_file(tmp_path, TINY.replace("  steps: 40\n", "  steps: 40\n  steps: 400\n"))
    assert "'steps' is given twice" in refused("sweep", path, "--dry-run")


def test_non_utf8_spec_is_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: tiny\n# caf\xe9\n")
    assert "not UTF-8" in refused("sweep", path, "--dry-run")


def test_directory_as_spec_is_not_file_not_found(tmp_path):
    from pathlib import Path

    from rirlab.errors import UserError
    from sweeps.yaml_lines import load_with_lines

    with pytest.raises(UserError, match="is a directory"):
        load_with_lines(Path(tmp_path))
    code, out = cli("sweep", tmp_path, "--dry-run")
    assert code == 2 and "not found" not in out and "directory" in out


def test_yaml_alias_bomb_is_refused_without_expanding(tmp_path):
    levels = ["  l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    levels += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    text = TINY.replace("fixed:\n", "fixed:\n" + "\n".join(levels) + "\n")  # 10^9 values once expanded
    assert len(text) - len(TINY) < 1000
    path = spec_file(tmp_path, text)
    msg = refused("sweep", path, "--dry-run")
    assert "aliases" in msg and str(path) in msg
