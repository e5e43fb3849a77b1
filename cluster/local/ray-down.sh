#!/usr/bin/env bash
# Stop the cluster that ray-up.sh started: only the processes whose command line names
# $RIRLAB_CLUSTER_DIR/ray (and their children), by pid. Never `ray stop`, which kills every Ray on the machine.
set -euo pipefail
source "$(dirname "$0")/common.sh"
pids=$(pids_under "$RAY_DIR")
# shellcheck disable=SC2086
kill_pids $pids
echo "stopped $(echo $pids | wc -w) Ray process(es) of $RAY_DIR"
