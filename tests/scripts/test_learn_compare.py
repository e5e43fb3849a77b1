"""benchmarks/learn_compare.py: several learn records on one plot against the step; a file that is not a learn
record is one line, exit 2, and no PNG."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.cli import REPO

SCRIPT = REPO / "benchmarks" / "learn_compare.py"


def record(path, device, last_step):
    curve = [{"step": s, "dev_accuracy": 10.0 + s / 10} for s in range(0, last_step + 1, 100)]
    path.write_text(json.dumps({"protocol": "learn", "device": device, "model": "m", "task": "t", "recipe": "paper",
                                "dev_examples": 100, "curve": curve}))
    return path


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=REPO)


def test_two_records_are_drawn_over_the_steps_both_cover(tmp_path):
    a, b = record(tmp_path / "a.json", "gpu", 700), record(tmp_path / "b.json", "cpu", 400)
    out = tmp_path / "curves.png"
    done = run(a, b, "--out", out)
    assert done.returncode == 0, done.stderr
    assert "2 curves, steps 0-400" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_file_that_is_not_a_learn_record_is_one_line_and_nothing_is_written(tmp_path):
    good = record(tmp_path / "a.json", "gpu", 300)
    step = tmp_path / "step.json"
    step.write_text(json.dumps({"protocol": "step", "median_ms": 1.0}))
    out = tmp_path / "curves.png"
    for bad in (step, REPO / "README.md"):
        done = run(good, bad, "--out", out)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and bad.name in lines[0], done.stderr
        assert not out.exists()
