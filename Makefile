# paysvc: build, run, test and lint. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := build

GO        ?= go
GOFMT     ?= $(shell $(GO) env GOROOT)/bin/gofmt
BIN       := bin
# staticcheck 2026.2.2; checked to build and run with Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
FUZZ_PKGS ?= ./internal/httpapi
FUZZTIME  ?= 30s

# The API and worker packages (and the store's, and the sandbox
# processor's, whose tables requests write) run again through PgBouncer,
# but for the tests that wait a minute for Asynq to recover a killed
# worker's task (nothing in them differs through the pooler).
POOLED_PKGS ?= ./internal/httpapi ./internal/worker ./internal/postgres ./internal/processor/sandbox
POOLED_SKIP ?= AfterWorkerKilled

.PHONY: help build run test test-pooled lint fuzz bench bench-b2b clean

help:
	@echo "make build  - bin/api, bin/worker, bin/scheduler"
	@echo "make run    - start PostgreSQL/Redis if needed, build, migrate, run all three (Ctrl-C stops);"
	@echo "              POOLER=1 runs them through a local PgBouncer in transaction mode"
	@echo "make test   - services (+chromium), go vet, go test -race"
	@echo "make test-pooled - POOLED_PKGS through a local PgBouncer in transaction mode"
	@echo "make lint   - gofmt, go vet, staticcheck $(STATICCHECK_VERSION)"
	@echo "make fuzz   - each Fuzz target in FUZZ_PKGS ($(FUZZ_PKGS)) for FUZZTIME ($(FUZZTIME))"
	@echo "make bench  - deploy/bench/bench.sh"
	@echo "make bench-b2b - the bench's phases back to back, no pause or CHECKPOINT (BENCH_MODE=backtoback)"
	@echo "make clean  - remove build and test artifacts"

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/api ./cmd/api
	$(GO) build -o $(BIN)/worker ./cmd/worker
	$(GO) build -o $(BIN)/scheduler ./cmd/scheduler

run:
	bash deploy/local/services.sh
	$(MAKE) --no-print-directory build
	bash deploy/local/run.sh

# The tests' output is kept in .local/test.log; when they fail, their
# failures (each --- FAIL with its messages, a timeout's running tests) are
# printed again at the end, where a CI log's tail shows them.
test:
	bash deploy/local/services.sh --chromium
	$(GO) vet ./...
	@mkdir -p .local
	@echo "$(GO) test -race -count=1 -timeout 20m ./... | tee .local/test.log"
	@set -o pipefail; $(GO) test -race -count=1 -timeout 20m ./... 2>&1 | tee .local/test.log || { \
	  echo; echo "=== make test failed; the failures again (whole output: .local/test.log):"; \
	  awk '/^panic: /{n=6} /^ *--- FAIL/{n=12} /^(FAIL|ok) /{n=0} /^FAIL/{print; next} n>0{print; n--}' .local/test.log | tail -n 120; \
	  exit 1; }

# DATABASE_POOL_MODE=transaction, tested: the tests reach their databases
# through deploy/local/pgbouncer.sh (transaction mode, 4 server connections
# per database) and testenv's pool guard, which refuses named prepared
# statements, two-round-trip queries, SET, LISTEN and session advisory locks.
#
# POOLER_PREPARED=N: the pooler tracks N named prepared statements (PgBouncer
# 1.21 or later as PGBOUNCER_BIN, see deploy/local/pgbouncer-trixie.sh) and
# the tests keep theirs, DATABASE_POOLER_PREPARED_STATEMENTS=true, tested.
POOLER_PREPARED ?= 0
test-pooled:
	bash deploy/local/services.sh
	@url=$$(PGBOUNCER_PREPARED_STATEMENTS='$(POOLER_PREPARED)' bash deploy/local/pgbouncer.sh start) || exit 1; \
	prep=false; [ '$(POOLER_PREPARED)' = 0 ] || prep=true; \
	echo "TEST_DATABASE_POOLER_URL=$$url TEST_DATABASE_POOLER_PREPARED=$$prep DATABASE_POOL_MODE=transaction go test -race $(POOLED_PKGS)"; \
	TEST_DATABASE_POOLER_URL="$$url" TEST_DATABASE_POOLER_PREPARED=$$prep DATABASE_POOL_MODE=transaction \
	  $(GO) test -race -count=1 -timeout 10m -skip '$(POOLED_SKIP)' $(POOLED_PKGS); rc=$$?; \
	bash deploy/local/pgbouncer.sh stop; exit $$rc

# .local (databases, possibly unreadable), .git, vendor and testdata are skipped.
lint:
	@files=$$(find . \( -path ./.local -o -path ./.git -o -path ./vendor -o -name testdata -o -name node_modules \) -prune -o -name '*.go' -print); \
	unformatted=$$( [ -z "$$files" ] || $(GOFMT) -l $$files ); \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need 'gofmt -w':"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Each Fuzz* target in turn, on Go 1.27 (deploy/local/fuzz.sh says why).
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) bash deploy/local/fuzz.sh $(FUZZ_PKGS)

bench:
	bash deploy/bench/bench.sh

bench-b2b:
	BENCH_MODE=backtoback bash deploy/bench/bench.sh

clean:
	rm -rf $(BIN) coverage* *.test
	find . \( -path ./.local -o -path ./.git \) -prune -o -name '*.test' -type f -print -delete
