#!/usr/bin/env bash
# .ci/fuzz.sh: fuzz every fuzz target in the tree, each for FUZZTIME (20s by
# default). The list comes from the code (`go test -list`), so a new Fuzz
# function runs without editing CI. A crasher is written to
# testdata/fuzz/<Target>/ and fails the run; keep it there as a regression
# input. Minimizing a new interesting input is bounded by FUZZMINTIME (5s):
# with Go's default of 60s, one 1 KiB FuzzKeys input took the whole 30s
# (execs stalled at 0/sec), and the run failed with "context deadline
# exceeded" and no crasher.
# Usage: .ci/fuzz.sh [-n]   (-n: print the package and target list only)
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-20s}
FUZZMINTIME=${FUZZMINTIME:-5s}
list_only=no
if [ "${1:-}" = "-n" ]; then list_only=yes; fi

found=0
# Only packages with a Fuzz function in a test file are asked for their list.
for dir in $(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do
	for fn in $(go test -list '^Fuzz' "$dir/" | grep '^Fuzz' || true); do
		found=$((found + 1))
		if [ "$list_only" = yes ]; then
			echo "${dir#./} $fn"
			continue
		fi
		printf '\n==> fuzz %s %s (%s)\n' "${dir#./}" "$fn" "$FUZZTIME"
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINTIME" "$dir/"
	done
done
if [ "$found" -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi
