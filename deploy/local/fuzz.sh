#!/usr/bin/env bash
# make fuzz: each Fuzz target of the packages given, one after another (go
# test -fuzz takes one package and one target at a time), for FUZZTIME each.
#
# A run that fails with nothing but "context deadline exceeded" as its time
# runs out, and writes no failing input under testdata/fuzz/<target>, found
# nothing: it is Go's fuzzing coordinator racing its own -fuzztime deadline
# (golang/go#75804, fixed in Go 1.27; go1.26.8 has it, and CI met it once in
# FuzzDecodeJSON). That run is made once more. Any other failure, or the same
# one twice, fails.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}

# inputs DIR: how many files DIR holds (0 when it does not exist).
inputs() { if [[ -d $1 ]]; then find "$1" -type f | wc -l; else echo 0; fi; }

for pkg in "$@"; do
	targets=$("$GO" test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
	if [[ -z $targets ]]; then
		echo "fuzz: no Fuzz targets in $pkg"
		continue
	fi
	dir=$("$GO" list -f '{{.Dir}}' "$pkg")
	for t in $targets; do
		for try in 1 2; do
			echo "fuzz: $pkg $t for $FUZZTIME"
			before=$(inputs "$dir/testdata/fuzz/$t")
			out=$(mktemp)
			if "$GO" test -run='^$' -fuzz="^$t\$" -fuzztime="$FUZZTIME" "$pkg" 2>&1 | tee "$out"; then
				rm -f "$out"
				break
			fi
			after=$(inputs "$dir/testdata/fuzz/$t")
			if ((try == 1 && after == before)) && grep -qx $'\tcontext deadline exceeded\|    context deadline exceeded' "$out" &&
				! grep -q 'Failing input written' "$out"; then
				echo "fuzz: $t stopped on Go's own -fuzztime deadline race (golang/go#75804), no input written: running it once more"
				rm -f "$out"
				continue
			fi
			rm -f "$out"
			exit 1
		done
	done
done
