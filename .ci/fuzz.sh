#!/usr/bin/env bash
# .ci/fuzz.sh: fuzz every fuzz target in the tree, each for FUZZTIME (20s by
# default). The list comes from the code (`go test -list`), so a new Fuzz
# function runs without editing CI. A crasher is written to
# testdata/fuzz/<Target>/ and fails the run; keep it there as a regression
# input. Minimizing a new interesting input is bounded by FUZZMINTIME (5s):
# with Go's default of 60s, one 1 KiB FuzzKeys input took the whole 30s
# (execs stalled at 0/sec), and the run failed with "context deadline
# exceeded" and no crasher.
# Go 1.26's coordinator can also fail a clean run with a bare "context deadline
# exceeded" just as a -fuzztime duration ends (go.dev/issue/75804, fixed in Go
# 1.27: it compares the deadline's error with its child context's before the
# child is cancelled); a target that keeps finding new inputs (FuzzClusterReply)
# met it in about one run in three on an idle 2-core machine. Such a run wrote
# no failing input, so it is run once more for as many executions as it had
# done (-fuzztime Nx, a count: no deadline, so no race); a run that writes a
# failing input, or fails any other way, fails CI at once.
# Usage: .ci/fuzz.sh [-n]   (-n: print the package and target list only)
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-20s}
FUZZMINTIME=${FUZZMINTIME:-5s}
list_only=no
if [ "${1:-}" = "-n" ]; then list_only=yes; fi

# fuzz_one DIR FN [FUZZTIME]: fuzz one target (for FUZZTIME, else $FUZZTIME),
# its output shown as it runs. It returns 1 only for the coordinator's deadline
# race (the output ends in a bare "context deadline exceeded", names no failing
# input, and the run was for a duration), with the executions done in
# race_execs; any other failure exits the script.
race_execs=
fuzz_one() {
	local log rc=0 t=${3:-$FUZZTIME}
	log=$(mktemp)
	go test -run '^$' -fuzz "^${2}\$" -fuzztime "$t" -fuzzminimizetime "$FUZZMINTIME" "$1/" 2>&1 | tee "$log" || rc=$?
	if [ "$rc" -ne 0 ]; then
		if [ -z "${3:-}" ] && grep -q 'context deadline exceeded' "$log" &&
			! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$log"; then
			race_execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
			rm -f "$log"
			return 1
		fi
		rm -f "$log"
		exit "$rc"
	fi
	rm -f "$log"
}

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
		fuzz_one "$dir" "$fn" || {
			execs=${race_execs:-100000}
			printf '==> fuzz %s %s: "context deadline exceeded" with no failing input written (go.dev/issue/75804); once more, for its %s executions\n' "${dir#./}" "$fn" "$execs"
			fuzz_one "$dir" "$fn" "${execs}x"
		}
	done
done
if [ "$found" -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi
