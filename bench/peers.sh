#!/usr/bin/env bash
# bench/peers.sh - respmeter against other Redis-protocol proxies, loopback only.
#
# Starts ONE redis-server (persistence off), loads the key space, then every target at once:
#   direct               client -> redis-server
#   twemproxy            client -> nutcracker (one pool, redis: true, server_connections: 1) -> redis
#   haproxy              client -> haproxy (mode tcp, nbthread PROXY_THREADS) -> redis
#   predixy              client -> predixy (StandaloneServerPool, WorkerThreads PROXY_THREADS) -> redis
#   respmeter            client -> respmeter proxy (defaults: 1 upstream conn per client conn) -> redis
#   respmeter-shared     client -> respmeter proxy --upstream-mode shared -> redis
#   respmeter-nomeasure  client -> respmeter proxy --measure=false (frame and forward only) -> redis
#   respmeter-pinned     client -> respmeter proxy --route pinned --shards <redis> -> redis
#   respmeter-slots      client -> respmeter proxy --route slots --shards <redis> (every slot on it) -> redis
#   respmeter-capture    client -> respmeter proxy --upstream-mode shared --capture OUT/respmeter-capture.respcap
#                        -> redis (every command recorded; capture needs a routed session: its A/B
#                        is against respmeter-shared)
# TLS targets (run only when TARGETS names them; their clients speak TLS, verifying a certificate
# for 127.0.0.1 that openssl makes in OUT/tls, and redis-server serves TLS on a tls-port too):
#   tls-direct           client -TLS-> redis-server's tls-port
#   respmeter-tls        client -TLS-> respmeter proxy --listen off --tls-listen --upstream-tls -TLS-> redis
#   haproxy-tls          client -TLS-> haproxy (bind ... ssl crt, server ... ssl verify required) -TLS-> redis
#   stunnel-tls          client -TLS-> stunnel4, one process with two services (TLS accepted,
#                        forwarded over loopback to its TLS client service) -TLS-> redis
#   e.g. TARGETS="tls-direct respmeter-tls haproxy-tls stunnel-tls" bench/peers.sh; the summary
#   then adds a table of proxy CPU µs/op, respmeter-tls over each peer, paired per repetition,
#   and one of handshakes per second: each TLS target also gets an hs cell (below).
#   <any respmeter target>-b  the same with the binary RESPMETER_B: an A/B of two builds in one
#                        interleaved run (e.g. TARGETS="respmeter respmeter-b respmeter-slots
#                        respmeter-slots-b" RESPMETER_B=/tmp/respmeter-old); the summary then adds
#                        a table of proxy CPU µs/op, B over A, per target, tool and pipeline.
# twemproxy, predixy and respmeter-shared pipeline all clients onto few engine connections;
# haproxy and respmeter (default) give each client connection its own. respmeter runs with
# --loops PROXY_THREADS; twemproxy has one thread.
#
# Cells, per target, pipeline P in PIPELINES and repetition (REPS, targets interleaved):
#   memtier     (only when MEMTIER names a memtier_benchmark) THREADS x CLIENTS connections,
#               --ratio=1:10 (set:get), DATA_SIZE-byte values, uniform random keys, TEST_TIME s
#   rb          redis-benchmark --threads THREADS -c THREADS*CLIENTS -t set,get -n RB_N -d DATA_SIZE
#               -r KEYS -P P: redis-benchmark runs its SET test, then its GET test, with equal
#               counts (it cannot mix 1:10); ops/s = 2*RB_N over the time of both
#   rtt         the unloaded round trip: redis-benchmark -c 1 -P 1 -t get -n RTT_N, p50 and mean
#               (and, with MEMTIER, memtier 1 thread x 1 connection, --ratio=1:10, RTT_TIME s)
#   hs          TLS targets only: handshakes per second, redis-benchmark --tls -k 0 (a new connection
#               per request: its handshake, then one GET) -c THREADS -t get -n HS_N; the proxies
#               (respmeter-tls, haproxy-tls, stunnel-tls) each make a TLS connection to redis-server
#               per client connection too, so each op is two handshakes there, one at tls-direct.
#               HS_ONLY=1 runs these cells alone (no load or rtt cells; the summary stops after
#               the handshake table).
# Each cell records ops/s, p50/p99, and the CPU (utime+stime from /proc/PID/stat, before/after)
# of the proxy (and its kernel part, stime, apart) and of redis-server, as µs per operation; also
# "other CPU": the CPU time of every process outside the cell (busy time from /proc/stat minus
# client, proxy and redis-server), in % of all cores over the cell, since the machine may be
# shared. The summary gives medians over REPS (with the ops/s spread), ratios to direct, haproxy
# and predixy, and the targets respmeter is held to:
#   respmeter (passthrough) >= 1.25x haproxy ops/s at P1 and >= 1.1x at P16, proxy CPU µs/op
#     <= haproxy's, added round trip (p50 over direct) <= 12 µs
#   respmeter-shared >= 1.05x predixy ops/s at P1 and P16, CPU µs/op <= predixy's
#   respmeter CPU µs/op <= 1.1x respmeter-nomeasure's (measurement on vs --measure=false)
#   respmeter-capture CPU µs/op <= 1.15x respmeter-shared's (capture on vs off; the summary
#     also gives the capture's records, drops and file size, read from its admin API at the end)
# (ops/s and CPU targets are judged on memtier when it ran, else on redis-benchmark); the slot-routing
# CPU targets with their floor (1:1 ≤ 1.1× haproxy's CPU µs/op at P1 and ≤ 1.0× at P16, shared
# ≤ 1.0× predixy's at P1 and P16; how much CPU per op each allows, how much of it respmeter's
# own kernel time already takes, and how far its user-space time would have to fall); and a
# "floors" table for the ops/s targets: with the cores saturated, ops/s is the CPU available over
# the CPU per operation of client + redis-server + proxy, so at want x the peer's ops/s those
# three may spend at most 1/want of the peer's; the table subtracts the client's and
# redis-server's CPU and the proxy's kernel time per operation, measured in respmeter's cells,
# from that, leaving what respmeter's own user-space code (Go runtime, gnet, framing, timing) may
# cost. The client's CPU is in no other table (cells.csv, client_s), and every figure is a median
# of its own over the repetitions, so the columns need not add up to the last digit. A negative figure means the target
# cannot be reached by user-space work at all: it would take fewer or cheaper system calls, or a
# cheaper client or engine.
#
# Requirements: bash, redis-server, redis-cli, redis-benchmark 7.x (redis-server redis-tools),
# nutcracker and haproxy (Debian packages), python3, awk, go (unless RESPMETER names a built
# binary). Optional: MEMTIER, PREDIXY (memtier_benchmark 2.3.0 and predixy 7.0.1 built from their
# public sources; BENCHMARKS.md, "respmeter and other proxies", gives the steps).
# A target whose program is missing is reported as "not run".
#
# Env knobs (defaults):
#   REPS=3 TEST_TIME=6 KEYS=200000 DATA_SIZE=256 THREADS=4 CLIENTS=25 PIPELINES="1 16"
#   RB_N=100000 RTT_N=20000 RTT_TIME=3 HS_N=2000 HS_ONLY= PROXY_THREADS=$(nproc)
#   TARGETS="direct twemproxy haproxy predixy respmeter respmeter-shared respmeter-nomeasure"
#   MEMTIER= PREDIXY= RESPMETER= (default: go build ./cmd/respmeter into OUT) RESPMETER_B=
#   NUTCRACKER=$(command -v nutcracker) HAPROXY=$(command -v haproxy) STUNNEL=$(command -v stunnel4)
#   BASE_PORT=27600 (uses BASE_PORT..BASE_PORT+40)  OUT=$(mktemp -d)
# Duration: about 34 s per target and repetition with MEMTIER, 15 s without: 7 targets x 3
# repetitions took 566-708 s on 2 cores (about 5 minutes without memtier). Short settings
# (TEST_TIME=2, RB_N=20000) check that the script works; their figures are not worth quoting:
# memtier's start-up is part of each cell's CPU window, CPU is read in 10 ms ticks, and
# redis-benchmark's P16 rows are over in half a second.
#
# Output: OUT/cells.csv (every cell), OUT/summary.md (the tables; also on stdout), OUT/env.txt.
# Example (abridged; see BENCHMARKS.md for a full run):
#   | target | P | ops/s | × direct | × haproxy | × predixy | p50 ms | p99 ms | proxy µs/op | of it kernel | redis µs/op | other CPU | runs |
#   | haproxy | 1 | 36889 ±33% | 0.66 | 1.00 | 0.68 | 2.735 | 6.303 | 21.5 | 19.3 | 12.8 | 2 % | 3/3 |
#   | passthrough ops/s ≥ 1.1× haproxy, P16 | 1.02× (208480 vs 204632) | not met |
#   | respmeter ≥ 1.25× haproxy, P1 | 54.7 | 43.8 | 51.4 | -7.6 | 4.0 |  (floors table)
#
# Safety: every address is 127.0.0.1; runs are bounded by -n/--test-time and `timeout`; only the
# processes this script started are stopped, by PID, on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

