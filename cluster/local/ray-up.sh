#!/usr/bin/env bash
# Start a Ray cluster on this machine: one head and $RAY_WORKERS worker nodes, each its own
# `ray start` (its own raylet, CPUs and temp dir), all on loopback, with token authentication.
# Then: source "$RIRLAB_CLUSTER_DIR/ray.env" && rirlab sweep SPEC --address "$RAY_ADDRESS"
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ -x "$VENV_BIN/ray" ] || die "$VENV_BIN/ray not found; run bash scripts/setup.sh first (or set VENV_BIN)"
[ -n "$(pids_under "$RAY_DIR")" ] && die "a cluster from $RAY_DIR is already running; stop it with cluster/local/ray-down.sh"
mkdir -p "$RAY_DIR" "$SECRETS_DIR"
chmod 700 "$SECRETS_DIR"
new_secret "$RAY_AUTH_TOKEN_PATH"
common=(--node-ip-address 127.0.0.1 --object-store-memory "$RAY_OBJECT_STORE_BYTES" --disable-usage-stats
        --dashboard-agent-listen-port 0 --log-style record)
"$VENV_BIN/ray" start --head --port "$RAY_HEAD_PORT" --num-cpus "$RAY_HEAD_CPUS" --include-dashboard=false \
  --dashboard-port "$RAY_DASHBOARD_PORT" --temp-dir "$RAY_DIR/head" "${common[@]}" > "$RAY_DIR/head.log" 2>&1 \
  || { tail -20 "$RAY_DIR/head.log" >&2; die "ray start --head failed (log: $RAY_DIR/head.log)"; }
for i in $(seq 1 "$RAY_WORKERS"); do
  "$VENV_BIN/ray" start --address "127.0.0.1:$RAY_HEAD_PORT" --num-cpus "$RAY_WORKER_CPUS" \
    --temp-dir "$RAY_DIR/worker$i" "${common[@]}" > "$RAY_DIR/worker$i.log" 2>&1 \
    || { tail -20 "$RAY_DIR/worker$i.log" >&2; die "worker $i failed to join (log: $RAY_DIR/worker$i.log)"; }
done
want=$((RAY_WORKERS + 1))  # a worker's `ray start` returns before the head lists it: wait until all are in
for _ in $(seq 60); do
  have=$("$VENV_BIN/ray" status --address "127.0.0.1:$RAY_HEAD_PORT" 2>/dev/null | grep -c '^ 1 node_' || true)
  [ "$have" -ge "$want" ] && break
  sleep 1
done
[ "$have" -ge "$want" ] || die "only $have of $want Ray nodes registered within 60 s (logs: $RAY_DIR)"
cat > "$RIRLAB_CLUSTER_DIR/ray.env" <<ENV
export RAY_ADDRESS=127.0.0.1:$RAY_HEAD_PORT
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH
ENV
echo "Ray head 127.0.0.1:$RAY_HEAD_PORT ($RAY_HEAD_CPUS CPU) + $RAY_WORKERS worker node(s) x $RAY_WORKER_CPUS CPU"
echo "client settings: source $RIRLAB_CLUSTER_DIR/ray.env"
