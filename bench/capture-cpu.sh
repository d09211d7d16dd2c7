#!/usr/bin/env bash
# bench/capture-cpu.sh - the capture's CPU cost on the in-memory hot path (issue 18).
#
# Runs BenchmarkCaptureHotPath (proxy/capture_test.go: a GET through a routed, shared-mode session
# whose client and engine connections are in memory, so no system call dilutes the cost) with the
# capture off and on, ROUNDS times, alternating which goes first, each for N commands, and reads
# its cpu-ns/op: the process's user + system CPU time (getrusage, every thread: the capture's
# writer goroutine, its redaction and zstd compression included) per command. A busy machine
# moves both sides of a pair alike, so the figure is the median of the per-round ratios on/off
# (with the lowest and highest ratio), plus each side's lowest cpu-ns/op.
#
# Env knobs (defaults): ROUNDS=10 N=300000 P=1 (pipeline depth: 1, or 16 for the -p16 variants, 16
# GETs per read) TESTBIN= (a test binary of ./proxy built elsewhere, for an A/B of two builds;
# default: go test -c into a temporary directory)
# Output: one line per round on stderr, the summary on stdout. About 1.5 s per round.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-10}
N=${N:-300000}
P=${P:-1}
SUFFIX=
if [ "$P" != 1 ]; then SUFFIX=-p$P; fi
TMP=$(mktemp -d /tmp/capture-cpu.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
BIN=${TESTBIN:-}
if [ -z "$BIN" ]; then
  BIN=$TMP/proxy.test
  (cd "$ROOT" && go test -c -o "$BIN" ./proxy/)
fi

one() { # off|on -> cpu-ns/op
  "$BIN" -test.run '^$' -test.bench "BenchmarkCaptureHotPath/capture-$1$SUFFIX\$" -test.benchtime "${N}x" -test.cpu 1 |
    awk '/cpu-ns\/op/ { for (i = 1; i < NF; i++) if ($(i + 1) == "cpu-ns/op") print $i }'
}

for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then off=$(one off); on=$(one on); else on=$(one on); off=$(one off); fi
  echo "round $r: off $off on $on cpu-ns/op" >&2
  echo "$off $on"
done | python3 -c '
import statistics, sys
pairs = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
r = sorted(on / off for off, on in pairs)
print(f"pipeline {sys.argv[1]}: capture on/off CPU per command: median {statistics.median(r):.2f}x (range {r[0]:.2f}-{r[-1]:.2f}, {len(r)} pairs); "
      f"lowest cpu-ns/op off {min(p[0] for p in pairs):.0f}, on {min(p[1] for p in pairs):.0f}")
' "$P"
echo "load: $(cut -d" " -f1-3 /proc/loadavg)"
