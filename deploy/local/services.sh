#!/usr/bin/env bash
# Ensure PostgreSQL and Redis answer at DATABASE_URL / REDIS_URL (defaults
# 127.0.0.1:5432 and 127.0.0.1:6379), and that the database named in
# DATABASE_URL exists. Idempotent and silent when everything is already up.
#
# When a local service does not answer, in order:
#   PostgreSQL: start the Debian system cluster if one is installed and listens
#               on the wanted port (pg_ctlcluster); otherwise install Debian's
#               postgresql (once) and use its cluster, or initdb a trust-auth
#               data dir under $REPO/.local/pgdata listening on 127.0.0.1:PORT.
#   Redis:      install Debian's redis-server if missing, then run a
#               non-persistent redis-server daemon (data and log under .local/).
# Remote hosts are never started: the script only waits for them.
#   stripe-mock: `go install github.com/stripe/stripe-mock@v0.183.0` when it is
#               not on PATH nor in $(go env GOPATH)/bin: the Stripe adapter's
#               tests start it (v0.183.0 embeds API version 2023-10-16, the
#               one stripe-go v76 pins), and fail under CI without it.
#
# Usage: deploy/local/services.sh [--chromium]
#   --chromium  also install Debian's chromium if /usr/bin/chromium is missing
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOCAL_DIR="$REPO/.local"
WAIT_SECONDS=30
WANT_CHROMIUM=0

for arg in "$@"; do
  case "$arg" in
    --chromium) WANT_CHROMIUM=1 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "services.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

log() { echo "services.sh: $*" >&2; }
die() { echo "services.sh: ERROR: $*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && SUDO=(sudo -n)
fi

APT_UPDATED=0
APT_LOG=""
apt_run() {
  [ -n "$APT_LOG" ] || APT_LOG=$(mktemp)
  if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive "$@" >"$APT_LOG" 2>&1; then
    cat "$APT_LOG" >&2
    die "$* failed (needs root or passwordless sudo)"
  fi
}
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "cannot install $*: apt-get not found (install it by hand)"
  if [ "$APT_UPDATED" -eq 0 ]; then
    log "apt-get update"
    apt_run apt-get update -q
    APT_UPDATED=1
  fi
  log "apt-get install -y $*"
  apt_run apt-get install -y -q "$@"
}

# Percent-decoding for URL userinfo.
urldecode() { local s="${1//+/ }"; printf '%b' "${s//%/\\x}"; }

is_local_host() {
  case "$1" in 127.0.0.1|localhost|::1|"") return 0 ;; *) return 1 ;; esac
}

# Split "[user[:pass]@]host[:port]" (IPv6 hosts in brackets) into
# U_USER U_PASS U_HOST U_PORT.
split_authority() {
  local auth="$1" hostport
  U_USER="" U_PASS=""
  if [[ "$auth" == *@* ]]; then
    local userinfo="${auth%@*}"
    hostport="${auth##*@}"
    if [[ "$userinfo" == *:* ]]; then
      U_USER=$(urldecode "${userinfo%%:*}")
      U_PASS=$(urldecode "${userinfo#*:}")
    else
      U_USER=$(urldecode "$userinfo")
    fi
  else
    hostport="$auth"
  fi
  if [[ "$hostport" == \[*\]* ]]; then
    U_HOST="${hostport#[}"; U_HOST="${U_HOST%%]*}"
    U_PORT="${hostport##*]}"; U_PORT="${U_PORT#:}"
  else
    U_HOST="${hostport%%:*}"
    U_PORT=""
    if [[ "$hostport" == *:* ]]; then U_PORT="${hostport#*:}"; fi
  fi
}

# ---------------------------------------------------------------- PostgreSQL

DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/payments?sslmode=disable}"
rest="${DATABASE_URL#*://}"
rest="${rest%%\?*}"
authority="${rest%%/*}"
PG_DB=""
if [[ "$rest" == */* ]]; then PG_DB=$(urldecode "${rest#*/}"); fi
split_authority "$authority"
PG_HOST="${U_HOST:-127.0.0.1}"
PG_PORT="${U_PORT:-5432}"
PG_USER="${U_USER:-postgres}"
PG_DB="${PG_DB:-$PG_USER}"
export PGCONNECT_TIMEOUT=5
if [ -n "$U_PASS" ]; then export PGPASSWORD="$U_PASS"; fi

pg_answers() {
  command -v pg_isready >/dev/null 2>&1 || return 1
  pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 2 >/dev/null 2>&1
}

pg_wait() {
  local deadline=$((SECONDS + WAIT_SECONDS))
  while ((SECONDS < deadline)); do
    pg_answers && return 0
    sleep 0.5
  done
  return 1
}

# Run a command as the postgres OS user (postgres refuses to run as root).
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# The first Debian cluster (version/main), if one is installed.
debian_cluster_version() {
  local v
  [ -d /etc/postgresql ] || return 1
  v=$(ls /etc/postgresql | head -1)
  [ -n "$v" ] && [ -f "/etc/postgresql/$v/main/postgresql.conf" ] || return 1
  echo "$v"
}

debian_cluster_port() {
  local p
  p=$(sed -n 's/^[[:space:]]*port[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' \
    "/etc/postgresql/$1/main/postgresql.conf" | tail -1)
  echo "${p:-5432}"
}

# Put trust lines for 127.0.0.1/32 and ::1 at the top of a fresh cluster's
# pg_hba.conf (Debian's default asks for scram-sha-256 over TCP).
trust_tcp_loopback() {
  local hba="$1" marker="# paysvc deploy/local/services.sh: trust on loopback"
  grep -qF "$marker" "$hba" && return 0
  log "setting trust auth for 127.0.0.1/32 and ::1/128 in $hba"
  local tmp
  tmp=$(mktemp)
  {
    echo "$marker"
    echo "host    all    all    127.0.0.1/32    trust"
    echo "host    all    all    ::1/128         trust"
    cat "$hba"
  } >"$tmp"
  cat "$tmp" >"$hba"
  rm -f "$tmp"
}

pg_bin() {
  local b
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return; fi
  b=$(ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -1)
  [ -n "$b" ] || die "$1 not found (is the postgresql package installed?)"
  echo "$b"
}

# initdb (once) and start a private trust-auth cluster on 127.0.0.1:$PG_PORT.
start_own_cluster() {
  local data="$LOCAL_DIR/pgdata" initdb pg_ctl listen
  initdb=$(pg_bin initdb)
  pg_ctl=$(pg_bin pg_ctl)
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
    mkdir -p "$LOCAL_DIR"
    if ! runuser -u postgres -- test -x "$LOCAL_DIR"; then
      data=/var/lib/postgresql/paysvc-pgdata
      log "user postgres cannot reach $LOCAL_DIR; using $data"
    fi
    mkdir -p "$data"
    chown postgres:postgres "$data"
  else
    mkdir -p "$data"
  fi
  chmod 700 "$data"
  if [ ! -f "$data/PG_VERSION" ]; then
    log "initdb $data (trust auth)"
    as_postgres "$initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-locale >/dev/null \
      || die "initdb $data failed"
    # TCP only: no unix socket directory to create or own.
    as_postgres sh -c "echo \"unix_socket_directories = ''\" >> '$data/postgresql.conf'"
  fi
  case "$PG_HOST" in
    localhost) listen=localhost ;;
    ::1) listen='::1' ;;
    *) listen=127.0.0.1 ;;
  esac
  log "starting PostgreSQL from $data on $listen:$PG_PORT"
  as_postgres "$pg_ctl" -D "$data" -l "$data/server.log" -w -t "$WAIT_SECONDS" \
    -o "-p $PG_PORT -c listen_addresses=$listen" start >/dev/null \
    || die "PostgreSQL from $data did not start (see $data/server.log)"
}

# Start the Debian cluster $1 if it listens on PG_PORT; fails otherwise.
start_debian_cluster() {
  local v="$1"
  [ "$(debian_cluster_port "$v")" = "$PG_PORT" ] || return 1
  if pg_ctlcluster "$v" main status >/dev/null 2>&1; then
    return 0 # running (maybe still starting): pg_wait decides
  fi
  log "starting PostgreSQL cluster $v/main"
  pg_ctlcluster --skip-systemctl-redirect "$v" main start \
    || die "pg_ctlcluster $v main start failed (see /var/log/postgresql/)"
}

