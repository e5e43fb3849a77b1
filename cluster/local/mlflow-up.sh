#!/usr/bin/env bash
# Start a PostgreSQL-backed MLflow tracking server on loopback with basic authentication:
#   PostgreSQL 15 (Debian's `postgresql` package) in $RIRLAB_CLUSTER_DIR/pg on 127.0.0.1:$PG_PORT,
#   MLflow on $MLFLOW_HOST:$MLFLOW_PORT, artifacts proxied by the server into $RIRLAB_CLUSTER_DIR/mlflow/artifacts.
# Then: source "$RIRLAB_CLUSTER_DIR/mlflow.env" (MLFLOW_TRACKING_URI/USERNAME/PASSWORD) and run sweeps.
set -euo pipefail
source "$(dirname "$0")/common.sh"
PG_BIN="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
[ -x "$PG_BIN/initdb" ] || die "PostgreSQL not found; install it: apt-get update && apt-get install -y postgresql (or set PG_BIN)"
"$VENV_BIN/python" -c "import psycopg2, flask_wtf" 2>/dev/null \
  || die "the MLflow server needs psycopg2 and Flask-WTF: $VENV_BIN/pip install -e '$REPO[cluster]'"
[ -f "$MLFLOW_DIR/server.pid" ] && kill -0 "$(cat "$MLFLOW_DIR/server.pid")" 2>/dev/null \
  && die "an MLflow server from $MLFLOW_DIR is already running; stop it with cluster/local/mlflow-down.sh"
mkdir -p "$PG_DIR" "$MLFLOW_DIR/artifacts" "$SECRETS_DIR"
chmod 700 "$SECRETS_DIR"
new_secret "$SECRETS_DIR/pg_password"
new_secret "$SECRETS_DIR/mlflow_admin_password"
new_secret "$SECRETS_DIR/mlflow_flask_secret_key"  # CSRF key of the basic-auth app
PG_PASSWORD=$(cat "$SECRETS_DIR/pg_password")
# the server finds the database password in a libpq password file, so it never shows up in `ps`
(umask 077 && echo "127.0.0.1:$PG_PORT:*:postgres:$PG_PASSWORD" > "$SECRETS_DIR/pgpass")
export PGPASSFILE="$SECRETS_DIR/pgpass"

# PostgreSQL refuses to run as root: as root, the database belongs to the `postgres` system user
as_pg=()
if [ "$(id -u)" = 0 ]; then
  as_pg=(runuser -u postgres --)
  chown postgres: "$PG_DIR"
  "${as_pg[@]}" test -w "$PG_DIR" || die "user postgres cannot write $PG_DIR; put RIRLAB_CLUSTER_DIR where it can (e.g. /tmp/...)"
fi
if [ ! -f "$PG_DIR/data/PG_VERSION" ]; then
  pwfile="$PG_DIR/.pw"; (umask 077 && cat "$SECRETS_DIR/pg_password" > "$pwfile")
  [ ${#as_pg[@]} -gt 0 ] && chown postgres: "$pwfile"
  "${as_pg[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --pwfile="$pwfile" --auth=scram-sha-256 \
    --encoding=UTF8 > "$PG_DIR/initdb.log" 2>&1 || { rm -f "$pwfile"; tail "$PG_DIR/initdb.log" >&2; die "initdb failed"; }
  rm -f "$pwfile"
fi
# TCP on 127.0.0.1 only, no unix socket (its default directory may not exist or be writable)
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w -t 60 \
  -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" start > /dev/null \
  || { tail "$PG_DIR/postgres.log" >&2; die "PostgreSQL did not start (log: $PG_DIR/postgres.log)"; }
psql_pg() { PGPASSWORD="$PG_PASSWORD" "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -v ON_ERROR_STOP=1 -qtAc "$1"; }
for db in mlflow mlflow_auth; do  # runs + experiments; users + permissions of the basic-auth app
  [ "$(psql_pg "SELECT 1 FROM pg_database WHERE datname='$db'")" = 1 ] || psql_pg "CREATE DATABASE $db"
done

# basic auth: admin user `admin`, password in $SECRETS_DIR; new users default to READ on others' experiments
admin_pw=$(cat "$SECRETS_DIR/mlflow_admin_password")
(umask 077 && cat > "$MLFLOW_DIR/basic_auth.ini" <<INI
[mlflow]
default_permission = READ
database_uri = postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/mlflow_auth
admin_username = admin
admin_password = $admin_pw
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
)
cd "$MLFLOW_DIR"
MLFLOW_FLASK_SERVER_SECRET_KEY=$(cat "$SECRETS_DIR/mlflow_flask_secret_key") \
MLFLOW_AUTH_CONFIG_PATH="$MLFLOW_DIR/basic_auth.ini" setsid "$VENV_BIN/mlflow" server --app-name basic-auth \
  --backend-store-uri "postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/mlflow" \
  --artifacts-destination "$MLFLOW_DIR/artifacts" --serve-artifacts \
  --host "$MLFLOW_HOST" --port "$MLFLOW_PORT" --workers 1 > "$MLFLOW_DIR/server.log" 2>&1 < /dev/null &
echo $! > "$MLFLOW_DIR/server.pid"
for _ in $(seq 120); do
  if "$VENV_BIN/python" -c "import urllib.request as u; u.urlopen('http://$MLFLOW_HOST:$MLFLOW_PORT/health', timeout=2)" 2>/dev/null; then
    (umask 077 && cat > "$RIRLAB_CLUSTER_DIR/mlflow.env" <<ENV
export MLFLOW_TRACKING_URI=http://$MLFLOW_HOST:$MLFLOW_PORT
export MLFLOW_TRACKING_USERNAME=admin
export MLFLOW_TRACKING_PASSWORD=$admin_pw
ENV
)
    echo "MLflow http://$MLFLOW_HOST:$MLFLOW_PORT (basic auth, PostgreSQL 127.0.0.1:$PG_PORT, artifacts $MLFLOW_DIR/artifacts)"
    echo "client settings: source $RIRLAB_CLUSTER_DIR/mlflow.env"
    exit 0
  fi
  kill -0 "$(cat "$MLFLOW_DIR/server.pid")" 2>/dev/null || break
  sleep 1
done
tail -20 "$MLFLOW_DIR/server.log" >&2
die "the MLflow server did not come up (log: $MLFLOW_DIR/server.log); stop the rest with cluster/local/mlflow-down.sh"
