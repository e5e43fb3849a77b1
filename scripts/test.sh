#!/usr/bin/env bash
# The test command: set up (if needed), then run the suite. Extra arguments go to pytest
# (e.g. `bash scripts/test.sh -m "not e2e"`, the fast subset; `bash scripts/test.sh -m browser`).
# "No tests collected" (pytest exit 5) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# the tests run in parallel (pytest-xdist), a worker per core: a test is one process's work, mostly one thread (on
# this 2-core machine 2 workers: 9m00s on a fresh clone, the fast subset -m "not e2e" 2m27s; 3 workers made the
# full-disk resume test flaky). Under xdist the slowest tests start first, one at the head of each worker's share
# (tests/helpers/schedule.py reads their times from tests/durations.txt).
# RIRLAB_TEST_WORKERS=0 runs them in this process (e.g. under a debugger); -n N sets the count.
.venv/bin/python -m pytest -n "${RIRLAB_TEST_WORKERS:-auto}" --dist worksteal "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi
exit "$rc"