REPS=${REPS:-3}
TEST_TIME=${TEST_TIME:-6}
KEYS=${KEYS:-200000}
DATA_SIZE=${DATA_SIZE:-256}
THREADS=${THREADS:-4}
CLIENTS=${CLIENTS:-25}
PIPELINES=${PIPELINES:-"1 16"}
RB_N=${RB_N:-100000}
RTT_N=${RTT_N:-20000}
RTT_TIME=${RTT_TIME:-3}
HS_N=${HS_N:-2000}
HS_ONLY=${HS_ONLY:-}
PROXY_THREADS=${PROXY_THREADS:-$(nproc)}
TARGETS=${TARGETS:-"direct twemproxy haproxy predixy respmeter respmeter-shared respmeter-nomeasure"}
MEMTIER=${MEMTIER:-}
PREDIXY=${PREDIXY:-}
NUTCRACKER=${NUTCRACKER:-$(command -v nutcracker || echo /usr/sbin/nutcracker)}
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
STUNNEL=${STUNNEL:-$(command -v stunnel4 || command -v stunnel || echo /usr/bin/stunnel4)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
REDIS_CLI=${REDIS_CLI:-$(command -v redis-cli || true)}
REDIS_BENCH=${REDIS_BENCH:-$(command -v redis-benchmark || true)}
BASE_PORT=${BASE_PORT:-27600}
OUT=${OUT:-$(mktemp -d /tmp/peers-bench.XXXXXX)}

REDIS_PORT=$BASE_PORT
declare -A PORT=(
  [direct]=$BASE_PORT
  [twemproxy]=$((BASE_PORT + 1))
  [haproxy]=$((BASE_PORT + 2))
  [predixy]=$((BASE_PORT + 3))
  [respmeter]=$((BASE_PORT + 4))
  [respmeter-shared]=$((BASE_PORT + 5))
  [respmeter-nomeasure]=$((BASE_PORT + 6))
  [respmeter-pinned]=$((BASE_PORT + 7))
  [respmeter-slots]=$((BASE_PORT + 8))
  [respmeter-capture]=$((BASE_PORT + 9))
  [tls-direct]=$((BASE_PORT + 10))
  [respmeter-tls]=$((BASE_PORT + 12))
  [haproxy-tls]=$((BASE_PORT + 13))
  [stunnel-tls]=$((BASE_PORT + 30))
)
STUNNEL_HOP=$((BASE_PORT + 31)) # stunnel-tls's loopback hop between its two services
declare -A ADMIN=(
  [respmeter]=$((BASE_PORT + 14))
  [respmeter-shared]=$((BASE_PORT + 15))
  [respmeter-nomeasure]=$((BASE_PORT + 16))
  [respmeter-pinned]=$((BASE_PORT + 17))
  [respmeter-slots]=$((BASE_PORT + 18))
  [respmeter-capture]=$((BASE_PORT + 19))
  [respmeter-tls]=$((BASE_PORT + 32))
)
# The -b targets (RESPMETER_B) take ports 20 above their A target's.
for t in respmeter respmeter-shared respmeter-nomeasure respmeter-pinned respmeter-slots respmeter-capture; do
  PORT[$t-b]=$((PORT[$t] + 20))
  ADMIN[$t-b]=$((ADMIN[$t] + 20))
done
PORT[respmeter-tls-b]=$((BASE_PORT + 33)) # +20 is respmeter-tls's admin port
ADMIN[respmeter-tls-b]=$((ADMIN[respmeter-tls] + 20))
RESPMETER_B=${RESPMETER_B:-}
TWEM_STATS_PORT=$((BASE_PORT + 11))
declare -A PID=()
STARTED=()
CLK_TCK=$(getconf CLK_TCK)
NCPU=$(nproc)

. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh" # log, die, cleanup, start_bg, wait_ping, child_ticks, busy_ticks

trap cleanup EXIT
trap 'exit 130' INT TERM

for b in "$REDIS_SERVER" "$REDIS_CLI" "$REDIS_BENCH"; do
  [ -n "$b" ] && [ -x "$b" ] || die "redis-server, redis-cli and redis-benchmark are needed (apt-get install -y redis-server redis-tools)"
done
command -v python3 >/dev/null || die "python3 is needed"
[ -z "$MEMTIER" ] || [ -x "$MEMTIER" ] || die "MEMTIER=$MEMTIER is not executable"
mkdir -p "$OUT"/{raw,logs,conf}
log "results -> $OUT"

declare -A SKIP=()
active=()
for t in $TARGETS; do
  case $t in
    direct | respmeter | respmeter-shared | respmeter-nomeasure | respmeter-pinned | respmeter-slots | respmeter-capture) ;;
    tls-direct | respmeter-tls) command -v openssl >/dev/null || SKIP[$t]="no openssl" ;;
    respmeter-tls-b) command -v openssl >/dev/null && [ -n "$RESPMETER_B" ] && [ -x "$RESPMETER_B" ] || SKIP[$t]="no openssl, or RESPMETER_B unset" ;;
    haproxy-tls) [ -x "$HAPROXY" ] && command -v openssl >/dev/null || SKIP[$t]="no haproxy or openssl" ;;
    stunnel-tls) [ -x "$STUNNEL" ] && command -v openssl >/dev/null || SKIP[$t]="no stunnel4 or openssl (apt-get install -y stunnel4)" ;;
    respmeter*-b) [ -n "$RESPMETER_B" ] && [ -x "$RESPMETER_B" ] || SKIP[$t]="RESPMETER_B unset or not executable" ;;
    twemproxy) [ -x "$NUTCRACKER" ] || SKIP[$t]="no nutcracker (apt-get install -y nutcracker)" ;;
    haproxy) [ -x "$HAPROXY" ] || SKIP[$t]="no haproxy (apt-get install -y haproxy)" ;;
    predixy) [ -n "$PREDIXY" ] && [ -x "$PREDIXY" ] || SKIP[$t]="PREDIXY unset or not executable" ;;
    *) die "unknown target $t" ;;
  esac
  if [ -n "${SKIP[$t]:-}" ]; then log "not run: $t: ${SKIP[$t]}"; else active+=("$t"); fi