ensure_postgres() {
  local fresh=0 started=0 v=""
  command -v pg_isready >/dev/null 2>&1 || apt_install postgresql-client
  if ! pg_answers; then
    if ! is_local_host "$PG_HOST"; then
      log "waiting for remote PostgreSQL at $PG_HOST:$PG_PORT"
    else
      if ! v=$(debian_cluster_version) && ! command -v initdb >/dev/null 2>&1 \
        && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        apt_install postgresql
        fresh=1
        v=$(debian_cluster_version) || v=""
        # The package may have started its cluster already.
        pg_answers && started=1
      fi
      if ! pg_answers; then
        if [ -n "$v" ] && start_debian_cluster "$v"; then
          started=1
        else
          start_own_cluster
          started=1
        fi
      fi
    fi
    pg_wait || die "PostgreSQL at $PG_HOST:$PG_PORT did not answer within ${WAIT_SECONDS}s"
  fi

  local psql=(psql -X -w -q -At -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER")
  if ! "${psql[@]}" -d postgres -c 'select 1' >/dev/null 2>&1; then
    # A cluster this run installed or started: let postgres in over TCP.
    if [ "$started" -eq 1 ] && [ -n "$v" ] && [ "$(debian_cluster_port "$v")" = "$PG_PORT" ]; then
      local hba
      hba=$(as_postgres psql -X -Atqc 'show hba_file' 2>/dev/null) || hba="/etc/postgresql/$v/main/pg_hba.conf"
      if [ "$fresh" -eq 1 ] || ! grep -qE '^[[:space:]]*host[[:space:]].*127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
        trust_tcp_loopback "$hba"
        pg_ctlcluster --skip-systemctl-redirect "$v" main reload >/dev/null
        sleep 1
      fi
    fi
    "${psql[@]}" -d postgres -c 'select 1' >/dev/null 2>&1 || {
      "${psql[@]}" -d postgres -c 'select 1' || true
      die "PostgreSQL at $PG_HOST:$PG_PORT answers but role '$PG_USER' cannot log in over TCP \
(the tests expect trust auth for 127.0.0.1: add 'host all all 127.0.0.1/32 trust' to pg_hba.conf and reload)"
    }
  fi

  local exists
  exists=$("${psql[@]}" -d postgres -c "select 1 from pg_database where datname = '${PG_DB//\'/\'\'}'")
  if [ "$exists" != 1 ]; then
    log "creating database $PG_DB"
    createdb -w -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" "$PG_DB" 2>/dev/null \
      || [ "$("${psql[@]}" -d postgres -c "select 1 from pg_database where datname = '${PG_DB//\'/\'\'}'")" = 1 ] \
      || die "could not create database $PG_DB as role $PG_USER"
  fi
}

# --------------------------------------------------------------------- Redis

REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
rest="${REDIS_URL#*://}"
rest="${rest%%\?*}"
split_authority "${rest%%/*}"
RD_HOST="${U_HOST:-127.0.0.1}"
RD_PORT="${U_PORT:-6379}"
if [ -n "$U_PASS" ]; then export REDISCLI_AUTH="$U_PASS"; fi
RD_CLI=(redis-cli -h "$RD_HOST" -p "$RD_PORT")
if [ -n "$U_USER" ]; then RD_CLI+=(--user "$U_USER"); fi
if [[ "$REDIS_URL" == rediss://* ]]; then RD_CLI+=(--tls); fi

redis_answers() {
  command -v redis-cli >/dev/null 2>&1 || return 1
  [ "$(timeout 3 "${RD_CLI[@]}" ping 2>/dev/null)" = PONG ]
}

ensure_redis() {
  command -v redis-cli >/dev/null 2>&1 || apt_install redis-tools
  redis_answers && return 0
  if ! is_local_host "$RD_HOST"; then
    log "waiting for remote Redis at $RD_HOST:$RD_PORT"
  else
    if ! command -v redis-server >/dev/null 2>&1; then
      apt_install redis-server
    fi
    if ! redis_answers; then
      local bind=127.0.0.1
      case "$RD_HOST" in ::1) bind='::1' ;; localhost) bind='127.0.0.1 -::1' ;; esac
      mkdir -p "$LOCAL_DIR/redis"
      log "starting redis-server on $RD_HOST:$RD_PORT (no persistence, log $LOCAL_DIR/redis.log)"
      # shellcheck disable=SC2086 # $bind holds one or two addresses
      redis-server --daemonize yes --bind $bind --port "$RD_PORT" --save "" --appendonly no \
        --dir "$LOCAL_DIR/redis" --logfile "$LOCAL_DIR/redis.log" >/dev/null \
        || die "redis-server failed to start (see $LOCAL_DIR/redis.log)"
    fi
  fi
  local deadline=$((SECONDS + WAIT_SECONDS))
  while ((SECONDS < deadline)); do
    redis_answers && return 0
    sleep 0.5
  done
  die "Redis at $RD_HOST:$RD_PORT did not answer PING within ${WAIT_SECONDS}s"
}

# ------------------------------------------------------------------ Chromium

ensure_chromium() {
  [ -x /usr/bin/chromium ] && return 0
  apt_install chromium
  [ -x /usr/bin/chromium ] || die "chromium installed but /usr/bin/chromium is missing"
}

# ---------------------------------------------------------------- stripe-mock

STRIPE_MOCK_VERSION=v0.183.0

ensure_stripe_mock() {
  command -v go >/dev/null 2>&1 || return 0 # no Go, no tests to serve
  command -v stripe-mock >/dev/null 2>&1 && return 0
  [ -x "$(go env GOPATH)/bin/stripe-mock" ] && return 0
  log "installing stripe-mock $STRIPE_MOCK_VERSION (go install)"
  go install "github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION" || die "go install stripe-mock failed"
}

ensure_postgres
ensure_redis
ensure_stripe_mock
if [ "$WANT_CHROMIUM" -eq 1 ]; then ensure_chromium; fi
if [ -n "$APT_LOG" ]; then rm -f "$APT_LOG"; fi
