#!/usr/bin/env bash
# bench/soak.sh - the chaos soak: respmeter under its integrity load while engines are killed,
# masters frozen until they fail over, slots migrated, clients churned and read slowly, and
# /metrics scraped every second. It asserts that nothing is lost and nothing grows. Loopback only.
#
# Modes (MODES picks them; each has its own ports, data directories and processes):
#   default  respmeter in front of one redis-server (private upstream connections)
#   shared   the same with --upstream-mode shared
#   slots    --route slots --shards A,B,C over 3 standalone redis-servers
#   cluster  --route slots --cluster SEED over a cluster of 3 masters, each with a replica
#   facade   --route facade --cluster SEED over such a cluster: memtier --cluster-mode and the
#            pub/sub pair talk to the first virtual node, `respmeter check` and the slow reader (not
#            cluster-aware) to the facade process's plain --listen, which routes as --route slots
# Every engine writes an append-only file fsynced on each write (appendfsync always), so an
# engine killed with SIGKILL and restarted keeps every write it acknowledged: a lost write is a
# mismatch, never an excuse.
#
# Load, per mode, for SOAK_SECONDS, each in bounded rounds (a round has a start, an end and a
# verdict, written to OUT/MODE/rounds.tsv):
#   check    respmeter check --conns CHECK_CONNS --depth 8 --duration CHECK_ROUND (its own keys and
#            pub/sub round trips; --no-pubsub in the cluster modes, where PUBLISH counts only the
#            subscribers of the node it ran on); a round passes with exit 0, 0 mismatches, 0
#            connection errors
#   memtier  memtier_benchmark -c 2 -t 1 --rate-limiting MT_RATE --test-time MT_ROUND (cluster
#            mode against the facade), --reconnect-on-error; a round passes with exit 0
#   pubsub   redis-cli SUBSCRIBE and 20 PUBLISHes of numbered messages 0.2 s apart; a round passes
#            when the subscriber received all 20, in order
#   slow     a client (python3) that pipelines 200 GETs of a 32 KiB value and reads the 6.4 MiB of
#            replies at 512 KiB/s; passes when every reply is the value
#   churn    redis-benchmark -c 50 -n 500 -k 0 -t ping (500 connections, each for one command);
#            passes with exit 0 and no error line
# Faults, one every FAULT_EVERY seconds, in turn (a fault window runs from the injection to the
# moment respmeter answers again and the engines are back, plus FAULT_GRACE seconds):
#   kill     SIGKILL an engine (a master in the cluster modes), restart it on the same files
#   freeze   SIGSTOP an engine for FREEZE_SECONDS (standalone modes); in the cluster modes SIGSTOP
#            a master until its replica has taken over its slots, then SIGCONT (it rejoins as a
#            replica)
#   migrate  (cluster modes) redis-cli --cluster rebalance of MIGRATE_SLOTS slots from one master to
#            another, under the load (ASK and MOVED redirects)
# Asserted per mode (the mode FAILS otherwise; the exit status is 1 if any mode fails):
#   - every failed round overlaps a fault window, and a failed check round's first mismatch (the
#     only one respmeter check prints) is an error reply, not a wrong value, except in a failover
#     window: a master frozen and replaced loses the writes it acknowledged and had not yet sent
#     to its replica (replication is asynchronous; the Redis Cluster spec says so), which the
#     check sees as a lost SET (nil) or INCR; churn and the slow reader are not faults: they may
#     fail nothing on their own
#   - 0 mismatches in the check rounds that overlap no fault window
#   - after each fault, respmeter_requests_in_flight falls to at most the load's concurrency
#     (INFLIGHT_LOAD_MAX) within 10 s, and to 0 once the load has stopped at the end
#   - goroutines (go_goroutines) and open fds (/proc/PID/fd) at most baseline + GOROUTINE_SLACK /
#     FD_SLACK during the run, and at most baseline + 10 at the end, the load stopped (no growth);
#     the baseline is a scrape of respmeter idle before the load starts
#   - respmeter's RSS (VmRSS) at most RSS_MAX_MIB
#   - at least one fault of each kind the mode has was injected (SOAK_SECONDS must leave room:
#     the CI variant, 300 s with FAULT_EVERY=20, injects 7-10 per mode; 60 s is too short for the
#     cluster modes)
#
# Usage: bench/soak.sh                 the modes one after another, SOAK_SECONDS each
#        SOAK_CI=1 bench/soak.sh       CI: all modes at once, SOAK_SECONDS=300 unless set
# Env knobs (defaults): MODES="default shared slots cluster facade", SOAK_SECONDS=3600 (300 with
#   SOAK_CI), FAULT_EVERY=30 (20 with SOAK_CI), FAULT_GRACE=3, FREEZE_SECONDS=3, MIGRATE_SLOTS=100,
#   CHECK_CONNS=2, CHECK_ROUND=10, MT_RATE=50 (requests/s per connection), MT_ROUND=15,
#   GOROUTINE_SLACK=300, FD_SLACK=700, RSS_MAX_MIB=512, INFLIGHT_LOAD_MAX=600, BASE_PORT=26000
#   (mode i uses BASE_PORT+40*i .. +39, the cluster bus ports included), MEMTIER (default
#   .ci/build-memtier.sh's), RESPMETER (default: go build), OUT=$(mktemp -d).
# Requirements: bash, redis-server, redis-cli, redis-benchmark 7.x, python3, curl, memtier.
# Output: OUT/MODE/{rounds.tsv,faults.tsv,metrics.tsv,result.txt,logs/}, and a summary table.
# Safety: every address is 127.0.0.1; every loop is bounded in count and time and every client
# run by `timeout`; only the processes this script started are stopped, by PID, on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