done
for t in "${active[@]}"; do
  for p in "${PORT[$t]}" ${ADMIN[$t]:-}; do
    if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then die "port $p for $t is in use (set BASE_PORT)"; fi
  done
done

# TLS: a CA and one certificate for 127.0.0.1 (ECDSA P-256), used by redis-server's tls-port,
# respmeter's TLS listener, haproxy's and stunnel's; each TLS client verifies against the CA.
TLS_ON=
for t in "${active[@]}"; do case $t in *tls*) TLS_ON=1 ;; esac; done
TLS_DIR=$OUT/tls
TLS_CLI=()
if [ -n "$TLS_ON" ]; then
  mkdir -p "$TLS_DIR"
  (
    cd "$TLS_DIR"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt \
      -days 2 -subj "/CN=peers.sh CA" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr \
      -subj "/CN=127.0.0.1" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >ext.cnf
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile ext.cnf \
      -out server.crt 2>/dev/null
    cat server.crt server.key >server.pem # haproxy's crt
  ) || die "openssl: TLS certificates"
  TLS_CLI=(--tls --cacert "$TLS_DIR/ca.crt")
fi
is_tls() { case $1 in *tls*) return 0 ;; esac; return 1; }

if [ -z "${RESPMETER:-}" ]; then
  RESPMETER=$OUT/respmeter
  log "building respmeter"
  (cd "$ROOT" && go build -o "$RESPMETER" ./cmd/respmeter)
fi

{
  echo "date_utc: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -srm)"
  echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), nproc $NCPU (shared by clients, proxies and redis-server)"
  echo "go: $(go version 2>/dev/null || echo n/a)"
  echo "respmeter: $RESPMETER, built $(date -u -r "$RESPMETER" +%FT%TZ); repo at run start: HEAD $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?'), $(cd "$ROOT" && git status --porcelain 2>/dev/null | grep -c . || true) changed files"
  echo "redis-server: $("$REDIS_SERVER" --version)"
  echo "redis-benchmark: $("$REDIS_BENCH" --version)"
  [ -n "$MEMTIER" ] && echo "memtier_benchmark: $("$MEMTIER" --version | head -1)"
  [ -x "$NUTCRACKER" ] && echo "nutcracker: $("$NUTCRACKER" --version 2>&1 | head -1)"
  [ -x "$HAPROXY" ] && echo "haproxy: $("$HAPROXY" -v | head -1)"
  [ -n "$TLS_ON" ] && echo "stunnel: $("$STUNNEL" -version 2>&1 | grep -m1 -i '^stunnel'); $(openssl version)"
  [ -n "$PREDIXY" ] && [ -x "$PREDIXY" ] && echo "predixy: $("$PREDIXY" --version 2>&1 | head -1)"
  echo "params: REPS=$REPS TEST_TIME=$TEST_TIME KEYS=$KEYS DATA_SIZE=$DATA_SIZE THREADS=$THREADS CLIENTS=$CLIENTS PIPELINES='$PIPELINES' RB_N=$RB_N RTT_N=$RTT_N RTT_TIME=$RTT_TIME HS_N=$HS_N HS_ONLY=$HS_ONLY PROXY_THREADS=$PROXY_THREADS"
  echo "targets: ${active[*]}"
  for t in "${!SKIP[@]}"; do echo "not run: $t: ${SKIP[$t]}"; done
  echo "uptime before: $(uptime)"
} >"$OUT/env.txt"
cat "$OUT/env.txt" >&2

ticks() { # "utime+stime stime" of a pid and its threads (and child processes), clock ticks
  local pid=$1 s total=0 sys=0 c
  if s=$(cat "/proc/$pid/stat" 2>/dev/null); then
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s
    total=$((${12} + ${13})) sys=${13}
  fi
  for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
    set -- $(ticks "$c")
    total=$((total + $1)) sys=$((sys + $2))
  done
  echo "$total $sys"
}

# --- redis-server and key space ------------------------------------------------------------------
REDIS_TLS=()
[ -n "$TLS_ON" ] && REDIS_TLS=(--tls-port "${PORT[tls-direct]}" --tls-cert-file "$TLS_DIR/server.crt"
  --tls-key-file "$TLS_DIR/server.key" --tls-ca-cert-file "$TLS_DIR/ca.crt" --tls-auth-clients no)
start_bg redis "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
  --daemonize no --dir "$OUT" --dbfilename dump-unused.rdb "${REDIS_TLS[@]}"
REDIS_PID=$LAST_PID
PID[direct]=$REDIS_PID
PID[tls-direct]=$REDIS_PID
wait_ping redis "$REDIS_PORT" "$REDIS_PID"
log "loading $KEYS keys x $DATA_SIZE B (redis-benchmark's key:NNNNNNNNNNNN and memtier's memtier-N)"
awk -v n="$KEYS" -v ds="$DATA_SIZE" 'BEGIN {
  v = sprintf("%*s", ds, ""); gsub(/ /, "x", v)
  for (i = 0; i < n; i++) {
    k = sprintf("key:%012d", i)
    printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, ds, v
    k = "memtier-" (i + 1)
    printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, ds, v
  }
}' | "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" --pipe >"$OUT/logs/preload.log" 2>&1 || die "preload failed"
echo "dbsize: $("$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" dbsize)" >>"$OUT/env.txt"

