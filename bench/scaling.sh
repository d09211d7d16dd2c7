#!/usr/bin/env bash
# bench/scaling.sh - respmeter's throughput and CPU per operation against its number of event
# loops, loopback only.
#
# Starts ONE redis-server (persistence off) and, for each L in LOOPS, one respmeter proxy with
# --loops L in front of it (the default 1:1 upstream connections; EXTRA adds flags, e.g.
# "--upstream-mode shared"). The proxy is pinned with taskset to PROXY_CPUS, redis-server and the
# load generator to the other cores, so that what the proxy spends per core shows apart from
# the engine's and the client's work even on a 2-core machine, and the same script shows how
# it scales on a bigger one (more PROXY_CPUS, LOOPS up to their count).
#
# Cells, per L, pipeline P in PIPELINES and repetition (REPS, loop counts interleaved):
#   memtier_benchmark (MEMTIER) THREADS x CLIENTS connections, --ratio=1:10, DATA_SIZE-byte
#   values, TEST_TIME s; or, without MEMTIER, redis-benchmark -t set,get with the same
#   connections and -P P.
# Each cell records ops/s and the proxy's CPU (utime+stime of all its threads, /proc/PID/stat,
# before/after). The table gives medians over REPS: ops/s, proxy CPU µs/op, proxy cores busy
# (CPU seconds per second) and ops/s per busy proxy core, the figure that should stay flat as
# loops are added while the proxy is what limits.
#
# Requirements: bash, taskset (util-linux), redis-server, redis-cli, redis-benchmark, awk, go
# (unless RESPMETER names a built binary). Optional: MEMTIER.
#
# Env knobs (defaults):
#   LOOPS="1 2" (never more than PROXY_CPUS cores' worth is useful) PIPELINES="1 16" REPS=3
#   TEST_TIME=6 KEYS=100000 DATA_SIZE=32 THREADS=2 CLIENTS=25 RB_N=200000
#   PROXY_CPUS=<upper half of the cores, at least the last one> OTHER_CPUS=<the rest>
#   MEMTIER= RESPMETER= EXTRA= BASE_PORT=28800 OUT=$(mktemp -d)
#
# Output: one markdown table on stdout (and OUT/scaling.md), raw cells in OUT/cells.csv.
# Safety: every address is 127.0.0.1; runs are bounded by --test-time / -n; only the processes
# this script started are stopped, by PID, on exit.
set -euo pipefail

LOOPS=${LOOPS:-1 2} PIPELINES=${PIPELINES:-1 16} REPS=${REPS:-3} TEST_TIME=${TEST_TIME:-6}
KEYS=${KEYS:-100000} DATA_SIZE=${DATA_SIZE:-32} THREADS=${THREADS:-2} CLIENTS=${CLIENTS:-25}
RB_N=${RB_N:-200000} MEMTIER=${MEMTIER:-} RESPMETER=${RESPMETER:-} EXTRA=${EXTRA:-}
BASE_PORT=${BASE_PORT:-28800} OUT=${OUT:-$(mktemp -d)}
NCPU=$(nproc)
if [ -z "${PROXY_CPUS:-}" ]; then
  lo=$((NCPU / 2))
  [ "$lo" -ge 1 ] || lo=0
  PROXY_CPUS=$lo-$((NCPU - 1))
  OTHER_CPUS=0-$((lo > 0 ? lo - 1 : 0))
fi
OTHER_CPUS=${OTHER_CPUS:-0}
REDIS_CLI=$(command -v redis-cli)
mkdir -p "$OUT/logs"
STARTED=()
. "$(dirname "$0")/lib.sh"
trap cleanup EXIT

command -v taskset >/dev/null || die "taskset is missing (apt-get install -y util-linux)"
if [ -z "$RESPMETER" ]; then
  RESPMETER=$OUT/respmeter
  (cd "$(dirname "$0")/.." && go build -o "$RESPMETER" ./cmd/respmeter)
fi
TICK=$(getconf CLK_TCK)

ticks() { # utime+stime of a pid (all its threads), clock ticks
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo $((${12} + ${13}))
}

RP=$BASE_PORT PP=$((BASE_PORT + 1))
start_bg redis taskset -c "$OTHER_CPUS" redis-server --bind 127.0.0.1 --port "$RP" --save "" \
  --appendonly no --daemonize no --dir "$OUT"