SOAK_CI=${SOAK_CI:-}
if [ -n "$SOAK_CI" ]; then
  SOAK_SECONDS=${SOAK_SECONDS:-300}
  FAULT_EVERY=${FAULT_EVERY:-20}
else
  SOAK_SECONDS=${SOAK_SECONDS:-3600}
  FAULT_EVERY=${FAULT_EVERY:-30}
fi
MODES=${MODES:-"default shared slots cluster facade"}
FAULT_GRACE=${FAULT_GRACE:-3}
FREEZE_SECONDS=${FREEZE_SECONDS:-3}
MIGRATE_SLOTS=${MIGRATE_SLOTS:-100}
CHECK_CONNS=${CHECK_CONNS:-2}
CHECK_ROUND=${CHECK_ROUND:-10}
MT_RATE=${MT_RATE:-50}
MT_ROUND=${MT_ROUND:-15}
GOROUTINE_SLACK=${GOROUTINE_SLACK:-300}
FD_SLACK=${FD_SLACK:-700}
RSS_MAX_MIB=${RSS_MAX_MIB:-512}
INFLIGHT_LOAD_MAX=${INFLIGHT_LOAD_MAX:-600}
BASE_PORT=${BASE_PORT:-26000}
OUT=${OUT:-$(mktemp -d /tmp/soak.XXXXXX)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
REDIS_CLI=${REDIS_CLI:-$(command -v redis-cli || true)}
REDIS_BENCH=${REDIS_BENCH:-$(command -v redis-benchmark || true)}
MEMTIER=${MEMTIER:-$("$ROOT/.ci/build-memtier.sh" 2>/dev/null | tail -1 || true)}

ulimit -c 0 # a client that aborts on an injected fault (memtier does) leaves no core file in the tree
STARTED=() # every pid this (sub)shell started, stopped on exit
. "$HERE/lib.sh" # log, die, cleanup, stop_modes, start_bg, wait_ping

for b in "$REDIS_SERVER" "$REDIS_CLI" "$REDIS_BENCH" "$MEMTIER"; do
  [ -n "$b" ] && [ -x "$b" ] || die "redis-server, redis-cli, redis-benchmark and memtier_benchmark are needed (.ci/build-memtier.sh)"
done
command -v curl >/dev/null || die "curl is needed"
command -v python3 >/dev/null || die "python3 is needed"
mkdir -p "$OUT"
if [ -z "${RESPMETER:-}" ]; then
  RESPMETER=$OUT/respmeter
  log "building respmeter"
  (cd "$ROOT" && go build -o "$RESPMETER" ./cmd/respmeter)
fi
log "results -> $OUT"

now() { date +%s.%N | cut -c1-14; }
cli() { timeout 5 "$REDIS_CLI" -h 127.0.0.1 -p "$@" 2>/dev/null; }

# ---------------------------------------------------------------- one mode (run in a subshell)

# engine_start PORT [cluster]: start (or restart on its files) the redis-server of PORT.
engine_start() {
  local port=$1 d="$MD/data/$1"
  mkdir -p "$d"
  local args=(--port "$port" --bind 127.0.0.1 --dir "$d" --save '' --appendonly yes
    --appendfsync always --enable-debug-command yes --daemonize no)
  if [ "$MODE" = cluster ] || [ "$MODE" = facade ]; then
    args+=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000
      --cluster-port $((port + 20)) --cluster-replica-validity-factor 0)
  fi
  start_bg "redis-$port" "$REDIS_SERVER" "${args[@]}"
  ENGINE_PID[$port]=$LAST_PID
  echo "$LAST_PID" >>"$MD/pids" # the scheduler's restarts too: the mode's cleanup stops them
  wait_ping "redis-$port" "$port" "$LAST_PID"
}

