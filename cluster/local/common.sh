# Shared settings of the local walkthrough scripts (sourced, not run). Every value can be overridden
# from the environment; everything the scripts create lives under $RIRLAB_CLUSTER_DIR.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RIRLAB_CLUSTER_DIR="${RIRLAB_CLUSTER_DIR:-/tmp/rirlab-cluster}"
VENV_BIN="${VENV_BIN:-$REPO/.venv/bin}"
RAY_HEAD_PORT="${RAY_HEAD_PORT:-6390}"          # GCS port: the address clients and workers join
RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8275}" # not 8265, so a default local Ray elsewhere keeps its port
RAY_HEAD_CPUS="${RAY_HEAD_CPUS:-0}"              # head schedules no trials, like a real cluster's head
RAY_WORKERS="${RAY_WORKERS:-2}"                  # worker nodes, each a separate `ray start` (raylet)
RAY_WORKER_CPUS="${RAY_WORKER_CPUS:-1}"
RAY_OBJECT_STORE_BYTES="${RAY_OBJECT_STORE_BYTES:-200000000}"
PG_PORT="${PG_PORT:-5439}"
MLFLOW_HOST="${MLFLOW_HOST:-127.0.0.1}"          # loopback; a private interface on a real server, never 0.0.0.0
MLFLOW_PORT="${MLFLOW_PORT:-5055}"

RAY_DIR="$RIRLAB_CLUSTER_DIR/ray"
PG_DIR="$RIRLAB_CLUSTER_DIR/pg"
MLFLOW_DIR="$RIRLAB_CLUSTER_DIR/mlflow"
SECRETS_DIR="$RIRLAB_CLUSTER_DIR/secrets"
# Ray 2.60 (this venv) clusters require a token (token authentication): every node and every client
# (the `rirlab sweep` driver) must present the same one. We keep it in a file of our own.
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH="$SECRETS_DIR/ray_auth_token"

die() { echo "error: $*" >&2; exit 2; }

new_secret() {  # new_secret FILE: a random 64-hex-digit secret in FILE (mode 600) unless it exists
  [ -s "$1" ] && return 0
  (umask 077 && "$VENV_BIN/python" -c "import secrets; print(secrets.token_hex(32))" > "$1")
}

# pids of the Ray processes that name a session under DIR on their command line, plus all their
# descendants (Ray retitles its worker processes, so those are found through their parents)
pids_under() {
  local dir="$1"
  ps -eo pid=,ppid=,args= | awk -v d="$dir/" '
    { pid[NR]=$1; ppid[NR]=$2; line=$0; sub(/^ *[0-9]+ +[0-9]+ +/, "", line)
      while ((i = index(line, d)) > 0) {
        line = substr(line, i + length(d)); tok = line; sub(/ .*/, "", tok)
        if (tok ~ /session_/) { mark[$1]=1; break } } }
    END { changed=1; while (changed) { changed=0
            for (i in pid) if (!(pid[i] in mark) && (ppid[i] in mark)) { mark[pid[i]]=1; changed=1 } }
          for (p in mark) print p }'
}

kill_pids() {  # kill_pids PID...: SIGTERM, up to 10 s grace, then SIGKILL
  [ $# -eq 0 ] && return 0
  kill -TERM "$@" 2>/dev/null || true
  for _ in $(seq 20); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.5
  done
  kill -KILL "$@" 2>/dev/null || true
}
