#!/usr/bin/env bash
# A local PgBouncer in transaction mode with a small pool, in front of the
# PostgreSQL of DATABASE_URL (default 127.0.0.1:5432): the configuration
# DATABASE_POOL_MODE=transaction is for, for `make test-pooled` (CI) and
# `make run POOLER=1`. Installs Debian's pgbouncer when missing.
#
# Usage: deploy/local/pgbouncer.sh start|stop|url|version
#   start  start it (once) on a free loopback port and print its base URL,
#          postgres://postgres@127.0.0.1:PORT/?sslmode=disable (any database
#          name works: the pooler forwards every name to the server)
#   stop   stop it
#   url    print the running pooler's base URL (exit 1 when none runs)
#   version print PgBouncer's version (of PGBOUNCER_BIN)
# Environment: PGBOUNCER_POOL_SIZE (server connections per database and
# user, default 4: small, so that clients share them), PGBOUNCER_DIR (state
# and log; default $REPO/.local/pgbouncer, or as root, where PgBouncer runs
# as postgres and may not reach the repository, a directory under /tmp),
# PGBOUNCER_BIN (default /usr/sbin/pgbouncer, Debian 12's 1.18),
# PGBOUNCER_PREPARED_STATEMENTS (max_prepared_statements, default 0: none;
# above 0 the pooler tracks named prepared statements across its server
# connections, which needs PgBouncer 1.21 or later and is what
# DATABASE_POOLER_PREPARED_STATEMENTS=true is for).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ "$(id -u)" -eq 0 ]; then
  DIR="${PGBOUNCER_DIR:-/tmp/paysvc-pgbouncer-$(printf %s "$REPO" | cksum | cut -d' ' -f1)}"
else
  DIR="${PGBOUNCER_DIR:-$REPO/.local/pgbouncer}"
fi
POOL_SIZE="${PGBOUNCER_POOL_SIZE:-4}"
BIN="${PGBOUNCER_BIN:-/usr/sbin/pgbouncer}"
PREPARED="${PGBOUNCER_PREPARED_STATEMENTS:-0}"
[[ "$PREPARED" =~ ^[0-9]+$ ]] || { echo "pgbouncer.sh: ERROR: PGBOUNCER_PREPARED_STATEMENTS must be a count, got '$PREPARED'" >&2; exit 1; }

log() { echo "pgbouncer.sh: $*" >&2; }
die() { echo "pgbouncer.sh: ERROR: $*" >&2; exit 1; }

# The server: host and port of DATABASE_URL (userinfo and database dropped).
DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/payments?sslmode=disable}"
rest="${DATABASE_URL#*://}"
rest="${rest%%[/?]*}"
rest="${rest##*@}"
PG_HOST="${rest%%:*}"
PG_PORT=5432
if [[ "$rest" == *:* ]]; then PG_PORT="${rest##*:}"; fi
PG_HOST="${PG_HOST:-127.0.0.1}"

base_url() { echo "postgres://postgres@127.0.0.1:$1/?sslmode=disable"; }

pid_of() { cat "$DIR/pgbouncer.pid" 2>/dev/null || true; }

