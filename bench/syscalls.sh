#!/usr/bin/env bash
# bench/syscalls.sh - where a proxy's CPU goes per operation: syscalls and context
# switches per operation, next to its CPU µs/op, for respmeter and the proxies it is measured
# against, loopback only.
#
# Starts ONE redis-server (persistence off), loads KEYS keys, then one target at a time:
#   haproxy           mode tcp, nbthread PROXY_THREADS (1:1 connections)
#   predixy           (only when PREDIXY names one) StandaloneServerPool, WorkerThreads PROXY_THREADS
#   respmeter         respmeter proxy, defaults (1:1 connections), --loops PROXY_THREADS
#   respmeter-shared  respmeter proxy --upstream-mode shared
# and drives each with memtier_benchmark (THREADS x CLIENTS connections, --ratio=1:10,
# DATA_SIZE-byte values, pipeline P, TEST_TIME s). After WARMUP s, `perf stat` counts the
# target's syscalls (tracepoints syscalls:sys_enter_*) and context switches for COUNT_TIME s,
# while /proc/PID/stat gives its CPU time over the same window. Per operation = count / (ops/s x
# COUNT_TIME), ops/s being memtier's average over the whole cell (ramp-up included, so the
# per-op figures are a few % high; compare targets, not absolute values).
#
# What it answers: the proxies do about the same reads and writes per operation, so the
# difference in CPU per operation is in what else the kernel does for them: epoll waits,
# sleeps and wake-ups (Go's sysmon `nanosleep`, futexes), context switches.
#
# Requirements: bash, redis-server, redis-cli, haproxy, perf (linux-perf, with tracefs: run as
# root), awk, MEMTIER (a memtier_benchmark, built as BENCHMARKS.md "respmeter and other proxies" shows), go
# (unless RESPMETER names a built binary). Optional: PREDIXY.
#
# Env knobs (defaults):
#   P=1 TEST_TIME=8 WARMUP=1.5 COUNT_TIME=5 KEYS=200000 DATA_SIZE=256 THREADS=4 CLIENTS=25
#   PROXY_THREADS=$(nproc) REPS=1 TARGETS="haproxy predixy respmeter respmeter-shared"
#   MEMTIER= PREDIXY= RESPMETER= (default: go build ./cmd/respmeter into OUT)
#   BASE_PORT=28600 (uses BASE_PORT..BASE_PORT+5)  OUT=$(mktemp -d)
#
# Output: one markdown table on stdout (and OUT/syscalls.md); raw perf output in OUT/logs.
# Safety: every address is 127.0.0.1; runs are bounded by --test-time; only the processes this
# script started are stopped, by PID, on exit.
set -euo pipefail

P=${P:-1} TEST_TIME=${TEST_TIME:-8} WARMUP=${WARMUP:-1.5} COUNT_TIME=${COUNT_TIME:-5}
KEYS=${KEYS:-200000} DATA_SIZE=${DATA_SIZE:-256} THREADS=${THREADS:-4} CLIENTS=${CLIENTS:-25}
PROXY_THREADS=${PROXY_THREADS:-$(nproc)} REPS=${REPS:-1}
TARGETS=${TARGETS:-haproxy predixy respmeter respmeter-shared}
MEMTIER=${MEMTIER:-} PREDIXY=${PREDIXY:-} RESPMETER=${RESPMETER:-}
BASE_PORT=${BASE_PORT:-28600}
OUT=${OUT:-$(mktemp -d)}
REDIS_CLI=$(command -v redis-cli)
mkdir -p "$OUT/logs"
STARTED=()
. "$(dirname "$0")/lib.sh"
trap cleanup EXIT

[ -n "$MEMTIER" ] && [ -x "$MEMTIER" ] || die "MEMTIER must name a memtier_benchmark binary"
command -v perf >/dev/null || die "perf is missing (apt-get install -y linux-perf)"
if [ -z "$RESPMETER" ]; then
  RESPMETER=$OUT/respmeter
  (cd "$(dirname "$0")/.." && go build -o "$RESPMETER" ./cmd/respmeter)
fi
RP=$BASE_PORT
start_bg redis redis-server --bind 127.0.0.1 --port "$RP" --save "" --appendonly no --dir "$OUT"
wait_ping redis "$RP" "$LAST_PID"
awk -v n="$KEYS" -v d="$DATA_SIZE" 'BEGIN { v = sprintf("%" d "s", ""); gsub(/ /, "x", v)
  for (i = 1; i <= n; i++) { k = "memtier-" i; printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, d, v } }' |
  "$REDIS_CLI" -p "$RP" --pipe >/dev/null

