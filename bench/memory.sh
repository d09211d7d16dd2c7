#!/usr/bin/env bash
# bench/memory.sh - how much memory respmeter holds when every command name is in use and it is
# scraped every second, for the build of this tree ("after") and, in the same run, a
# build of the git revision BEFORE ("before").
#
# Starts SHARDS redis-servers (persistence off), then for each target (before, after) and each
# shape in SHAPES one respmeter at a time:
#   LOOPS:none    respmeter proxy --loops LOOPS --upstream <the first redis-server>
#   LOOPS:slots   respmeter proxy --loops LOOPS --route slots --shards <all SHARDS redis-servers>
#   LOOPS:ROUTE:hdr  as LOOPS:ROUTE, plus --hdr-log OUT/<target>-<shape>.hlog (an interval line
#                 per command name and phase every second, the default --hdr-interval)
# and drives it for DURATION s with CLIENTS redis-cli processes, each replaying
# bench/memory-commands.txt (220 command names of the built-in table, valid arguments) in a loop,
# with its own hash tag so that routed, the clients' keys spread over the shards. DURATION times,
# a second apart, it fetches /metrics and /stats (as a Prometheus scrape and a dashboard would)
# and samples the proxy's VmRSS from /proc; a proxy slower to answer than that is scraped as
# often as it answers (the clients stop after DURATION s, the scrapes go on to DURATION). At the
# end it reads go_memstats_heap_inuse_bytes and the number of command names with a count from
# /metrics.
#
# Requirements: bash, redis-server, redis-cli, curl, awk, git and go (to build both targets).
#
# Env knobs (defaults):
#   DURATION=60 CLIENTS=6 SHARDS=3 SHAPES="2:none 4:none 2:slots 2:none:hdr" BEFORE=bbd267c (empty: after
#   only) BASE_PORT=28700 (uses BASE_PORT..BASE_PORT+SHARDS+2)  OUT=$(mktemp -d)
#
# Output: one markdown table on stdout (and OUT/memory.md): per target and shape, the command
# names in use, RSS after the 10th scrape, at the end and its maximum, and the Go heap in use at
# the end; one sample per scrape in OUT/<target>-<shape>.tsv (scrape, RSS KiB).
# Safety: every address is 127.0.0.1; only the processes this script started are stopped, by
# PID, on exit.
set -euo pipefail

DURATION=${DURATION:-60} CLIENTS=${CLIENTS:-6} SHARDS=${SHARDS:-3}
SHAPES=${SHAPES:-2:none 4:none 2:slots 2:none:hdr}
BEFORE=${BEFORE-bbd267c}
BASE_PORT=${BASE_PORT:-28700}
OUT=${OUT:-$(mktemp -d)}
REDIS_CLI=$(command -v redis-cli)
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT/logs"
STARTED=()
. "$HERE/lib.sh"
trap cleanup EXIT

command -v curl >/dev/null || die "curl is missing"
TARGETS=after
log "building after: this tree"
(cd "$HERE/.." && go build -o "$OUT/respmeter-after" ./cmd/respmeter)
if [ -n "$BEFORE" ]; then
  log "building before: $BEFORE"
  mkdir -p "$OUT/before-src"
  (cd "$HERE/.." && git archive "$BEFORE") | tar -x -C "$OUT/before-src"
  (cd "$OUT/before-src" && go build -o "$OUT/respmeter-before" ./cmd/respmeter)
  TARGETS="before after"
fi

SHARD_ADDRS=()
for i in $(seq 0 $((SHARDS - 1))); do
  port=$((BASE_PORT + 2 + i))
  start_bg "redis-$i" redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$OUT"
  wait_ping "redis-$i" "$port" "$LAST_PID"
  SHARD_ADDRS+=("127.0.0.1:$port")