# --- targets ---------------------------------------------------------------------------------------
start_target() {
  local t=$1 port=${PORT[$1]} cfg
  case $t in
    direct | tls-direct) return 0 ;;
    stunnel-tls)
      cfg=$OUT/conf/stunnel.conf
      cat >"$cfg" <<EOF
foreground = yes
pid =
[tls-in]
accept = 127.0.0.1:$port
connect = 127.0.0.1:$STUNNEL_HOP
cert = $TLS_DIR/server.crt
key = $TLS_DIR/server.key
[tls-out]
client = yes
accept = 127.0.0.1:$STUNNEL_HOP
connect = 127.0.0.1:${PORT[tls-direct]}
CAfile = $TLS_DIR/ca.crt
verifyChain = yes
checkIP = 127.0.0.1
EOF
      start_bg stunnel-tls "$STUNNEL" "$cfg"
      ;;
    twemproxy)
      cfg=$OUT/conf/nutcracker.yml
      cat >"$cfg" <<EOF
bench:
  listen: 127.0.0.1:$port
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  preconnect: true
  timeout: 10000
  server_connections: 1
  servers:
   - 127.0.0.1:$REDIS_PORT:1
EOF
      "$NUTCRACKER" -t -c "$cfg" >"$OUT/logs/nutcracker-test.log" 2>&1 || die "nutcracker config test failed"
      start_bg twemproxy "$NUTCRACKER" -c "$cfg" -a 127.0.0.1 -s "$TWEM_STATS_PORT" -v 4 -o "$OUT/logs/nutcracker.out"
      ;;
    haproxy | haproxy-tls)
      local bind_tls="" server_tls="" up=$REDIS_PORT
      if [ "$t" = haproxy-tls ]; then
        bind_tls=" ssl crt $TLS_DIR/server.pem" up=${PORT[tls-direct]}
        server_tls=" ssl verify required ca-file $TLS_DIR/ca.crt"
      fi
      cfg=$OUT/conf/$t.cfg
      cat >"$cfg" <<EOF
global
  nbthread $PROXY_THREADS
  maxconn 4000
defaults
  mode tcp
  timeout connect 5s
  timeout client 120s
  timeout server 120s
frontend fe_redis
  bind 127.0.0.1:$port$bind_tls
  default_backend be_redis
backend be_redis
  server r1 127.0.0.1:$up$server_tls
EOF
      "$HAPROXY" -c -f "$cfg" >"$OUT/logs/$t-check.log" 2>&1 || die "$t config check failed"
      start_bg "$t" "$HAPROXY" -db -f "$cfg"
      ;;
    predixy)
      cfg=$OUT/conf/predixy.conf
      cat >"$cfg" <<EOF
Name bench-predixy
Bind 127.0.0.1:$port
WorkerThreads $PROXY_THREADS
ClientTimeout 300
LogVerbSample 0
LogDebugSample 0
LogInfoSample 0
LogNoticeSample 1
LogWarnSample 1
LogErrorSample 1
Authority {
    Auth {
        Mode write
    }
}
StandaloneServerPool {
    Databases 1
    Hash crc16
    Distribution modula
    MasterReadPriority 100
    RefreshMethod fixed
    ServerTimeout 0
    ServerFailureLimit 10
    ServerRetryTimeout 1
    Group g1 {
        + 127.0.0.1:$REDIS_PORT
    }
}
EOF
      start_bg predixy "$PREDIXY" "$cfg"
      ;;
    respmeter*)
      local extra=() bin=$RESPMETER
      case $t in *-b) bin=$RESPMETER_B ;; esac
      case ${t%-b} in
        respmeter-shared) extra=(--upstream-mode shared) ;;
        respmeter-nomeasure) extra=(--measure=false) ;;
        respmeter-pinned) extra=(--route pinned --shards "127.0.0.1:$REDIS_PORT") ;;
        respmeter-slots) extra=(--route slots --shards "127.0.0.1:$REDIS_PORT") ;;
        respmeter-capture) extra=(--upstream-mode shared --capture "$OUT/$t.respcap") ;;
        respmeter-tls) extra=(--tls-listen "127.0.0.1:$port" --tls-cert-file "$TLS_DIR/server.crt"
          --tls-key-file "$TLS_DIR/server.key" --tls-auth-clients no --upstream-tls
          --upstream-tls-ca-cert-file "$TLS_DIR/ca.crt") ;;
      esac
      local listen=127.0.0.1:$port upstream=127.0.0.1:$REDIS_PORT
      if [ "${t%-b}" = respmeter-tls ]; then listen=off upstream=127.0.0.1:${PORT[tls-direct]}; fi
      echo "$bin proxy --listen $listen --upstream $upstream --admin 127.0.0.1:${ADMIN[$t]} --loops $PROXY_THREADS --log-level warn ${extra[*]:-}" >"$OUT/conf/$t.cmd"
      start_bg "$t" "$bin" proxy --listen "$listen" --upstream "$upstream" \
        --admin "127.0.0.1:${ADMIN[$t]}" --loops "$PROXY_THREADS" --log-level warn "${extra[@]}"
      ;;
  esac
  PID[$t]=$LAST_PID
  if is_tls "$t"; then wait_ping "$t" "$port" "${PID[$t]}" "${TLS_CLI[@]}"; else wait_ping "$t" "$port" "${PID[$t]}"; fi
  log "$t pid ${PID[$t]} on 127.0.0.1:$port"
}
for t in "${active[@]}"; do start_target "$t"; done

# --- cells -----------------------------------------------------------------------------------------
CELLS=$OUT/cells.csv
echo "rep,target,tool,pipeline,ops_per_sec,avg_ms,p50_ms,p99_ms,set_p50_ms,set_p99_ms,ops,proxy_s,redis_s,client_s,busy_s,wall_s,rc,proxy_sys_s" >"$CELLS"

