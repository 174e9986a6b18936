#!/usr/bin/env bash
# make bench: load runs of the API over loopback beside raw PostgreSQL figures
# measured in the same run, written into README.md (between the bench markers)
# and deploy/bench/results.md.
#
# Each API scenario runs twice with bin/loadgen:
#   closed model: BENCH_CONNS connections as fast as they go -> throughput;
#   open model:   BENCH_RATE requests/s on a fixed schedule -> p50/p99, latency
#                 counted from each request's scheduled time (no coordinated omission).
# Raw PostgreSQL: pgbench, BENCH_CONNS clients, prepared statements, same duration.
#
# Settings (environment):
#   BENCH_DURATION   measured time per run (15s; 90, 15s, 2m)
#   BENCH_WARMUP     unmeasured warmup before each API run (3s)
#   BENCH_CONNS      connections / pgbench clients (32)
#   BENCH_RATE       open-model arrival rate, req/s (1000)
#   BENCH_OPEN_CONNS open-model pool of in-flight requests (128)
#   BENCH_ROWS       products of the big merchant (1000000)
#   BENCH_SMALL_ROWS products of the small merchant (1000)
#   BENCH_PG         PostgreSQL server URL without database (postgres://postgres@127.0.0.1:5432)
#   BENCH_DB         database, dropped and recreated (payments_bench)
#   BENCH_REDIS_URL  Redis database for the run, flushed first (redis://127.0.0.1:6379/15)
#   BENCH_API_PORT / BENCH_ADMIN_PORT  listeners of the API under test (18080 / 18081)
#   BENCH_REFUND_PAYMENTS  paid payments seeded for the refund runs (100000)
#   BENCH_REFUND_RATE      open-model rate of the refund runs, req/s (200: below the hot payment's capacity)
#   BENCH_DASH_PAYMENTS    payments of the dashboard's merchant, over its last 30 days (1000000)
#   BENCH_DASH_RATE        open-model rate of the dashboard runs, req/s (100)
#   BENCH_SUBS             subscriptions of the subscription list's merchant (100000)
#   BENCH_RENEWALS         subscriptions due at once for bin/scheduler + bin/worker's renewal sweep (100000)
#   BENCH_RENEWAL_TIMEOUT  cap on the sweep's measurement (10m)
#   BENCH_EVENTS           events of the event list's big merchant, over its last 29 days (1000000; the small one has 1000)
#
#   BENCH_SCALE_ROWS customers and payments of the list-scale merchant (1000000; the small one has BENCH_SMALL_ROWS)
#   BENCH_MERCHANTS  merchants sharing the load in the spread runs (100), each with
#   BENCH_MERCHANT_ROWS products (1000)
#   BENCH_IDLE_CONNS idle keep-alive connections held open during a 1,000 req/s run (10000;
#                    the script raises ulimit -n to fit them)
#   BENCH_STRIPE_RATE      stripe: open-model rate of POST /v1/payment-intents on stripe-mock and of
#                          stripe-mock alone, req/s (200)
#   BENCH_STRIPE_EVENTS    stripe: signed Stripe events posted to /stripe/webhook (20000)
#   BENCH_ONLY       run only these groups (space-separated: main webhooks refunds subscriptions
#                    events renewals dashboard scaleout scale merchants idle stripe); README.md and
#                    deploy/bench/results.md are then left alone (the run's results.md is in its output folder)
#   BENCH_POOLER_SIZE      scaleout, BENCH_B2B_POOLED: PgBouncer's server connections (20)
#   BENCH_MODE       empty: the scenarios below, each after a CHECKPOINT; backtoback: the
#                    phases of the independent harness of issue 17 back to back with no pause
#                    or CHECKPOINT between them (see backtoback below; its defaults are
#                    BENCH_DURATION=10s BENCH_WARMUP=2s BENCH_OPEN_CONNS=64)
#   BENCH_B2B_REST   backtoback: seconds of bin/stallprobe on the machine at rest before the
#                    first phase (15; 0 skips it)
#   BENCH_B2B_POOLED backtoback: 1 runs the API through a local PgBouncer in transaction mode
#                    (BENCH_POOLER_SIZE server connections), pgbench still direct; its report
#                    goes into results.md's own block (0)
#   BENCH_POOLER_PREPARED  scaleout, BENCH_B2B_POOLED: PgBouncer's max_prepared_statements (0: none);
#                    above 0 the API keeps its prepared statements through the pooler
#                    (DATABASE_POOLER_PREPARED_STATEMENTS=true), which needs PgBouncer 1.21 or
#                    later (PGBOUNCER_BIN, see deploy/local/pgbouncer.sh); a back-to-back run's
#                    report then goes into a block of its own
#
# Adding a scenario is one line in main(), see `scenario` below.
# shellcheck disable=SC2016 # backquotes in printf formats are Markdown
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

BENCH_MODE=${BENCH_MODE:-}
case $BENCH_MODE in
backtoback)
	BENCH_DURATION=${BENCH_DURATION:-10s}
	BENCH_WARMUP=${BENCH_WARMUP:-2s}
	BENCH_OPEN_CONNS=${BENCH_OPEN_CONNS:-64}
	;;
"") ;;
*)
	printf 'bench: BENCH_MODE=%s: want empty or backtoback\n' "$BENCH_MODE" >&2
	exit 2
	;;
esac
BENCH_DURATION=${BENCH_DURATION:-15s}
BENCH_WARMUP=${BENCH_WARMUP:-3s}
BENCH_CONNS=${BENCH_CONNS:-32}
BENCH_RATE=${BENCH_RATE:-1000}
BENCH_OPEN_CONNS=${BENCH_OPEN_CONNS:-128}
BENCH_ROWS=${BENCH_ROWS:-1000000}
BENCH_SMALL_ROWS=${BENCH_SMALL_ROWS:-1000}
BENCH_BATCH=${BENCH_BATCH:-100000}
BENCH_PG=${BENCH_PG:-postgres://postgres@127.0.0.1:5432}
BENCH_DB=${BENCH_DB:-payments_bench}
BENCH_REDIS_URL=${BENCH_REDIS_URL:-redis://127.0.0.1:6379/15}
BENCH_API_PORT=${BENCH_API_PORT:-18080}
BENCH_ADMIN_PORT=${BENCH_ADMIN_PORT:-18081}
# Scenarios whose error rate is above this (percent) make the run invalid.
BENCH_MAX_ERROR_PCT=${BENCH_MAX_ERROR_PCT:-1}
BENCH_WEBHOOK_EVENTS=${BENCH_WEBHOOK_EVENTS:-10000}
BENCH_WEBHOOK_RATE=${BENCH_WEBHOOK_RATE:-200}
BENCH_REFUND_PAYMENTS=${BENCH_REFUND_PAYMENTS:-100000}
BENCH_REFUND_RATE=${BENCH_REFUND_RATE:-200}
BENCH_DASH_PAYMENTS=${BENCH_DASH_PAYMENTS:-1000000}
BENCH_DASH_RATE=${BENCH_DASH_RATE:-100}
BENCH_SUBS=${BENCH_SUBS:-100000}
BENCH_RENEWALS=${BENCH_RENEWALS:-100000}
BENCH_RENEWAL_TIMEOUT=${BENCH_RENEWAL_TIMEOUT:-10m}
BENCH_EVENTS=${BENCH_EVENTS:-1000000}
BENCH_SCALE_ROWS=${BENCH_SCALE_ROWS:-1000000}
BENCH_MERCHANTS=${BENCH_MERCHANTS:-100}
BENCH_MERCHANT_ROWS=${BENCH_MERCHANT_ROWS:-1000}
BENCH_IDLE_CONNS=${BENCH_IDLE_CONNS:-10000}
BENCH_STRIPE_RATE=${BENCH_STRIPE_RATE:-200}
BENCH_STRIPE_EVENTS=${BENCH_STRIPE_EVENTS:-20000}
BENCH_ONLY=${BENCH_ONLY:-}
BENCH_POOLER_SIZE=${BENCH_POOLER_SIZE:-20}
B2B_POOLED=${BENCH_B2B_POOLED:-0}
POOLER_PREPARED=${BENCH_POOLER_PREPARED:-0}
[[ $POOLER_PREPARED =~ ^[0-9]+$ ]] || { printf 'bench: BENCH_POOLER_PREPARED=%s: want a count\n' "$POOLER_PREPARED" >&2; exit 2; }
case $B2B_POOLED in
0) ;;
1) [[ $BENCH_MODE == backtoback ]] || { printf 'bench: BENCH_B2B_POOLED=1 needs BENCH_MODE=backtoback\n' >&2; exit 2; } ;;
*)
	printf 'bench: BENCH_B2B_POOLED=%s: want 0 or 1\n' "$B2B_POOLED" >&2
	exit 2
	;;
esac

export DATABASE_URL="$BENCH_PG/$BENCH_DB?sslmode=disable"
export REDIS_URL="$BENCH_REDIS_URL"
API="http://127.0.0.1:$BENCH_API_PORT"
ADMIN="http://127.0.0.1:$BENCH_ADMIN_PORT"

OUT=$(mktemp -d "${TMPDIR:-/tmp}/paysvc-bench.XXXXXX")
RESULTS="$OUT/results.jsonl"   # one JSON line per measurement
: >"$RESULTS"
API_PID=""
SAMPLER_PID=""
PROBE_PID=""
# The load generator; backtoback runs it at nice -n -10, as the harness does.
LOADGEN=(bin/loadgen)
# quiesce's CHECKPOINT before each measurement (backtoback: none).
QUIESCE=1
WORKER_PID=""
SCHEDULER_PID=""
BARE_PID=""
# failover's Redis servers and sentinels, pooled's PgBouncer directory.
SENTINEL_PIDS=()
POOLER_DIR=""

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

