"""The suite's start order under pytest-xdist (tests/conftest.py, tests/helpers/schedule.py): with `-n 2 --dist
worksteal`, as scripts/test.sh runs it, each worker starts with the longest tests tests/durations.txt records, the
known-slow tests shared out by their times; a real xdist run of a generated test folder shows it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import schedule
from tests.helpers.cli import REPO


def test_spread_puts_the_longest_tests_at_the_head_of_each_block_and_balances_them():
    ids = [f"t{i}" for i in range(10)]
    estimate = {"t1": 300.0, "t2": 250.0, "t7": 200.0, "t8": 60.0, "t9": 40.0}
    order = [ids[i] for i in schedule.spread(ids, estimate, 2)]
    assert sorted(order) == sorted(ids)  # a permutation
    first, second = order[:5], order[5:]  # xdist's first two blocks: 10 // 2, then the rest
    assert (first[0], second[0]) == ("t1", "t2")
    assert first[:3] == ["t1", "t8", "t9"] and second[:2] == ["t2", "t7"]  # 400 s and 450 s, longest first
    assert [t for t in order if t not in estimate] == ["t0", "t3", "t4", "t5", "t6"]  # as collected, in the tails
    assert schedule.block_sizes(11, 2) == [5, 6] and schedule.block_sizes(7, 3) == [2, 2, 3]
    assert schedule.spread(ids, estimate, 2) == schedule.spread(ids, dict(reversed(estimate.items())), 2)


def test_spread_keeps_the_tests_of_a_group_together_in_one_block_as_one_unit():
    ids = [f"t{i}" for i in range(12)]
    estimate = {"t1": 300.0, "t2": 250.0, "t4": 120.0, "t6": 120.0, "t9": 120.0}
    groups = {"t4": "sweep", "t6": "sweep", "t9": "sweep", "t10": "sweep"}  # (t10: no time recorded)
    order = [ids[i] for i in schedule.spread(ids, estimate, 2, groups)]
    assert sorted(order) == sorted(ids)
    first, second = order[:6], order[6:]
    assert first[:4] == ["t4", "t6", "t9", "t10"] and second[:2] == ["t1", "t2"]  # the group (360 s) alone
    apart = [ids[i] for i in schedule.spread(ids, estimate, 2)]  # without the groups: spread over both blocks
    assert {"t4", "t6", "t9"} - set(apart[:6]) and {"t4", "t6", "t9"} - set(apart[6:])
    big = {n: "all" for n in ids[:8]}  # a group larger than a block: together, then what did not fit
    order = [ids[i] for i in schedule.spread(ids, estimate, 2, big)]
    assert sorted(order) == sorted(ids) and order[:8] == ids[:8]


def test_read_durations_sums_the_phases_of_pytests_lines_and_skips_the_rest(tmp_path):
    listing = tmp_path / "durations.txt"
    listing.write_text("============ slowest durations ============\n"
                       "367.21s call     tests/e2e/test_a.py::test_x[p-1]\n"
                       "2.50s setup    tests/e2e/test_a.py::test_x[p-1]\n"
                       "(3 durations < 0.005s hidden.)\n")
    assert schedule.read_durations(listing) == {"tests/e2e/test_a.py::test_x[p-1]": 369.71}
    assert schedule.read_durations(tmp_path / "none.txt") == {}
    recorded = schedule.read_durations()  # the committed list parses and names tests of this suite
    assert recorded and all((REPO / nodeid.split("::")[0]).is_file() for nodeid in recorded), recorded


CONFTEST = """
from pathlib import Path

import tests.helpers.schedule as schedule

schedule.DURATIONS = Path(__file__).parent / "durations.txt"
from tests.conftest import pytest_collection_modifyitems, pytest_configure_node  # noqa: E402,F401 (the suite's hooks)
"""

TESTS = """
import os

def _log(name):
    with open(os.environ["ORDER_LOG"], "a") as f:
        f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {name}\\n")
""" + "".join(f"\ndef test_{i}():\n    _log('test_{i}')\n" for i in range(10))


def test_two_worksteal_workers_each_start_with_a_long_test(tmp_path):
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_gen.py").write_text(TESTS)
    (folder / "durations.txt").write_text("50.00s call     test_gen.py::test_3\n40.00s call     test_gen.py::test_7\n"
                                          "30.00s call     test_gen.py::test_5\n")
    log = tmp_path / "order.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "ORDER_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "worksteal", "-p", "no:cacheprovider",
                           "-q", "--rootdir", str(folder), str(folder)], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        worker, name = line.split()
        ran.setdefault(worker, []).append(name)
    assert sorted(ran) == ["gw0", "gw1"] and sum(map(len, ran.values())) == 10, ran
    firsts = {names[0] for names in ran.values()}
    assert firsts == {"test_3", "test_7"}, ran  # in collection order they would be test_0 and test_5
    (with_7,) = [names for names in ran.values() if names[0] == "test_7"]
    assert with_7[1] == "test_5", ran  # the third longest joins the lighter block (40 + 30 s against 50 s)
