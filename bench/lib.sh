# bench/lib.sh - helpers shared by the bench/ scripts (sourced, not run).
# Expects: OUT (with OUT/logs), REDIS_CLI, and an array STARTED of the PIDs to stop on exit
# (MODE_PIDS: the mode subshells of soak.sh and redis-suite.sh, for stop_modes).

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# cleanup stops every process in STARTED: TERM, up to 5 s, then KILL.
cleanup() {
  local p i
  for p in "${STARTED[@]:-}"; do
    [ -n "$p" ] && kill "$p" 2>/dev/null || true
  done
  for p in "${STARTED[@]:-}"; do
    [ -n "$p" ] || continue
    for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
}

# stop_modes stops the subshells in MODE_PIDS (each stops the processes it started on its exit).
stop_modes() {
  local p
  for p in "${MODE_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${MODE_PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
}

# start_bg NAME CMD...: run CMD in the background, log to $OUT/logs/NAME.log, set LAST_PID.
start_bg() {
  local name=$1
  shift
  "$@" >"$OUT/logs/$name.log" 2>&1 &
  LAST_PID=$!
  STARTED+=("$LAST_PID")
}

wait_ping() { # name port pid [redis-cli flags, e.g. --tls --cacert FILE]
  local i
  for i in $(seq 100); do
    kill -0 "$3" 2>/dev/null || die "$1 (pid $3) exited during start-up; see $OUT/logs/$1.log"
    [ "$("$REDIS_CLI" -h 127.0.0.1 -p "$2" "${@:4}" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  die "$1 did not answer PING on 127.0.0.1:$2 within 10 s"
}

child_ticks() { # utime+stime of this shell's waited-for children (the benchmark clients)
  local s
  s=$(cat /proc/$$/stat)
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo $((${14} + ${15}))
}

busy_ticks() { # all CPUs, busy = total - idle - iowait, from /proc/stat
  local _c u n s i w q sq st rest
  read -r _c u n s i w q sq st rest </proc/stat
  echo $((u + n + s + q + sq + st))
}