done
PROXY_PORT=$BASE_PORT ADMIN_PORT=$((BASE_PORT + 1))
# Hash tags whose slots (15495, 3300, 7365) fall in the three thirds of the slot space.
TAGS=(a b c)

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# run TARGET SHAPE: one respmeter, DURATION s of clients and scrapes; appends a row to ROWS.
ROWS=()
run() {
  local target=$1 shape=$2 loops route hdr name args pid t rss rss10=0 max=0
  IFS=: read -r loops route hdr <<<"$shape"
  name=$target-${shape//:/-}
  args=(proxy --listen "127.0.0.1:$PROXY_PORT" --admin "127.0.0.1:$ADMIN_PORT" --loops "$loops")
  if [ "$route" = slots ]; then
    args+=(--route slots --shards "$(IFS=,; echo "${SHARD_ADDRS[*]}")")
  else
    args+=(--upstream "${SHARD_ADDRS[0]}")
  fi
  # Every name exported (--metrics-commands 0; the default caps them at 100): the worst case
  # this script measures.
  if "$OUT/respmeter-$target" proxy --help 2>&1 | grep -q -- --metrics-commands; then
    args+=(--metrics-commands 0)
  fi
  if [ "$hdr" = hdr ]; then
    args+=(--hdr-log "$OUT/$name.hlog")
  fi
  start_bg "$name" "$OUT/respmeter-$target" "${args[@]}"
  pid=$LAST_PID
  wait_ping "respmeter-$target" "$PROXY_PORT" "$pid"
  "$REDIS_CLI" -p "$PROXY_PORT" ping >/dev/null
  local clients=() c
  for c in $(seq 0 $((CLIENTS - 1))); do
    (
      prefix="{${TAGS[$((c % ${#TAGS[@]}))]}}c$c:"
      cmds=$(grep -v '^#' "$HERE/memory-commands.txt" | sed "s/{t}/$prefix/g")
      end=$((SECONDS + DURATION))
      while [ $SECONDS -lt $end ]; do
        printf '%s\n' "$cmds" | "$REDIS_CLI" -p "$PROXY_PORT" >/dev/null 2>&1 || true
      done
    ) &
    clients+=($!)
    STARTED+=($!)
  done
  : >"$OUT/$name.tsv"
  for t in $(seq 1 "$DURATION"); do
    sleep 1
    curl -sf "127.0.0.1:$ADMIN_PORT/metrics" >"$OUT/metrics.txt" || die "scraping /metrics of $target $shape failed"
    curl -sf "127.0.0.1:$ADMIN_PORT/stats" >/dev/null || die "fetching /stats of $target $shape failed"
    rss=$(rss_kib "$pid")
    printf '%s\t%s\n' "$t" "$rss" >>"$OUT/$name.tsv"
    [ "$t" = 10 ] && rss10=$rss
    [ "$rss" -gt "$max" ] && max=$rss
  done
  wait "${clients[@]}" 2>/dev/null || true
  curl -sf "127.0.0.1:$ADMIN_PORT/metrics" >"$OUT/metrics.txt"
  rss=$(rss_kib "$pid")
  local names heap
  names=$(grep -c '^respmeter_commands_total{' "$OUT/metrics.txt" || true)
  heap=$(awk '/^go_memstats_heap_inuse_bytes / { printf "%.1f", $2 / 1048576 }' "$OUT/metrics.txt")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  if [ "$hdr" = hdr ]; then
    log "$name.hlog: $(grep -c '^Tag=' "$OUT/$name.hlog" || true) interval lines"
  fi
  ROWS+=("$(printf '| %s | %s loops, %s | %s | %.1f | %.1f | %.1f | %s |' "$target" "$loops" \
    "$([ "$route" = slots ] && echo "routed, $SHARDS shards" || echo passthrough)$([ "$hdr" = hdr ] && echo ", --hdr-log")" "$names" \
    "$(echo "$rss10" | awk '{ print $1 / 1024 }')" "$(echo "$rss" | awk '{ print $1 / 1024 }')" \
    "$(echo "$max" | awk '{ print $1 / 1024 }')" "$heap")")
  log "$target $shape: ${ROWS[-1]}"
}

for shape in $SHAPES; do
  for target in $TARGETS; do
    run "$target" "$shape"
  done
done

{
  echo "DURATION=$DURATION, CLIENTS=$CLIENTS, SHARDS=$SHARDS; /metrics and /stats every second"
  echo
  echo "| target | shape | names in use | RSS after 10 scrapes (MiB) | RSS at end (MiB) | max RSS (MiB) | heap in use at end (MiB) |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/memory.md"
