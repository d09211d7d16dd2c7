#!/usr/bin/env bash
# bench/cluster-shape.sh - what hash-slot routing costs and how it reshapes the pipeline
# each shard sees, against the client's own cluster mode. One run, loopback only.
#
# Two set-ups of 3 redis-servers each (persistence off, 127.0.0.1):
#   cluster     3 masters with cluster-enabled yes, slots by CLUSTER ADDSLOTSRANGE
#               (0-5460, 5461-10922, 10923-16383), joined by CLUSTER MEET, cluster_state:ok
#   standalone  3 plain redis-servers, which respmeter --shards splits the slots over the same way
# Rows (each at pipeline 1 and 16; PATHS picks them):
#   direct          cluster     redis-benchmark --cluster (memtier --cluster-mode): the client's own
#                               cluster mode, no proxy. redis-benchmark gives each of its connections
#                               one node and one {hash tag}, so every connection talks to one shard.
#   slots-cluster   cluster     respmeter --route slots --cluster SEED
#   pinned-cluster  cluster     respmeter --route pinned --cluster SEED. The benchmarks' keys are
#                               random, so about 2 in 3 land on a shard that does not own them; a
#                               real cluster answers MOVED, which the client sees (pinned does not
#                               reroute) and redis-benchmark aborts on: the row records that.
#   slots-shards    standalone  respmeter --route slots --shards A,B,C
#   pinned-shards   standalone  respmeter --route pinned --shards A,B,C: each connection goes to
#                               one shard whatever its keys (a standalone engine accepts them); the
#                               notes give respmeter_pinned_misroutes_total, the share of commands
#                               that a slot-routed proxy would have sent elsewhere.
#   facade-cluster  cluster     respmeter --route facade --cluster SEED, driven by redis-benchmark
#                               --cluster (memtier --cluster-mode) at the first virtual node: the
#                               client routes itself, as against the cluster directly
#   facade-shards   standalone  respmeter --route facade --shards A,B,C, the same clients
# Keys: key:000000000000 .. key:<KEYS-1> (redis-benchmark's -r names), DATA_SIZE bytes, are loaded
# into each set-up through a slots proxy (redis-cli --pipe) before the runs; with MEMTIER also
# mt:1 .. mt:<KEYS>. redis-benchmark --cluster puts a per-node {tag} in its key names, so for the
# direct rows a SET pass of 3*KEYS random keys is loaded instead (~63 % of those names); every
# redis-benchmark run also does its SET test before its GET test over the same names.
#
# Per row: ops/s (redis-benchmark: SET+GET ops over the time of both tests; memtier: Totals),
# p50/p99 in ms (redis-benchmark: "SET/GET" from --csv; memtier: Totals), effective depth per
# shard (commands per write to each shard's upstream connections: the delta of
# respmeter_upstream_batch_commands sum/count over the run, scraped from /metrics, shards in
# slot order), proxy CPU µs/op (utime+stime of respmeter from /proc/PID/stat, delta over ops)
# and its kernel part (stime) apart, redis CPU µs/op (the same, summed over the 3 redis-servers), and the machine's load: the
# 1-minute load average at the end of the row (which counts this run's own processes) and
# "other CPU", the CPU time of all processes outside the row (busy time from /proc/stat minus
# client, proxy and redis-servers), in % of all cores over the row: on a shared machine, read
# the figures next to it.
#
# Requirements: bash, redis-server, redis-cli, redis-benchmark 7.x (apt-get install -y
# redis-server redis-tools), curl, awk, go (unless RESPMETER names a built binary); python3 only
# with MEMTIER. Run from anywhere inside the repo: bench/cluster-shape.sh
#
# Env knobs (defaults):
#   N=100000          requests per redis-benchmark test (-n; SET then GET, so 2*N ops a run)
#   CLIENTS=50        redis-benchmark connections (-c)
#   THREADS=2         redis-benchmark --threads
#   KEYS=100000       key space (-r; memtier --key-maximum)
#   DATA_SIZE=256     value bytes (-d)
#   PIPELINES="1 16"
#   PATHS="direct slots-cluster pinned-cluster slots-shards pinned-shards facade-cluster facade-shards"
#   MEMTIER=          path of memtier_benchmark: adds memtier rows (MT_THREADS=2 x MT_CLIENTS=25,
#                     --ratio=1:10, MT_TIME=5 s each); pinned-cluster is not run with memtier
#   LOOPS=0           respmeter --loops (0: one per CPU)
#   RESPMETER=        respmeter binary (default: go build ./cmd/respmeter into OUT)
#   BASE_PORT=27500   uses BASE_PORT..BASE_PORT+13, the last three as cluster bus ports
#                     (--cluster-port): port+10000 would fall in Linux's ephemeral range
#                     (32768-60999), where any test's or client's free port may sit
#   OUT=$(mktemp -d)  logs, raw outputs, table.md
# After the rows, a table of the slot-routing target (slots and facade against pinned,
# proxy CPU µs/op, at most 1.5x) with its floor: the path's kernel time plus pinned's user-space
# time, over pinned's CPU.
# A full run with the defaults took 115 s on 2 busy cores with MEMTIER (about 80 s without).
#
# Example output (abridged; 2 cores, other processes 1-2 % of them, Redis 7.0.15; BENCHMARKS.md has full runs):
#   | set-up | path | tool | P | ops/s | p50 ms | p99 ms | depth/shard | proxy µs/op | of it kernel | redis µs/op | load1 / other CPU | notes |
#   |---|---|---|---|---|---|---|---|---|---|---|---|---|
#   | standalone | slots-shards | memtier | 16 | 75837 | 9.663 | 27.647 | 4.8/4.8/4.8 | 11.4 | 6.7 | 8.5 | 4.75 / 2 % |  |
#   | standalone | pinned-shards | redis-benchmark | 16 | 132188 | 4.207/3.583 | 11.007/16.119 | 16.0/16.0/16.0 | 4.6 | 2.5 | 4.2 | 4.85 / 2 % | misroutes 133481 (67 %) |
#   | standalone | facade-shards | memtier | 16 | 131904 | 17.407 | 38.399 | 15.7/15.7/15.8 | 5.9 | 3.2 | 4.7 | 4.83 / 1 % |  |
#   | cluster | pinned-cluster | redis-benchmark | 1 | failed | - | - | - | - | - | - | 8.09 / 51 % | rc=1: Error from server: MOVED 12962 127.0.0.1:27502; misroutes 37 |
#
# Safety: every address is 127.0.0.1; each run is bounded by `timeout`; only the processes this
# script started are stopped, by PID, on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