cluster_ok() { # every node says cluster_state:ok and agrees on 3 masters with slots
  local p
  for p in "${ENGINES[@]}"; do
    cli "$p" cluster info | grep -q 'cluster_state:ok' || return 1
  done
  [ "$(cli "${ENGINES[0]}" cluster nodes | awk '$3 ~ /master/ && $3 !~ /fail/ && NF > 8' | wc -l)" -eq 3 ]
}

wait_until() { # SECONDS CMD...: poll CMD every 0.2 s, bounded
  local n=$(($1 * 5)) i
  shift
  for ((i = 0; i < n; i++)); do "$@" && return 0; sleep 0.2; done
  return 1
}

proxy_ok() { [ "$(cli "$PROXY_PORT" ping)" = PONG ] && { [ -z "$CLUSTERED" ] || cluster_ok; }; }

# The harness reads two gauges of /metrics, by name (client_golang's name[] filter): the whole
# exposition (270-430 KB) took over the scrape's 2 s to render and send on the overloaded host,
# and a transfer cut before respmeter_requests_in_flight read as no answer.
GAUGES='metrics?name[]=go_goroutines&name[]=respmeter_requests_in_flight'

scrape() { # one line of metrics.tsv: time goroutines fds(/proc) rss_kib inflight
  local m fds rss
  m=$(timeout 2 curl -gs "http://127.0.0.1:$ADMIN_PORT/$GAUGES" 2>/dev/null || true)
  fds=$(ls "/proc/$PROXY_PID/fd" 2>/dev/null | wc -l || true)
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$PROXY_PID/status" 2>/dev/null || echo 0)
  printf '%s\t%s\t%s\t%s\t%s\n' "$(now)" \
    "$(awk '$1 == "go_goroutines" {print $2}' <<<"$m")" "$fds" "$rss" \
    "$(awk '$1 == "respmeter_requests_in_flight" {print $2}' <<<"$m")"
}

inflight() { timeout 2 curl -gs "http://127.0.0.1:$ADMIN_PORT/$GAUGES" 2>/dev/null | awk '$1 == "respmeter_requests_in_flight" {print $2}'; }

