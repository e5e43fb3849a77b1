#!/usr/bin/env bash
# Stop what mlflow-up.sh started: the MLflow server's process group (by its pid file), then PostgreSQL.
# The data stays in $RIRLAB_CLUSTER_DIR; mlflow-up.sh starts it again, rm -rf the directory to forget it.
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ -f "$MLFLOW_DIR/server.pid" ]; then
  pid=$(cat "$MLFLOW_DIR/server.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || true  # setsid made it a group leader: the server and its workers
    for _ in $(seq 20); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$MLFLOW_DIR/server.pid"
  echo "stopped the MLflow server"
fi
PG_BIN="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
if [ -f "$PG_DIR/data/postmaster.pid" ]; then
  as_pg=(); [ "$(id -u)" = 0 ] && as_pg=(runuser -u postgres --)
  "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop > /dev/null && echo "stopped PostgreSQL"
fi
