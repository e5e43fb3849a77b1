"""Read-only commands start fast (issue 33 item 6): they pause the cyclic GC while MLflow's imports and store build
~10^5 objects, and the `rirlab` process freezes them at the end so neither a later collection nor the one at exit
walks them (about a third of such a command's CPU time); in-process callers get the collector back, unfrozen."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from click.testing import CliRunner

from rirlab.cli import analysis as analysis_cli, main
from tests.helpers.analysis_store import make_sweep
from tests.helpers.cli import REPO

SPEC = {"name": "fast", "task": "listops", "model": "rir_ebt_grc", "search": {"chunk_size": {"grid": [10, 20]}},
        "seeds": 1}
READ_ONLY = [analysis_cli.tables, analysis_cli.runs, analysis_cli.export, analysis_cli.importance,
             analysis_cli.pareto, analysis_cli.curves]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("fast")
    return make_sweep(root, SPEC, [{"swept": {"chunk_size": c, "seed": 0}, "metrics": {"dev/accuracy": c}}
                                   for c in (10, 20)])


@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: c.name)
def test_every_read_only_command_pauses_the_collector(command):
    assert getattr(command.callback, "__wrapped__", None) is not None, f"{command.name} is not @read_only"


def test_in_process_the_collector_comes_back_unfrozen(store):
    uri, spec = store
    frozen = gc.get_freeze_count()
    r = CliRunner().invoke(main, ["tables", str(spec), "--tracking-uri", uri])
    assert r.exit_code == 0, r.output
    assert gc.isenabled() and gc.get_freeze_count() == frozen


PROBE = """
import atexit, gc, sys
sys.argv = ["/venv/bin/rirlab", "runs", sys.argv[1], "--tracking-uri", sys.argv[2]]
seen = []
gc.callbacks.append(lambda phase, info: seen.append(info["collected"]) if phase == "stop" else None)
atexit.register(lambda: print(f"frozen={gc.get_freeze_count()} enabled={gc.isenabled()} collections={len(seen)}",
                              file=sys.stderr))
from rirlab.cli import main
seen.clear()  # the command's own collections from here on
main()
"""


def test_the_rirlab_process_collects_nothing_while_reading_and_freezes_what_it_built(store):
    uri, spec = store
    proc = subprocess.run([sys.executable, "-c", PROBE, str(spec), uri], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 sweep of 'fast'" in proc.stdout
    line = proc.stderr.strip().splitlines()[-1]
    frozen = int(line.split("frozen=")[1].split()[0])
    collections = int(line.split("collections=")[1])
    assert frozen > 100_000 and "enabled=True" in line, line  # MLflow's objects frozen, the collector back on
    assert collections <= 2, line  # (without the pause: some 30 passes over MLflow's import-time objects)
