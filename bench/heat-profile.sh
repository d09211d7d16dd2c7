#!/usr/bin/env bash
# bench/heat-profile.sh - where heat's CPU goes inside the proxy, two builds side by side.
#
# Profiles `respmeter proxy --heat` under a pipelined load with perf (cpu-clock samples at F Hz
# of the proxy process alone, SECONDS each), two builds A and B alternating (A B A B ...) PAIRS
# times, one redis-server behind both. The load is redis-benchmark -P 16 -c 50 -r 100000 -d 100
# -t set,get (what BenchmarkHeatCPU's -P 16 side sends); the operations of a profile are the
# engine's commands processed over it (INFO stats). For each build it prints the nanoseconds per
# operation of each heat symbol (metrics/heat, internal/hashslot, xxhash: samples x 1e9/F over
# operations, all profiles of the build pooled), their sum, and that sum's share of the proxy's
# samples per profile. It measures heat's own functions where they run, with the proxy's caches
# as they are there, in about 40 s a pair: differences of a few ns per operation, which
# BenchmarkHeatCPU's interval (about ±1 % of 2.4 µs) cannot resolve. What heat's cache lines cost
# the proxy's own code afterwards is not in it: that is BenchmarkHeatCPU's.
#
# Env knobs (defaults): A, B (respmeter binaries; A defaults to a build of this tree) PAIRS=3
# SECONDS_EACH=15 F=4000 PORT=29601 (redis-server; the proxy listens on PORT+1, its admin on PORT+2)
# FLAGS (more proxy flags for both). Needs perf, redis-server, redis-benchmark and redis-cli.
# Run it on a machine with nothing else running.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PAIRS=${PAIRS:-3}
SECONDS_EACH=${SECONDS_EACH:-15}
F=${F:-4000}
PORT=${PORT:-29601}
FLAGS=${FLAGS:-}
OUT=$(mktemp -d /tmp/heat-profile.XXXXXX)
mkdir -p "$OUT/logs"
REDIS_CLI=redis-cli
STARTED=()
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
trap cleanup EXIT

for t in perf redis-server redis-benchmark redis-cli; do
  command -v "$t" >/dev/null || die "$t is not installed"
done
if [ -z "${A:-}" ]; then
  A=$OUT/respmeter-a
  (cd "$ROOT" && go build -o "$A" ./cmd/respmeter) || die "go build failed"
fi
[ -n "${B:-}" ] || die "B (the second respmeter binary) is not set"

start_bg redis redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no
wait_ping redis "$PORT" "$LAST_PID"

processed() { "$REDIS_CLI" -p "$PORT" info stats | awk -F: '/^total_commands_processed/ {print $2+0}'; }

# profile TAG BIN: one profile of BIN's proxy; writes OUT/TAG.syms (samples, symbol) and OUT/TAG.ops.
profile() {
  local tag=$1 bin=$2 proxy bench a b
  # shellcheck disable=SC2086
  "$bin" proxy --listen "127.0.0.1:$((PORT + 1))" --admin "127.0.0.1:$((PORT + 2))" \
    --upstream "127.0.0.1:$PORT" --slowlog-threshold 1s --heat $FLAGS >"$OUT/logs/$tag.log" 2>&1 &
  proxy=$!
  STARTED+=("$proxy")
  wait_ping "$tag" "$((PORT + 1))" "$proxy"
  redis-benchmark -p "$((PORT + 1))" -P 16 -c 50 -r 100000 -d 100 -t set,get -n 2000000000 -q \
    >/dev/null 2>&1 &
  bench=$!
  STARTED+=("$bench")
  sleep 3
  a=$(processed)
  perf record -q -e cpu-clock -F "$F" -p "$proxy" -o "$OUT/$tag.data" -- sleep "$SECONDS_EACH" \
    >/dev/null 2>&1
  b=$(processed)
  kill "$bench" "$proxy" 2>/dev/null || true
  wait "$bench" "$proxy" 2>/dev/null || true
  echo $((b - a)) >"$OUT/$tag.ops"
  perf report -i "$OUT/$tag.data" --no-children --sort symbol --stdio -F sample,sym 2>/dev/null |
    awk '/^ +[0-9]/ {n=$1; $1=""; $2=""; sub(/^ +/, ""); sub(/ +- +- *$/, ""); print n "\t" $0}' \
      >"$OUT/$tag.syms"
  log "$tag: $((b - a)) operations"
}

for i in $(seq "$PAIRS"); do
  profile "A$i" "$A"
  profile "B$i" "$B"
done

python3 - "$OUT" "$PAIRS" "$F" <<'EOF'
import collections, re, sys
out, pairs, hz = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
heat = re.compile(r'metrics/heat\.|internal/hashslot\.|xxhash')
ns = {}
for side in 'AB':
    per, ops, shares = collections.Counter(), 0, []
    for i in range(1, pairs + 1):
        tag = f'{side}{i}'
        n = int(open(f'{out}/{tag}.ops').read())
        ops += n
        tot = h = 0
        for line in open(f'{out}/{tag}.syms'):
            cnt, sym = line.rstrip('\n').split('\t', 1)
            tot += int(cnt)
            if heat.search(sym):
                h += int(cnt)
                per[sym] += int(cnt)
        shares.append(100 * h / max(tot, 1))
    ns[side] = {s: c * 1e9 / hz / ops for s, c in per.items()}
    print(f'{side}: heat {sum(ns[side].values()):.1f} ns/op; share of the proxy per profile: ' +
          ' '.join(f'{x:.2f}%' for x in shares))
print(f'{"A ns/op":>8} {"B ns/op":>8} {"B-A":>6}  symbol')
syms = sorted(set(ns['A']) | set(ns['B']), key=lambda s: -(ns['A'].get(s, 0) + ns['B'].get(s, 0)))
for s in syms:
    a, b = ns['A'].get(s, 0), ns['B'].get(s, 0)
    print(f'{a:8.1f} {b:8.1f} {b - a:+6.1f}  {s.split("/")[-1]}')
EOF
