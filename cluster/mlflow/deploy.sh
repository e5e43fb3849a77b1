#!/usr/bin/env bash
# Deploy the shared MLflow tracking server (docker compose): PostgreSQL + MinIO + MLflow with basic auth.
#   cluster/mlflow/deploy.sh [up|down|status|client-env]
# First run writes .env (mode 600) with random passwords and binds MLflow to this host's first private
# address (10/8, 172.16/12, 192.168/16), else 127.0.0.1; set MLFLOW_BIND / MLFLOW_PORT in .env to change it.
set -euo pipefail
cd "$(dirname "$0")"
secret() { python3 -c "import secrets; print(secrets.token_hex(24))"; }
private_ip() {
  ip -4 -o addr show scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]}' \
    | grep -E '^(10\.|192\.168\.|172\.(1[6-9]|2[0-9]|3[01])\.)' | head -1
}
if [ ! -f .env ]; then
  bind=$(private_ip); bind=${bind:-127.0.0.1}
  (umask 077 && cat > .env <<ENV
MLFLOW_BIND=$bind
MLFLOW_PORT=5000
MLFLOW_ADMIN_PASSWORD=$(secret)
MLFLOW_FLASK_SECRET=$(secret)
PG_PASSWORD=$(secret)
MINIO_USER=mlflow
MINIO_PASSWORD=$(secret)
ENV
)
  echo "wrote $(pwd)/.env (secrets; keep it out of git)"
fi
set -a; source ./.env; set +a
[ "$MLFLOW_BIND" = 0.0.0.0 ] && { echo "error: MLFLOW_BIND=0.0.0.0 exposes the server on every interface; use a private address" >&2; exit 2; }
case "${1:-up}" in
  up)
    docker compose up -d --build
    for _ in $(seq 60); do
      curl -fsS "http://$MLFLOW_BIND:$MLFLOW_PORT/health" > /dev/null 2>&1 && break; sleep 2
    done
    curl -fsS "http://$MLFLOW_BIND:$MLFLOW_PORT/health" > /dev/null || { docker compose logs --tail 50 mlflow; exit 1; }
    echo "MLflow http://$MLFLOW_BIND:$MLFLOW_PORT (user admin); client settings: $0 client-env" ;;
  down) docker compose down ;;
  status) docker compose ps ;;
  client-env)  # what `rirlab sweep` needs; create per-person users instead of sharing admin (README)
    echo "export MLFLOW_TRACKING_URI=http://$MLFLOW_BIND:$MLFLOW_PORT"
    echo "export MLFLOW_TRACKING_USERNAME=admin"
    echo "export MLFLOW_TRACKING_PASSWORD=$MLFLOW_ADMIN_PASSWORD" ;;
  *) echo "usage: $0 [up|down|status|client-env]" >&2; exit 2 ;;
esac
