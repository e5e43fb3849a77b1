"""`scripts/setup.sh` says what it does while it works (issue 33 item 10: it printed nothing for minutes): a line per
step with the time so far, pip's "Collecting" lines as progress, and a line when there is nothing to do. Run on a
copy of the checkout's packaging files with a stand-in python that answers like pip (no download)."""

from __future__ import annotations

import shutil
import subprocess

from tests.helpers.cli import REPO

FAKE_PYTHON = """#!/usr/bin/env bash
# stands in for .venv/bin/python: no torch yet; pip prints what a real install prints
if [ "$1" = "-c" ]; then exit 1; fi
if [ "$1 $2 $3" = "-m pip install" ]; then
  echo "$*" >> "$(dirname "$0")/pip-calls"
  echo "Collecting ${4}"; echo "  Downloading ${4}-1.0-py3-none-any.whl (1.0 MB)"; echo "Requirement already satisfied: x"
  echo "Installing collected packages: ${4}"; echo "Successfully installed ${4}-1.0"; exit 0
fi
exit 3
"""


def _checkout(tmp_path):
    for name in ("setup.cfg", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return tmp_path


def _run(root):
    return subprocess.run(["bash", str(root / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=60)


def test_setup_prints_each_step_and_pips_progress_then_nothing_to_do(tmp_path):
    root = _checkout(tmp_path)
    first = _run(root)
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    steps = [line for line in lines if line.startswith("setup [")]
    assert [s.split("] ", 1)[1].split(" (")[0] for s in steps] == [
        "installing torch==2.13.0", "installing rirlab and its dependencies", "done: .venv/bin/rirlab is ready"], lines
    assert all(s[len("setup ["):].split("]")[0].endswith("s") for s in steps)  # the time so far: 0m03s
    assert "    Collecting torch==2.13.0" in lines and "    Collecting -e" in lines  # pip's progress, indented
    assert "    Installing collected packages: torch==2.13.0" in lines
    assert not any("Downloading" in line or "Requirement already" in line for line in lines)  # pip's noise left out
    calls = (root / ".venv" / "bin" / "pip-calls").read_text().splitlines()
    assert calls == ["-m pip install torch==2.13.0 --progress-bar off", "-m pip install -e .[dev] --progress-bar off"]
    again = _run(root)
    assert again.returncode == 0 and "nothing to do" in again.stdout and "Collecting" not in again.stdout, again.stdout


def test_a_failing_pip_fails_the_setup(tmp_path):
    root = _checkout(tmp_path)
    python = root / ".venv" / "bin" / "python"
    python.write_text(FAKE_PYTHON.replace("exit 0\nfi", "echo 'ERROR: no matching distribution' >&2; exit 1\nfi"))
    r = _run(root)
    assert r.returncode != 0 and "no matching distribution" in r.stderr
    assert not list((root / ".venv").glob(".rirlab-installed-*"))  # not marked installed