# round NAME OK-CMD...: run one bounded round and append "name start end ok detail" to rounds.tsv.
# OK-CMD prints a one-line detail and exits 0 when the round passed.
round() {
  local name=$1 t0 detail ok=1
  shift
  t0=$(now)
  detail=$("$@" 2>&1 | tail -1) || ok=0
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$t0" "$(now)" "$ok" "${detail//$'\t'/ }" >>"$MD/rounds.tsv"
}

check_round() {
  local o rc=0
  local nopubsub=()
  # In a cluster PUBLISH answers the subscribers of the node it ran on, not the cluster's (the
  # message reaches the others over the bus): the pub/sub pair checks delivery there instead.
  [ -n "$CLUSTERED" ] && nopubsub=(--no-pubsub)
  o=$(timeout $((CHECK_ROUND + 40)) "$RESPMETER" check --target "127.0.0.1:$CHECK_PORT" "${nopubsub[@]}" \
    --conns "$CHECK_CONNS" --depth 8 --commands 1000000000 --duration "${CHECK_ROUND}s" --timeout 8s 2>&1) || rc=$?
  printf '%s\n' "$o" >>"$MD/logs/check.log"
  # commands N, mismatches M, error replies E, connection errors C, duration D (X cmds/s)
  local s first
  s=$(grep -m1 '^commands ' <<<"$o" || echo "no summary")
  first=$(grep -m1 -i 'expected' <<<"$o" | grep -o 'got .*' | cut -c1-80 || true)
  echo "rc=$rc $s ${first:+first: $first}"
  [ "$rc" = 0 ]
}

memtier_round() {
  local tgt=(-s 127.0.0.1 -p "$MT_PORT") o rc=0
  [ "$MODE" = facade ] && tgt+=(--cluster-mode)
  o=$(timeout $((MT_ROUND + 30)) "$MEMTIER" "${tgt[@]}" -c 2 -t 1 --ratio 1:4 --key-prefix "mt:$MODE:" \
    --key-maximum 10000 -d 128 --rate-limiting "$MT_RATE" --test-time "$MT_ROUND" --reconnect-on-error \
    --max-reconnect-attempts 50 --hide-histogram 2>&1) || rc=$?
  printf '%s\n' "$o" | tail -3 >>"$MD/logs/memtier.log"
  echo "rc=$rc ops=$(awk '$1 == "Totals" {print int($2 * '"$MT_ROUND"')}' <<<"$o")"
  [ "$rc" = 0 ]
}

pubsub_round() {
  local f="$MD/logs/sub.out" i got replies=""
  timeout 120 "$REDIS_CLI" -h 127.0.0.1 -p "$PS_PORT" ${CLUSTER_FLAG} SUBSCRIBE "soak:$MODE:ch" >"$f" 2>&1 &
  local sub=$!
  # until the subscription is confirmed (its count, 1, after the channel's name), at most 10 s
  for i in $(seq 50); do grep -qx 1 "$f" && break; sleep 0.2; done
  for i in $(seq 1 20); do
    replies+="$(timeout 3 "$REDIS_CLI" -h 127.0.0.1 -p "$PS_PORT" ${CLUSTER_FLAG} PUBLISH "soak:$MODE:ch" "m-$PS_SEQ-$i" 2>&1 | tr -d '\n'),"
    sleep 0.2
  done
  sleep 0.5
  kill "$sub" 2>/dev/null || true
  wait "$sub" 2>/dev/null || true
  got=$(grep -c "^m-$PS_SEQ-" "$f" || true)
  local want
  want=$(seq 1 20 | sed "s/^/m-$PS_SEQ-/")
  PS_SEQ=$((PS_SEQ + 1))
  echo "received $got/20 publish replies ${replies:0:60}"
  [ "$(grep "^m-$((PS_SEQ - 1))-" "$f")" = "$want" ]
}

slow_round() {
  timeout 60 python3 - "$SLOW_PORT" "soak:$MODE:big" <<'PY'
import socket, sys, time
port, key = int(sys.argv[1]), sys.argv[2].encode()
val = bytes((i * 7 + 13) % 251 for i in range(32768))
def cmd(*a):
    return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)
s = socket.create_connection(("127.0.0.1", port), timeout=20)
s.sendall(cmd(b"SET", key, val))
want_set = b"+OK\r\n"
buf = b""
while len(buf) < len(want_set):
    buf += s.recv(64)
if buf != want_set:
    print("SET got %r" % buf[:60]); sys.exit(1)
n = 200
s.sendall(cmd(b"GET", key) * n)
one = b"$%d\r\n%s\r\n" % (len(val), val)
want, got = len(one) * n, bytearray()
while len(got) < want:  # 512 KiB/s: 64 KiB every 0.125 s
    chunk = s.recv(min(65536, want - len(got)))
    if not chunk:
        print("EOF after %d of %d bytes" % (len(got), want)); sys.exit(1)
    got += chunk
    time.sleep(0.125)
if bytes(got) != one * n:
    print("replies differ from the value (first bytes %r)" % bytes(got[:40])); sys.exit(1)
print("200 x 32 KiB read slowly, all equal")
PY
}

churn_round() {
  local o rc=0
  o=$(timeout 60 "$REDIS_BENCH" -h 127.0.0.1 -p "$PROXY_PORT" -c 50 -n 500 -k 0 -t ping -q 2>&1) || rc=$?
  o=$(tr '\r' '\n' <<<"$o" | grep -v '^$' | tail -1)
  echo "rc=$rc $o"
  [ "$rc" = 0 ] && ! grep -qi 'error' <<<"$o"
}

# load NAME FUNC PAUSE: rounds of FUNC until the soak's end (bounded: at most SOAK_SECONDS rounds).
load() {
  local i
  for ((i = 0; i < SOAK_SECONDS; i++)); do
    [ "$(date +%s)" -lt "$END" ] || break
    round "$1" "$2"
    sleep "$3"
  done
}

masters() { cli "${ENGINES[0]}" cluster nodes | awk '$3 ~ /master/ && $3 !~ /fail/ && NF > 8 {split($2, a, "[:@]"); print $1, a[2]}'; }

