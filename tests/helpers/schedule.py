"""The order the suite's tests start in under pytest-xdist (tests/conftest.py): the longest first, spread so that each
worker's first share starts with long tests.

`scripts/test.sh` runs `pytest -n auto --dist worksteal` (a worker per core: 2 on CI). Work stealing first hands
worker k the k-th contiguous block of the collected tests (sizes N // workers, in order) and later moves the tail of
the longest queue to a worker that ran dry. In collection order the minutes-long end-to-end tests sit together in
tests/e2e, inside the first block; a long one late in a block can start last and run alone while the other worker
has finished. Here the tests known to be slow go into the blocks longest first, each to the block with the least
work so far, and each block runs its longest first; the tests with no recorded time (most of the suite: seconds)
fill the blocks' tails, which is what stealing moves. (A guard for the tail more than a saving: with the suite's
loaded serial times, a model of two stealing workers ends 13 s after an even split in collection order, 1 s after
it in this one; benchmarks/HISTORY.md, "Suite wall time".)

tests/durations.txt holds the recorded times, in the lines `pytest --durations=N` prints (``367.21s call
tests/e2e/...::test_x``; refresh it by pasting that section of a serial run). A test that is not listed counts
UNLISTED_E2E_S when it is end-to-end (a new one then still starts among the long ones), else nothing.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

DURATIONS = Path(__file__).resolve().parents[1] / "durations.txt"
UNLISTED_E2E_S = 120.0  # about a short end-to-end test under load (tests/durations.txt: 36-367 s)
_LINE = re.compile(r"^\s*([0-9.]+)s\s+(call|setup|teardown)\s+(\S.*?)\s*$")


def read_durations(path: Path | None = None) -> dict[str, float]:
    """nodeid -> seconds (its setup, call and teardown summed) from ``pytest --durations`` lines in PATH (default
    DURATIONS); other lines (headers, comments) are skipped."""
    path = DURATIONS if path is None else path
    seconds: dict[str, float] = {}
    if not path.is_file():
        return seconds
    for line in path.read_text().splitlines():
        m = _LINE.match(line)
        if m:
            seconds[m.group(3)] = seconds.get(m.group(3), 0.0) + float(m.group(1))
    return seconds


def block_sizes(n_items: int, n_workers: int) -> list[int]:
    """The sizes of the blocks pytest-xdist's work stealing first hands its workers, in order (its
    ``check_schedule``: each idle worker gets ``len(pending) // workers_left``)."""
    sizes, left = [], n_items
    for k in range(n_workers):
        size = left // (n_workers - k)
        sizes.append(size)
        left -= size
    return sizes


def spread(nodeids: list[str], estimate: dict[str, float], n_workers: int,
           groups: dict[str, str] | None = None) -> list[int]:
    """A new order (indices into ``nodeids``) for ``n_workers`` work-stealing workers: the tests with an estimate
    longest first, each into the block (of the sizes xdist hands out) with the least estimated work so far and room
    left, each block longest first; the rest in collection order fill the blocks' room. GROUPS (nodeid -> key): the
    tests of one key go into one block as one unit (their estimates summed), one after the other in collection
    order, so that the module-scoped fixture they share (tests marked ``one_worker``: one sweep that several tests
    read) runs once; at a block's head, where stealing (which takes a queue's tail) leaves them together.
    Deterministic: every worker must compute the same order (xdist checks that all collected the same list)."""
    groups = groups or {}
    sizes = block_sizes(len(nodeids), max(1, n_workers))
    units: dict[str, list[int]] = {}  # a group's key, or a lone timed test's own id -> its tests' indices
    for i, n in enumerate(nodeids):
        if n in groups or estimate.get(n, 0) > 0:
            units.setdefault(groups.get(n, n), []).append(i)
    seconds = {key: sum(estimate.get(nodeids[i], 0.0) for i in members) for key, members in units.items()}
    blocks: list[list[int]] = [[] for _ in sizes]
    work = [0.0] * len(sizes)
    for key in sorted(units, key=lambda key: (-seconds[key], units[key][0])):
        members = units[key]
        room = [k for k in range(len(sizes)) if len(blocks[k]) + len(members) <= sizes[k]]
        k = min(room or range(len(sizes)), key=lambda k: (work[k], k))
        blocks[k].extend(members)
        work[k] += seconds[key]
    placed = {i for members in units.values() for i in members}
    rest = iter(i for i in range(len(nodeids)) if i not in placed)
    for k, size in enumerate(sizes):
        blocks[k].extend(itertools.islice(rest, max(0, size - len(blocks[k]))))
    return [i for block in blocks for i in block] + list(rest)  # (after a group too big for any block's room)


def longest_first(nodeids: list[str], estimate: dict[str, float]) -> list[int]:
    """The order for the other xdist schedulers: the known-slow tests longest first, then the rest as collected."""
    return sorted(range(len(nodeids)), key=lambda i: (-estimate.get(nodeids[i], 0.0), i))


def estimates(nodeids: list[str], e2e: set[str], recorded: dict[str, float]) -> dict[str, float]:
    """Each test's expected seconds: the recorded time, else UNLISTED_E2E_S for an end-to-end test, else 0."""
    return {n: recorded.get(n, UNLISTED_E2E_S if n in e2e else 0.0) for n in nodeids}