start_target() { # name -> sets PID, PORT (or returns 1 when the target cannot run)
  PORT=$((BASE_PORT + 1))
  case $1 in
  haproxy)
    command -v haproxy >/dev/null || return 1
    printf 'global\n  nbthread %s\n  maxconn 4000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\nfrontend fe\n  bind 127.0.0.1:%s\n  default_backend be\nbackend be\n  server r1 127.0.0.1:%s\n' \
      "$PROXY_THREADS" "$PORT" "$RP" >"$OUT/haproxy.cfg"
    start_bg haproxy haproxy -db -f "$OUT/haproxy.cfg" ;;
  predixy)
    [ -n "$PREDIXY" ] && [ -x "$PREDIXY" ] || return 1
    printf 'Bind 127.0.0.1:%s\nWorkerThreads %s\nClientTimeout 300\nLogVerbSample 0\nLogDebugSample 0\nLogInfoSample 0\nAuthority {\n Auth {\n  Mode write\n }\n}\nStandaloneServerPool {\n Databases 1\n Hash crc16\n Distribution modula\n RefreshMethod fixed\n ServerTimeout 0\n Group g1 {\n  + 127.0.0.1:%s\n }\n}\n' \
      "$PORT" "$PROXY_THREADS" "$RP" >"$OUT/predixy.conf"
    start_bg predixy "$PREDIXY" "$OUT/predixy.conf" ;;
  respmeter | respmeter-shared)
    local extra=()
    [ "$1" = respmeter-shared ] && extra=(--upstream-mode shared)
    start_bg "$1" "$RESPMETER" proxy --listen "127.0.0.1:$PORT" --upstream "127.0.0.1:$RP" \
      --admin "127.0.0.1:$((BASE_PORT + 2))" --log-level warn --loops "$PROXY_THREADS" "${extra[@]}" ;;
  *) die "unknown target $1" ;;
  esac
  PID=$LAST_PID
  wait_ping "$1" "$PORT" "$PID"
}

ticks() { local s; s=$(cat "/proc/$1/stat"); s=${s##*) }; set -- $s; echo $((${12} + ${13})); }
HZ=$(getconf CLK_TCK)
EVENTS=syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto
EVENTS=$EVENTS,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_nanosleep,syscalls:sys_enter_futex,context-switches
{
  echo "| target | P | ops/s | proxy CPU µs/op | reads | writes | epoll waits | nanosleep | futex | context switches |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} | tee "$OUT/syscalls.md"
for rep in $(seq "$REPS"); do
  for t in $TARGETS; do
    if ! start_target "$t"; then
      log "$t: not run (program missing)"
      continue
    fi
    "$MEMTIER" -s 127.0.0.1 -p "$PORT" -t "$THREADS" -c "$CLIENTS" --ratio=1:10 -d "$DATA_SIZE" \
      --key-pattern=R:R --key-maximum="$KEYS" --pipeline="$P" --test-time="$TEST_TIME" \
      --hide-histogram >"$OUT/logs/$t.$rep.memtier" 2>&1 &
    W=$!
    sleep "$WARMUP"
    c0=$(ticks "$PID")
    perf stat -x, -e "$EVENTS" -p "$PID" -o "$OUT/logs/$t.$rep.perf" -- sleep "$COUNT_TIME"
    c1=$(ticks "$PID")
    wait "$W" || die "memtier failed against $t; see $OUT/logs/$t.$rep.memtier"
    ops=$(awk '/^Totals/ { print int($2) }' "$OUT/logs/$t.$rep.memtier")
    awk -F, -v t="$t" -v p="$P" -v ops="$ops" -v ct="$COUNT_TIME" -v cpu=$((c1 - c0)) -v hz="$HZ" '
      $1 ~ /^[0-9]+$/ { n = $3; sub(/.*sys_enter_/, "", n); c[n] += $1 }
      END {
        o = ops * ct
        printf "| %s | %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", t, p, ops, cpu * 1e6 / hz / o,
          (c["read"] + c["recvfrom"]) / o, (c["write"] + c["writev"] + c["sendto"]) / o,
          (c["epoll_wait"] + c["epoll_pwait"]) / o, c["nanosleep"] / o, c["futex"] / o, c["context-switches"] / o
      }' "$OUT/logs/$t.$rep.perf" | tee -a "$OUT/syscalls.md"
    kill "$PID"
    wait "$PID" 2>/dev/null || true
  done
done