# fault KIND: inject one fault, wait until it is over, record its window in faults.tsv.
fault() {
  local kind=$1 t0 t1 detail="" port id pid ok=1
  t0=$(now)
  case $kind in
  kill)
    if [ -n "$CLUSTERED" ]; then port=$(masters | awk 'NR == 2 {print $2}'); else port=${ENGINES[$((${#ENGINES[@]} - 1))]}; fi
    kill -9 "${ENGINE_PID[$port]}" 2>/dev/null || true
    wait "${ENGINE_PID[$port]}" 2>/dev/null || true
    sleep 0.5
    engine_start "$port"
    detail="SIGKILL and restart of $port"
    ;;
  freeze)
    if [ -n "$CLUSTERED" ]; then
      read -r id port < <(masters | head -1)
      pid=${ENGINE_PID[$port]}
      kill -STOP "$pid"
      # until another node has its slots: a replica promoted
      if wait_until 60 bash -c "[ \"\$(timeout 2 '$REDIS_CLI' -h 127.0.0.1 -p ${ENGINES_NOT[$port]} cluster nodes 2>/dev/null | awk '\$2 ~ /:$port@/ && \$3 ~ /(^|,)fail(,|\$)/' | wc -l)\" = 1 ] && [ \"\$(timeout 2 '$REDIS_CLI' -h 127.0.0.1 -p ${ENGINES_NOT[$port]} cluster nodes 2>/dev/null | awk '\$3 ~ /master/ && \$3 !~ /fail/ && NF > 8' | wc -l)\" = 3 ]"; then
        detail="SIGSTOP of master $port until its replica took over"
      else
        detail="SIGSTOP of master $port: NO failover within 60 s"
        ok=0
      fi
      kill -CONT "$pid"
    else
      port=${ENGINES[0]}
      kill -STOP "${ENGINE_PID[$port]}"
      sleep "$FREEZE_SECONDS"
      kill -CONT "${ENGINE_PID[$port]}"
      detail="SIGSTOP of $port for ${FREEZE_SECONDS} s"
    fi
    ;;
  migrate)
    local from to
    from=$(masters | awk 'NR == 1 {print $1}')
    to=$(masters | awk 'NR == 3 {print $1}')
    if timeout 120 "$REDIS_CLI" --cluster reshard "127.0.0.1:${ENGINES[0]}" --cluster-from "$from" \
      --cluster-to "$to" --cluster-slots "$MIGRATE_SLOTS" --cluster-yes --cluster-pipeline 20 \
      >>"$MD/logs/reshard.log" 2>&1; then
      detail="$MIGRATE_SLOTS slots ${from:0:8} -> ${to:0:8}"
    else
      detail="reshard FAILED (logs/reshard.log)"
      ok=0
    fi
    ;;
  esac
  wait_until 60 proxy_ok || { ok=0; detail+="; respmeter or the cluster not back within 60 s"; }
  t1=$(now)
  # in flight back within the load's concurrency (a request never answered stays counted)
  local fl=""
  if wait_until 10 bash -c "v=\$(timeout 2 curl -gs 'http://127.0.0.1:$ADMIN_PORT/$GAUGES' | awk '\$1 == \"respmeter_requests_in_flight\" {print \$2}'); [ -n \"\$v\" ] && [ \"\${v%.*}\" -le $INFLIGHT_LOAD_MAX ]"; then
    fl=$(inflight)
  else
    ok=0
    fl="$(inflight) (over $INFLIGHT_LOAD_MAX)"
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$kind" "$t0" "$t1" "$ok" "$detail; in flight after: $fl" >>"$MD/faults.tsv"
  log "$MODE: fault $kind ok=$ok $detail; in flight after: $fl"
}

scheduler() {
  local kinds=(kill freeze) i=0 n
  [ -n "$CLUSTERED" ] && kinds=(kill freeze migrate)
  n=$((SOAK_SECONDS / FAULT_EVERY + 1))
  for ((k = 0; k < n; k++)); do
    sleep "$FAULT_EVERY"
    [ "$(($(date +%s) + 15))" -lt "$END" ] || break
    fault "${kinds[$((i % ${#kinds[@]}))]}"
    i=$((i + 1))
  done
}

# scraper starts a scrape every second (each bounded by curl's 2 s; on a busy machine one takes
# longer than a second, so they overlap rather than slow the cadence down).
scraper() {
  local i
  for ((i = 0; i < SOAK_SECONDS + 120; i++)); do
    [ "$(date +%s)" -lt "$((END + 15))" ] || break
    scrape >>"$MD/metrics.tsv" &
    sleep 1
  done
  wait
}

run_mode() {
  MODE=$1
  local base=$2
  MD="$OUT/$MODE"
  mkdir -p "$MD/logs" "$MD/data"
  OUT=$MD # lib.sh's start_bg logs to $OUT/logs
  STARTED=()
  declare -gA ENGINE_PID=() ENGINES_NOT=()
  LOADS=()
  : >"$MD/pids"
  trap 'kill "${LOADS[@]}" 2>/dev/null; mapfile -t STARTED <"$MD/pids"; cleanup' EXIT
  trap 'exit 130' INT TERM
  set +e # a mode's background loops report failures in their rounds; they must not end it
  PROXY_PORT=$((base + 10)) ADMIN_PORT=$((base + 11))
  local facade_ports=($((base + 12)) $((base + 13)) $((base + 14)))
  CLUSTERED="" CLUSTER_FLAG=""
  local p
  case $MODE in
  default | shared) ENGINES=("$base") ;;
  slots) ENGINES=("$base" $((base + 1)) $((base + 2))) ;;
  cluster | facade) ENGINES=("$base" $((base + 1)) $((base + 2)) $((base + 3)) $((base + 4)) $((base + 5))) CLUSTERED=1 ;;
  *) die "unknown mode $MODE" ;;
  esac
  for p in "${ENGINES[@]}" "$PROXY_PORT" "$ADMIN_PORT" "${facade_ports[@]}"; do
    if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then die "$MODE: port $p is in use (set BASE_PORT)"; fi
  done
  for p in "${ENGINES[@]}"; do engine_start "$p"; done
  if [ -n "$CLUSTERED" ]; then
    for p in "${ENGINES[@]}"; do ENGINES_NOT[$p]=$([ "$p" = "${ENGINES[0]}" ] && echo "${ENGINES[1]}" || echo "${ENGINES[0]}"); done
    timeout 60 "$REDIS_CLI" --cluster create $(printf '127.0.0.1:%s ' "${ENGINES[@]}") --cluster-replicas 1 \
      --cluster-yes >"$MD/logs/create.log" 2>&1 || die "$MODE: cluster create failed (logs/create.log)"
    wait_until 60 cluster_ok || die "$MODE: cluster not ok within 60 s"
  fi
  # --dial-timeout 5s: the soak alone keeps a 2-core host at load 36-68, where an engine can take
  # over 2 s (the default) to accept a connection with no fault injected.
  local args=(proxy --listen "127.0.0.1:$PROXY_PORT" --admin "127.0.0.1:$ADMIN_PORT" --loops 1 --log-level warn --dial-timeout 5s)
  case $MODE in
  default) args+=(--upstream "127.0.0.1:${ENGINES[0]}") ;;
  shared) args+=(--upstream "127.0.0.1:${ENGINES[0]}" --upstream-mode shared) ;;
  slots) args+=(--route slots --shards "127.0.0.1:${ENGINES[0]},127.0.0.1:${ENGINES[1]},127.0.0.1:${ENGINES[2]}") ;;
  cluster) args+=(--route slots --cluster "127.0.0.1:${ENGINES[0]}" --topology-refresh 5s) ;;
  facade) args+=(--route facade --cluster "127.0.0.1:${ENGINES[0]}" --topology-refresh 5s
    --facade-listen "127.0.0.1:${facade_ports[0]},127.0.0.1:${facade_ports[1]},127.0.0.1:${facade_ports[2]}") ;;
  esac
  start_bg respmeter "$RESPMETER" "${args[@]}"
  PROXY_PID=$LAST_PID
  echo "$PROXY_PID" >>"$MD/pids"
  wait_ping respmeter "$PROXY_PORT" "$PROXY_PID"
  CHECK_PORT=$PROXY_PORT MT_PORT=$PROXY_PORT PS_PORT=$PROXY_PORT SLOW_PORT=$PROXY_PORT PS_SEQ=1
  if [ "$MODE" = facade ]; then
    MT_PORT=${facade_ports[0]} PS_PORT=${facade_ports[0]} CLUSTER_FLAG=-c
    wait_ping facade "${facade_ports[0]}" "$PROXY_PID"
  fi
  : >"$MD/rounds.tsv"
  : >"$MD/faults.tsv"
  : >"$MD/metrics.tsv"
  sleep 1
  scrape >"$MD/base.tsv" # the baseline: respmeter idle, before any load
  END=$(($(date +%s) + SOAK_SECONDS))
  log "$MODE: engines ${ENGINES[*]}, respmeter :$PROXY_PORT (admin :$ADMIN_PORT), for $SOAK_SECONDS s"
  load check check_round 1 & LOADS+=($!)
  load memtier memtier_round 1 & LOADS+=($!)
  load pubsub pubsub_round 2 & LOADS+=($!)
  load slow slow_round 5 & LOADS+=($!)
  load churn churn_round 10 & LOADS+=($!)
  scraper & LOADS+=($!)
  sleep 5
  scheduler & LOADS+=($!)
  local w
  for w in "${LOADS[@]}"; do wait "$w" || true; done
  LOADS=()
  # The load has stopped: in flight must be 0, goroutines and fds back near the baseline. The
  # last connections' goroutines end a little after their clients on a busy host: up to 30 s.
  local base_g i g
  IFS=$'\t' read -r _ base_g _ _ _ <"$MD/base.tsv"
  for i in $(seq 30); do
    sleep 1
    scrape >"$MD/final.tsv"
    IFS=$'\t' read -r _ g _ _ _ <"$MD/final.tsv"
    [ -n "$g" ] && [ "${g%.*}" -le $((base_g + 10)) ] && break
  done
  verdict >"$MD/result.txt"
  cat "$MD/result.txt" >&2
}