N=${N:-100000}
CLIENTS=${CLIENTS:-50}
THREADS=${THREADS:-2}
KEYS=${KEYS:-100000}
DATA_SIZE=${DATA_SIZE:-256}
PIPELINES=${PIPELINES:-"1 16"}
PATHS=${PATHS:-"direct slots-cluster pinned-cluster slots-shards pinned-shards facade-cluster facade-shards"}
MEMTIER=${MEMTIER:-}
MT_THREADS=${MT_THREADS:-2}
MT_CLIENTS=${MT_CLIENTS:-25}
MT_TIME=${MT_TIME:-5}
LOOPS=${LOOPS:-0}
BASE_PORT=${BASE_PORT:-27500}
OUT=${OUT:-$(mktemp -d /tmp/cluster-shape.XXXXXX)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
REDIS_CLI=${REDIS_CLI:-$(command -v redis-cli || true)}
REDIS_BENCH=${REDIS_BENCH:-$(command -v redis-benchmark || true)}

CLUSTER_PORTS=("$BASE_PORT" "$((BASE_PORT + 1))" "$((BASE_PORT + 2))")
SHARD_PORTS=("$((BASE_PORT + 3))" "$((BASE_PORT + 4))" "$((BASE_PORT + 5))")
PROXY_PORT=$((BASE_PORT + 6))
ADMIN_PORT=$((BASE_PORT + 7))
FACADE_PORTS=("$((BASE_PORT + 8))" "$((BASE_PORT + 9))" "$((BASE_PORT + 10))")
BUS_PORTS=("$((BASE_PORT + 11))" "$((BASE_PORT + 12))" "$((BASE_PORT + 13))")
FACADE=127.0.0.1:${FACADE_PORTS[0]},127.0.0.1:${FACADE_PORTS[1]},127.0.0.1:${FACADE_PORTS[2]}
CLK_TCK=$(getconf CLK_TCK)

STARTED=()        # every pid this script started, stopped on exit
CLUSTER_PIDS=()
SHARD_PIDS=()
PROXY_PID=

. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh" # log, die, cleanup, start_bg, wait_ping, child_ticks, busy_ticks

trap cleanup EXIT
trap 'exit 130' INT TERM

for b in "$REDIS_SERVER" "$REDIS_CLI" "$REDIS_BENCH"; do
  [ -n "$b" ] && [ -x "$b" ] || die "redis-server, redis-cli and redis-benchmark are needed (apt-get install -y redis-server redis-tools)"
done
command -v curl >/dev/null || die "curl is needed"
if [ -n "$MEMTIER" ]; then
  [ -x "$MEMTIER" ] || die "MEMTIER=$MEMTIER is not executable"
  command -v python3 >/dev/null || die "python3 is needed with MEMTIER"
fi
for p in "${CLUSTER_PORTS[@]}" "${SHARD_PORTS[@]}" "$PROXY_PORT" "$ADMIN_PORT" "${FACADE_PORTS[@]}" \
  "${BUS_PORTS[@]}"; do
  if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then die "port $p is in use (set BASE_PORT)"; fi
done
mkdir -p "$OUT/raw" "$OUT/logs"
log "results -> $OUT"

if [ -z "${RESPMETER:-}" ]; then
  RESPMETER=$OUT/respmeter
  log "building respmeter"
  (cd "$ROOT" && go build -o "$RESPMETER" ./cmd/respmeter)
fi

stop_pid() {
  local i
  kill "$1" 2>/dev/null || true
  for i in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}

ticks() { # utime+stime of the pids, in clock ticks
  local p s total=0
  for p in "$@"; do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s
    total=$((total + ${12} + ${13}))
  done
  echo "$total"
}

sticks() { # stime (kernel time) of one pid, in clock ticks
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo "${13}"
}

load1() { cut -d' ' -f1 /proc/loadavg; }

# --- redis-servers ---------------------------------------------------------------------------
start_redis() { # name port [extra args]
  local name=$1 port=$2
  shift 2
  mkdir -p "$OUT/$name"
  start_bg "$name" "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --daemonize no --dir "$OUT/$name" "$@"
  wait_ping "$name" "$port" "$LAST_PID"
}

for i in 0 1 2; do
  p=${CLUSTER_PORTS[$i]}
  start_redis "cluster-$p" "$p" --cluster-enabled yes --cluster-config-file "$OUT/cluster-$p/nodes.conf" \
    --cluster-node-timeout 5000 --cluster-port "${BUS_PORTS[$i]}"
  CLUSTER_PIDS+=("$LAST_PID")
done
for p in "${SHARD_PORTS[@]}"; do
  start_redis "shard-$p" "$p"
  SHARD_PIDS+=("$LAST_PID")
done
rc() { "$REDIS_CLI" -h 127.0.0.1 -p "$1" "${@:2}"; }
rc "${CLUSTER_PORTS[0]}" cluster addslotsrange 0 5460 >/dev/null
rc "${CLUSTER_PORTS[1]}" cluster addslotsrange 5461 10922 >/dev/null
rc "${CLUSTER_PORTS[2]}" cluster addslotsrange 10923 16383 >/dev/null
rc "${CLUSTER_PORTS[0]}" cluster meet 127.0.0.1 "${CLUSTER_PORTS[1]}" "${BUS_PORTS[1]}" >/dev/null
rc "${CLUSTER_PORTS[0]}" cluster meet 127.0.0.1 "${CLUSTER_PORTS[2]}" "${BUS_PORTS[2]}" >/dev/null
for i in $(seq 200); do
  ok=0
  for p in "${CLUSTER_PORTS[@]}"; do
    rc "$p" cluster info | grep -q '^cluster_state:ok' && ok=$((ok + 1))
  done
  [ "$ok" -eq 3 ] && break
  [ "$i" -eq 200 ] && die "cluster_state not ok on all 3 nodes after 20 s"
  sleep 0.1
done
SEED=127.0.0.1:${CLUSTER_PORTS[0]}
SHARDS=127.0.0.1:${SHARD_PORTS[0]},127.0.0.1:${SHARD_PORTS[1]},127.0.0.1:${SHARD_PORTS[2]}
log "cluster ok (seed $SEED); standalone shards $SHARDS"

# --- respmeter ---------------------------------------------------------------------------------
start_proxy() { # name respmeter-args...
  local name=$1
  shift
  start_bg "$name" "$RESPMETER" proxy --listen "127.0.0.1:$PROXY_PORT" --admin "127.0.0.1:$ADMIN_PORT" \
    --loops "$LOOPS" --log-level warn "$@"
  PROXY_PID=$LAST_PID
  wait_ping "$name" "$PROXY_PORT" "$PROXY_PID"
}
stop_proxy() {
  [ -n "$PROXY_PID" ] && stop_pid "$PROXY_PID"
  PROXY_PID=
}

# --- key loading -------------------------------------------------------------------------------
preload() { # route-args... : SETs through a short-lived slots proxy
  start_proxy preload --route slots "$@"
  awk -v n="$KEYS" -v ds="$DATA_SIZE" -v mt="${MEMTIER:+1}" 'BEGIN {
    v = sprintf("%*s", ds, ""); gsub(/ /, "x", v)
    for (i = 0; i < n; i++) {
      k = sprintf("key:%012d", i)
      printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, ds, v
      if (mt) { k = "mt:" (i + 1); printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, ds, v }
    }
  }' | "$REDIS_CLI" -h 127.0.0.1 -p "$PROXY_PORT" --pipe >"$OUT/logs/preload-$1.log" 2>&1 ||
    die "preload failed; see $OUT/logs/preload-$1.log"
  stop_proxy
}
log "loading $KEYS keys x $DATA_SIZE B into each set-up"
preload --cluster "$SEED"
preload --shards "$SHARDS"
case " $PATHS " in *" direct "*)
  timeout 300 "$REDIS_BENCH" --cluster -h 127.0.0.1 -p "${CLUSTER_PORTS[0]}" -t set -P 16 -c "$CLIENTS" \
    -n $((3 * KEYS)) -r "$KEYS" -d "$DATA_SIZE" -q >"$OUT/logs/preload-direct.log" 2>&1 ||
    die "direct preload failed; see $OUT/logs/preload-direct.log"
  ;;
