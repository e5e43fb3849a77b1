#!/usr/bin/env bash
# The CPU seconds of tests, before and after a change: each TEST_ID runs in BEFORE (an earlier checkout of the
# repository, e.g. `git worktree add /tmp/before <commit>`) and in this checkout at the same time, both on CPU $CORE
# (default 1), each in a cgroup of its own, so the figure counts the test and everything it starts (the sweep's
# driver, its Ray, its trials' workers, an MLflow server) however loaded the machine is. Wall seconds are printed
# too, but two tests sharing a core finish closer together than they would alone: compare the CPU seconds.
#   bash benchmarks/test_cpu.sh BEFORE TEST_ID...      (root: it makes cgroups; pytest -n 0, one torch thread)
# Both trees import rirlab from the environment's python ($PYTHON, default .venv/bin/python): the tests differ,
# the package is the one installed. BEFORE_PACKAGE=1: BEFORE's tests run its own rirlab instead (a copy of BEFORE
# with sweeps/ and analysis/ inside rirlab/, as a wheel installs them, first on its PYTHONPATH; the sweeps' drivers
# and Ray workers inherit it), for a change to the package itself. CI's wall time is about the suite's CPU seconds
# over its two cores. TOGETHER=1: all the TEST_IDs in one pytest session on each side, one figure for them (tests
# that share a module-scoped fixture, e.g. one sweep that several tests read: measured apart, each pays for it).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bash benchmarks/test_cpu.sh BEFORE_CHECKOUT TEST_ID..." >&2; exit 2; }
before=$(cd "$1" 2>/dev/null && pwd) || { echo "error: no folder $1: give an earlier checkout of the repository" >&2; exit 2; }
shift
after=$(pwd)
before_path=""
if [ "${BEFORE_PACKAGE:-0}" = 1 ]; then
  copy=$(mktemp -d /tmp/test_cpu_before_XXXXXX) && tar -C "$before" --exclude=./.git --exclude=./.venv -cf - . |
    tar -C "$copy" -xf - &&
    mv "$copy/sweeps" "$copy/rirlab/sweeps" && mv "$copy/analysis" "$copy/rirlab/analysis" ||
    { echo "error: cannot assemble the package of $before (rirlab/, sweeps/, analysis/) in a copy" >&2; exit 2; }
  trap 'rm -rf "$copy"' EXIT
  before=$copy before_path=$copy
fi
PY=${PYTHON:-$after/.venv/bin/python}
CORE=${CORE:-1}
if [ -d /sys/fs/cgroup/cpuacct ]; then root=/sys/fs/cgroup/cpuacct; usage() { echo $(( $(cat "$1/cpuacct.usage") / 1000000 )); }
else root=/sys/fs/cgroup; usage() { echo $(( $(awk '/^usage_usec/ {print $2}' "$1/cpu.stat") / 1000 )); }; fi
measure() {  # measure NAME DIR TEST_ID...: "wall_s cpu_s rc"
  local cg="$root/test_cpu_$1_$$" start rc
  mkdir "$cg" || { echo "error: cannot make a cgroup under $root (run as root)" >&2; return 2; }
  start=$(date +%s.%N)
  local path=""; [ "$1" = before ] && path=$before_path
  (cd "$2" && echo $BASHPID > "$cg/cgroup.procs" && PYTHONPATH=$path${PYTHONPATH:+${path:+:}$PYTHONPATH} \
    OMP_NUM_THREADS=1 exec taskset -c "$CORE" "$PY" -m pytest -n 0 -p no:cacheprovider -q "${@:3}" \
    > "/tmp/test_cpu_$1_$$.log" 2>&1)
  rc=$?
  sleep 2  # the test's last processes exit
  printf "%.0f %.1f %s\n" "$(echo "$(date +%s.%N) - $start - 2" | bc)" "$(echo "scale=1; $(usage "$cg") / 1000" | bc)" "$rc"
  rmdir "$cg" 2>/dev/null || true
}
pair() {  # pair TEST_ID...: both sides at once, one line
  measure before "$before" "$@" > "/tmp/test_cpu_before_$$.out" &
  measure after "$after" "$@" > "/tmp/test_cpu_after_$$.out" &
  wait
  read -r bw bc brc < "/tmp/test_cpu_before_$$.out"; read -r aw ac arc < "/tmp/test_cpu_after_$$.out"
  echo "$*: before ${bc} s CPU (wall ${bw} s, rc ${brc}), after ${ac} s CPU (wall ${aw} s, rc ${arc})"
}
if [ "${TOGETHER:-0}" = 1 ]; then pair "$@"; else for id in "$@"; do pair "$id"; done; fi