cleanup() {
	[[ -n ${STRIPE_API_PID:-} ]] && kill -TERM "$STRIPE_API_PID" 2>/dev/null || true
	[[ -n ${MOCK_PID:-} ]] && kill "$MOCK_PID" 2>/dev/null || true
	[[ -n $SAMPLER_PID ]] && kill "$SAMPLER_PID" 2>/dev/null || true
	[[ -n $PROBE_PID ]] && kill "$PROBE_PID" 2>/dev/null || true
	((${#SENTINEL_PIDS[@]})) && kill "${SENTINEL_PIDS[@]}" 2>/dev/null || true
	stop_pooler 2>/dev/null || true
	[[ -n $WORKER_PID ]] && kill -KILL "$WORKER_PID" 2>/dev/null || true
	[[ -n $BARE_PID ]] && kill -KILL "$BARE_PID" 2>/dev/null || true
	[[ -n $SCHEDULER_PID ]] && kill -KILL "$SCHEDULER_PID" 2>/dev/null || true
	if [[ -n "$API_PID" ]] && kill -0 "$API_PID" 2>/dev/null; then
		kill -TERM "$API_PID" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$API_PID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$API_PID" 2>/dev/null || true
		wait "$API_PID" 2>/dev/null || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Duration in whole seconds (pgbench -T) from 90, 15s or 2m.
seconds() {
	case "$1" in
	*[!0-9smh]* | "") die "bad duration '$1' (want 90, 15s, 2m)" ;;
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
SECS=$(seconds "$BENCH_DURATION")
WARM=$(seconds "$BENCH_WARMUP")
((SECS > 0)) || die "BENCH_DURATION must be at least 1s"

# psql on the bench database: quiet, unaligned, stop at the first error.
pg() { psql "$DATABASE_URL" -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }

need_jq() {
	command -v jq >/dev/null && return
	log "installing jq"
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q jq >/dev/null ||
			{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q jq >/dev/null; }
	fi
	command -v jq >/dev/null || die "jq is required (apt-get install jq)"
}

# ---------------------------------------------------------------------------
# Setup

prepare() {
	need_jq
	# File descriptors for BENCH_IDLE_CONNS connections on both ends (loadgen
	# and the API inherit the limit), with room for the rest.
	local fds=$((BENCH_IDLE_CONNS + 4096))
	if (($(ulimit -n) < fds)); then
		ulimit -n "$fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
	fi
	(($(ulimit -n) >= fds)) || log "ulimit -n is $(ulimit -n), below the $fds that $BENCH_IDLE_CONNS idle connections need (raise the hard limit)"

	command -v curl >/dev/null || die "curl is required"
	if ! command -v psql >/dev/null || ! command -v pgbench >/dev/null; then
		die "psql and pgbench are required (apt-get install postgresql-client)"
	fi

	log "services"
	if [[ -f deploy/local/services.sh ]]; then
		bash deploy/local/services.sh
	else
		echo "deploy/local/services.sh missing: expecting PostgreSQL and Redis to answer already" >&2
	fi
	log "build"
	make build >&2
	for b in api worker scheduler; do [[ -x bin/$b ]] || die "make build did not produce bin/$b"; done
	go build -o bin/loadgen ./internal/tools/loadgen
	go build -o bin/stallprobe ./internal/tools/stallprobe
	go build -o bin/barehandler ./internal/tools/barehandler

	log "database $BENCH_DB"
	psql "$BENCH_PG/postgres?sslmode=disable" -X -q -v ON_ERROR_STOP=1 \
		-c "DROP DATABASE IF EXISTS $BENCH_DB WITH (FORCE)" -c "CREATE DATABASE $BENCH_DB"
	if command -v redis-cli >/dev/null; then
		redis-cli -u "$REDIS_URL" FLUSHDB >/dev/null
	fi
	bin/api migrate >/dev/null
	# The weeks' partitions, as the scheduler's first tick makes them: the API
	# runs without a scheduler until the renewal group, and the rows it wrote
	# meanwhile would otherwise wait in the default partitions, for that
	# group's worker to move them out while holding every write to events.
	bin/api partitions maintain >/dev/null

	MERCHANT=$(bin/api merchant create --name Bench | jq -er .id)
	KEY=$(bin/api key create --merchant "$MERCHANT" --mode test | jq -er .key)
	MERCHANT_1K=$(bin/api merchant create --name 'Bench 1k' | jq -er .id)
	KEY_1K=$(bin/api key create --merchant "$MERCHANT_1K" --mode test | jq -er .key)

	log "seeding $BENCH_ROWS products for $MERCHANT, $BENCH_SMALL_ROWS for $MERCHANT_1K"
	seed "$MERCHANT" "$BENCH_ROWS"
	seed "$MERCHANT_1K" "$BENCH_SMALL_ROWS"
	pg -c "VACUUM ANALYZE products" -c "VACUUM ANALYZE prices"

	# Scratch tables for pgbench: the ids the API's GET runs also use, and an
	# insert target shaped like products (same columns, checks and indexes).
	pg -v mid="$MERCHANT" <<-'SQL'
		CREATE TABLE bench_ids (n int PRIMARY KEY, id text NOT NULL);
		INSERT INTO bench_ids
		SELECT row_number() OVER (), id FROM (
		    SELECT id FROM products WHERE merchant_id = :'mid' AND livemode = false
		    ORDER BY random() LIMIT 10000) s;
		CREATE TABLE bench_products (LIKE products INCLUDING ALL);
		ALTER TABLE bench_products ADD FOREIGN KEY (merchant_id) REFERENCES merchants (id);
		ANALYZE bench_ids;
	SQL
	IDS="$OUT/ids.txt"
	pg -c "SELECT id FROM bench_ids ORDER BY n" >"$IDS"
	[[ -s "$IDS" ]] || die "no product ids sampled"
}

# seed MERCHANT COUNT: COUNT test-mode products, each with its default price,
# created over the past year; one statement per batch of BENCH_BATCH rows.
# Foreign-key triggers are off while seeding (the rows are consistent by construction).
seed() {
	local mid=$1 count=$2 lo hi
	for ((lo = 1; lo <= count; lo += BENCH_BATCH)); do
		hi=$((lo + BENCH_BATCH - 1 < count ? lo + BENCH_BATCH - 1 : count))
		pg -v mid="$mid" -v lo="$lo" -v hi="$hi" <<-'SQL'
			SET session_replication_role = replica;
			WITH s AS MATERIALIZED (
			    SELECT g AS i,
			           'prod_'  || substr(md5(random()::text || g::text), 1, 24) AS pid,
			           'price_' || substr(md5(random()::text || g::text || 'price'), 1, 24) AS prid,
			           now() - random() * interval '365 days' AS ts
			    FROM generate_series(:lo::int, :hi::int) AS g
			), ins AS (
			    INSERT INTO products (id, merchant_id, livemode, name, default_price_id, created_at, updated_at)
			    SELECT pid, :'mid', false, 'Seed product ' || i, prid, ts, ts FROM s
			)
			INSERT INTO prices (id, merchant_id, livemode, product_id, amount, currency, created_at)
			SELECT prid, :'mid', false, pid, 100 + i % 99900, 'usd', ts FROM s;
		SQL
		printf '  %s: %d/%d\n' "$mid" "$hi" "$count" >&2
	done
}

start_api() {
	log "starting bin/api serve on $API"
	API_STARTED=$(date +%s.%N)
	WEBHOOK_ALLOW_PRIVATE_NETWORKS=true RATE_LIMIT_PER_HOUR=1000000000 API_ADDR="127.0.0.1:$BENCH_API_PORT" \
		API_ADMIN_ADDR="127.0.0.1:$BENCH_ADMIN_PORT" GIN_MODE=release \
		bin/api serve >"$OUT/api.log" 2>&1 &
	API_PID=$!
	for _ in $(seq 300); do
		if [[ $(curl -s -o /dev/null -w '%{http_code}' "$ADMIN/readyz" || true) == 200 ]]; then
			return
		fi
		kill -0 "$API_PID" 2>/dev/null || { tail -n 30 "$OUT/api.log" >&2; die "bin/api serve exited"; }
		sleep 0.2
	done
	tail -n 30 "$OUT/api.log" >&2
	die "$ADMIN/readyz not 200 after 60s"
}

# smoke METHOD PATH BODY: one request that must succeed before any load
# (with $SCENARIO_KEY when set, else $KEY).
smoke() {
	local code args=(-s -o "$OUT/smoke.json" -w '%{http_code}' -X "$1" -H "Authorization: Bearer ${SCENARIO_KEY:-$KEY}")
	[[ -z ${3:-} ]] || args+=(-H 'Content-Type: application/json' --data "$3")
	code=$(curl "${args[@]}" "$API$2" || true)
	[[ $code == 2?? ]] || { cat "$OUT/smoke.json" >&2; echo >&2; die "$1 $2 answered $code"; }
}

# Flush dirty pages so no checkpoint lands inside a measurement.
quiesce() {
	((QUIESCE)) || return 0
	pg -c CHECKPOINT
	sleep 1
}

# ---------------------------------------------------------------------------
# Measurements

# raw NAME REF SCRIPT: pgbench with SCRIPT (SQL text) on BENCH_CONNS clients.
# REF names the figure API scenarios compare with (insert, select, page).
raw() {
	local name=$1 ref=$2 script=$3 file="$OUT/pgbench-$2.sql" jobs
	printf '%s\n' "$script" >"$file"
	jobs=$(nproc)
	((jobs > BENCH_CONNS)) && jobs=$BENCH_CONNS
	log "raw: $name"
	quiesce
	pgbench -n -M prepared -c "$BENCH_CONNS" -j "$jobs" -T "$SECS" -D mid="$MERCHANT" \
		-f "$file" "$DATABASE_URL" >"$OUT/pgbench-$ref.log" 2>&1 ||
		{ cat "$OUT/pgbench-$ref.log" >&2; die "pgbench $ref failed"; }
	local tps lat failed
	tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$OUT/pgbench-$ref.log" | tail -n 1)
	lat=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$OUT/pgbench-$ref.log")
	failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$OUT/pgbench-$ref.log")
	[[ -n $tps ]] || { cat "$OUT/pgbench-$ref.log" >&2; die "no tps in pgbench output"; }
	jq -nc --arg s "$name" --arg ref "$ref" --argjson tps "$tps" --argjson lat "${lat:-null}" \
		--argjson failed "${failed:-0}" --argjson c "$BENCH_CONNS" \
		'{scenario:$s, kind:"raw", ref:$ref, model:"pgbench", conns:$c, rps:$tps, mean_ms:$lat, errors:$failed, count:null}' \
		| tee -a "$RESULTS" >&2
}

# scenario NAME METHOD PATH BODY [RAW_REF] [extra loadgen flags...]
# PATH and BODY may hold {id} (a random line of $SCENARIO_IDS, else of the
# seeded product ids) and {n} (a unique counter).
# The key is $SCENARIO_KEY when set (SCENARIO_KEY=... scenario ...), else $KEY;
# the open model's rate is $SCENARIO_RATE when set, else BENCH_RATE.
# RAW_REF (insert, select, page) names the pgbench figure to compare with.
scenario() {
	local name=$1 method=$2 path=$3 body=$4 ref=${5:-}
	shift $(($# < 5 ? $# : 5))
	local key=${SCENARIO_KEY:-$KEY} rate=${SCENARIO_RATE:-$BENCH_RATE}
	local args=(-name "$name" -method "$method" -url "$API$path" -H "Authorization: Bearer $key"
		-warmup "${WARM}s" -duration "${SECS}s" -json "$@")
	[[ -n $body ]] && args+=(-body "$body")
	[[ $path$body$key == *"{id}"* || $key == *"{key}"* ]] && args+=(-ids "${SCENARIO_IDS:-$IDS}")

	log "api: $name ($BENCH_CONNS connections, closed)"
	quiesce
	measure closed "$ref" "${args[@]}" -conns "$BENCH_CONNS"
	log "api: $name ($rate req/s, open)"
	quiesce
	measure open "$ref" "${args[@]}" -conns "$BENCH_OPEN_CONNS" -rate "$rate"
}

# measure KIND REF LOADGEN_ARGS...: one loadgen run, its JSON line kept in
# $RESULTS with kind and ref, its per-second timeline in $OUT/timeline-N.csv
# (named in the line).
measure() {
	local kind=$1 ref=$2 tl
	shift 2
	TIMELINES=$((${TIMELINES:-0} + 1))
	tl="$OUT/timeline-$TIMELINES.csv"
	"${LOADGEN[@]}" "$@" -timeline "$tl" |
		jq -c --arg kind "$kind" --arg ref "$ref" --arg tl "$tl" \
			'. + {scenario:.name, kind:$kind, ref:$ref, timeline:$tl}' | tee -a "$RESULTS" >&2
}

# bare_floor: the floor under GET by id, internal/tools/barehandler: a Gin
# engine with that one route and no middleware (no request id, metrics,
# gate, authentication, rate limit), on the same database, ids and
# connections, closed model only: first reading through the API's store
# (concurrent reads share one statement), then with one prepared SELECT per
# request (Store.ProductUnshared), each on bin/api's pool size. The API's
# GET beside it is what the API's own work costs.
BARE_STORE="GET /v1/products/{id}: bare Gin handler, the API's store"
BARE_PLAIN="GET /v1/products/{id}: bare Gin handler, one SELECT a request"
bare_floor() {
	local mode name port code
	port=$(free_port)
	for mode in store plain; do
		name=$BARE_STORE
		[[ $mode == plain ]] && name=$BARE_PLAIN
		bin/barehandler -addr "127.0.0.1:$port" -merchant "$MERCHANT" -read "$mode" >"$OUT/bare-$mode.log" 2>&1 &
		BARE_PID=$!
		code=""
		for _ in $(seq 100); do
			code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/products/$(head -n 1 "$IDS")" || true)
			[[ $code == 200 ]] && break
			kill -0 "$BARE_PID" 2>/dev/null || { cat "$OUT/bare-$mode.log" >&2; die "bin/barehandler exited"; }
			sleep 0.1
		done
		[[ $code == 200 ]] || { cat "$OUT/bare-$mode.log" >&2; die "bin/barehandler answered $code, not 200, for a seeded product"; }
		log "api: $name ($BENCH_CONNS connections, closed)"
		quiesce
		measure closed select -name "$name" -method GET -url "http://127.0.0.1:$port/v1/products/{id}" -ids "$IDS" \
			-warmup "${WARM}s" -duration "${SECS}s" -json -conns "$BENCH_CONNS"
		kill -TERM "$BARE_PID" 2>/dev/null || true
		wait "$BARE_PID" 2>/dev/null || true
		BARE_PID=""
	done
}

# bare_comparison: the API's GET by id against the bare handlers' (one line).
bare_comparison() {
	jq -rs --arg api "GET /v1/products/{id}" --arg store "$BARE_STORE" --arg plain "$BARE_PLAIN" '
	  (map(select(.kind == "closed")) | map({key: .scenario, value: .rps}) | from_entries) as $c
	  | if $c[$api] and ($c[$store] // 0) > 0 and ($c[$plain] // 0) > 0 then
	      "GET by id vs a bare Gin handler on the same load (no middleware; internal/tools/barehandler): \($c[$api] / $c[$store] * 100 | round)% of its throughput when it reads through the API'"'"'s store, \($c[$api] / $c[$plain] * 100 | round)% when it runs one SELECT a request."
	    else empty end
	' "$RESULTS"
}

# scale_lists: a merchant with BENCH_SCALE_ROWS customers and as many
# payments, and one with BENCH_SMALL_ROWS of each; the first page of both
# lists on each (a page costs the same however many rows lie behind it).
scale_lists() {
	local big small key_big key_small
	big=$(bin/api merchant create --name 'Bench scale' | jq -er .id)
	key_big=$(bin/api key create --merchant "$big" --mode test | jq -er .key)
	small=$(bin/api merchant create --name 'Bench scale small' | jq -er .id)
	key_small=$(bin/api key create --merchant "$small" --mode test | jq -er .key)
	log "seeding $BENCH_SCALE_ROWS customers and payments for $big, $BENCH_SMALL_ROWS for $small"
	seed_customers_payments "$big" "$BENCH_SCALE_ROWS"
	seed_customers_payments "$small" "$BENCH_SMALL_ROWS"
	pg -c "VACUUM ANALYZE customers" -c "VACUUM ANALYZE payment_intents"
	CUSTOMERS_BIG="GET /v1/customers?limit=10 ($BENCH_SCALE_ROWS customers)"
	CUSTOMERS_SMALL="GET /v1/customers?limit=10 ($BENCH_SMALL_ROWS customers)"
	PAYMENTS_BIG="GET /v1/test-payments?limit=10 ($BENCH_SCALE_ROWS payments)"
	PAYMENTS_SMALL="GET /v1/test-payments?limit=10 ($BENCH_SMALL_ROWS payments)"
	SCENARIO_KEY=$key_big smoke GET '/v1/customers?limit=10'
	SCENARIO_KEY=$key_big smoke GET '/v1/test-payments?limit=10'
	SCENARIO_KEY=$key_big scenario "$CUSTOMERS_BIG" GET '/v1/customers?limit=10' "" page
	SCENARIO_KEY=$key_small scenario "$CUSTOMERS_SMALL" GET '/v1/customers?limit=10' "" page
	SCENARIO_KEY=$key_big scenario "$PAYMENTS_BIG" GET '/v1/test-payments?limit=10' "" page
	SCENARIO_KEY=$key_small scenario "$PAYMENTS_SMALL" GET '/v1/test-payments?limit=10' "" page
}

# seed_customers_payments MERCHANT COUNT: COUNT test customers and COUNT
# succeeded test payments created over the past year, BENCH_BATCH rows a
# statement (foreign-key triggers off: consistent by construction).
seed_customers_payments() {
	local mid=$1 count=$2 lo hi
	for ((lo = 1; lo <= count; lo += BENCH_BATCH)); do
		hi=$((lo + BENCH_BATCH - 1 < count ? lo + BENCH_BATCH - 1 : count))
		pg -v mid="$mid" -v lo="$lo" -v hi="$hi" <<-'SQL'
			SET session_replication_role = replica;
			INSERT INTO customers (id, merchant_id, livemode, email, created_at, updated_at)
			SELECT 'cus_' || substr(md5(random()::text || g::text), 1, 24), :'mid', false, 'c' || g || '@example.com', ts, ts
			FROM (SELECT g, now() - random() * interval '365 days' AS ts FROM generate_series(:lo::int, :hi::int) AS g) s;
			INSERT INTO payment_intents (merchant_id, livemode, id, amount, amount_received, currency, status,
			    fee_amount, succeeded_at, created_at, updated_at)
			SELECT :'mid', false, 'pi_' || substr(md5(random()::text || g::text), 1, 24), 1000 + g % 9000, 1000 + g % 9000,
			       'usd', 'succeeded', 40 + (1000 + g % 9000) / 20, ts, ts, ts
			FROM (SELECT g, now() - random() * interval '365 days' AS ts FROM generate_series(:lo::int, :hi::int) AS g) s;
		SQL
		printf '  %s: %d/%d\n' "$mid" "$hi" "$count" >&2
	done
}

# many_merchants: BENCH_MERCHANTS merchants with a key and
# BENCH_MERCHANT_ROWS products each; POST /v1/products and GET by id with
# every request on a random merchant's key (GET: one of that merchant's
# products), to set beside the same runs on the one benchmarked merchant:
# spread over merchants, nothing is shared but the tables (no hot row).
many_merchants() {
	local i mid key file="$OUT/merchants.txt"
	local product='{"name":"Bench product {n}","price":{"amount":1999,"currency":"usd"}}'
	log "creating $BENCH_MERCHANTS merchants with $BENCH_MERCHANT_ROWS products each"
	: >"$file"
	for ((i = 1; i <= BENCH_MERCHANTS; i++)); do
		mid=$(bin/api merchant create --name "Bench merchant $i" | jq -er .id)
		key=$(bin/api key create --merchant "$mid" --mode test | jq -er .key)
		seed "$mid" "$BENCH_MERCHANT_ROWS" 2>/dev/null
		pg -v mid="$mid" <<<"SELECT id FROM products WHERE merchant_id = :'mid' ORDER BY random() LIMIT 100" |
			awk -v k="$key" '{ print $0 "\t" k }' >>"$file"
	done
	pg -c "VACUUM ANALYZE products" -c "VACUUM ANALYZE prices"
	[[ -s $file ]] || die "no products seeded for the merchants"
	MERCHANTS_POST="POST /v1/products ($BENCH_MERCHANTS merchants)"
	MERCHANTS_GET="GET /v1/products/{id} ($BENCH_MERCHANTS merchants)"
	SCENARIO_KEY="$(head -n 1 "$file" | cut -f 2)" smoke POST /v1/products "$product"
	SCENARIO_KEY='{key}' SCENARIO_IDS=$file scenario "$MERCHANTS_POST" POST /v1/products "$product" insert
	SCENARIO_KEY='{key}' SCENARIO_IDS=$file scenario "$MERCHANTS_GET" GET '/v1/products/{id}' "" select
}

# idle_connections: loadgen -idle holds BENCH_IDLE_CONNS keep-alive
# connections open (one request each, then idle) while GET
# /v1/products/{id} runs at BENCH_RATE req/s (open model). The API's
# resident memory, heap, stacks and goroutines (its /metrics) before they
# open and while they are held give the memory per connection.
idle_connections() {
	local name="GET /v1/products/{id} ($BENCH_IDLE_CONNS idle connections open)" lg_pid i
	log "api: $name ($BENCH_RATE req/s, open)"
	quiesce
	curl -s "$ADMIN/metrics" >"$OUT/idle-before.txt"
	TIMELINES=$((${TIMELINES:-0} + 1))
	"${LOADGEN[@]}" -name "$name" -method GET -url "$API/v1/products/{id}" -H "Authorization: Bearer $KEY" -ids "$IDS" \
		-warmup "${WARM}s" -duration "${SECS}s" -json -conns "$BENCH_OPEN_CONNS" -rate "$BENCH_RATE" \
		-idle "$BENCH_IDLE_CONNS" -timeline "$OUT/timeline-$TIMELINES.csv" >"$OUT/idle.json" 2>"$OUT/idle.log" &
	lg_pid=$!
	for ((i = 0; i < 600; i++)); do
		grep -q 'idle connections open' "$OUT/idle.log" 2>/dev/null && break
		kill -0 "$lg_pid" 2>/dev/null || break
		sleep 0.2
	done
	sleep 1
	curl -s "$ADMIN/metrics" >"$OUT/idle-during.txt"
	wait "$lg_pid" || { cat "$OUT/idle.log" >&2; die "loadgen failed with idle connections"; }
	grep 'idle connections open' "$OUT/idle.log" >&2 || true
	jq -c --arg tl "$OUT/timeline-$TIMELINES.csv" \
		--argjson before "$(metric_set "$OUT/idle-before.txt")" --argjson during "$(metric_set "$OUT/idle-during.txt")" \
		'. + {scenario:.name, kind:"open", ref:"select", timeline:$tl, memory:{before:$before, during:$during}}' \
		"$OUT/idle.json" | tee -a "$RESULTS" >&2
}

# metric_set FILE: the API's memory figures from a /metrics scrape, as JSON.
metric_set() {
	awk '
		$1 == "process_resident_memory_bytes" { r = $2 }
		$1 == "go_memstats_heap_inuse_bytes" { h = $2 }
		$1 == "go_memstats_stack_inuse_bytes" { s = $2 }
		$1 == "go_goroutines" { g = $2 }
		END { printf "{\"rss\":%d,\"heap\":%d,\"stack\":%d,\"goroutines\":%d}", r, h, s, g }' "$1"
}

idle_table() {
	jq -rs '
	  def mb: . / 1048576 * 10 | round / 10 | tostring;
	  def kb: . / 1024 * 10 | round / 10 | tostring;
	  .[] | select(.memory != null and (.idle_conns // 0) > 0) | .memory as $m | .idle_conns as $n
	  | "\n| \($n) idle keep-alive connections during \(.rate) req/s | before | while held | per connection |",
	    "|---|---:|---:|---:|",
	    "| API resident memory (MB) | \($m.before.rss | mb) | \($m.during.rss | mb) | \(($m.during.rss - $m.before.rss) / $n | kb) KB |",
	    "| heap in use + goroutine stacks (MB) | \(($m.before.heap + $m.before.stack) | mb) | \(($m.during.heap + $m.during.stack) | mb) | \((($m.during.heap + $m.during.stack) - ($m.before.heap + $m.before.stack)) / $n | kb) KB |",
	    "| goroutines | \($m.before.goroutines) | \($m.during.goroutines) | \(($m.during.goroutines - $m.before.goroutines) / $n * 100 | round / 100) |",
	    "| GET /v1/products/{id} p99 / max ms meanwhile | | \(.p99_ms) / \(.max_ms) | |"
	' "$RESULTS"
}

# seed_subscriptions: a merchant with BENCH_SUBS test subscriptions created
# over the past year, one item each, a customer per ten of them; 90% active,
# 5% trialing, 5% canceled, so status=all pages through every row while the
# default (active) list skips some.
seed_subscriptions() {
	SUB_MERCHANT=$(bin/api merchant create --name 'Bench subscriptions' | jq -er .id)
	SUB_KEY=$(bin/api key create --merchant "$SUB_MERCHANT" --mode test | jq -er .key)
	log "seeding $BENCH_SUBS subscriptions for $SUB_MERCHANT"
	pg -v mid="$SUB_MERCHANT" -v n="$BENCH_SUBS" <<-'SQL'
		INSERT INTO customers (id, merchant_id, livemode, email, created_at, updated_at)
		SELECT 'cus_bench' || g, :'mid', false, 'c' || g || '@example.com', now(), now()
		FROM generate_series(0, :n::int / 10) AS g;
		WITH s AS MATERIALIZED (
		    SELECT g, 'sub_' || substr(md5(random()::text || g::text), 1, 24) AS id,
		           date_trunc('second', now() - random() * interval '365 days') AS ts,
		           CASE WHEN g % 20 = 0 THEN 'trialing' WHEN g % 20 = 1 THEN 'canceled' ELSE 'active' END AS status
		    FROM generate_series(1, :n::int) AS g
		), subs AS (
		    INSERT INTO subscriptions (id, merchant_id, livemode, customer_id, status, currency, anchor,
		        current_period_start, current_period_end, trial_end, canceled_at, ended_at, card_id, created_at, updated_at)
		    SELECT id, :'mid', false, 'cus_bench' || (g / 10), status, 'usd', ts, ts, ts + interval '1 month',
		           CASE WHEN status = 'trialing' THEN ts + interval '1 month' END,
		           CASE WHEN status = 'canceled' THEN ts END, CASE WHEN status = 'canceled' THEN ts END,
		           'card_bench', ts, ts
		    FROM s
		)
		INSERT INTO subscription_items (id, merchant_id, livemode, subscription_id, price_id, name, amount, currency,
		    interval, interval_count, quantity, created_at)
		SELECT 'si_' || substr(md5(id), 1, 24), :'mid', false, id, 'price_bench', 'Bench plan', 1500, 'usd', 'month', 1,
		       1 + g % 5, ts
		FROM s;
		VACUUM ANALYZE subscriptions, subscription_items;
	SQL
}

# Subscriptions: creating an inline-price subscription session, and the
# list (all statuses, then the default active filter) of a merchant with
# BENCH_SUBS subscriptions.
subscriptions() {
	seed_subscriptions
	local session='{"amount_cents":1500,"currency":"usd","interval":"month","name":"Bench plan","metadata":{"order":"{n}"},"success_url":"https://shop.example/ok?s={CHECKOUT_SESSION_ID}","cancel_url":"https://shop.example/plans"}'
	SCENARIO_KEY=$SUB_KEY smoke POST /v1/subscription-sessions "$session"
	SCENARIO_KEY=$SUB_KEY smoke GET '/v1/subscriptions?status=all&limit=10'
	SCENARIO_KEY=$SUB_KEY scenario "POST /v1/subscription-sessions" POST /v1/subscription-sessions "$session" insert
	SCENARIO_KEY=$SUB_KEY scenario "GET /v1/subscriptions?status=all ($BENCH_SUBS rows)" GET '/v1/subscriptions?status=all&limit=10' "" page
	SCENARIO_KEY=$SUB_KEY scenario "GET /v1/subscriptions (active, $BENCH_SUBS rows)" GET '/v1/subscriptions?limit=10' "" page
}

# renewals: the production renewal path under API load. A merchant with
# BENCH_RENEWALS monthly subscriptions whose periods ended in the last ten
# minutes (a saved sandbox card that succeeds); bin/scheduler enqueues the
# sweep's current tick as it starts (worker.Periodic), bin/worker's sweep
# turns each due subscription into a pending charge and a task, and its
# tasks charge them (the billing queue, WORKER_BILLING_CONCURRENCY at once). Meanwhile bin/loadgen sends
# GET /v1/products/{id} at BENCH_RATE req/s (open model). Measured: the time
# until every charge of the merchant has succeeded (or BENCH_RENEWAL_TIMEOUT),
# renewals per second, and the API's latency over that time; kept in
# $OUT/renewals.json and a row of the report, with the API's second-by-second
# timeline in $OUT/renewals-timeline.csv (to set its slow seconds beside the
# sweep's batches in renewals-worker.log).
renewals() {
	local mid started elapsed done_n=0 lg_pid limit
	limit=$(seconds "$BENCH_RENEWAL_TIMEOUT")
	mid=$(bin/api merchant create --name 'Bench renewals' | jq -er .id)
	log "seeding $BENCH_RENEWALS subscriptions already due for $mid"
	pg -v mid="$mid" -v n="$BENCH_RENEWALS" <<-'SQL'
		INSERT INTO customers (id, merchant_id, livemode, email, created_at, updated_at)
		VALUES ('cus_renew_' || :'mid', :'mid', false, 'renew@example.com', now(), now());
		INSERT INTO sandbox_cards (id, merchant_id, livemode, customer_id, brand, last4, exp_month, exp_year, behavior)
		VALUES ('card_renew_' || :'mid', :'mid', false, 'cus_renew_' || :'mid', 'visa', '4242', 12, 2040, 'succeeds');
		WITH s AS MATERIALIZED (
		    SELECT g, 'sub_r' || substr(md5(random()::text || g::text), 1, 23) AS id,
		           date_trunc('second', now() - interval '1 month' - random() * interval '10 minutes') AS ts
		    FROM generate_series(1, :n::int) AS g
		), subs AS (
		    INSERT INTO subscriptions (id, merchant_id, livemode, customer_id, status, currency, anchor,
		        current_period_start, current_period_end, card_id, created_at, updated_at)
		    SELECT id, :'mid', false, 'cus_renew_' || :'mid', 'active', 'usd', ts, ts, ts + interval '1 month',
		           'card_renew_' || :'mid', ts, ts
		    FROM s
		)
		INSERT INTO subscription_items (id, merchant_id, livemode, subscription_id, price_id, name, amount, currency,
		    interval, interval_count, quantity, created_at)
		SELECT 'si_' || substr(md5(id), 1, 24), :'mid', false, id, 'price_renew', 'Renewed plan', 1500, 'usd', 'monthly', 1,
		       1, ts
		FROM s;
		VACUUM ANALYZE subscriptions, subscription_items;
	SQL
	# Only this merchant's subscriptions are due: the subscription list's
	# seeded ones (periods in the past, a card that does not exist) end here.
	pg -v mid="$mid" <<<"UPDATE subscriptions SET status = 'canceled', canceled_at = now(), ended_at = now()
		WHERE merchant_id <> :'mid' AND status IN ('active', 'trialing')"
	quiesce
	log "renewal sweep: bin/scheduler + bin/worker, GET /v1/products/{id} at $BENCH_RATE req/s meanwhile (cap ${limit}s)"
	bin/loadgen -name "GET /v1/products/{id} during the renewal sweep" -method GET -url "$API/v1/products/{id}" \
		-H "Authorization: Bearer $KEY" -ids "$IDS" -conns "$BENCH_OPEN_CONNS" -rate "$BENCH_RATE" \
		-duration "${limit}s" -timeline "$OUT/renewals-timeline.csv" -json >"$OUT/renewals-api.json" 2>"$OUT/renewals-api.log" &
	lg_pid=$!
	started=$(date +%s.%N)
	WEBHOOK_ALLOW_PRIVATE_NETWORKS=true WORKER_ADMIN_ADDR="127.0.0.1:$((BENCH_ADMIN_PORT + 1))" \
		bin/worker >"$OUT/renewals-worker.log" 2>&1 &
	WORKER_PID=$!
	SCHEDULER_ADMIN_ADDR="127.0.0.1:$((BENCH_ADMIN_PORT + 2))" bin/scheduler >"$OUT/scheduler.log" 2>&1 &
	SCHEDULER_PID=$!
	# Done when no charge of the merchant waits and no subscription of it is
	# due without one: two index probes a second. (Counting its succeeded
	# charges twice a second read the whole table, 100,000 rows and more, on
	# the cores the API shares.)
	while kill -0 "$lg_pid" 2>/dev/null; do
		sleep 1
		[[ $(pg -v mid="$mid" <<-'SQL'
			SELECT NOT EXISTS (SELECT 1 FROM subscription_charges WHERE status = 'pending' AND merchant_id = :'mid')
			   AND NOT EXISTS (SELECT 1 FROM subscriptions WHERE merchant_id = :'mid' AND due_at <= now()
			       AND status IN ('active', 'trialing') AND processor_subscription_id IS NULL
			       AND renewal_charged_for IS DISTINCT FROM current_period_end)
		SQL
		) == t ]] && break
	done
	elapsed=$(echo "$(date +%s.%N) - $started" | bc -l)
	done_n=$(pg -v mid="$mid" <<<"SELECT count(*) FROM subscription_charges WHERE merchant_id = :'mid' AND status = 'succeeded'")
	kill -TERM "$lg_pid" 2>/dev/null || true
	wait "$lg_pid" 2>/dev/null || true
	stop_workers
	[[ -s $OUT/renewals-api.json ]] || { cat "$OUT/renewals-api.log" >&2; die "loadgen gave no results during the renewal sweep"; }
	jq -c --argjson n "$BENCH_RENEWALS" --argjson done "$done_n" --arg s "$elapsed" '{scenario:"renewal sweep",
		subscriptions: $n, renewals: $done, seconds: ($s | tonumber), renewals_per_second: ($done / ($s | tonumber) | floor),
		api: {rate, count, errors, late, missed, p50_ms, p99_ms, max_ms}}' "$OUT/renewals-api.json" |
		tee "$OUT/renewals.json" >&2
	((done_n >= BENCH_RENEWALS)) || echo "bench: only $done_n of $BENCH_RENEWALS renewals succeeded within ${limit}s" >&2
}

# stripe: PROCESSOR=stripe against stripe-mock (issue 14). stripe-mock
# answers canned objects after validating each request against Stripe's
# OpenAPI, so what is measured is the platform's own cost around a Stripe
# call: POST /v1/payment-intents through a second bin/api whose processor is
# Stripe at STRIPE_API_BASE=stripe-mock (validation, the connected account
# and plan lookup, the call, the id map and the payment row), against
# stripe-mock alone taking the same PaymentIntent creation (loadgen straight
# at it, form-encoded as stripe-go sends it), both closed and at
# BENCH_STRIPE_RATE req/s; the difference of the p50s and p99s is the
# overhead. Then inbound Stripe events accepted per second: BENCH_STRIPE_EVENTS
# distinct events signed with STRIPE_WEBHOOK_SECRET posted to /stripe/webhook
# (verify, translate, store once with its job, 200) by bin/stripeevents.
stripe_bench() {
	local mock port https api_port admin_port mid key saved_api=$API saved_admin=$ADMIN
	mock=$(command -v stripe-mock || true)
	[[ -n $mock ]] || mock="$(go env GOPATH)/bin/stripe-mock"
	[[ -x $mock ]] || die "stripe-mock is required for the stripe group (go install github.com/stripe/stripe-mock@v0.183.0)"
	go build -o bin/stripeevents ./internal/tools/stripeevents
	port=$(free_port) https=$(free_port) api_port=$(free_port) admin_port=$(free_port)
	"$mock" -http-addr "127.0.0.1:$port" -https-addr "127.0.0.1:$https" -strict-version-check >"$OUT/stripe-mock.log" 2>&1 &
	MOCK_PID=$!
	for _ in $(seq 100); do
		curl -s -o /dev/null "http://127.0.0.1:$port/" && break
		sleep 0.1
	done
	mid=$(bin/api merchant create --name 'Bench Stripe' | jq -er .id)
	bin/api merchant stripe-account --merchant "$mid" --mode test --account acct_bench >/dev/null
	key=$(bin/api key create --merchant "$mid" --mode test | jq -er .key)

	log "stripe: bin/api serve with PROCESSOR=stripe on 127.0.0.1:$api_port, stripe-mock on $port"
	PROCESSOR=stripe STRIPE_SECRET_KEY=sk_test_bench STRIPE_PUBLISHABLE_KEY=pk_test_bench \
		STRIPE_API_BASE="http://127.0.0.1:$port" STRIPE_WEBHOOK_SECRET=whsec_bench \
		RATE_LIMIT_PER_HOUR=1000000000 API_ADDR="127.0.0.1:$api_port" API_ADMIN_ADDR="127.0.0.1:$admin_port" GIN_MODE=release \
		bin/api serve >"$OUT/api-stripe.log" 2>&1 &
	STRIPE_API_PID=$!
	for _ in $(seq 300); do
		[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin_port/readyz" || true) == 200 ]] && break
		kill -0 "$STRIPE_API_PID" 2>/dev/null || { tail -n 30 "$OUT/api-stripe.log" >&2; die "bin/api serve (PROCESSOR=stripe) exited"; }
		sleep 0.2
	done

	local mock_args=(-name "stripe-mock alone: POST /v1/payment_intents" -method POST -url "http://127.0.0.1:$port/v1/payment_intents"
		-H "Authorization: Bearer sk_test_bench" -H "Stripe-Account: acct_bench" -H "Idempotency-Key: bench-{run}-{n}"
		-H "Content-Type: application/x-www-form-urlencoded" -body "amount=2500&currency=usd&metadata[paysvc_payment_intent]=pi_{run}{n}"
		-warmup "${WARM}s" -duration "${SECS}s" -json)
	log "stripe: stripe-mock alone"
	quiesce
	measure closed "" "${mock_args[@]}" -conns "$BENCH_CONNS"
	quiesce
	measure open "" "${mock_args[@]}" -conns "$BENCH_OPEN_CONNS" -rate "$BENCH_STRIPE_RATE"

	local intent='{"amount":2500,"currency":"usd","metadata":{"order":"{n}"}}'
	API="http://127.0.0.1:$api_port" ADMIN="http://127.0.0.1:$admin_port"
	SCENARIO_KEY=$key smoke POST /v1/payment-intents "$intent"
	SCENARIO_KEY=$key SCENARIO_RATE=$BENCH_STRIPE_RATE scenario "POST /v1/payment-intents (PROCESSOR=stripe, stripe-mock)" \
		POST /v1/payment-intents "$intent" insert

	log "stripe: $BENCH_STRIPE_EVENTS inbound events, $BENCH_CONNS connections"
	bin/stripeevents -url "$API/stripe/webhook" -secret whsec_bench -account acct_bench \
		-events "$BENCH_STRIPE_EVENTS" -conns "$BENCH_CONNS" >"$OUT/stripe-events.json" ||
		die "bin/stripeevents failed"
	API=$saved_api ADMIN=$saved_admin

	kill -TERM "$STRIPE_API_PID" 2>/dev/null || true
	wait "$STRIPE_API_PID" 2>/dev/null || true
	kill "$MOCK_PID" 2>/dev/null || true
	wait "$MOCK_PID" 2>/dev/null || true
	STRIPE_API_PID="" MOCK_PID=""
	jq -s '
	  (map(select(.scenario | startswith("stripe-mock alone")) | select(.kind == "open")) | first) as $m
	  | (map(select(.scenario | startswith("POST /v1/payment-intents (PROCESSOR=stripe")) | select(.kind == "open")) | first) as $a
	  | {rate: $a.rate, mock_p50_ms: $m.p50_ms, mock_p99_ms: $m.p99_ms, api_p50_ms: $a.p50_ms, api_p99_ms: $a.p99_ms,
	     overhead_p50_ms: ($a.p50_ms - $m.p50_ms), overhead_p99_ms: ($a.p99_ms - $m.p99_ms), errors: ($a.errors + $m.errors)}' \
		"$RESULTS" >"$OUT/stripe-intents.json"
	jq -s '.[0] + {events: .[1]}' "$OUT/stripe-intents.json" "$OUT/stripe-events.json" | tee "$OUT/stripe.json" >&2
}

stripe_table() {
	jq -r '"\n| PROCESSOR=stripe against stripe-mock | p50 ms | p99 ms |\n|---|---:|---:|\n| stripe-mock alone, PaymentIntent creation @ \(.rate) req/s | \(.mock_p50_ms * 100 | round / 100) | \(.mock_p99_ms * 100 | round / 100) |\n| POST /v1/payment-intents on it @ \(.rate) req/s | \(.api_p50_ms * 100 | round / 100) | \(.api_p99_ms * 100 | round / 100) |\n| the platform overhead (difference) | \(.overhead_p50_ms * 100 | round / 100) | \(.overhead_p99_ms * 100 | round / 100) |\n\n| inbound Stripe events (POST /stripe/webhook, \(.events.conns) connections) | figure |\n|---|---:|\n| accepted per second (\(.events.events) signed events) | \(.events.events_per_s | floor) |\n| p50 / p99 ms per event | \(.events.p50_ms * 100 | round / 100) / \(.events.p99_ms * 100 | round / 100) (\(.events.errors) errors) |"' "$OUT/stripe.json"
}

# stop_workers: bin/worker and bin/scheduler, when running.
stop_workers() {
	local p
	for p in "$WORKER_PID" "$SCHEDULER_PID"; do
		[[ -n $p ]] || continue
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	WORKER_PID="" SCHEDULER_PID=""
}

# events: BENCH_EVENTS test events of one merchant spread over its last 29
# days (inside EVENT_RETENTION's 30, so the worker's prune leaves them) and
# 1,000 of another, one statement each; then the first page of each, all
# types and filtered: by the type of all their events, and by a prefix none
# of theirs has (a page each type reads from events_type, not a walk over
# the merchant's events).
events() {
	local big small key_big key_small
	big=$(bin/api merchant create --name 'Bench events' | jq -er .id)
	key_big=$(bin/api key create --merchant "$big" --mode test | jq -er .key)
	small=$(bin/api merchant create --name 'Bench events 1k' | jq -er .id)
	key_small=$(bin/api key create --merchant "$small" --mode test | jq -er .key)
	log "seeding $BENCH_EVENTS events for $big, 1000 for $small"
	seed_events "$big" "$BENCH_EVENTS"
	seed_events "$small" 1000
	# The seeds are dated over the past 29 days, weeks with no partition in a
	# new database: give them theirs, where a running scheduler's would be.
	bin/api partitions maintain >/dev/null
	pg -c "VACUUM ANALYZE events"
	EVENTS_BIG="GET /v1/events?limit=10 ($BENCH_EVENTS events)"
	EVENTS_SMALL="GET /v1/events?limit=10 (1000 events)"
	SCENARIO_KEY=$key_big smoke GET '/v1/events?limit=10'
	SCENARIO_KEY=$key_big scenario "$EVENTS_BIG" GET '/v1/events?limit=10' "" page
	SCENARIO_KEY=$key_small scenario "$EVENTS_SMALL" GET '/v1/events?limit=10' "" page
	local q
	for q in 'type=payment_intent.*' 'type=charge.*'; do
		SCENARIO_KEY=$key_big scenario "GET /v1/events?limit=10&$q ($BENCH_EVENTS events)" GET "/v1/events?limit=10&$q" "" page
		SCENARIO_KEY=$key_small scenario "GET /v1/events?limit=10&$q (1000 events)" GET "/v1/events?limit=10&$q" "" page
	done

	# The delivery log: an endpoint of each merchant with a delivery of every
	# event, as if a worker had sent them all: one in 1,000 failed on the big
	# endpoint, one in 100 on the small one, so that a status=failed page
	# holds ten deliveries on both (one in 1,000 left the small one's page a
	# single delivery, against the big one's ten: 62% of its throughput).
	local ep_big ep_small
	ep_big=$(SCENARIO_KEY=$key_big endpoint_id)
	ep_small=$(SCENARIO_KEY=$key_small endpoint_id)
	log "seeding a delivery of every event to $ep_big and $ep_small"
	seed_deliveries "$big" "$ep_big" 1000
	seed_deliveries "$small" "$ep_small" 100
	bin/api partitions maintain >/dev/null # their weeks, as the events'
	pg -c "VACUUM ANALYZE webhook_deliveries"
	for q in "${DELIVERY_QUERIES[@]}"; do
		SCENARIO_KEY=$key_big smoke GET "/v1/webhook-endpoints/$ep_big/deliveries?$q"
		SCENARIO_KEY=$key_big scenario "$(deliveries_name "$q" "$BENCH_EVENTS")" GET \
			"/v1/webhook-endpoints/$ep_big/deliveries?$q" "" page
		SCENARIO_KEY=$key_small scenario "$(deliveries_name "$q" 1000)" GET \
			"/v1/webhook-endpoints/$ep_small/deliveries?$q" "" page
	done
	DELIVERIES=1
}

# The delivery-log pages the events group measures, and a scenario's name:
# deliveries_name QUERY DELIVERIES.
DELIVERY_QUERIES=('limit=10' 'limit=10&status=failed')
deliveries_name() { printf 'GET /v1/webhook-endpoints/{id}/deliveries?%s (%s deliveries)' "$1" "$2"; }

# endpoint_id: a new webhook endpoint of $SCENARIO_KEY's merchant (nothing
# delivers to it during the group: no worker runs).
endpoint_id() {
	curl -sf "$API/v1/webhook-endpoints" -H "Authorization: Bearer $SCENARIO_KEY" \
		--data '{"url":"https://hooks.example.com/bench"}' | jq -er .data.id
}

# seed_deliveries MERCHANT ENDPOINT EVERY: a delivery of each of MERCHANT's
# events to ENDPOINT, made when its event was; every EVERYth failed after 3
# attempts. (Their attempts are not written: the delivery log reads the
# last response from the delivery, migration 0020.)
seed_deliveries() {
	pg -v mid="$1" -v ep="$2" -v every="$3" <<-'SQL'
		INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, event_type, endpoint_id, status, attempts,
		    last_status, last_response_body, next_attempt_at, delivered_at, created_at, event_created_at)
		SELECT 'whd_' || substr(md5(e.id), 1, 24), e.merchant_id, e.livemode, e.id, e.type, :'ep',
		       CASE WHEN failed THEN 'failed' ELSE 'succeeded' END, CASE WHEN failed THEN 3 ELSE 1 END,
		       CASE WHEN failed THEN 503 ELSE 200 END, CASE WHEN failed THEN 'unavailable' ELSE 'ok' END,
		       e.created_at, CASE WHEN NOT failed THEN e.created_at END, e.created_at, e.created_at
		FROM (SELECT *, row_number() OVER () % :every = 0 AS failed FROM events
		      WHERE merchant_id = :'mid' AND livemode = false) e;
	SQL
}

# seed_events MERCHANT COUNT: payment_intent.succeeded test events.
seed_events() {
	pg -v mid="$1" -v n="$2" <<-'SQL'
		INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_' || substr(md5(random()::text || g::text), 1, 24), :'mid', false, 'payment_intent.succeeded',
		       jsonb_build_object('id', 'pi_' || substr(md5(g::text), 1, 24), 'object', 'payment_intent',
		           'amount', 1000 + g % 9000, 'currency', 'usd', 'status', 'succeeded'),
		       now() - random() * interval '29 days'
		FROM generate_series(1, :n::int) AS g;
	SQL
}

# seed_refunds: a merchant with BENCH_REFUND_PAYMENTS succeeded test payments
# of 100.00 USD (their ids in $REFUND_IDS) and one hot payment of the maximum
# amount ($HOT_PAYMENT), with the ledger entries and the balance they make,
# so every 1-cent refund of the runs is accepted.
seed_refunds() {
	REFUND_MERCHANT=$(bin/api merchant create --name 'Bench refunds' | jq -er .id)
	REFUND_KEY=$(bin/api key create --merchant "$REFUND_MERCHANT" --mode test | jq -er .key)
	log "seeding $BENCH_REFUND_PAYMENTS paid payments for $REFUND_MERCHANT"
	pg -v mid="$REFUND_MERCHANT" -v n="$BENCH_REFUND_PAYMENTS" <<-'SQL'
		WITH s AS MATERIALIZED (
		    SELECT 'pi_' || substr(md5(random()::text || g::text), 1, 24) AS id,
		           CASE WHEN g = 0 THEN 99999999 ELSE 10000 END AS amount,
		           now() - random() * interval '30 days' AS ts
		    FROM generate_series(0, :n::int) AS g
		), p AS (
		    INSERT INTO payment_intents (merchant_id, livemode, id, amount, amount_received, currency, status,
		        fee_amount, succeeded_at, created_at, updated_at, description)
		    SELECT :'mid', false, id, amount, amount, 'usd', 'succeeded', round(amount * 0.049) + 40, ts, ts, ts,
		           CASE WHEN amount = 99999999 THEN 'hot' END
		    FROM s
		    RETURNING id, amount, fee_amount, created_at
		)
		INSERT INTO ledger_entries (id, merchant_id, livemode, currency, type, amount, fee, source_id, created_at)
		SELECT 'le_' || substr(md5(id), 1, 24), :'mid', false, 'usd', 'payment', amount - fee_amount, fee_amount, id, created_at
		FROM p;
		INSERT INTO balances (merchant_id, livemode, currency, ledger_total)
		SELECT :'mid', false, 'usd', sum(amount) FROM ledger_entries WHERE merchant_id = :'mid';
		VACUUM ANALYZE payment_intents;
	SQL
	REFUND_IDS="$OUT/payments.txt"
	# (psql substitutes :'mid' in scripts read from stdin, not in -c commands)
	pg -v mid="$REFUND_MERCHANT" <<<"SELECT id FROM payment_intents WHERE merchant_id = :'mid' AND description IS NULL" >"$REFUND_IDS"
	HOT_PAYMENT=$(pg -v mid="$REFUND_MERCHANT" <<<"SELECT id FROM payment_intents WHERE merchant_id = :'mid' AND description = 'hot'")
	[[ -s $REFUND_IDS && -n $HOT_PAYMENT ]] || die "no payments seeded for the refund runs"
}

# Refunds: 1-cent partial refunds on random distinct payments, then all on
# the one hot payment, whose row lock serializes them (contention). Every
# refund of a merchant also takes its balance row for the end of its
# transaction. Runs after the webhook measurement: the refund tasks the API
# enqueues wait in Redis (no worker runs), so they do not load it.
refunds() {
	seed_refunds
	local body='{"payment_intent":"{id}","amount":1,"reason":"requested_by_customer"}'
	SCENARIO_KEY=$REFUND_KEY smoke POST /v1/refunds '{"payment_intent":"'"$(head -n 1 "$REFUND_IDS")"'","amount":1}'
	SCENARIO_KEY=$REFUND_KEY SCENARIO_IDS=$REFUND_IDS SCENARIO_RATE=$BENCH_REFUND_RATE \
		scenario "POST /v1/refunds (distinct payments)" POST /v1/refunds "$body" insert
	SCENARIO_KEY=$REFUND_KEY SCENARIO_RATE=$BENCH_REFUND_RATE \
		scenario "POST /v1/refunds (one hot payment)" POST /v1/refunds \
		'{"payment_intent":"'"$HOT_PAYMENT"'","amount":1}' insert
	drain_refunds
}

# drain_refunds: bin/worker until no refund is pending, so the groups after
# do not inherit this one's queue (the renewal sweep's worker spent eight of
# its ten minutes on 17,000 refunds left by these runs, on a slow machine).
drain_refunds() {
	local pending
	log "draining the refunds' queue with bin/worker"
	WORKER_ADMIN_ADDR="127.0.0.1:$((BENCH_ADMIN_PORT + 1))" bin/worker >"$OUT/refunds-worker.log" 2>&1 &
	WORKER_PID=$!
	while pending=$(pg -c "SELECT count(*) FROM refunds WHERE status = 'pending'") && ((pending > 0)); do
		kill -0 "$WORKER_PID" 2>/dev/null || die "bin/worker exited while draining refunds (see $OUT/refunds-worker.log)"
		sleep 2
	done
	stop_workers
}

# dashboard: a merchant with BENCH_DASH_PAYMENTS succeeded test payments
# spread over its last 30 days (with their ledger entries, which the home
# page's chart sums, and the balance they make) and a dashboard user signed
# in through the form; then its home page and payments list, the session
# cookie in place of a key.
dashboard() {
	local mid cookie csrf pw=bench-dashboard-password
	mid=$(bin/api merchant create --name 'Bench dashboard' | jq -er .id)
	printf '%s\n' "$pw" | bin/api user create --merchant "$mid" --email bench@dashboard.example --password-stdin >/dev/null
	log "seeding $BENCH_DASH_PAYMENTS paid payments for the dashboard's $mid"
	pg -v mid="$mid" -v n="$BENCH_DASH_PAYMENTS" <<-'SQL'
		WITH s AS MATERIALIZED (
		    SELECT 'pi_' || substr(md5(random()::text || g::text), 1, 24) AS id,
		           1000 + (g % 9000) AS amount, now() - random() * interval '30 days' AS ts
		    FROM generate_series(1, :n::int) AS g
		), p AS (
		    INSERT INTO payment_intents (merchant_id, livemode, id, amount, amount_received, currency, status,
		        fee_amount, succeeded_at, created_at, updated_at)
		    SELECT :'mid', false, id, amount, amount, 'usd', 'succeeded', round(amount * 0.049) + 40, ts, ts, ts
		    FROM s
		    RETURNING id, amount, fee_amount, created_at
		)
		INSERT INTO ledger_entries (id, merchant_id, livemode, currency, type, amount, fee, source_id, created_at)
		SELECT 'le_' || substr(md5(id), 1, 24), :'mid', false, 'usd', 'payment', amount - fee_amount, fee_amount, id, created_at
		FROM p;
		INSERT INTO balances (merchant_id, livemode, currency, ledger_total)
		SELECT :'mid', false, 'usd', sum(amount) FROM ledger_entries WHERE merchant_id = :'mid';
		VACUUM ANALYZE payment_intents;
		VACUUM ANALYZE ledger_entries;
	SQL
	# Sign in as a browser does: the form's CSRF cookie and field, then the
	# session cookie.
	csrf=$(curl -s -c "$OUT/dash.cookies" "$API/dashboard/login" | sed -n 's/.*name="csrf_token" value="\([^"]*\)".*/\1/p')
	curl -s -o /dev/null -b "$OUT/dash.cookies" -c "$OUT/dash.cookies" --data-urlencode "csrf_token=$csrf" \
		--data-urlencode email=bench@dashboard.example --data-urlencode "password=$pw" "$API/dashboard/login"
	cookie=$(awk '$6 == "dash_session" { print $7 }' "$OUT/dash.cookies")
	[[ -n $cookie ]] || die "dashboard sign-in gave no session cookie"
	[[ $(curl -s -o /dev/null -w '%{http_code}' -H "Cookie: dash_session=$cookie" "$API/dashboard/test") == 200 ]] ||
		die "the dashboard's home page did not answer 200"
	SCENARIO_RATE=$BENCH_DASH_RATE scenario "GET /dashboard/test (home, $BENCH_DASH_PAYMENTS payments)" \
		GET /dashboard/test "" "" -H "Cookie: dash_session=$cookie"
	SCENARIO_RATE=$BENCH_DASH_RATE scenario "GET /dashboard/test/payments ($BENCH_DASH_PAYMENTS payments)" \
		GET /dashboard/test/payments "" "" -H "Cookie: dash_session=$cookie"
}

# ---------------------------------------------------------------------------
# Report

machine() {
	local cpu
	cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
	printf '%s cores, %s; %s; %s' "$(nproc)" "${cpu:-unknown CPU}" \
		"$(psql "$DATABASE_URL" -X -A -t -c 'SHOW server_version' 2>/dev/null | sed 's/^/PostgreSQL /')" \
		"$(go env GOVERSION)"
}

# A jq definition the report's tables start with: each raw figure (insert,
# select, page) by its ref, the mean of its rounds (back to back has two).
JQ_RAW_BY_REF='def raw_by_ref: map(select(.kind == "raw")) | group_by(.ref)
  | map({key: .[0].ref, value: (map(.rps) | add / length)}) | from_entries;'

# The summary table: one row per scenario (closed throughput, open latency).
summary_table() {
	jq -rs --arg rate "$BENCH_RATE" --arg conns "$BENCH_CONNS" "$JQ_RAW_BY_REF"'
	  def r1: if . == null then "—" else (. * 10 | round / 10 | tostring) end;
	  def r2: if . == null then "—" else (. * 100 | round / 100 | tostring) end;
	  def pct: (. * 100 | round | tostring) + "%";
	  raw_by_ref as $raw
	  | (reduce .[] as $x ([]; if any(.[]; . == $x.scenario) then . else . + [$x.scenario] end)) as $names
	  | "| scenario | vs raw PostgreSQL | req/s (\($conns) conns) | open-model rate req/s | p50 ms | p99 ms | max ms | errors |",
	    "|---|---:|---:|---:|---:|---:|---:|---:|",
	    ( $names[] as $n
	      | [ .[] | select(.scenario == $n) ] as $rows
	      | ($rows | map(select(.kind == "closed" or .kind == "raw")) | first) as $c
	      | ($rows | map(select(.kind == "open")) | first) as $o
	      | if $c.kind == "raw" then
	          "| \($n) | — | \($c.rps | r1) TPS | — | — | — | — | \($c.errors) |"
	        else
	          "| \($n) | "
	          + (if (($c.ref // "") != "" and $raw[$c.ref] != null and $raw[$c.ref] > 0)
	             then "\($c.rps / $raw[$c.ref] | pct) of \($c.ref)" else "—" end)
	          + " | \($c.rps | r1) | \($o.rate // "—") | \($o.p50_ms | r2) | \($o.p99_ms | r2) | \($o.max_ms | r1)"
	          + " | \(($c.errors + ($o.errors // 0)))"
	          + (if (($o.missed // 0) + ($o.late // 0)) > 0
	             then " (open: \($o.late) late, \($o.missed) missed)" else "" end)
	          + " |"
	        end )
	' "$RESULTS"
}

# The aims of issue 17 against this run, ratios first: one row each, with
# the figure it is judged on and whether it is met.
aims_table() {
	local big=${LIST_BIG:-} small=${LIST_SMALL:-}
	jq -rs --arg big "$big" --arg small "$small" --arg rate "$BENCH_RATE" "$JQ_RAW_BY_REF"'
	  def r2: . * 100 | round / 100 | tostring;
	  def f2: (. * 100 | round) as $n | "\($n / 100 | floor).\($n % 100 | tostring | if length < 2 then "0" + . else . end)";
	  def row($what; $aim; $ok; $shown): "| \($what) | \($aim) | \($shown) | \(if $ok then "met" else "not met" end) |";
	  raw_by_ref as $raw
	  | (map(select(.kind == "closed")) | map({key: .scenario, value: .}) | from_entries) as $c
	  | (map(select(.kind == "open")) | map({key: .scenario, value: .}) | from_entries) as $o
	  | def ratio($s; $ref; $aim; $what):
	      if $c[$s] and $raw[$ref] then ($c[$s].rps / $raw[$ref]) as $v
	        | row($what; "≥ \($aim)"; $v >= ($aim | tonumber); ($v | f2)) else empty end;
	    def p99($s; $what):
	      if $o[$s] then row($what; "< 10 ms"; $o[$s].p99_ms < 10;
	        "\($o[$s].p99_ms | r2) ms (max \($o[$s].max_ms | r2))") else empty end;
	  "| aim (issue 17; open model at \($rate) req/s, this bench'"'"'s order) | target | this run | |",
	  "|---|---:|---:|---|",
	  ratio("POST /v1/products"; "insert"; "0.40"; "`POST /v1/products` / raw single-row insert"),
	  ratio("GET /v1/products/{id}"; "select"; "0.50"; "`GET /v1/products/{id}` / raw primary-key select"),
	  ratio($big; "page"; "0.35"; "`GET /v1/products?limit=10` / raw 10-row page"),
	  p99("POST /v1/products"; "open-model p99, `POST /v1/products`"),
	  p99("GET /v1/products/{id}"; "open-model p99, `GET /v1/products/{id}`"),
	  p99("POST /v1/products (PgBouncer, transaction mode)"; "open-model p99, `POST /v1/products` through PgBouncer"),
	  p99("GET /v1/products/{id} (PgBouncer, transaction mode)"; "open-model p99, `GET /v1/products/{id}` through PgBouncer"),
	  (if $c[$big] and $c[$small] then ($c[$big].rps / $c[$small].rps) as $v
	    | row("list page throughput, big merchant / 1,000 rows"; "≥ 0.90"; $v >= 0.9; ($v | f2)) else empty end)
	' "$RESULTS"
	if [[ -s $OUT/webhooks.json ]]; then
		jq -r '"| webhook deliveries/s (\(.events) events × \(.receivers) receivers) | ≥ 2,000 | \(.deliveries_per_s | floor) | \(if .deliveries_per_s >= 2000 then "met" else "not met" end) |",
		  "| webhook event-to-receipt p99 at \(.rate) events/s | < 100 ms | \(.p99_ms * 10 | round / 10) ms | \(if .p99_ms < 100 then "met" else "not met" end) |"' "$OUT/webhooks.json"
	fi
}

# Every figure, for results.md.
detail_table() {
	jq -rs '
	  def r2: if . == null then "—" else (. * 100 | round / 100 | tostring) end;
	  "| scenario | model | requests | errors | late | missed | req/s | p50 ms | p90 ms | p99 ms | max ms | mean ms | statuses |",
	  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
	  ( .[] | "| \(.scenario) | "
	    + (if .kind == "raw" then "pgbench \(.conns) clients"
	       elif .kind == "open" then "open \(.rate)/s, \(.conns) in flight"
	       else "closed \(.conns) conns" end)
	    + " | \(.count // "—") | \(.errors) | \(.late // "—") | \(.missed // "—") | \(.rps | r2)"
	    + " | \(.p50_ms | r2) | \(.p90_ms | r2) | \(.p99_ms | r2) | \(.max_ms | r2) | \(.mean_ms | r2)"
	    + " | \(.statuses // {} | to_entries | map("\(.key)×\(.value)") | join(" "))"
	    + (if (.first_error // "") != "" then " first error: \(.first_error | gsub("\\|"; "/"))" else "" end)
	    + " |" )
	' "$RESULTS"
}

# List page at BENCH_ROWS vs BENCH_SMALL_ROWS (or LABEL's big vs small).
list_comparison() {
	jq -rs --arg big "$1" --arg small "$2" --arg what "${3:-List page}" '
	  def r2: . * 100 | round / 100 | tostring;
	  (map(select(.scenario == $big)) | map({key: .kind, value: .}) | from_entries) as $b
	  | (map(select(.scenario == $small)) | map({key: .kind, value: .}) | from_entries) as $s
	  | if $b.closed and $s.closed and $s.closed.rps > 0 then
	      "\($what)\(if ($what | test(" vs ")) then "" else " on the big merchant vs the small one" end): \($b.closed.rps / $s.closed.rps * 100 | round)% of the throughput; p99 \($b.open.p99_ms | r2) ms vs \($s.open.p99_ms | r2) ms at the fixed rate."
	    else empty end
	' "$RESULTS"
}

# Scenarios whose error share is above BENCH_MAX_ERROR_PCT.
failing() {
	jq -rs --argjson max "$BENCH_MAX_ERROR_PCT" '
	  .[] | select(.kind != "raw" and .count > 0 and (.errors * 100 / .count) > $max)
	  | "\(.scenario) (\(.kind)): \(.errors)/\(.count) errors; statuses \(.statuses); \(.first_error // "")"
	' "$RESULTS"
}

# Webhook delivery: bin/worker delivering to in-process HTTPS receivers
# (internal/tools/webhookbench), events made through the API.
webhooks() {
	log "webhook delivery: $BENCH_WEBHOOK_EVENTS events x 5 receivers, then ${BENCH_WEBHOOK_RATE}/s for $SECS s"
	WEBHOOK_ALLOW_PRIVATE_NETWORKS=true WEBHOOK_TLS_INSECURE=true WORKER_ADMIN_ADDR="127.0.0.1:$((BENCH_ADMIN_PORT + 1))" \
		bin/worker >"$OUT/worker.log" 2>&1 &
	WORKER_PID=$!
	go build -o bin/webhookbench ./internal/tools/webhookbench
	bin/webhookbench -api "$API" -key "$KEY" -receivers 5 -events "$BENCH_WEBHOOK_EVENTS" \
		-rate "$BENCH_WEBHOOK_RATE" -duration "${SECS}s" -json >"$OUT/webhooks.json"
	kill -TERM "$WORKER_PID" 2>/dev/null || true
	wait "$WORKER_PID" 2>/dev/null || true
	WORKER_PID=""
}

webhook_table() {
	jq -r '"\n| webhook delivery | figure |\n|---|---:|\n| \(.events) events × \(.receivers) receivers, deliveries/s | \(.deliveries_per_s | floor) |\n| event-to-receipt p50 ms @ \(.rate) events/s | \(.p50_ms * 10 | round / 10) |\n| event-to-receipt p99 ms @ \(.rate) events/s | \(.p99_ms * 10 | round / 10) |\n\nAims: ≥ 2,000 deliveries/s, p99 < 100 ms."' "$OUT/webhooks.json"
}

renewal_table() {
	jq -r '"\n| renewal sweep (bin/scheduler + bin/worker) | figure |\n|---|---:|\n| \(.subscriptions) subscriptions due at once, renewals/s | \(.renewals_per_second) (\(.renewals) in \(.seconds * 10 | round / 10) s) |\n| API p99 / max ms during it, GET /v1/products/{id} @ \(.api.rate) req/s | \(.api.p99_ms * 100 | round / 100) / \(.api.max_ms * 100 | round / 100) (\(.api.errors) errors) |\n\nAim: the sweep does not push the API p99 over 10 ms."' "$OUT/renewals.json"
}

report() {
	local date table aims detail cmp bad block
	date=$(date -u '+%Y-%m-%d %H:%M UTC')
	table=$(summary_table)
	aims=$(aims_table)
	detail=$(detail_table)
	cmp=$(list_comparison "${LIST_BIG:-}" "${LIST_SMALL:-}")
	cmp+=$'\n'$(bare_comparison)
	if [[ -n ${EVENTS_BIG:-} ]]; then
		cmp+=$'\n'$(list_comparison "$EVENTS_BIG" "$EVENTS_SMALL" "Event list page")
		local q
		for q in 'type=payment_intent.*' 'type=charge.*'; do
			cmp+=$'\n'$(list_comparison "GET /v1/events?limit=10&$q ($BENCH_EVENTS events)" "GET /v1/events?limit=10&$q (1000 events)" "Event list page, $q,")
		done
	fi
	if [[ -n ${DELIVERIES:-} ]]; then
		local dq
		for dq in "${DELIVERY_QUERIES[@]}"; do
			cmp+=$'\n'$(list_comparison "$(deliveries_name "$dq" "$BENCH_EVENTS")" "$(deliveries_name "$dq" 1000)" \
				"Delivery log page, $dq,")
		done
	fi
	if [[ -n ${CUSTOMERS_BIG:-} ]]; then
		cmp+=$'\n'$(list_comparison "$CUSTOMERS_BIG" "$CUSTOMERS_SMALL" "Customer list page")
		cmp+=$'\n'$(list_comparison "$PAYMENTS_BIG" "$PAYMENTS_SMALL" "Payment list page")
	fi
	if [[ -n ${MERCHANTS_POST:-} ]]; then
		cmp+=$'\n'$(list_comparison "$MERCHANTS_POST" "POST /v1/products" "POST spread over $BENCH_MERCHANTS merchants vs one merchant")
		cmp+=$'\n'$(list_comparison "$MERCHANTS_GET" "GET /v1/products/{id}" "GET by id spread over $BENCH_MERCHANTS merchants vs one merchant")
	fi
	cmp=$(sed '/^$/d' <<<"$cmp")
	bad=$(failing)
	block=$(
		printf 'Measured by `make bench` on %s (%s), everything over loopback on one machine.\n' "$date" "$(machine)"
		printf 'Throughput: %s connections, closed model, %ss after %ss warmup. Latency: open model at a constant %s req/s (refunds: the rate in their row; latency from the scheduled send time). Raw PostgreSQL: pgbench, %s clients, prepared statements, %ss, in the same run.\n\n' \
			"$BENCH_CONNS" "$SECS" "$WARM" "$BENCH_RATE" "$BENCH_CONNS" "$SECS"
		printf '%s\n\n' "$aims"
		printf '%s\n' "$table"
		[[ -n $cmp ]] && printf '\n%s\n' "$cmp"
		printf '\nEvery figure: `deploy/bench/results.md`.\n'
		[[ -s $OUT/webhooks.json ]] && webhook_table
		if [[ -s $OUT/renewals.json ]]; then renewal_table; fi
		idle_table
		if [[ -s $OUT/failover.json ]]; then failover_table; fi
		if [[ -s $OUT/stripe.json ]]; then stripe_table; fi
	)

	{
		printf '# Benchmark results\n\n'
		[[ -n $bad ]] && printf '**INVALID RUN: too many errors**\n\n```\n%s\n```\n\n' "$bad"
		printf '%s\n\n## Every measurement\n\n%s\n\n' "$block" "$detail"
		printf 'Settings: BENCH_DURATION=%s BENCH_WARMUP=%s BENCH_CONNS=%s BENCH_RATE=%s BENCH_OPEN_CONNS=%s BENCH_ROWS=%s BENCH_SMALL_ROWS=%s.\n' \
			"$BENCH_DURATION" "$BENCH_WARMUP" "$BENCH_CONNS" "$BENCH_RATE" "$BENCH_OPEN_CONNS" "$BENCH_ROWS" "$BENCH_SMALL_ROWS"
		printf 'CPU: %s\n' "$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
		kept_results
	} >"$OUT/results.md"
	# A partial run (BENCH_ONLY) would replace the full run's tables with
	# its few rows: its results stay in $OUT.
	if [[ -z $BENCH_ONLY ]]; then
		cat "$OUT/results.md" >deploy/bench/results.md
	fi

	if [[ -n $bad ]]; then
		printf '%s\n' "$table"
		printf '\nbench: error rate above %s%% in:\n%s\n' "$BENCH_MAX_ERROR_PCT" "$bad" >&2
		printf 'bench: README.md left as it was; logs in %s\n' "$OUT" >&2
		exit 1
	fi

	if [[ -n $BENCH_ONLY ]]; then
		echo "bench: BENCH_ONLY=$BENCH_ONLY, a partial run: README.md and deploy/bench/results.md left as they were; results in $OUT/results.md" >&2
	elif [[ -f README.md ]] && grep -q '<!-- bench:start -->' README.md && grep -q '<!-- bench:end -->' README.md; then
		printf '%s\n' "$block" >"$OUT/block.md"
		awk -v f="$OUT/block.md" '
			/<!-- bench:start -->/ { print; while ((getline l < f) > 0) print l; skip = 1; next }
			/<!-- bench:end -->/   { skip = 0 }
			!skip { print }
		' README.md >"$OUT/README.md"
		cat "$OUT/README.md" >README.md
		echo "bench: README.md updated" >&2
	else
		echo "bench: README.md has no <!-- bench:start --> / <!-- bench:end --> markers: results only in deploy/bench/results.md" >&2
	fi
	if [[ -z $BENCH_ONLY ]]; then
		echo "bench: deploy/bench/results.md written; raw outputs and logs in $OUT" >&2
	fi
	printf '\n%s\n' "$table"
	[[ -n $cmp ]] && printf '\n%s\n' "$cmp"
	return 0
}

# The part of results.md that report() keeps: the webhook delivery profile
# (between its markers), the back-to-back runs' blocks and the notes after them
# (from the first backtoback* marker on), and the cost split of a request
# (from its cost marker on, kept the same way).
kept_results() {
	[[ -f deploy/bench/results.md ]] || return 0
	awk '/<!-- (backtoback[a-z-]*|cost):start -->/ && !keep { keep = 1; print "" }
		/<!-- webhook-profile:start -->/ && !keep { wp = 1; print "" }
		keep || wp { print }
		/<!-- webhook-profile:end -->/ { wp = 0 }' deploy/bench/results.md
}

# ---------------------------------------------------------------------------
# Scale-out: the API through PgBouncer, and during a Redis failover.

# stop_api: SIGTERM the API under test and wait for it.
stop_api() {
	[[ -n $API_PID ]] || return 0
	kill -TERM "$API_PID" 2>/dev/null || true
	wait "$API_PID" 2>/dev/null || true
	API_PID=""
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_api_pooled: a local PgBouncer in transaction mode
# (deploy/local/pgbouncer.sh, BENCH_POOLER_SIZE server connections) and
# bin/api serve through it, DATABASE_POOL_MODE=transaction, with
# DATABASE_DIRECT_URL on the server itself for its migrations. With
# BENCH_POOLER_PREPARED, the pooler tracks prepared statements and the API
# keeps its own.
start_api_pooled() {
	local url direct=$DATABASE_URL prepared=false
	((POOLER_PREPARED == 0)) || prepared=true
	# Under /tmp: as root PgBouncer runs as postgres, which cannot enter $OUT.
	POOLER_DIR="${TMPDIR:-/tmp}/paysvc-bench-pgbouncer-$$"
	url=$(PGBOUNCER_DIR=$POOLER_DIR PGBOUNCER_POOL_SIZE=$BENCH_POOLER_SIZE PGBOUNCER_PREPARED_STATEMENTS=$POOLER_PREPARED \
		bash deploy/local/pgbouncer.sh start) || die "deploy/local/pgbouncer.sh start failed"
	# (direct first: a prefix assignment sees the ones before it)
	DATABASE_URL="${url%%/\?*}/$BENCH_DB?sslmode=disable" DATABASE_DIRECT_URL=$direct DATABASE_POOL_MODE=transaction \
		DATABASE_POOLER_PREPARED_STATEMENTS=$prepared start_api
}

# stop_pooler stops start_api_pooled's PgBouncer, if one runs.
stop_pooler() {
	[[ -n $POOLER_DIR ]] || return 0
	PGBOUNCER_DIR=$POOLER_DIR bash deploy/local/pgbouncer.sh stop
	rm -rf "$POOLER_DIR"
	POOLER_DIR=""
}

# pooled: POST /v1/products and GET /v1/products/{id} through
# start_api_pooled, beside the direct rows above: the pooler's overhead.
# The API is restarted direct afterwards.
pooled() {
	stop_api
	start_api_pooled
	smoke POST /v1/products "$1"
	scenario "POST /v1/products (PgBouncer, transaction mode)" POST /v1/products "$1" insert
	scenario "GET /v1/products/{id} (PgBouncer, transaction mode)" GET '/v1/products/{id}' "" select
	stop_api
	stop_pooler
	start_api
}

# failover: the API on a redis-sentinel:// REDIS_URL (Debian's redis-server
# as a primary, its replica and three sentinels on loopback, down after 1 s),
# GET /v1/products/{id} at BENCH_RATE req/s (open model) for max(BENCH_DURATION,
# 12 s); the primary is killed 3 s into the measured window. Kept in
# $OUT/failover.json: how long the sentinels took to promote the replica,
# and the run's requests, errors, p50/p99/max (the limiter's Redis call is
# on every request's path). The API is restarted on BENCH_REDIS_URL afterwards.
failover() {
	command -v redis-server >/dev/null || { log "failover: no redis-server, skipped"; return 0; }
	local dir="$OUT/sentinel" primary replica sentinels=() s secs=$((SECS > 12 ? SECS : 12)) ppid
	mkdir -p "$dir"
	primary=$(free_port)
	replica=$(free_port)
	redis-server --port "$primary" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/primary.log" 2>&1 &
	ppid=$!
	SENTINEL_PIDS=("$ppid")
	redis-server --port "$replica" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
		--replicaof 127.0.0.1 "$primary" >"$dir/replica.log" 2>&1 &
	SENTINEL_PIDS+=($!)
	for i in 0 1 2; do
		s=$(free_port)
		printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor pay 127.0.0.1 %s 2\nsentinel down-after-milliseconds pay 1000\nsentinel failover-timeout pay 4000\n' \
			"$s" "$dir" "$primary" >"$dir/sentinel$i.conf"
		redis-server "$dir/sentinel$i.conf" --sentinel >"$dir/sentinel$i.log" 2>&1 &
		SENTINEL_PIDS+=($!)
		sentinels+=("127.0.0.1:$s")
	done
	local ok=""
	for _ in $(seq 100); do
		if [[ $(redis-cli -p "${sentinels[0]#*:}" sentinel replicas pay 2>/dev/null | grep -c "^name$") == 1 &&
			$(redis-cli -p "${sentinels[0]#*:}" sentinel sentinels pay 2>/dev/null | grep -c "^name$") == 2 ]]; then
			ok=1
			break
		fi
		sleep 0.2
	done
	[[ -n $ok ]] || { die "failover: the sentinels did not see the replica and each other in 20 s"; }

	stop_api
	REDIS_URL="redis-sentinel://$(IFS=,; echo "${sentinels[*]}")/0?master=pay" start_api
	smoke GET "/v1/products/$(head -n 1 "$IDS")"
	local name="GET /v1/products/{id} during a Redis failover"
	log "api: $name ($BENCH_RATE req/s, open, ${secs}s; primary killed 3 s in)"
	"${LOADGEN[@]}" -name "$name" -method GET -url "$API/v1/products/{id}" -ids "$IDS" -H "Authorization: Bearer $KEY" \
		-warmup "${WARM}s" -duration "${secs}s" -json -conns "$BENCH_OPEN_CONNS" -rate "$BENCH_RATE" \
		-timeline "$OUT/failover-timeline.csv" >"$OUT/failover-run.json" &
	local lg=$! killed promoted=""
	sleep $((WARM + 3))
	killed=$(date +%s.%N)
	kill -KILL "$ppid"
	for _ in $(seq 300); do
		if [[ $(redis-cli -p "${sentinels[0]#*:}" sentinel get-master-addr-by-name pay 2>/dev/null | tail -n 1) == "$replica" ]]; then
			promoted=$(date +%s.%N)
			break
		fi
		sleep 0.05
	done
	wait "$lg" || die "loadgen failed during the failover run"
	jq -c --arg killed "$killed" --arg promoted "$promoted" \
		'{scenario:.name, rate, duration_s, count, errors, p50_ms, p99_ms, max_ms, statuses,
		  promoted_after_s: (if $promoted == "" then null else (($promoted | tonumber) - ($killed | tonumber)) end)}' \
		"$OUT/failover-run.json" | tee "$OUT/failover.json" >&2
	stop_api
	kill "${SENTINEL_PIDS[@]}" 2>/dev/null || true
	wait "${SENTINEL_PIDS[@]}" 2>/dev/null || true
	SENTINEL_PIDS=()
	start_api
}

failover_table() {
	jq -r '"\n| Redis failover (Sentinel, down after 1 s) | figure |\n|---|---:|\n| replica promoted after the primary was killed, s | \(if .promoted_after_s == null then "—" else (.promoted_after_s * 10 | round / 10) end) |\n| \(.scenario) @ \(.rate) req/s for \(.duration_s | round) s: errors | \(.errors) of \(.count) |\n| its p50 / p99 / max ms | \(.p50_ms * 100 | round / 100) / \(.p99_ms * 100 | round / 100) / \(.max_ms * 100 | round / 100) |"' "$OUT/failover.json"
}

# ---------------------------------------------------------------------------
# BENCH_MODE=backtoback: the independent harness of issue 17. Every phase
# runs right after the previous one, BENCH_WARMUP then BENCH_DURATION each
# (10 s after 2 s), with no pause and no CHECKPOINT between them: raw INSERT
# and raw SELECT (pgbench), the closed POST /v1/products, GET by id and
# list (BENCH_CONNS connections), raw INSERT and SELECT again (the ratios
# divide by the mean of both rounds), then the open-model POST and GET at
# BENCH_RATE req/s (BENCH_OPEN_CONNS in flight). The generator runs at
# nice -n -10 (when allowed). Beside every figure it keeps the evidence a
# stall needs: each run's per-second timeline, PostgreSQL's checkpoint
# and WAL counters and the products table's counters after every phase, the
# checkpoints PostgreSQL logged meanwhile (when its log is readable), and
# the API's GC trace (GODEBUG=gctrace=1, in $OUT/api.log). Its report goes
# into results.md between the backtoback markers; README.md is left alone.

backtoback() {
	local product='{"name":"Bench product {n}","price":{"amount":1999,"currency":"usd"}}'
	local insert select
	insert="INSERT INTO bench_products (id, merchant_id, livemode, name)
VALUES ('prod_' || substr(md5(random()::text), 1, 24), :mid, false, 'Raw product');"
	select="\\set n random(1, 10000)
SELECT * FROM products
WHERE merchant_id = :mid AND livemode = false AND id = (SELECT id FROM bench_ids WHERE n = :n);"
	if nice -n -10 true 2>/dev/null; then
		LOADGEN=(nice -n -10 bin/loadgen)
	else
		log "nice -n -10 refused (needs root): the generator runs at the default priority"
	fi
	pg -c "ALTER DATABASE $BENCH_DB SET track_wal_io_timing = on"
	# BENCH_B2B_POOLED=1: the API through PgBouncer; pgbench stays direct,
	# the ratios being against raw PostgreSQL.
	local start=start_api
	[[ $B2B_POOLED == 1 ]] && start=start_api_pooled
	GODEBUG=${GODEBUG:+$GODEBUG,}gctrace=1 "$start"
	smoke POST /v1/products "$product"
	smoke GET "/v1/products/$(head -n 1 "$IDS")"
	smoke GET "/v1/products?limit=10"

	pg_log_mark
	quiesce # once, before the first phase; none between them (BENCH_B2B_CHECKPOINT=1: before each, to compare)
	QUIESCE=${BENCH_B2B_CHECKPOINT:-0}
	# The machine's own pauses, second by second (internal/tools/stallprobe),
	# at the generator's priority: a sleep that overruns by tens of ms there
	# is the machine stopping, not one process. First BENCH_B2B_REST seconds
	# at rest, the services idle: a VM that stops by itself (with or without
	# steal accounted) shows there, and the run's stalls read against it.
	local probe=(bin/stallprobe) rest=${BENCH_B2B_REST:-15}
	[[ ${LOADGEN[0]} == nice ]] && probe=(nice -n -10 bin/stallprobe)
	if [[ $rest -gt 0 ]]; then
		log "backtoback: the machine at rest for $rest s (bin/stallprobe)"
		"${probe[@]}" >"$OUT/stalls-rest.csv" &
		PROBE_PID=$!
		sleep "$rest"
		kill "$PROBE_PID" 2>/dev/null || true
		wait "$PROBE_PID" 2>/dev/null || true
	fi
	B2B_STARTED=$(date +%s)
	sampler &
	SAMPLER_PID=$!
	"${probe[@]}" >"$OUT/stalls.csv" &
	PROBE_PID=$!
	pg_snapshot "start"
	raw "raw INSERT (round 1)" insert "$insert"
	pg_snapshot "raw INSERT (round 1)"
	raw "raw SELECT (round 1)" select "$select"
	pg_snapshot "raw SELECT (round 1)"
	b2b_api closed "POST /v1/products" POST /v1/products "$product" insert
	b2b_api closed "GET /v1/products/{id}" GET '/v1/products/{id}' "" select
	b2b_api closed "GET /v1/products?limit=10" GET '/v1/products?limit=10' "" page
	raw "raw INSERT (round 2)" insert "$insert"
	pg_snapshot "raw INSERT (round 2)"
	raw "raw SELECT (round 2)" select "$select"
	pg_snapshot "raw SELECT (round 2)"
	# BENCH_B2B_HOOK: a command run here, before the open-model runs, to
	# test a cause (e.g. sync, to write back the kernel's dirty pages).
	if [[ -n ${BENCH_B2B_HOOK:-} ]]; then
		log "hook: $BENCH_B2B_HOOK"
		bash -c "$BENCH_B2B_HOOK"
	fi
	b2b_api open "POST /v1/products" POST /v1/products "$product" insert
	b2b_api open "GET /v1/products/{id}" GET '/v1/products/{id}' "" select
	# Not in the harness, after it: PostgreSQL's own single-row insert at the
	# same fixed rate, the floor under the open-model POST's tail.
	raw_open "raw INSERT at $BENCH_RATE/s (open model)" insert-open "$insert"
	pg_snapshot "raw INSERT open model"
	kill "$SAMPLER_PID" "$PROBE_PID" 2>/dev/null || true
	wait "$SAMPLER_PID" "$PROBE_PID" 2>/dev/null || true
	SAMPLER_PID="" PROBE_PID=""
	pg_log_copy
}

# sampler: once a second until killed, a CSV line in $OUT/io.csv: the time,
# the kernel's dirty and under-writeback page cache (kB), the disks' writes
# completed and milliseconds spent writing (/proc/diskstats, whole disks),
# PostgreSQL's WAL writes and syncs with their time (pg_stat_wal;
# track_wal_io_timing is on for the bench database in this mode), and what
# the bench database's active backends wait on at that instant
# (pg_stat_activity: e.g. LWLock:WALWrite=12 IO:WALSync=1 CPU=3).
sampler() {
	echo "unix_s,dirty_kb,writeback_kb,disk_writes,disk_write_ms,wal_write,wal_sync,wal_write_ms,wal_sync_ms,waits" >"$OUT/io.csv"
	while :; do
		printf '%s,%s,%s,%s\n' "$(date +%s)" \
			"$(awk '/^Dirty:/ { d = $2 } /^Writeback:/ { w = $2 } END { printf "%d,%d", d, w }' /proc/meminfo)" \
			"$(awk '$3 ~ /^(vd|sd|xvd)[a-z]+$|^nvme[0-9]+n[0-9]+$/ { n += $8; ms += $11 } END { printf "%d,%d", n, ms }' /proc/diskstats)" \
			"$(pg -F, 2>/dev/null <<-'SQL'
				SELECT wal_write, wal_sync, round(wal_write_time), round(wal_sync_time),
				       (SELECT coalesce(string_agg(w || '=' || n, ' ' ORDER BY n DESC), '')
				        FROM (SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS w, count(*) AS n
				              FROM pg_stat_activity
				              WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
				              GROUP BY 1) s)
				FROM pg_stat_wal
			SQL
			)" \
			>>"$OUT/io.csv"
		sleep 1
	done
}

# raw_open NAME REF SCRIPT: pgbench at BENCH_RATE transactions/s on
# BENCH_OPEN_CONNS clients (-R: latency from each transaction's scheduled
# start, as loadgen's open model), p50/p99/max from its per-transaction log.
raw_open() {
	local name=$1 ref=$2 file="$OUT/pgbench-open-$2.sql" jobs
	printf '%s\n' "$3" >"$file"
	jobs=$(nproc)
	log "raw: $name"
	(cd "$OUT" && pgbench -n -M prepared -c "$BENCH_OPEN_CONNS" -j "$jobs" -R "$BENCH_RATE" -T "$SECS" -D mid="$MERCHANT" \
		-l --log-prefix=rawopen -f "$file" "$DATABASE_URL" >"$OUT/pgbench-open-$ref.log" 2>&1) ||
		{ cat "$OUT/pgbench-open-$ref.log" >&2; die "pgbench $ref (open model) failed"; }
	# Log lines: client tx latency_us script epoch_s epoch_us lag_us.
	cat "$OUT"/rawopen.* | awk '{ print ($3 + $7) / 1000 }' | sort -n | awk '
		{ v[NR] = $1; sum += $1 }
		END {
			i50 = int(NR * 0.50); if (i50 < 1) i50 = 1
			i99 = int(NR * 0.99 + 0.999); if (i99 > NR) i99 = NR
			printf "{\"count\":%d,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"mean_ms\":%.3f}\n", NR, v[i50], v[i99], v[NR], sum / NR
		}' | jq -c --arg s "$name" --arg ref "$ref" --argjson rate "$BENCH_RATE" --argjson c "$BENCH_OPEN_CONNS" --argjson secs "$SECS" \
		'. + {scenario:$s, kind:"raw", model:"pgbench open", ref:$ref, rate:$rate, conns:$c, rps:(.count / $secs), errors:0}' |
		tee -a "$RESULTS" >&2
	rm -f "$OUT"/rawopen.*
}

# b2b_api KIND NAME METHOD PATH BODY REF: one API phase of backtoback.
b2b_api() {
	local kind=$1 name=$2 method=$3 path=$4 body=$5 ref=$6
	local args=(-name "$name" -method "$method" -url "$API$path" -H "Authorization: Bearer $KEY"
		-warmup "${WARM}s" -duration "${SECS}s" -json)
	[[ -n $body ]] && args+=(-body "$body")
	[[ $path$body == *"{id}"* ]] && args+=(-ids "$IDS")
	if [[ $kind == closed ]]; then
		log "api: $name ($BENCH_CONNS connections, closed)"
		measure closed "$ref" "${args[@]}" -conns "$BENCH_CONNS"
	else
		log "api: $name ($BENCH_RATE req/s, open, $BENCH_OPEN_CONNS in flight)"
		measure open "$ref" "${args[@]}" -conns "$BENCH_OPEN_CONNS" -rate "$BENCH_RATE"
	fi
	pg_snapshot "$name ($kind)"
	curl -s "$ADMIN/metrics" >"$OUT/metrics-$TIMELINES.txt" || true
}

# pg_snapshot LABEL: PostgreSQL's checkpoint and WAL counters and the
# products table's, one JSON line in $OUT/pgstat.jsonl.
pg_snapshot() {
	pg -v label="$1" <<-'SQL' >>"$OUT/pgstat.jsonl"
		SELECT json_build_object('label', :'label', 'at', extract(epoch FROM clock_timestamp()),
		    'checkpoints_timed', b.checkpoints_timed, 'checkpoints_req', b.checkpoints_req,
		    'buffers_checkpoint', b.buffers_checkpoint, 'buffers_clean', b.buffers_clean,
		    'buffers_backend', b.buffers_backend, 'buffers_backend_fsync', b.buffers_backend_fsync,
		    'wal_bytes', w.wal_bytes, 'wal_fpi', w.wal_fpi, 'wal_buffers_full', w.wal_buffers_full,
		    'products_live', t.n_live_tup, 'products_dead', t.n_dead_tup,
		    'products_mod_since_analyze', t.n_mod_since_analyze,
		    'products_autovacuums', t.autovacuum_count, 'products_autoanalyzes', t.autoanalyze_count)
		FROM pg_stat_bgwriter b, pg_stat_wal w, pg_stat_user_tables t WHERE t.relname = 'products';
	SQL
}

# PostgreSQL's own log (log_checkpoints): the lines written during the run,
# when the server's log file is readable here.
pg_log_mark() {
	PG_LOG=${BENCH_PG_LOG:-}
	if [[ -z $PG_LOG ]]; then
		local v
		v=$(pg -c "SELECT current_setting('server_version_num')::int / 10000")
		PG_LOG=/var/log/postgresql/postgresql-$v-main.log
	fi
	if [[ -r $PG_LOG ]]; then
		PG_LOG_OFFSET=$(stat -c %s "$PG_LOG")
	else
		PG_LOG=""
	fi
}

pg_log_copy() {
	[[ -n $PG_LOG && -r $PG_LOG ]] || return 0
	tail -c +"$((PG_LOG_OFFSET + 1))" "$PG_LOG" >"$OUT/postgres.log" || true
}

# b2b_report: the run's block in results.md, between its markers: backtoback,
# backtoback-pooled for BENCH_B2B_POOLED=1, backtoback-pooled-prepared with
# BENCH_POOLER_PREPARED too (the three are kept side by side, in that order).
b2b_report() {
	local date block mark=backtoback title='Back to back (`make bench-b2b`)' via='' after=''
	if [[ $B2B_POOLED == 1 ]]; then
		mark=backtoback-pooled after=backtoback
		title='Back to back through PgBouncer (`BENCH_B2B_POOLED=1 make bench-b2b`)'
		via=" The API reached PostgreSQL through a local PgBouncer $(bash deploy/local/pgbouncer.sh version) in transaction mode ($BENCH_POOLER_SIZE server connections, DATABASE_POOL_MODE=transaction); pgbench connected directly."
		if ((POOLER_PREPARED > 0)); then
			mark=backtoback-pooled-prepared after=backtoback-pooled
			title="Back to back through PgBouncer, prepared statements kept (\`BENCH_B2B_POOLED=1 BENCH_POOLER_PREPARED=$POOLER_PREPARED make bench-b2b\`, PgBouncer 1.21 or later)"
			via="$via PgBouncer tracked prepared statements (max_prepared_statements=$POOLER_PREPARED) and the API kept its own (DATABASE_POOLER_PREPARED_STATEMENTS=true)."
		fi
	fi
	date=$(date -u '+%Y-%m-%d %H:%M UTC')
	block=$(
		printf '<!-- %s:start -->\n## %s\n\n' "$mark" "$title"
		printf 'Measured on %s (%s). The phases of issue 17'"'"'s harness in its order, %ss each after %ss warmup, no pause or CHECKPOINT between them; %s connections closed, open model at %s req/s with %s in flight, generator at %s; ratios against the mean of both raw rounds. %s products of the benchmarked merchant at the start.%s\n\n' \
			"$date" "$(machine)" "$SECS" "$WARM" "$BENCH_CONNS" "$BENCH_RATE" "$BENCH_OPEN_CONNS" \
			"$([[ ${LOADGEN[0]} == nice ]] && echo 'nice -n -10' || echo 'the default priority')" "$BENCH_ROWS" "$via"
		b2b_table
		printf '\n'
		b2b_seconds
		b2b_io
		b2b_pgstat
		b2b_checkpoints
		b2b_gc
		printf '<!-- %s:end -->\n' "$mark"
	)
	printf '%s\n' "$block" >"$OUT/backtoback.md"
	if [[ -f deploy/bench/results.md ]] && grep -qxF "<!-- $mark:start -->" deploy/bench/results.md; then
		awk -v f="$OUT/backtoback.md" -v start="<!-- $mark:start -->" -v end="<!-- $mark:end -->" '
			$0 == start { while ((getline l < f) > 0) print l; skip = 1; next }
			$0 == end   { skip = 0; next }
			!skip { print }
		' deploy/bench/results.md >"$OUT/results.md"
	elif [[ -n $after ]] && grep -qxF "<!-- $after:end -->" deploy/bench/results.md; then
		# A first pooled block goes right after the block before it.
		awk -v f="$OUT/backtoback.md" -v end="<!-- $after:end -->" '
			{ print }
			$0 == end { print ""; while ((getline l < f) > 0) print l }
		' deploy/bench/results.md >"$OUT/results.md"
	else
		{ [[ -f deploy/bench/results.md ]] && cat deploy/bench/results.md && echo; cat "$OUT/backtoback.md"; } >"$OUT/results.md"
	fi
	cat "$OUT/results.md" >deploy/bench/results.md
	echo "bench: the back-to-back block of deploy/bench/results.md written; raw outputs and logs in $OUT" >&2
	printf '\n%s\n' "$block"
}

# Every phase in the order it ran.
b2b_table() {
	jq -rs "$JQ_RAW_BY_REF"'
	  def r2: if . == null then "—" else (. * 100 | round / 100 | tostring) end;
	  def pct: (. * 100 | round | tostring) + "%";
	  raw_by_ref as $raw
	  | "| # | phase | model | vs raw (mean of both rounds) | req/s | p50 ms | p99 ms | max ms | errors |",
	    "|---:|---|---|---:|---:|---:|---:|---:|---:|",
	    ( to_entries[] | .key as $i | .value
	      | "| \($i + 1) | \(.scenario) | "
	        + (if .model == "pgbench open" then "pgbench open \(.rate)/s, \(.conns) clients"
	           elif .kind == "raw" then "pgbench \(.conns) clients"
	           elif .kind == "open" then "open \(.rate)/s, \(.conns) in flight"
	           else "closed \(.conns) conns" end)
	        + " | "
	        + (if .kind != "closed" then "—"
	           elif $raw[.ref] then "\(.rps / $raw[.ref] | pct) of \(.ref)"
	           # the harness divides the list by the primary-key select
	           elif .ref == "page" and $raw.select then "\(.rps / $raw.select | pct) of select"
	           else "—" end)
	        + " | \(.rps | r2) | \(.p50_ms | r2) | \(.p99_ms | r2) | \(.max_ms | r2) | \(.errors)"
	        + (if ((.late // 0) + (.missed // 0)) > 0 then " (\(.late) late, \(.missed) missed)" else "" end)
	        + " |" )
	' "$RESULTS"
}

# The open phases' seconds with a request over 10 ms, from their timelines.
b2b_seconds() {
	local name tl rows probe=$OUT/stalls.csv
	[[ -s $probe ]] || probe=/dev/null
	while IFS=$'\t' read -r name tl; do
		[[ -s $tl ]] || continue
		rows=$(awk -F, -v t0="$B2B_STARTED" '
			FILENAME != tl { if (FNR > 1) { late[$1] = $3; steal[$1] = $5 }; next }
			FNR > 1 && $3 > 0 {
				printf "%s%d s (+%d): %d over 10 ms, max %.1f ms", sep, FNR - 2, $1 - t0, $3, $4
				if ($1 in late) printf " [machine: wake-up late %.1f ms, steal %d ms]", late[$1], steal[$1]
				sep = "; " }' tl="$tl" "$probe" "$tl")
		printf -- '- open %s: %s\n' "$name" "${rows:-no second with a request over 10 ms}"
	done < <(jq -r 'select(.kind == "open") | [.scenario, .timeline] | @tsv' "$RESULTS")
	printf '\n(Seconds of the measured window, then, in brackets, seconds since the first phase began. "machine": that second of bin/stallprobe, at the generator'"'"'s priority: the longest a 1 ms sleep overran, and the CPU time the hypervisor took.)\n\n'
	b2b_stalls
}

# The whole run's seconds in which the machine itself stalled: a 1 ms
# sleep of bin/stallprobe overran by more than 20 ms.
b2b_stalls() {
	[[ -s $OUT/stalls.csv ]] || return 0
	local rows
	rows=$(awk -F, -v t0="$B2B_STARTED" 'NR > 1 && $3 > 20 {
		printf "%s+%d s: %.1f ms late (steal %d ms)", sep, $1 - t0, $3, $5; sep = "; " }' "$OUT/stalls.csv")
	printf 'Seconds of the whole run in which a 1 ms sleep of bin/stallprobe overran by more than 20 ms: %s. Steal over the run: %s ms.\n\n' \
		"${rows:-none}" "$(awk -F, 'NR > 1 { s += $5 } END { print s + 0 }' "$OUT/stalls.csv")"
	[[ -s $OUT/stalls-rest.csv ]] || return 0
	awk -F, 'NR > 1 { n++; if ($3 > m) m = $3; if ($3 > 10) o++; s += $5 }
		END { printf "At rest before the run (%d s, the services idle): a 1 ms sleep overran by at most %.1f ms, by more than 10 ms in %d of those seconds; steal %d ms.\n\n", n, m, o, s }' \
		"$OUT/stalls-rest.csv"
}

# The open POST's window second by second beside the disk and the WAL:
# latency (timeline) joined with $OUT/io.csv on the Unix second.
b2b_io() {
	local tl
	[[ -s $OUT/io.csv ]] || return 0
	tl=$(jq -r 'select(.kind == "open" and .method == "POST") | .timeline' "$RESULTS" | head -n 1)
	[[ -s $tl ]] || return 0
	printf '| open POST second | requests | over 10 ms | max ms | dirty / writeback MB | disk writes | ms per disk write | WAL syncs | ms per WAL sync | backends waiting on (one sample) |\n'
	printf '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n'
	# The sampler may miss seconds on a busy machine: each second uses the
	# nearest samples around it.
	awk -F, '
		FNR == 1 { next }
		NR == FNR { n++; ts[n] = $1; io[n] = $0; next }
		{
			t = $1; lo = 0; hi = 0
			for (i = 1; i <= n; i++) { if (ts[i] <= t) lo = i; if (ts[i] >= t + 1 && !hi) hi = i }
			if (!lo || !hi) next
			split(io[lo], a, ","); split(io[hi], b, ",")
			dw = b[4] - a[4]; ds = b[7] - a[7]
			printf "| %d | %d | %d | %.1f | %.0f / %.0f | %d | %s | %d | %s | %s |\n", FNR - 2, $2, $3, $4, b[2] / 1024, b[3] / 1024,
				dw, (dw > 0 ? sprintf("%.2f", (b[5] - a[5]) / dw) : "—"), ds, (ds > 0 ? sprintf("%.2f", (b[9] - a[9]) / ds) : "—"), b[10]
		}' "$OUT/io.csv" "$tl"
	printf '\n'
}

# What each phase cost PostgreSQL: WAL, full-page images, checkpoints, the
# buffers backends had to write themselves; the products table's rows.
b2b_pgstat() {
	[[ -s $OUT/pgstat.jsonl ]] || return 0
	jq -rs --argjson t0 "$B2B_STARTED" '
	  "| after phase | at s | WAL MB | full-page images | checkpoints (timed/requested) | buffers by checkpoint / bgwriter / backends | products rows live / dead / changed since analyze | autovacuum / autoanalyze |",
	  "|---|---:|---:|---:|---:|---:|---:|---:|",
	  ( [., .[1:]] | transpose[] | select(.[1] != null) | .[0] as $a | .[1] as $b
	    | "| \($b.label) | \($b.at - $t0 | floor) | \(($b.wal_bytes - $a.wal_bytes) / 1048576 | . * 10 | round / 10)"
	      + " | \($b.wal_fpi - $a.wal_fpi) | \($b.checkpoints_timed - $a.checkpoints_timed)/\($b.checkpoints_req - $a.checkpoints_req)"
	      + " | \($b.buffers_checkpoint - $a.buffers_checkpoint) / \($b.buffers_clean - $a.buffers_clean) / \($b.buffers_backend - $a.buffers_backend)"
	      + " | \($b.products_live) / \($b.products_dead) / \($b.products_mod_since_analyze)"
	      + " | \($b.products_autovacuums) / \($b.products_autoanalyzes) |" )
	' "$OUT/pgstat.jsonl"
	printf '\n'
}

# The checkpoints PostgreSQL logged during the run, seconds since it began.
b2b_checkpoints() {
	if [[ ! -s $OUT/postgres.log ]]; then
		printf 'PostgreSQL log not readable here (BENCH_PG_LOG): no checkpoint timing.\n'
		return 0
	fi
	local lines
	lines=$(grep -E 'checkpoint (starting|complete)|automatic (vacuum|analyze) of table "[^"]*\.products"' "$OUT/postgres.log" |
		while IFS= read -r l; do
			local ts
			ts=$(date -d "$(cut -c1-23 <<<"$l")" +%s.%N 2>/dev/null) || continue
			printf -- '- +%.1f s: %s\n' "$(echo "$ts - $B2B_STARTED" | bc -l)" "${l#*] }"
		done)
	printf 'PostgreSQL log during the run (checkpoints, autovacuum of products):\n\n%s\n' "${lines:-- none}"
}

# The API's garbage collections during the run (GODEBUG=gctrace=1 lines in
# api.log: "gc N @T s P%: STW1+mark+STW2 ms clock, ..."): how many, the
# longest stop-the-world pause and the longest concurrent mark.
b2b_gc() {
	awk -v off="$(echo "$API_STARTED - $B2B_STARTED" | bc -l)" '
		/^gc [0-9]+ @/ {
			t = substr($3, 2) + 0 + off
			if (t < 0) next
			split($5, c, "+"); stw = c[1] + c[3]
			n++; if (stw > maxstw) { maxstw = stw; at = t }; if (c[2] > maxmark) maxmark = c[2]
		}
		END {
			if (n == 0) { print "\nAPI garbage collections during the run: none traced."; exit }
			printf "\nAPI garbage collections during the run: %d; longest stop-the-world pause %.2f ms (at +%.0f s), longest concurrent mark %.1f ms.\n", n, maxstw, at, maxmark
		}' "$OUT/api.log"
}

# ---------------------------------------------------------------------------

main() {
	prepare
	if [[ $BENCH_MODE == backtoback ]]; then
		backtoback
		b2b_report
		return
	fi

	raw "raw PostgreSQL: single-row insert" insert \
		"INSERT INTO bench_products (id, merchant_id, livemode, name)
VALUES ('prod_' || substr(md5(random()::text), 1, 24), :mid, false, 'Raw product');"
	raw "raw PostgreSQL: primary-key select" select \
		"\\set n random(1, 10000)
SELECT * FROM products
WHERE merchant_id = :mid AND livemode = false AND id = (SELECT id FROM bench_ids WHERE n = :n);"
	raw "raw PostgreSQL: 10-row keyset page" page \
		"SELECT * FROM products WHERE merchant_id = :mid AND livemode = false
ORDER BY created_at DESC, id DESC LIMIT 11;"

	start_api
	local g
	for g in ${BENCH_ONLY:-main webhooks refunds subscriptions events renewals dashboard scaleout scale merchants idle stripe}; do
		case $g in
		main) main_scenarios ;;
		webhooks | refunds | subscriptions | events | renewals | dashboard) "$g" ;;
		scaleout) pooled '{"name":"Bench product {n}","price":{"amount":1999,"currency":"usd"}}' && failover ;;
		scale) scale_lists ;;
		merchants) many_merchants ;;
		idle) idle_connections ;;
		stripe) stripe_bench ;;
		*) die "BENCH_ONLY: unknown group '$g'" ;;
		esac
	done
	report
}

# The products and payments scenarios against the benchmarked merchant.
main_scenarios() {
	local product='{"name":"Bench product {n}","price":{"amount":1999,"currency":"usd"}}'
	smoke POST /v1/products "$product"
	smoke GET "/v1/products/$(head -n 1 "$IDS")"
	smoke GET "/v1/products?limit=10"

	LIST_BIG="GET /v1/products?limit=10 ($BENCH_ROWS rows)"
	LIST_SMALL="GET /v1/products?limit=10 ($BENCH_SMALL_ROWS rows)"
	scenario "POST /v1/products" POST /v1/products "$product" insert
	scenario "POST /v1/products + Idempotency-Key" POST /v1/products "$product" insert \
		-H 'Idempotency-Key: bench-{run}-{n}'
	scenario "GET /v1/products/{id}" GET '/v1/products/{id}' "" select
	bare_floor
	scenario "$LIST_BIG" GET '/v1/products?limit=10' "" page
	SCENARIO_KEY=$KEY_1K scenario "$LIST_SMALL" GET '/v1/products?limit=10' "" page

	# Payments: a session selling a seeded price, and an embedded intent.
	local price session intent
	price=$(psql "$DATABASE_URL" -Atc "SELECT default_price_id FROM products WHERE id = '$(head -n 1 "$IDS")'")
	session='{"line_items":[{"price_id":"'"$price"'","quantity":2}],"success_url":"https://shop.example/ok?s={CHECKOUT_SESSION_ID}","cancel_url":"https://shop.example/cancel","metadata":{"order":"{n}"}}'
	intent='{"amount":2500,"currency":"usd","metadata":{"order":"{n}"}}'
	smoke POST /v1/payment-sessions "$session"
	smoke POST /v1/payment-intents "$intent"
	scenario "POST /v1/payment-sessions" POST /v1/payment-sessions "$session" insert
	scenario "POST /v1/payment-intents" POST /v1/payment-intents "$intent" insert
}

# Sourcing the file (tests, a re-run of report) defines the functions only.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	main "$@"
fi
