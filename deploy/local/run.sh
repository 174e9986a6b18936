#!/usr/bin/env bash
# Run the whole service on this machine in the foreground: ensure PostgreSQL
# and Redis (services.sh), apply migrations, then api, worker and scheduler
# side by side, each output line prefixed with its process name. Ctrl-C (or
# any process exiting) stops all three: SIGTERM, then SIGKILL after 15 s.
#
# Expects bin/ to be built (`make run` builds first). The three processes
# share this one environment, every variable of the service's configuration
# included; each takes its own admin listener by the configuration's rule:
#   api ADMIN_ADDR (127.0.0.1:8081), worker its port +1, scheduler +2,
# unless API_ADMIN_ADDR, WORKER_ADMIN_ADDR or SCHEDULER_ADMIN_ADDR is set.
# POOLER=1 puts a local PgBouncer in transaction mode in front of PostgreSQL.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"

for b in api worker scheduler; do
  [ -x "bin/$b" ] || { echo "run.sh: bin/$b is missing: run 'make build' (or 'make run')" >&2; exit 1; }
done

bash deploy/local/services.sh
# POOLER=1 (make run POOLER=1): the three processes reach PostgreSQL through
# a local PgBouncer in transaction mode (deploy/local/pgbouncer.sh), as at
# scale; migrations keep the direct URL.
if [ "${POOLER:-0}" = 1 ]; then
  DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/payments?sslmode=disable}"
  pooler=$(bash deploy/local/pgbouncer.sh start)
  db="${DATABASE_URL#*://}"; db="${db#*/}"; db="${db%%\?*}"
  export DATABASE_DIRECT_URL="${DATABASE_DIRECT_URL:-$DATABASE_URL}"
  export DATABASE_URL="${pooler/\/\?//$db?}"
  export DATABASE_POOL_MODE=transaction
  echo "run.sh: through PgBouncer: DATABASE_URL=$DATABASE_URL (transaction mode), DATABASE_DIRECT_URL=$DATABASE_DIRECT_URL"
fi
echo "run.sh: bin/api migrate"
bin/api migrate

API_ADDR="${API_ADDR:-:8080}"
export API_ADDR
# For the messages only: the processes work their addresses out themselves.
admin_base="${ADMIN_ADDR:-127.0.0.1:8081}"
admin_port="${admin_base##*:}"
admin_api="${API_ADMIN_ADDR:-$admin_base}"
admin_worker="${WORKER_ADMIN_ADDR:-${admin_base%:*}:$((admin_port + 1))}"
admin_scheduler="${SCHEDULER_ADMIN_ADDR:-${admin_base%:*}:$((admin_port + 2))}"

# Line-buffered prefixer: "api      | message". It ignores SIGINT so that on
# Ctrl-C it outlives its process and shows the shutdown logs (a prefixer that
# died first would also hand the process a SIGPIPE on its next log line).
prefix() {
  trap '' INT
  exec awk -v p="$(printf '%-9s|' "$1")" '{ print p, $0; fflush() }'
}

pids=()
names=()
start() {
  local name="$1" admin="$2"
  shift 2
  "$@" > >(prefix "$name") 2>&1 &
  pids+=("$!")
  names+=("$name")
  echo "run.sh: started $name (pid $!, admin http://$admin)"
}

stopping=0
hint_pid=""
stop_all() {
  [ "$stopping" -eq 1 ] && return
  stopping=1
  trap '' INT TERM
  kill "$hint_pid" 2>/dev/null || true
  echo
  echo "run.sh: stopping ${names[*]}"
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  local deadline=$((SECONDS + 15))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "run.sh: pid $pid still running after 15 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  wait 2>/dev/null || true
  echo "run.sh: stopped"
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

start api "$admin_api" bin/api serve
start worker "$admin_worker" bin/worker
start scheduler "$admin_scheduler" bin/scheduler

# Once the API answers (any HTTP status), print how to get going.
(
  port="${API_ADDR##*:}"
  for _ in $(seq 1 120); do
    code=$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:$port/" 2>/dev/null || true)
    if [ -n "$code" ] && [ "$code" != 000 ]; then
      cat <<EOF

run.sh: API is up on http://127.0.0.1:$port (merchant dashboard http://127.0.0.1:$port/dashboard,
queues http://$admin_api/queues). Next, in another shell with the same DATABASE_URL and SECRETS_KEY:
  bin/api merchant create --name "Demo shop" --email demo@example.com     # prints {"id":"mch_…",…}
  bin/api key create --merchant mch_… --mode test                          # prints {"key":"svc_test_…",…}
  curl -s -H "Authorization: Bearer svc_test_…" http://127.0.0.1:$port/v1/products
Ctrl-C stops api, worker and scheduler.

EOF
      exit 0
    fi
    sleep 0.5
  done
  echo "run.sh: the API did not answer on port $port within 60 s (see its log lines above)"
) &
hint_pid=$!

# Wait until any of the three exits, then stop the rest.
status=0
wait -n "${pids[@]}" || status=$?
if [ "$stopping" -eq 0 ]; then
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      echo "run.sh: ${names[$i]} exited (status $status)"
    fi
  done
  stop_all
  exit "$status"
fi