# cell REP TARGET TOOL PIPELINE: one benchmark run, appended to cells.csv.
cell() {
  local rep=$1 t=$2 tool=$3 pl=$4 port=${PORT[$2]} tag="$3_$2_p$4_r$1" rcode=0
  local pb pa psb psa rb ra cb ca bb ba t0 t1 proxied=1 cli=() mtls=()
  case $t in direct | tls-direct) proxied= ;; esac
  if is_tls "$t"; then cli=("${TLS_CLI[@]}") mtls=(--tls "--cacert=$TLS_DIR/ca.crt"); fi
  pb=0 psb=0
  [ -n "$proxied" ] && read -r pb psb < <(ticks "${PID[$t]}")
  read -r rb _ < <(ticks "$REDIS_PID")
  cb=$(child_ticks)
  bb=$(busy_ticks)
  t0=$(date +%s.%N)
  case $tool in
    memtier)
      timeout $((TEST_TIME + 120)) "$MEMTIER" -s 127.0.0.1 -p "$port" "${mtls[@]}" --protocol=redis -t "$THREADS" -c "$CLIENTS" \
        --test-time="$TEST_TIME" --ratio=1:10 --key-pattern=R:R --key-minimum=1 --key-maximum="$KEYS" \
        -d "$DATA_SIZE" --pipeline="$pl" --distinct-client-seed --hide-histogram --print-percentiles=50,99 \
        --json-out-file="$OUT/raw/$tag.json" >"$OUT/raw/$tag.txt" 2>&1 || rcode=$?
      ;;
    memtier-rtt)
      timeout $((RTT_TIME + 120)) "$MEMTIER" -s 127.0.0.1 -p "$port" "${mtls[@]}" --protocol=redis -t 1 -c 1 \
        --test-time="$RTT_TIME" --ratio=1:10 --key-pattern=R:R --key-minimum=1 --key-maximum="$KEYS" \
        -d "$DATA_SIZE" --pipeline=1 --hide-histogram --print-percentiles=50,99 \
        --json-out-file="$OUT/raw/$tag.json" >"$OUT/raw/$tag.txt" 2>&1 || rcode=$?
      ;;
    rb)
      timeout 600 "$REDIS_BENCH" -h 127.0.0.1 -p "$port" "${cli[@]}" --threads "$THREADS" -c $((THREADS * CLIENTS)) \
        -t set,get -n "$RB_N" -r "$KEYS" -d "$DATA_SIZE" -P "$pl" --csv >"$OUT/raw/$tag.csv" 2>"$OUT/raw/$tag.err" || rcode=$?
      ;;
    rb-rtt)
      timeout 600 "$REDIS_BENCH" -h 127.0.0.1 -p "$port" "${cli[@]}" -c 1 -P 1 -t get -n "$RTT_N" -r "$KEYS" -d "$DATA_SIZE" \
        --csv >"$OUT/raw/$tag.csv" 2>"$OUT/raw/$tag.err" || rcode=$?
      ;;
    rb-hs)
      timeout 600 "$REDIS_BENCH" -h 127.0.0.1 -p "$port" "${cli[@]}" -k 0 -c "$THREADS" -P 1 -t get -n "$HS_N" -r "$KEYS" \
        -d "$DATA_SIZE" --csv >"$OUT/raw/$tag.csv" 2>"$OUT/raw/$tag.err" || rcode=$?
      ;;
  esac
  t1=$(date +%s.%N)
  pa=0 psa=0
  [ -n "$proxied" ] && read -r pa psa < <(ticks "${PID[$t]}")
  read -r ra _ < <(ticks "$REDIS_PID")
  ca=$(child_ticks)
  ba=$(busy_ticks)
  [ "$rcode" -eq 0 ] || log "WARN: $tag exited $rcode"
  python3 - "$OUT/raw/$tag" "$tool" "$rep" "$t" "$pl" "$((pa - pb))" "$((ra - rb))" "$((ca - cb))" "$((ba - bb))" \
    "$CLK_TCK" "$t0" "$t1" "$rcode" "$RB_N" "$RTT_N" "$((psa - psb))" "$HS_N" >>"$CELLS" <<'PY'
import csv, json, sys
stem, tool, rep, t, pl, dp, dr, dc, db, hz, t0, t1, rc, rb_n, rtt_n, dps, hs_n = sys.argv[1:]
hz = float(hz)
nan = float("nan")
ops_s = avg = p50 = p99 = sp50 = sp99 = nan
ops = 0
try:
    if tool.startswith("memtier"):
        tot = json.load(open(stem + ".json"))["ALL STATS"]["Totals"]
        pct = tot.get("Percentile Latencies", {})
        ops_s, avg = tot["Ops/sec"], tot.get("Average Latency", nan)
        p50, p99 = pct.get("p50.00", nan), pct.get("p99.00", nan)
        ops = int(tot.get("Count") or 0)
        # the JSON's "Average Latency" is rounded to whole ms: take the text table's Totals row
        head = None
        for ln in open(stem + ".txt"):
            w = ln.split()
            if w[:1] == ["Type"]:
                head = w
            elif w[:1] == ["Totals"] and head:
                i = 1 + sum(1 for x in head[1:head.index("Avg.")] if x.endswith("/sec"))
                avg = float(w[i])
    else:
        rows = {r["test"]: r for r in csv.DictReader(open(stem + ".csv"))}
        if tool == "rb":
            n = int(rb_n)
            s, g = rows["SET"], rows["GET"]
            ops = 2 * n
            ops_s = ops / (n / float(s["rps"]) + n / float(g["rps"]))
            avg = (float(s["avg_latency_ms"]) + float(g["avg_latency_ms"])) / 2
            p50, p99 = float(g["p50_latency_ms"]), float(g["p99_latency_ms"])
            sp50, sp99 = float(s["p50_latency_ms"]), float(s["p99_latency_ms"])
        else:
            g = rows["GET"]
            ops = int(hs_n if tool == "rb-hs" else rtt_n)
            ops_s, avg = float(g["rps"]), float(g["avg_latency_ms"])
            p50, p99 = float(g["p50_latency_ms"]), float(g["p99_latency_ms"])
except Exception as e:  # a failed run leaves NaN and rc says why
    rc = rc if rc != "0" else "parse:" + type(e).__name__
print(f"{rep},{t},{tool},{pl},{ops_s:.1f},{avg:.4f},{p50:.4f},{p99:.4f},{sp50:.4f},{sp99:.4f},{ops},"
      f"{int(dp)/hz:.2f},{int(dr)/hz:.2f},{int(dc)/hz:.2f},{int(db)/hz:.2f},{float(t1)-float(t0):.2f},{rc},{int(dps)/hz:.2f}")
PY
  tail -1 "$CELLS" >&2
}

check_alive() {
  local t
  for t in "${active[@]}"; do kill -0 "${PID[$t]}" 2>/dev/null || die "$t (pid ${PID[$t]}) died; see $OUT/logs/$t.log"; done
}

T0=$(date +%s)
for rep in $(seq "$REPS"); do
  for t in "${active[@]}"; do
    check_alive
    if [ -z "$HS_ONLY" ]; then
      for pl in $PIPELINES; do
        [ -n "$MEMTIER" ] && cell "$rep" "$t" memtier "$pl"
        cell "$rep" "$t" rb "$pl"
      done
      cell "$rep" "$t" rb-rtt 1
      [ -n "$MEMTIER" ] && cell "$rep" "$t" memtier-rtt 1
    fi
    if is_tls "$t"; then cell "$rep" "$t" rb-hs 1; fi
  done
