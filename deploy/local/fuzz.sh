#!/usr/bin/env bash
# make fuzz: each Fuzz target of the packages given, one after another (go
# test -fuzz takes one package and one target at a time), for FUZZTIME each.
#
# The fuzzing runs on Go 1.27 (FUZZ_TOOLCHAIN, fetched from the Go module
# proxy once, about 76 MB) while the module stays on the machine's 1.26: Go
# 1.26's fuzzing coordinator races its own -fuzztime deadline and fails a
# target that found nothing with a bare "context deadline exceeded"
# (golang/go#75804, fixed in 1.27). CI met it in FuzzDecodeJSON and then
# twice in a row in FuzzSubscriptionListQuery, so running such a target again
# was not enough. A count budget (-fuzztime Nx) avoids the race too, but its
# time would swing with each target's speed and the machine's.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
export GOTOOLCHAIN=${FUZZ_TOOLCHAIN:-go1.27.3}

version=$("$GO" version) || { echo "fuzz: cannot get the $GOTOOLCHAIN toolchain from the Go module proxy" >&2; exit 1; }
echo "fuzz: $version"

for pkg in "$@"; do
	targets=$("$GO" test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
	if [[ -z $targets ]]; then
		echo "fuzz: no Fuzz targets in $pkg"
		continue
	fi
	for t in $targets; do
		echo "fuzz: $pkg $t for $FUZZTIME"
		"$GO" test -run='^$' -fuzz="^$t\$" -fuzztime="$FUZZTIME" "$pkg"
	done
done
