#!/usr/bin/env bash
# bench/inject-scenario.sh - a what-if scenario of timed fault injection steps, run under
# memtier_benchmark --cluster-mode through respmeter's facade over three standalone shards and a
# replica of the first (docs/injection.md):
#
#    0-10 s   clean
#   10-30 s   shard 2 in another zone: +1.2 ms per request (600 us each way, before forwarding)
#   30-40 s   clean
#   40-42 s   shard 1 frozen (its requests held), then failed over to its replica (promoted,
#             announced as a fourth virtual node)
#   42-60 s   clean
#
# Every second it prints the latest interval's verdict (/stats "verdict": when the interval ended,
# counted from respmeter's start, its bound and injected share, the mean cycle), the per-shard
# command rates over the last second (/stats?window=1s) and each shard's injected share in its own
# verdict of that interval (/stats "shard_engines"), so each step shows at its time and shard; at the end, `respmeter report` on the HDR log and memtier's totals.
#
# Usage: MEMTIER=/path/to/memtier_benchmark bench/inject-scenario.sh
#   DURATION=60  the run (s); the steps' times are fixed as above
#   BASE_PORT=27600  11 ports from there
#   OUT=  results directory (default: a temporary one)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MEMTIER=${MEMTIER:-}
DURATION=${DURATION:-60}
BASE_PORT=${BASE_PORT:-27600}
OUT=${OUT:-$(mktemp -d /tmp/inject-scenario.XXXXXX)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
REDIS_CLI=${REDIS_CLI:-$(command -v redis-cli || true)}

SHARD_PORTS=("$BASE_PORT" "$((BASE_PORT + 1))" "$((BASE_PORT + 2))")
REPLICA_PORT=$((BASE_PORT + 3))
PROXY_PORT=$((BASE_PORT + 4))
ADMIN_PORT=$((BASE_PORT + 5))
FACADE_PORTS=("$((BASE_PORT + 6))" "$((BASE_PORT + 7))" "$((BASE_PORT + 8))" "$((BASE_PORT + 9))")
STARTED=()

. "$ROOT/bench/lib.sh" # log, die, cleanup, start_bg, wait_ping

trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$REDIS_SERVER" ] && [ -x "$REDIS_CLI" ] || die "redis-server and redis-cli are needed"
[ -n "$MEMTIER" ] && [ -x "$MEMTIER" ] || die "set MEMTIER to memtier_benchmark's path (.ci/build-memtier.sh | tail -1)"
command -v curl >/dev/null && command -v python3 >/dev/null || die "curl and python3 are needed"
for p in "${SHARD_PORTS[@]}" "$REPLICA_PORT" "$PROXY_PORT" "$ADMIN_PORT" "${FACADE_PORTS[@]}"; do
  if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then die "port $p is in use (set BASE_PORT)"; fi
done
mkdir -p "$OUT/logs"
log "results -> $OUT"
RESPMETER=$OUT/respmeter
(cd "$ROOT" && go build -o "$RESPMETER" ./cmd/respmeter)

start_redis() { # name port [extra args]
  local name=$1 port=$2
  shift 2
  mkdir -p "$OUT/$name"
  start_bg "$name" "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --daemonize no --dir "$OUT/$name" --repl-diskless-sync-delay 0 "$@"
  wait_ping "$name" "$port" "$LAST_PID"
}
for i in 0 1 2; do start_redis "shard$((i + 1))" "${SHARD_PORTS[$i]}"; done
start_redis replica "$REPLICA_PORT" --replicaof 127.0.0.1 "${SHARD_PORTS[0]}"

S1=127.0.0.1:${SHARD_PORTS[0]}
S2=127.0.0.1:${SHARD_PORTS[1]}
S3=127.0.0.1:${SHARD_PORTS[2]}
cat >"$OUT/scenario.yaml" <<EOF
seed: 7
rules:
- name: far-shard-2
  shards: ["$S2"]
  at: 10s
  for: 20s
  delay: 1200us
- name: shard-1-fails
  shards: ["$S1"]
  at: 40s
  for: 2s
  failover: {to: "127.0.0.1:$REPLICA_PORT"}
EOF

FACADE=127.0.0.1:${FACADE_PORTS[0]},127.0.0.1:${FACADE_PORTS[1]},127.0.0.1:${FACADE_PORTS[2]},127.0.0.1:${FACADE_PORTS[3]}
# memtier first fills nothing; the proxy's clock (the scenario's 0) starts when it does: memtier is
# started right after it answers.
start_bg respmeter "$RESPMETER" proxy --listen "127.0.0.1:$PROXY_PORT" --admin "127.0.0.1:$ADMIN_PORT" \
  --route facade --shards "$S1,$S2,$S3" --facade-listen "$FACADE" --inject "$OUT/scenario.yaml" \
  --hdr-log "$OUT/run.hlog"
PROXY_PID=$LAST_PID
wait_ping respmeter "${FACADE_PORTS[0]}" "$PROXY_PID"
T0=$(date +%s.%N)

"$MEMTIER" -s 127.0.0.1 -p "${FACADE_PORTS[0]}" --cluster-mode -t 2 -c 10 --ratio=1:4 \
  --key-maximum=10000 -d 64 --test-time="$DURATION" --hide-histogram >"$OUT/memtier.txt" 2>"$OUT/logs/memtier.log" &
MT_PID=$!
STARTED+=("$MT_PID")

printf '%5s %-16s %8s %10s  %s\n' "end(s)" "bound" "injected" "cycle(ms)" "per-shard rates (commands/s over the last second)"
while kill -0 "$MT_PID" 2>/dev/null; do
  sleep 1
  curl -s "http://127.0.0.1:$ADMIN_PORT/stats?window=1s" 2>/dev/null | T0=$T0 python3 -c '
import json, os, sys, time
from datetime import datetime
try:
    d = json.load(sys.stdin)
except Exception:
    sys.exit(0)
v = d.get("verdict") or {}
sh = ", ".join("%s %.0f" % (s["shard"].rsplit(":", 1)[1], s.get("rate") or 0) for s in d.get("shards") or [])
# The injected share in each shard verdict of the same interval.
inj = ", ".join("%s %.0f%%" % (s["shard"].rsplit(":", 1)[1], 100 * ((s.get("verdict") or {}).get("shares") or {}).get("injected", 0))
                for s in d.get("shard_engines") or [])
end = v.get("end")  # the interval the verdict is of, not when it was read
t = datetime.fromisoformat(end.replace("Z", "+00:00")).timestamp() if end else time.time()
print("%5.1f %-16s %7.1f%% %10.3f  %s | injected by shard: %s" % (t - float(os.environ["T0"]), v.get("bound", "-"),
      100 * (v.get("shares") or {}).get("injected", 0), 1000 * v.get("cycle_seconds", 0), sh, inj))
' || true
done
wait "$MT_PID" || log "memtier exited with $?; see $OUT/logs/memtier.log"
echo
echo "memtier totals:"
grep -E "^(Type|Totals)" "$OUT/memtier.txt" || true
echo
echo "replica's role after the run: $("$REDIS_CLI" -p "$REPLICA_PORT" role | head -1)"
echo "rules:"
"$RESPMETER" inject list --admin "127.0.0.1:$ADMIN_PORT" || true
kill "$PROXY_PID"
wait "$PROXY_PID" 2>/dev/null || true
echo
"$RESPMETER" report "$OUT/run.hlog" | head -40