wait_ping redis "$RP" "$LAST_PID"
awk -v n="$KEYS" -v d="$DATA_SIZE" 'BEGIN { v = sprintf("%" d "s", ""); gsub(/ /, "x", v)
  for (i = 1; i <= n; i++) { k = "memtier-" i; printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, d, v } }' |
  "$REDIS_CLI" -p "$RP" --pipe >/dev/null
log "proxy on cores $PROXY_CPUS, redis-server and the load on $OTHER_CPUS; loops: $LOOPS; $(uptime)"

echo "loops,pipeline,rep,ops,proxy_ticks,seconds" >"$OUT/cells.csv"
cell() { # loops pipeline rep
  local l=$1 p=$2 r=$3 pid t0 t1 ops start end
  # shellcheck disable=SC2086
  start_bg "respmeter-$l" taskset -c "$PROXY_CPUS" "$RESPMETER" proxy --listen "127.0.0.1:$PP" \
    --upstream "127.0.0.1:$RP" --admin off --loops "$l" --log-level warn $EXTRA
  pid=$LAST_PID
  wait_ping "respmeter-$l" "$PP" "$pid"
  t0=$(ticks "$pid") start=$(date +%s.%N)
  if [ -n "$MEMTIER" ]; then
    ops=$(taskset -c "$OTHER_CPUS" "$MEMTIER" -s 127.0.0.1 -p "$PP" -t "$THREADS" -c "$CLIENTS" \
      --pipeline "$p" --ratio 1:10 -d "$DATA_SIZE" --key-maximum "$KEYS" --test-time "$TEST_TIME" \
      --hide-histogram 2>"$OUT/logs/memtier-$l-$p-$r.err" | awk '/^Totals/ { print $2 }')
  else
    taskset -c "$OTHER_CPUS" redis-benchmark -p "$PP" --threads "$THREADS" -c $((THREADS * CLIENTS)) \
      -t set,get -n "$RB_N" -d "$DATA_SIZE" -r "$KEYS" -P "$p" -q >"$OUT/logs/rb-$l-$p-$r.log"
    end=$(date +%s.%N)
    ops=$(awk -v n="$RB_N" -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", 2 * n / (b - a) }')
  fi
  end=$(date +%s.%N)
  t1=$(ticks "$pid")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  echo "$l,$p,$r,$ops,$((t1 - t0)),$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" >>"$OUT/cells.csv"
  log "loops $l P$p rep $r: $ops ops/s"
}

for r in $(seq "$REPS"); do
  for p in $PIPELINES; do
    for l in $LOOPS; do cell "$l" "$p" "$r"; done
  done
done

awk -F, -v tick="$TICK" -v cores="$PROXY_CPUS" -v tool="${MEMTIER:+memtier}" '
  function median(key,   n, i, j, t, a) {
    n = split(vals[key], a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  NR > 1 && $4 > 0 {
    k = $1 "," $2; keys[k] = 1
    vals[k ",ops"] = vals[k ",ops"] " " $4
    cpu = $5 / tick                                  # proxy CPU seconds over the cell
    vals[k ",us"] = vals[k ",us"] " " 1e6 * cpu / ($4 * $6)
    vals[k ",busy"] = vals[k ",busy"] " " cpu / $6
    vals[k ",percore"] = vals[k ",percore"] " " $4 * $6 / cpu
  }
  END {
    printf "| loops | pipeline | ops/s | proxy CPU µs/op | proxy cores busy | ops/s per busy proxy core |\n"
    printf "|---:|---:|---:|---:|---:|---:|\n"
    for (k in keys) {
      split(k, f, ",")
      printf "| %d | %d | %.0f | %.2f | %.2f | %.0f |\n", f[1], f[2], median(k ",ops"), median(k ",us"), median(k ",busy"), median(k ",percore") | "sort -t\"|\" -k3n -k2n"
    }
    close("sort -t\"|\" -k3n -k2n")
    printf "\nMedians of the repetitions; proxy pinned to cores %s; load generator: %s.\n", cores, tool ? tool : "redis-benchmark"
  }' "$OUT/cells.csv" | tee "$OUT/scaling.md"
log "cells: $OUT/cells.csv; $(uptime)"