esac
for p in "${CLUSTER_PORTS[@]}" "${SHARD_PORTS[@]}"; do printf '%s:%s ' "$p" "$(rc "$p" dbsize)"; done >"$OUT/logs/dbsize.txt"
log "dbsize per port: $(cat "$OUT/logs/dbsize.txt")"

# --- metrics -----------------------------------------------------------------------------------
scrape() { # file: batch histogram sum/count lines and the misroute counter, or empty
  if [ -n "$PROXY_PID" ]; then
    curl -fsS "http://127.0.0.1:$ADMIN_PORT/metrics" 2>/dev/null |
      grep -E '^respmeter_(upstream_batch_commands_(sum|count)\{|pinned_misroutes_total)' >"$1" || true
  else
    : >"$1"
  fi
}

# depth BEFORE AFTER SHARD...: "d1/d2/d3", delta sum / delta count per shard label
depth() {
  local b=$1 a=$2 out="" s v
  shift 2
  for s in "$@"; do
    v=$(awk -v s="shard=\"$s\"" '
      index($0, s) { val = $NF + 0; if ($0 ~ /_sum\{/) sum[FILENAME] = val; else cnt[FILENAME] = val }
      END { ds = sum[ARGV[2]] - sum[ARGV[1]]; dc = cnt[ARGV[2]] - cnt[ARGV[1]]
            if (dc > 0) printf "%.1f", ds / dc; else printf "-" }' "$b" "$a")
    out=${out:+$out/}$v
  done
  echo "$out"
}

misroutes() { # BEFORE AFTER
  awk '/^respmeter_pinned_misroutes_total/ { v[FILENAME] = $NF + 0 } END { printf "%d", v[ARGV[2]] - v[ARGV[1]] }' "$1" "$2"
}

# --- runs --------------------------------------------------------------------------------------
TABLE=$OUT/table.md
{
  echo "| set-up | path | tool | P | ops/s | p50 ms | p99 ms | depth/shard | proxy µs/op | of it kernel | redis µs/op | load1 / other CPU | notes |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$TABLE"

# run_one SETUP PATH TOOL PL TARGET-ARGS...: one benchmark run and its table row.
# Globals read: REDIS_PIDS (the set-up's servers), SHARD_LABELS (shard addresses in slot order).
run_one() {
  local setup=$1 path=$2 tool=$3 pl=$4
  shift 4
  local tag="${path}_${tool}_p${pl}" rcode=0 pb pa psb psa rb ra ops="" p50="-" p99="-" notes="" mb ma
  local ops_s="failed" dep="-" pcpu="-" pkcpu="-" rcpu="-" cb ca bb ba t0 t1 other
  mb=$OUT/raw/$tag.metrics.before
  ma=$OUT/raw/$tag.metrics.after
  scrape "$mb"
  pb=0 psb=0
  [ -n "$PROXY_PID" ] && pb=$(ticks "$PROXY_PID") && psb=$(sticks "$PROXY_PID")
  rb=$(ticks "${REDIS_PIDS[@]}")
  cb=$(child_ticks)
  bb=$(busy_ticks)
  t0=$(date +%s.%N)
  if [ "$tool" = redis-benchmark ]; then
    timeout 600 "$REDIS_BENCH" -h 127.0.0.1 "$@" -t set,get -c "$CLIENTS" -n "$N" -r "$KEYS" \
      -d "$DATA_SIZE" -P "$pl" --threads "$THREADS" --csv >"$OUT/raw/$tag.csv" 2>"$OUT/raw/$tag.err" || rcode=$?
  else
    timeout $((MT_TIME + 120)) "$MEMTIER" -s 127.0.0.1 "$@" --protocol=redis -t "$MT_THREADS" -c "$MT_CLIENTS" \
      --test-time="$MT_TIME" --ratio=1:10 --key-prefix=mt: --key-minimum=1 --key-maximum="$KEYS" \
      -d "$DATA_SIZE" --pipeline="$pl" --distinct-client-seed --hide-histogram --print-percentiles=50,99 \
      --json-out-file="$OUT/raw/$tag.json" >"$OUT/raw/$tag.txt" 2>"$OUT/raw/$tag.err" || rcode=$?
  fi
  pa=0 psa=0
  [ -n "$PROXY_PID" ] && pa=$(ticks "$PROXY_PID") && psa=$(sticks "$PROXY_PID")
  ra=$(ticks "${REDIS_PIDS[@]}")
  ca=$(child_ticks)
  ba=$(busy_ticks)
  t1=$(date +%s.%N)
  scrape "$ma"
  # CPU burnt outside this row (client, proxy, redis-servers), in % of all cores over its wall time
  other=$(awk -v m=$((ba - bb)) -v o=$((ca - cb + pa - pb + ra - rb)) -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" \
    -v nc="$(nproc)" 'BEGIN { x = (m - o) / hz / ((t1 - t0) * nc) * 100; if (x < 0) x = 0; printf "%.0f", x }')

  if [ "$tool" = redis-benchmark ]; then
    # "test","rps",...,"p50_latency_ms","p95_latency_ms","p99_latency_ms",...
    read -r ops_s p50 p99 < <(awk -F, -v n="$N" '
      { gsub(/"/, "") }
      $1 == "SET" || $1 == "GET" { rps[$1] = $2; p50[$1] = $5; p99[$1] = $7 }
      END {
        if (rps["SET"] > 0 && rps["GET"] > 0)
          printf "%.0f %s/%s %s/%s\n", 2 * n / (n / rps["SET"] + n / rps["GET"]), p50["SET"], p50["GET"], p99["SET"], p99["GET"]
        else print "failed - -"
      }' "$OUT/raw/$tag.csv")
    [ "$ops_s" != failed ] && ops=$((2 * N))
  elif [ -s "$OUT/raw/$tag.json" ]; then
    read -r ops_s p50 p99 ops < <(python3 - "$OUT/raw/$tag.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["ALL STATS"]["Totals"]
pct = t.get("Percentile Latencies", {})
print("%.0f %.3f %.3f %d" % (t["Ops/sec"], pct.get("p50.00", float("nan")), pct.get("p99.00", float("nan")), t.get("Count") or 0))
PY
)
  fi
  if [ "$rcode" -ne 0 ] || [ "$ops_s" = failed ]; then
    ops_s=failed
    notes="rc=$rcode: $(grep -m1 -v '^$' "$OUT/raw/$tag.err" 2>/dev/null | tr -d '\r|' | cut -c1-80)"
  elif [ -n "$ops" ] && [ "$ops" -gt 0 ]; then
    rcpu=$(awk -v t=$((ra - rb)) -v hz="$CLK_TCK" -v n="$ops" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    if [ -n "$PROXY_PID" ]; then
      pcpu=$(awk -v t=$((pa - pb)) -v hz="$CLK_TCK" -v n="$ops" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
      pkcpu=$(awk -v t=$((psa - psb)) -v hz="$CLK_TCK" -v n="$ops" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
      dep=$(depth "$mb" "$ma" "${SHARD_LABELS[@]}")
    fi
  fi
  if [ -n "$PROXY_PID" ] && [ "${path#pinned}" != "$path" ]; then
    local m
    m=$(misroutes "$mb" "$ma")
    if [ -n "$ops" ] && [ "$ops" -gt 0 ] && [ "$ops_s" != failed ]; then
      notes="${notes:+$notes; }misroutes $m ($(awk -v m="$m" -v n="$ops" 'BEGIN { printf "%.0f", 100 * m / n }') %)"
    else
      notes="${notes:+$notes; }misroutes $m"
    fi
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
    "$setup" "$path" "$tool" "$pl" "$ops_s" "$p50" "$p99" "$dep" "$pcpu" "$pkcpu" "$rcpu" "$(load1) / $other %" "$notes" | tee -a "$TABLE" >&2
}

run_path() { # PATH
  local path=$1 setup tool pl
  PROXY_PID=
  case $path in
    direct) setup=cluster ;;
    slots-cluster) setup=cluster; start_proxy "$path" --route slots --cluster "$SEED" ;;
    pinned-cluster) setup=cluster; start_proxy "$path" --route pinned --cluster "$SEED" ;;
    slots-shards) setup=standalone; start_proxy "$path" --route slots --shards "$SHARDS" ;;
    pinned-shards) setup=standalone; start_proxy "$path" --route pinned --shards "$SHARDS" ;;
    facade-cluster) setup=cluster; start_proxy "$path" --route facade --cluster "$SEED" --facade-listen "$FACADE" ;;
    facade-shards) setup=standalone; start_proxy "$path" --route facade --shards "$SHARDS" --facade-listen "$FACADE" ;;
    *) die "unknown path $path" ;;
  esac
  if [ "$setup" = cluster ]; then
    REDIS_PIDS=("${CLUSTER_PIDS[@]}")
    SHARD_LABELS=("127.0.0.1:${CLUSTER_PORTS[0]}" "127.0.0.1:${CLUSTER_PORTS[1]}" "127.0.0.1:${CLUSTER_PORTS[2]}")
  else
    REDIS_PIDS=("${SHARD_PIDS[@]}")
    SHARD_LABELS=("127.0.0.1:${SHARD_PORTS[0]}" "127.0.0.1:${SHARD_PORTS[1]}" "127.0.0.1:${SHARD_PORTS[2]}")
  fi
  for tool in redis-benchmark ${MEMTIER:+memtier}; do
    for pl in $PIPELINES; do
      if [ "$path" = direct ] || [ "${path#facade-}" != "$path" ]; then
        local port=${CLUSTER_PORTS[0]}
        [ "$path" = direct ] || port=${FACADE_PORTS[0]}
        if [ "$tool" = redis-benchmark ]; then
          run_one "$setup" "$path" "$tool" "$pl" -p "$port" --cluster
        else
          run_one "$setup" "$path" "$tool" "$pl" -p "$port" --cluster-mode
        fi
      elif [ "$path" = pinned-cluster ] && [ "$tool" = memtier ]; then
        printf '| %s | %s | %s | %s | not run | - | - | - | - | - | - | %s | MOVED replies: see redis-benchmark row |\n' \
          "$setup" "$path" "$tool" "$pl" "$(load1) / - %" | tee -a "$TABLE" >&2
      else
        run_one "$setup" "$path" "$tool" "$pl" -p "$PROXY_PORT"
      fi
    done
  done
  stop_proxy
}

START_UPTIME=$(uptime)
T0=$(date +%s)
for path in $PATHS; do run_path "$path"; done
T1=$(date +%s)

# The slot-routing CPU target and its floor, from the rows above: --route slots may cost at
# most 1.5x --route pinned's proxy CPU per op (same engines, tool and pipeline). The floor is
# what no user-space work can take away: slots' kernel time (a pipeline over 3 shards is 3 engine
# writes and 3 engine reads where pinned makes one of each) plus pinned's user-space time (slots
# does all of pinned's per-command work, and hashes and reorders besides), over pinned's CPU.
# Making both paths' user space cheaper only raises that ratio, since slots' kernel time is the
# larger part.
floors() {
  awk -F' [|] ' '
    $2 ~ /^(slots|pinned|facade)-shards$/ && $9 + 0 > 0 { cpu[$2 "|" $3 "|" $4] = $9; ker[$2 "|" $3 "|" $4] = $10; key[$3 "|" $4] = 1 }
    END {
      n = 0
      for (k in key) {
        p = "pinned-shards|" k
        if (!(p in cpu)) continue
        split(k, a, "|")
        for (i = 0; i < 2; i++) {
          path = i ? "facade-shards" : "slots-shards"
          q = path "|" k
          if (!(q in cpu)) continue
          if (!n++) {
            print ""
            print "Slot routing: proxy CPU µs/op against --route pinned (target: at most 1.5x), and the floor: (the path'"'"'s kernel time + pinned'"'"'s user-space time) over pinned'"'"'s CPU"
            print ""
            print "| path | tool | P | proxy µs/op | pinned µs/op | × pinned | of it kernel | floor × pinned | verdict |"
            print "|---|---|---|---|---|---|---|---|---|"
          }
          r = cpu[q] / cpu[p]; f = (ker[q] + cpu[p] - ker[p]) / cpu[p]
          v = r <= 1.5 ? "met" : (f >= 1.5 ? "not met: the floor is over 1.5x" : "not met")
          printf "| %s | %s | %s | %s | %s | %.2f | %s | %.2f | %s |\n", path, a[1], a[2], cpu[q], cpu[p], r, ker[q], f, v
        }
      }
    }' "$TABLE"
}
floors >>"$TABLE"

{
  echo
  echo "Run: $(date -u +%FT%TZ), $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), $("$REDIS_SERVER" --version | cut -d' ' -f3), $((T1 - T0)) s."
  echo "redis-benchmark -t set,get -c $CLIENTS -n $N -r $KEYS -d $DATA_SIZE --threads $THREADS -P <P>${MEMTIER:+; memtier -t $MT_THREADS -c $MT_CLIENTS --ratio=1:10 --test-time=$MT_TIME -d $DATA_SIZE --pipeline=<P>}; respmeter --loops $LOOPS."
  echo "uptime before:$START_UPTIME"
  echo "uptime after: $(uptime)"
} >>"$TABLE"
echo
cat "$TABLE"