done
T1=$(date +%s)
{
  echo "duration: $((T1 - T0)) s"
  echo "uptime after: $(uptime)"
} >>"$OUT/env.txt"
# The captures' stats (records, drops, bytes) while their proxies still run.
for t in "${active[@]}"; do
  case $t in respmeter-capture*)
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
      "http://127.0.0.1:${ADMIN[$t]}/capture" >"$OUT/$t.capture.json" || log "no capture stats from $t"
  ;; esac
done

# --- summary ---------------------------------------------------------------------------------------
HS_ONLY=$HS_ONLY python3 - "$OUT" "$NCPU" "${active[*]}" "$TARGETS" <<'PY' | tee "$OUT/summary.md"
import csv, json, math, os, statistics, sys
out, ncpu, active, wanted = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
nan = float("nan")
rows = list(csv.DictReader(open(out + "/cells.csv")))

def f(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return nan

def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else nan

def fmt(x, nd=2):
    return "n/a" if math.isnan(x) else f"{x:.{nd}f}"

cells = {}
for r in rows:
    cells.setdefault((r["target"], r["tool"], r["pipeline"]), []).append(r)

def stat(t, tool, pl):
    rs = cells.get((t, tool, str(pl)), [])
    ok = [r for r in rs if r["rc"] == "0"]
    if not ok:
        return None
    def per_op(key):
        return med([f(r[key]) * 1e6 / f(r["ops"]) if f(r["ops"]) > 0 else nan for r in ok])
    def other(r):
        own = f(r["proxy_s"]) + f(r["redis_s"]) + f(r["client_s"])
        return max(0.0, (f(r["busy_s"]) - own) / (f(r["wall_s"]) * ncpu) * 100)
    ops = [f(r["ops_per_sec"]) for r in ok]
    m = med(ops)
    spread = max(abs(max(ops) - m), abs(m - min(ops))) / m * 100 if len(ops) > 1 and m else nan
    return dict(ops=m, spread=spread, avg=med([f(r["avg_ms"]) for r in ok]),
                p50=med([f(r["p50_ms"]) for r in ok]), p99=med([f(r["p99_ms"]) for r in ok]),
                sp50=med([f(r["set_p50_ms"]) for r in ok]), sp99=med([f(r["set_p99_ms"]) for r in ok]),
                proxy=per_op("proxy_s"), redis=per_op("redis_s"), other=med([other(r) for r in ok]),
                sys=per_op("proxy_sys_s"), client=per_op("client_s"),
                own=med([(f(r["proxy_s"]) + f(r["redis_s"]) + f(r["client_s"])) * 1e6 / f(r["ops"])
                         if f(r["ops"]) > 0 else nan for r in ok]),
                floor=med([(f(r["proxy_sys_s"]) + f(r["redis_s"]) + f(r["client_s"])) * 1e6 / f(r["ops"])
                           if f(r["ops"]) > 0 else nan for r in ok]),
                n=len(ok), tried=len(rs))

def ratio(a, b):
    return a / b if a and b and not math.isnan(a) and not math.isnan(b) else nan

tools = [x for x in ("memtier", "rb") if any(k[1] == x for k in cells)]
pls = sorted({int(k[2]) for k in cells if k[1] in ("memtier", "rb")})
names = {"memtier": "memtier_benchmark (--ratio=1:10; p50/p99 of all ops)",
         "rb": "redis-benchmark (-t set,get, equal counts; p50/p99 as SET/GET)"}
for tool in tools:
    print(f"\n#### {names[tool]}\n")
    print("| target | P | ops/s | × direct | × haproxy | × predixy | p50 ms | p99 ms | proxy µs/op | of it kernel | redis µs/op | other CPU | runs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pl in pls:
        ref = {k: stat(k, tool, pl) for k in ("direct", "haproxy", "predixy")}
        for t in wanted:
            s = stat(t, tool, pl)
            if s is None:
                print(f"| {t} | {pl} | not run | | | | | | | | | | |")
                continue
            r = [fmt(ratio(s["ops"], ref[k]["ops"] if ref[k] else nan)) for k in ("direct", "haproxy", "predixy")]
            sp = "" if math.isnan(s["spread"]) else f" ±{s['spread']:.0f}%"
            if tool == "rb":
                lat = f"{fmt(s['sp50'], 3)}/{fmt(s['p50'], 3)} | {fmt(s['sp99'], 3)}/{fmt(s['p99'], 3)}"
            else:
                lat = f"{fmt(s['p50'], 3)} | {fmt(s['p99'], 3)}"
            proxy = "- | -" if t in ("direct", "tls-direct") else f"{fmt(s['proxy'], 1)} | {fmt(s['sys'], 1)}"
            print(f"| {t} | {pl} | {s['ops']:.0f}{sp} | {' | '.join(r)} | {lat} | {proxy} | {fmt(s['redis'], 1)} | {s['other']:.0f} % | {s['n']}/{s['tried']} |")

rtt_tools = [x for x in ("rb-rtt", "memtier-rtt") if any(k[1] == x for k in cells)]
if rtt_tools:
    print("\n#### Unloaded round trip (1 connection, pipeline 1)\n")
    hdr = "| target | redis-benchmark GET p50 µs | mean µs | added p50 µs (vs direct) |"
    sep = "|---|---|---|---|"
    if "memtier-rtt" in rtt_tools:
        hdr += " memtier 1x1 p50 µs | mean µs | added mean µs |"
        sep += "---|---|---|"
    print(hdr + " other CPU |")
    print(sep + "---|")
    d_rb, d_mt = stat("direct", "rb-rtt", 1), stat("direct", "memtier-rtt", 1)
    for t in wanted:
        s = stat(t, "rb-rtt", 1)
        if s is None:
            print(f"| {t} | not run | | |" + (" | | |" if "memtier-rtt" in rtt_tools else "") + " |")
            continue
        line = f"| {t} | {s['p50']*1e3:.0f} | {s['avg']*1e3:.0f} | {(s['p50'] - d_rb['p50'])*1e3:+.0f} |" if d_rb else f"| {t} | {s['p50']*1e3:.0f} | {s['avg']*1e3:.0f} | n/a |"
        if "memtier-rtt" in rtt_tools:
            m = stat(t, "memtier-rtt", 1)
            if m and d_mt:
                line += f" {m['p50']*1e3:.0f} | {m['avg']*1e3:.0f} | {(m['avg'] - d_mt['avg'])*1e3:+.0f} |"
            else:
                line += " n/a | n/a | n/a |"
        print(line + f" {s['other']:.0f} % |")

# TLS on both sides: respmeter-tls's proxy CPU per operation over each TLS-terminating peer's,
# paired per repetition (the targets are interleaved, so a pair shares the machine's load).
tls_peers = [x for x in ("haproxy-tls", "stunnel-tls") if x in wanted]
if "respmeter-tls" in wanted and tls_peers and tools:
    per_rep = {}
    for r in rows:
        if r["rc"] == "0" and f(r["ops"]) > 0:
            per_rep[(r["target"], r["tool"], r["pipeline"], r["rep"])] = f(r["proxy_s"]) * 1e6 / f(r["ops"])
    print("\n#### TLS on both sides: proxy CPU µs/op, respmeter-tls over each peer (ratio per repetition: median, min–max)\n")
    print("| tool | P | respmeter-tls | " + " | ".join(f"{x} | respmeter-tls ÷ {x}" for x in tls_peers) + " |")
    print("|---|---|---|" + "---|---|" * len(tls_peers))
    for tool in tools:
        for pl in pls:
            a = stat("respmeter-tls", tool, pl)
            line = f"| {tool} | {pl} | {fmt(a['proxy'], 1) if a else 'not run'} |"
            for x in tls_peers:
                b = stat(x, tool, pl)
                rs = [per_rep[("respmeter-tls", tool, str(pl), k[3])] / v for k, v in per_rep.items()
                      if k[:3] == (x, tool, str(pl)) and ("respmeter-tls", tool, str(pl), k[3]) in per_rep and v > 0]
                rr = f"{med(rs):.2f} ({min(rs):.2f}–{max(rs):.2f}, {len(rs)} reps)" if rs else "n/a"
                line += f" {fmt(b['proxy'], 1) if b else 'not run'} | {rr} |"
            print(line)

# TLS handshakes per second: redis-benchmark -k 0, a new connection per GET.
hs_targets = [t for t in wanted if any(k[:2] == (t, "rb-hs") for k in cells)]
if hs_targets:
    base = [x for x in ("haproxy-tls", "stunnel-tls") if stat(x, "rb-hs", 1)]
    print("\n#### TLS handshakes per second (redis-benchmark --tls -k 0: a new connection per GET; medians)\n")
    print("A proxy's connection costs two handshakes (the client's with it, its own with redis-server), "
          "tls-direct's one; CPU is per connection.\n")
    print("| target | handshakes/s | " + "".join(f"× {x} | " for x in base) + "proxy CPU µs/conn | of it kernel | "
          + "".join(f"× {x} CPU | " for x in base) + "redis µs/conn | other CPU | runs |")
    print("|---|---|" + "---|" * len(base) + "---|---|" + "---|" * len(base) + "---|---|---|")
    for t in hs_targets:
        s = stat(t, "rb-hs", 1)
        if s is None:
            print(f"| {t} | not run |" + " |" * (5 + 2 * len(base)))
            continue
        bs = [stat(x, "rb-hs", 1) for x in base]
        direct = t == "tls-direct"
        line = f"| {t} | {s['ops']:.0f} | " + "".join(f"{fmt(ratio(s['ops'], b['ops']))} | " for b in bs)
        line += "- | - | " if direct else f"{fmt(s['proxy'], 0)} | {fmt(s['sys'], 0)} | "
        line += "".join("- | " if direct else f"{fmt(ratio(s['proxy'], b['proxy']))} | " for b in bs)
        print(line + f"{fmt(s['redis'], 0)} | {s['other']:.0f} % | {s['n']}/{s['tried']} |")
if os.environ.get("HS_ONLY"):
    sys.exit(0)

# the targets respmeter is held to
tool = "memtier" if "memtier" in tools else "rb"
print(f"\n#### Throughput and latency targets (ops/s and CPU from {names[tool].split(' (')[0]}, medians)\n")
print("| target | figure | verdict |")
print("|---|---|---|")
def verdict(ok):
    return "not run" if ok is None else ("met" if ok else "not met")
def line(name, fig, ok):
    print(f"| {name} | {fig} | {verdict(ok)} |")
def cmp(a, b, want, above=True):
    if a is None or b is None:
        return None, nan
    x = ratio(a, b)
    if math.isnan(x):
        return None, x
    return (x >= want if above else x <= want), x
for pl, want in ((1, 1.25), (16, 1.1)):
    a, b = stat("respmeter", tool, pl), stat("haproxy", tool, pl)
    ok, x = cmp(a and a["ops"], b and b["ops"], want)
    line(f"passthrough ops/s ≥ {want}× haproxy, P{pl}", f"{fmt(x)}× ({fmt(a['ops'] if a else nan, 0)} vs {fmt(b['ops'] if b else nan, 0)})", ok)
for pl in (1, 16):
    a, b = stat("respmeter", tool, pl), stat("haproxy", tool, pl)
    ok, x = cmp(a and a["proxy"], b and b["proxy"], 1.0, above=False)
    line(f"passthrough proxy CPU µs/op ≤ haproxy's, P{pl}", f"{fmt(a['proxy'] if a else nan, 1)} vs {fmt(b['proxy'] if b else nan, 1)} ({fmt(x)}×)", ok)
a, d = stat("respmeter", "rb-rtt", 1), stat("direct", "rb-rtt", 1)
if a and d:
    add = (a["p50"] - d["p50"]) * 1e3
    line("added round trip ≤ 12 µs (redis-benchmark -c 1 GET p50 − direct)", f"{add:+.0f} µs ({a['p50']*1e3:.0f} vs {d['p50']*1e3:.0f})", add <= 12)
a, d = stat("respmeter", "memtier-rtt", 1), stat("direct", "memtier-rtt", 1)
if a and d:
    add = (a["avg"] - d["avg"]) * 1e3
    line("added round trip ≤ 12 µs (memtier 1×1 mean − direct)", f"{add:+.0f} µs ({a['avg']*1e3:.0f} vs {d['avg']*1e3:.0f})", add <= 12)
for pl in (1, 16):
    a, b = stat("respmeter-shared", tool, pl), stat("predixy", tool, pl)
    ok, x = cmp(a and a["ops"], b and b["ops"], 1.05)
    line(f"shared ops/s ≥ 1.05× predixy, P{pl}", f"{fmt(x)}× ({fmt(a['ops'] if a else nan, 0)} vs {fmt(b['ops'] if b else nan, 0)})", ok)
for pl in (1, 16):
    a, b = stat("respmeter-shared", tool, pl), stat("predixy", tool, pl)
    ok, x = cmp(a and a["proxy"], b and b["proxy"], 1.0, above=False)
    line(f"shared proxy CPU µs/op ≤ predixy's, P{pl}", f"{fmt(a['proxy'] if a else nan, 1)} vs {fmt(b['proxy'] if b else nan, 1)} ({fmt(x)}×)", ok)
for pl in (1, 16):
    a, b = stat("respmeter", tool, pl), stat("respmeter-nomeasure", tool, pl)
    ok, x = cmp(a and a["proxy"], b and b["proxy"], 1.1, above=False)
    line(f"measure on ≤ 1.1× --measure=false CPU µs/op, P{pl}", f"{fmt(x)}× ({fmt(a['proxy'] if a else nan, 1)} vs {fmt(b['proxy'] if b else nan, 1)})", ok)
for pl in (1, 16):
    a, b = stat("respmeter-capture", tool, pl), stat("respmeter-shared", tool, pl)
    ok, x = cmp(a and a["proxy"], b and b["proxy"], 1.15, above=False)
    line(f"capture on ≤ 1.15× capture off CPU µs/op, P{pl}", f"{fmt(x)}× ({fmt(a['proxy'] if a else nan, 1)} vs {fmt(b['proxy'] if b else nan, 1)})", ok)
for t in wanted:
    if t.startswith("respmeter-capture") and os.path.exists(os.path.join(out, t + ".capture.json")):
        with open(os.path.join(out, t + ".capture.json")) as fh:
            c = json.load(fh)
        # Dropped records cost less than written ones: a run with drops understates the cost.
        line(f"{t}: capture records written, dropped, file MB", f"{c.get('records', 0)}, {c.get('dropped', 0)}, {c.get('bytes', 0) / 1e6:.1f}",
             c.get("dropped", 0) == 0 and not c.get("error"))

# Floors: can user-space work reach an ops/s target at all? When the cores are saturated, ops/s is
# (CPU available) / (CPU per op of client + redis + proxy). At `want` x the peer's ops/s with the
# same CPU available, the three together may spend at most peer_own / want µs per op. What is
# left for respmeter after its client, redis-server and its own kernel time (measured in its own
# cells) is the most its user-space code may take; a negative budget means that even a proxy
# whose user-space work cost nothing would miss the target, unless it made fewer or cheaper
# system calls (or the client or redis-server cheaper).
def floor_table(title, header, sign, targets):
    """Prints a floors table's title and header, and a "not run" row for each
    (target, peer, want, pipeline) whose cells are missing; yields (name,
    target, want, pipeline, target's stat, peer's stat) for the others."""
    print(f"\n#### {title} ({names[tool].split(' (')[0]}, medians, µs of CPU per operation)\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for t, peer, want, pl in targets:
        a, b = stat(t, tool, pl), stat(peer, tool, pl)
        name = f"{t} {sign} {want}× {peer}, P{pl}"
        if not a or not b:
            print(f"| {name} | not run |" + " |" * (len(header) - 2))
            continue
        yield name, t, want, pl, a, b

for name, t, want, pl, a, b in floor_table(
        "Floors for the ops/s targets",
        ["target", "peer cells: client + redis + proxy CPU", "allowed at the target",
         "respmeter cells: client + redis CPU + proxy kernel", "left for respmeter's user space",
         "respmeter's user space now"], "≥",
        (("respmeter", "haproxy", 1.25, 1), ("respmeter", "haproxy", 1.1, 16),
         ("respmeter-shared", "predixy", 1.05, 1), ("respmeter-shared", "predixy", 1.05, 16))):
    allowed = b["own"] / want
    print(f"| {name} | {fmt(b['own'], 1)} | {fmt(allowed, 1)} | {fmt(a['floor'], 1)} | "
          f"{fmt(allowed - a['floor'], 1)} | {fmt(a['proxy'] - a['sys'], 1)} |")

# The CPU targets, with their floor: respmeter's CPU per op is its kernel time (system calls,
# and the Go runtime's sleeps and wake-ups) plus its user-space time. A target allows `want` x the
# peer's CPU per op; what is left of that after respmeter's own kernel time (measured in its own
# cells) is the most its user-space code may take. When respmeter's kernel time alone reaches the
# allowance, no user-space work meets the target; only fewer or cheaper system calls would. The
# user space of respmeter-nomeasure (frame and forward, no timing) shows what is left without
# measuring at all. With TLS on both sides, respmeter-tls against haproxy-tls at pipeline 16
# (≤ 1.2×): its user space holds the record layer's work (crypto/tls), as haproxy's holds OpenSSL's.
for name, t, want, pl, a, b in floor_table(
        "CPU targets and their floors",
        ["target", "peer CPU", "allowed", "respmeter CPU (× peer)", "of it kernel", "left for user space",
         "user space now", "user space, --measure=false", "verdict"], "≤",
        (("respmeter", "haproxy", 1.1, 1), ("respmeter", "haproxy", 1.0, 16),
         ("respmeter-shared", "predixy", 1.0, 1), ("respmeter-shared", "predixy", 1.0, 16),
         ("respmeter-tls", "haproxy-tls", 1.2, 16))):
    nm = stat("respmeter-nomeasure", tool, pl) if t == "respmeter" else None
    allowed = b["proxy"] * want
    left, user = allowed - a["sys"], a["proxy"] - a["sys"]
    if a["proxy"] <= allowed:
        v = "met"
    elif left <= 0:
        v = "not met: kernel time alone is over the allowance"
    else:
        v = f"not met: user space must fall {100 * (1 - left / user):.0f} %"
    print(f"| {name} | {fmt(b['proxy'], 2)} | {fmt(allowed, 2)} | {fmt(a['proxy'], 2)} ({fmt(ratio(a['proxy'], b['proxy']))}×) | "
          f"{fmt(a['sys'], 2)} | {fmt(left, 2)} | {fmt(user, 2)} | {fmt(nm['proxy'] - nm['sys'], 2) if nm else '-'} | {v} |")

# A/B of two builds (RESPMETER_B): each -b target against its A target, same cells, interleaved.
pairs = [t for t in wanted if t.endswith("-b") and t[:-2] in wanted]
if pairs:
    print("\n#### A/B: RESPMETER_B (B) against RESPMETER (A), medians\n")
    print("| target | tool | P | A proxy µs/op | B proxy µs/op | B / A | A ops/s | B ops/s | B / A ops |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tb in pairs:
        ta = tb[:-2]
        for tool in tools + ["rb-rtt"]:
            for pl in sorted({int(k[2]) for k in cells if k[1] == tool}):
                a, b = stat(ta, tool, pl), stat(tb, tool, pl)
                if not a or not b:
                    continue
                print(f"| {ta} | {tool} | {pl} | {fmt(a['proxy'], 2)} | {fmt(b['proxy'], 2)} | {fmt(ratio(b['proxy'], a['proxy']))} | "
                      f"{a['ops']:.0f} | {b['ops']:.0f} | {fmt(ratio(b['ops'], a['ops']))} |")
PY
echo >&2
cat "$OUT/env.txt" >&2
