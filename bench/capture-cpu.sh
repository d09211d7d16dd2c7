#!/usr/bin/env bash
# bench/capture-cpu.sh - the capture's CPU cost on the in-memory hot path.
#
# Runs BenchmarkCaptureHotPath (proxy/capture_test.go: a GET through a routed, shared-mode session
# whose client and engine connections are in memory, so no system call dilutes the cost) with the
# capture off and on, ROUNDS times, alternating which goes first, each for N commands, and reads
# its cpu-ns/op: the process's user + system CPU time (getrusage, every thread: the capture's
# writer goroutine, its redaction and zstd compression included) per command. A busy machine
# moves both sides of a pair alike, so the figure is the median of the per-round ratios on/off
# (with the lowest and highest ratio), plus each side's lowest cpu-ns/op.
#
# With BEFORE (a test binary of ./proxy built from another tree, e.g. an older commit with this
# tree's proxy/capture_test.go copied in) every round runs off and on of both builds, in an order
# rotated from round to round, and the summary gives both builds' ratios, measured side by side.
#
# Env knobs (defaults): ROUNDS=10 N=300000 P=1 (pipeline depth: 1, or 16 for the -p16 variants, 16
# GETs per read) TESTBIN= (the test binary to measure; default: go test -c of this tree into a
# temporary directory) BEFORE= (see above)
# Output: one line per round on stderr, the summary on stdout. About 1.5 s per round (3 s with
# BEFORE). A run whose capture dropped a record fails (the benchmark's check); it is tried up to
# three times, and a round with a side that never ran cleanly is left out (and said).
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
BEFORE=${BEFORE:-}

once() { # binary off|on -> cpu-ns/op, or nothing when the run failed
  "$1" -test.run '^$' -test.bench "BenchmarkCaptureHotPath/capture-$2$SUFFIX\$" -test.benchtime "${N}x" -test.cpu 1 |
    awk '/cpu-ns\/op/ { for (i = 1; i < NF; i++) if ($(i + 1) == "cpu-ns/op") print $i }' || true
}
one() { # binary off|on -> cpu-ns/op, or nan
  local v
  for _ in 1 2 3; do
    v=$(once "$1" "$2")
    if [ -n "$v" ]; then echo "$v"; return; fi
  done
  echo nan
}

for r in $(seq "$ROUNDS"); do
  if [ -z "$BEFORE" ]; then
    if [ $((r % 2)) = 1 ]; then off=$(one "$BIN" off); on=$(one "$BIN" on); else on=$(one "$BIN" on); off=$(one "$BIN" off); fi
    echo "round $r: off $off on $on cpu-ns/op" >&2
    echo "$off $on"
  else
    case $((r % 4)) in
      0) boff=$(one "$BEFORE" off); bon=$(one "$BEFORE" on); off=$(one "$BIN" off); on=$(one "$BIN" on) ;;
      1) on=$(one "$BIN" on); off=$(one "$BIN" off); bon=$(one "$BEFORE" on); boff=$(one "$BEFORE" off) ;;
      2) off=$(one "$BIN" off); boff=$(one "$BEFORE" off); on=$(one "$BIN" on); bon=$(one "$BEFORE" on) ;;
      3) bon=$(one "$BEFORE" on); on=$(one "$BIN" on); boff=$(one "$BEFORE" off); off=$(one "$BIN" off) ;;
    esac
    echo "round $r: before off $boff on $bon, after off $off on $on cpu-ns/op" >&2
    echo "$off $on $boff $bon"
  fi
done | python3 -c '
import math, statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
good = [r for r in rows if not any(math.isnan(x) for x in r)]
if len(good) < len(rows):
    print(f"{len(rows) - len(good)} round(s) left out: a capture dropped records in three tries")
def line(name, pairs):
    r = sorted(on / off for off, on in pairs)
    print(f"pipeline {sys.argv[1]}: {name}capture on/off CPU per command: median {statistics.median(r):.2f}x (range {r[0]:.2f}-{r[-1]:.2f}, {len(r)} pairs); "
          f"lowest cpu-ns/op off {min(p[0] for p in pairs):.0f}, on {min(p[1] for p in pairs):.0f}")
if good and len(good[0]) == 4:
    line("before: ", [(r[2], r[3]) for r in good])
    line("after: ", [(r[0], r[1]) for r in good])
elif good:
    line("", [(r[0], r[1]) for r in good])
' "$P"
echo "load: $(cut -d" " -f1-3 /proc/loadavg)"