# verdict prints the mode's figures as key=value lines and FAILED lines.
verdict() {
  local fails=() line
  local base_g base_fd max_g max_fd max_rss fin_g fin_fd fin_rss fin_fl
  IFS=$'\t' read -r _ base_g base_fd _ _ <"$MD/base.tsv"
  read -r max_g max_fd max_rss < <(awk -F'\t' '{if ($2 > g) g = $2; if ($3 > f) f = $3; if ($4 > r) r = $4} END {print g + 0, f + 0, r + 0}' "$MD/metrics.tsv")
  IFS=$'\t' read -r _ fin_g fin_fd fin_rss fin_fl <"$MD/final.tsv"
  local faults kinds
  faults=$(wc -l <"$MD/faults.tsv")
  kinds=$(cut -f1 "$MD/faults.tsv" | sort -u | tr '\n' ' ')
  local want_kinds="freeze kill "
  [ -n "$CLUSTERED" ] && want_kinds="freeze kill migrate "
  [ "$kinds" = "$want_kinds" ] || fails+=("fault kinds injected: '$kinds', want '$want_kinds'")
  awk -F'\t' '$4 != 1 {print "FAULT NOT RECOVERED: " $0}' "$MD/faults.tsv" | while read -r line; do echo "$line"; done >"$MD/bad-faults.txt"
  [ -s "$MD/bad-faults.txt" ] && fails+=("$(wc -l <"$MD/bad-faults.txt") faults not recovered (bad-faults.txt)")
  # Failed rounds: each must overlap a fault window [t0, t1 + grace]; a check round's first
  # mismatch must be an error reply.
  awk -F'\t' -v grace="$FAULT_GRACE" -v clustered="$CLUSTERED" '
    NR == FNR { f0[NR] = $2; f1[NR] = $3 + grace; fk[NR] = $1; nf = NR; next }
    $4 == 1 { next }
    {
      in_fault = 0; in_failover = 0
      for (i = 1; i <= nf; i++) if ($2 <= f1[i] && $3 >= f0[i]) { in_fault = 1; if (fk[i] == "freeze" && clustered) in_failover = 1 }
      why = ""
      if (!in_fault) why = "outside every fault window"
      else if ($1 == "check" && $5 ~ /first: got / && $5 !~ /first: got "?-/ && !in_failover) why = "a wrong value, not an error reply"
      if (why != "") print "UNEXPLAINED (" why "): " $0; else print "explained: " $0
    }' "$MD/faults.tsv" "$MD/rounds.tsv" >"$MD/failed-rounds.txt"
  local unexplained explained
  unexplained=$(grep -c '^UNEXPLAINED' "$MD/failed-rounds.txt" || true)
  explained=$(grep -c '^explained' "$MD/failed-rounds.txt" || true)
  [ "$unexplained" = 0 ] || fails+=("$unexplained failed rounds not explained by a fault (failed-rounds.txt)")
  local checked mism clean_mism
  checked=$(awk -F'\t' '$1 == "check" {if (match($5, /commands [0-9]+/)) s += substr($5, RSTART + 9, RLENGTH - 9)} END {print s + 0}' "$MD/rounds.tsv")
  mism=$(awk -F'\t' '$1 == "check" {if (match($5, /mismatches [0-9]+/)) s += substr($5, RSTART + 11, RLENGTH - 11)} END {print s + 0}' "$MD/rounds.tsv")
  clean_mism=$(awk -F'\t' -v grace="$FAULT_GRACE" '
    NR == FNR { f0[NR] = $2; f1[NR] = $3 + grace; nf = NR; next }
    $1 == "check" {
      for (i = 1; i <= nf; i++) if ($2 <= f1[i] && $3 >= f0[i]) next
      if (match($5, /mismatches [0-9]+/)) s += substr($5, RSTART + 11, RLENGTH - 11)
    } END {print s + 0}' "$MD/faults.tsv" "$MD/rounds.tsv")
  [ "$clean_mism" = 0 ] || fails+=("$clean_mism mismatches outside the fault windows")
  local rounds ok_rounds
  rounds=$(wc -l <"$MD/rounds.tsv")
  ok_rounds=$(awk -F'\t' '$4 == 1' "$MD/rounds.tsv" | wc -l)
  for k in check memtier pubsub slow churn; do
    awk -F'\t' -v k="$k" '$1 == k && $4 == 1 {n++} END {exit !(n > 0)}' "$MD/rounds.tsv" || fails+=("no passing $k round")
  done
  [ -n "$base_g" ] || fails+=("no /metrics scrape")
  if [ -n "$base_g" ]; then
    [ "$max_g" -le $((base_g + GOROUTINE_SLACK)) ] || fails+=("goroutines $max_g > baseline $base_g + $GOROUTINE_SLACK")
    [ "$max_fd" -le $((base_fd + FD_SLACK)) ] || fails+=("fds $max_fd > baseline $base_fd + $FD_SLACK")
    [ "${fin_g:-999999}" -le $((base_g + 10)) ] || fails+=("goroutines at the end $fin_g > baseline $base_g + 10 (growth)")
    [ "${fin_fd:-999999}" -le $((base_fd + 10)) ] || fails+=("fds at the end $fin_fd > baseline $base_fd + 10 (growth)")
  fi
  [ "$max_rss" -le $((RSS_MAX_MIB * 1024)) ] || fails+=("max RSS $((max_rss / 1024)) MiB > $RSS_MAX_MIB MiB")
  [ "${fin_fl%.*}" = 0 ] || fails+=("in flight at the end, load stopped: '${fin_fl}', want 0")
  echo "mode=$MODE"
  echo "seconds=$SOAK_SECONDS"
  echo "faults=$faults ($(cut -f1 "$MD/faults.tsv" | sort | uniq -c | awk '{printf "%s%s %s", s, $2, $1; s = ", "}'))"
  echo "rounds=$rounds passed=$ok_rounds failed_explained=$explained failed_unexplained=$unexplained"
  echo "commands_checked=$checked mismatches=$mism mismatches_outside_faults=$clean_mism"
  echo "goroutines=base $base_g max $max_g end $fin_g"
  echo "fds=base $base_fd max $max_fd end $fin_fd"
  echo "rss_max_mib=$((max_rss / 1024)) in_flight_end=$fin_fl"
  echo "scrapes=$(wc -l <"$MD/metrics.tsv") answered=$(awk -F'\t' '$2 != ""' "$MD/metrics.tsv" | wc -l)"
  if [ ${#fails[@]} -eq 0 ]; then echo "verdict=PASS"; else
    echo "verdict=FAIL"
    printf 'FAILED: %s\n' "${fails[@]}"
  fi
}

# ---------------------------------------------------------------- main

MODE_PIDS=()
trap stop_modes EXIT
trap 'exit 130' INT TERM

i=0
for m in $MODES; do
  if [ -n "$SOAK_CI" ]; then
    (run_mode "$m" $((BASE_PORT + 40 * i))) &
    MODE_PIDS+=($!)
  else
    (run_mode "$m" $((BASE_PORT + 40 * i))) || true
  fi
  i=$((i + 1))
done
for p in "${MODE_PIDS[@]:-}"; do [ -n "$p" ] && { wait "$p" || true; }; done
MODE_PIDS=()

status=0
printf '\n| mode | s | faults | rounds ok/failed (unexplained) | commands checked | mismatches (outside faults) | max RSS MiB | goroutines base/max/end | fds base/max/end | in flight at end | verdict |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for m in $MODES; do
  r="$OUT/$m/result.txt"
  if [ ! -s "$r" ]; then
    printf '| %s | - | - | - | - | - | - | - | - | - | FAIL (no result; see %s/logs) |\n' "$m" "$OUT/$m"
    status=1
    continue
  fi
  g() { sed -n "s/^$1=//p" "$r"; }
  read -r rn _ ok _ ex _ un < <(g rounds | tr '=' ' ')
  read -r _ gb _ gm _ ge < <(g goroutines)
  read -r _ fb _ fm _ fe < <(g fds)
  printf '| %s | %s | %s | %s/%s (%s) | %s | %s | %s | %s/%s/%s | %s/%s/%s | %s | %s |\n' "$m" "$(g seconds)" \
    "$(g faults)" "${ok:-?}" "$((${ex:-0} + ${un:-0}))" "${un:-?}" "$(g commands_checked | awk '{print $1}')" \
    "$(g commands_checked | sed 's/.*mismatches=\([0-9]*\) mismatches_outside_faults=\([0-9]*\)/\1 (\2)/')" \
    "$(g rss_max_mib | awk '{print $1}')" "$gb" "$gm" "$ge" "$fb" "$fm" "$fe" \
    "$(g rss_max_mib | sed 's/.*in_flight_end=//')" "$(g verdict)"
  grep -q '^verdict=PASS' "$r" || status=1
done
for m in $MODES; do grep -h '^FAILED' "$OUT/$m/result.txt" 2>/dev/null | sed "s/^/$m: /" || true; done
log "results in $OUT"
exit $status