running_port() {
  local pid
  pid=$(pid_of)
  [ -n "$pid" ] && [ -f "$DIR/port" ] && kill -0 "$pid" 2>/dev/null || return 1
  cat "$DIR/port"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pgbouncer answers once it accepts a login and reaches the server.
answers() {
  PGCONNECT_TIMEOUT=3 psql -X -w -q -At -h 127.0.0.1 -p "$1" -U postgres -d postgres -c 'select 1' >/dev/null 2>&1
}

write_ini() {
  cat >"$DIR/pgbouncer.ini" <<INI
[databases]
; every database name goes to the same server
* = host=$PG_HOST port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $1
unix_socket_dir =
auth_type = trust
auth_file = $DIR/userlist.txt
pool_mode = transaction
default_pool_size = $POOL_SIZE
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 2000
; lib/pq sends it at startup; PgBouncer would refuse the login otherwise
ignore_startup_parameters = extra_float_digits
server_idle_timeout = 60
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
admin_users = postgres
log_connections = 0
log_disconnections = 0
INI
	# 1.18 refuses a setting it does not know, so it is written only when asked.
	[ "$PREPARED" -eq 0 ] || echo "max_prepared_statements = $PREPARED" >>"$DIR/pgbouncer.ini"
}

# settings: what a running pooler was started with, to reuse it only as asked.
settings() { echo "bin=$BIN pool=$POOL_SIZE prepared=$PREPARED"; }

# version prints the pooler's version, 1.18.0 say.
version() { "$BIN" --version 2>/dev/null | awk 'NR == 1 { print $2 }'; }

start() {
  local port
  if port=$(running_port) && answers "$port"; then
    # One started with other settings would not be what the caller asked for.
    [ "$(cat "$DIR/settings" 2>/dev/null)" = "$(settings)" ] ||
      die "a pooler with other settings ($(cat "$DIR/settings" 2>/dev/null || echo 'unknown: started by an older script')) runs from $DIR: stop it first (deploy/local/pgbouncer.sh stop)"
    base_url "$port"
    return 0
  fi
  if [ ! -x "$BIN" ] && [ -z "${PGBOUNCER_BIN:-}" ]; then
    log "installing Debian's pgbouncer"
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null \
      || { "${sudo[@]}" apt-get update -q >/dev/null && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null; } \
      || die "apt-get install pgbouncer failed (needs root or passwordless sudo)"
  fi
  [ -x "$BIN" ] || die "PGBOUNCER_BIN $BIN is not an executable"
  if [ "$PREPARED" -gt 0 ]; then
    local v
    v=$(version) || v=
    printf '%s\n%s\n' 1.21 "$v" | sort -V -C || die "PGBOUNCER_PREPARED_STATEMENTS needs PgBouncer 1.21 or later; $BIN is ${v:-of no version}"
  fi
  mkdir -p "$DIR"
  # Trust, as the test server does; the user must still be listed.
  echo '"postgres" ""' >"$DIR/userlist.txt"
  local user=() runas=""
  if [ "$(id -u)" -eq 0 ]; then
    # PgBouncer refuses to run as root: drop to postgres (or nobody).
    runas=postgres
    id "$runas" >/dev/null 2>&1 || runas=nobody
    user=(-u "$runas")
  fi
  # A free port may be taken between the probe and the bind (another run
  # starting its own pooler): then the next one is tried.
  local p pid deadline
  for p in $(seq 6432 6531); do
    port_free "$p" || continue
    write_ini "$p"
    : >"$DIR/pgbouncer.log"
    rm -f "$DIR/pgbouncer.pid" "$DIR/port"
    [ -z "$runas" ] || chown -R "$runas" "$DIR"
    "$BIN" -d "${user[@]}" "$DIR/pgbouncer.ini" || true
    deadline=$((SECONDS + 20))
    while ((SECONDS < deadline)); do
      if answers "$p"; then
        echo "$p" >"$DIR/port"
        settings >"$DIR/settings"
        log "$(version), transaction mode, pool $POOL_SIZE, prepared statements $PREPARED, on 127.0.0.1:$p in front of $PG_HOST:$PG_PORT (log $DIR/pgbouncer.log)"
        base_url "$p"
        return 0
      fi
      pid=$(pid_of)
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        sleep 0.2
        pid=$(pid_of)
        [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
      fi
      sleep 0.2
    done
    pid=$(pid_of)
    [ -z "$pid" ] || kill -INT "$pid" 2>/dev/null || true
    if ! grep -q 'Address already in use' "$DIR/pgbouncer.log"; then
      tail -20 "$DIR/pgbouncer.log" >&2
      die "pgbouncer on 127.0.0.1:$p did not answer within 20s (log $DIR/pgbouncer.log)"
    fi
  done
  die "no free loopback port in 6432-6531"
}

stop() {
  local pid
  pid=$(pid_of)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid" # SIGINT: a fast shutdown, clients dropped
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$DIR/pgbouncer.pid" "$DIR/port" "$DIR/settings"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) port=$(running_port) || exit 1; base_url "$port" ;;
  version) version ;;
  *) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
