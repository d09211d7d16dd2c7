#!/usr/bin/env bash
# bench/redis-suite.sh - Redis's own test suite (tests/test_helper.tcl, `./runtest`) in
# external-server mode, run directly against an engine (the baseline) and through respmeter in
# each of its modes, with the same options as its baseline. A test that passes directly and fails
# through respmeter is a transparency bug, a race between connections that a proxy widens, or a
# documented difference. Loopback only.
#
# Modes (MODES picks them, in order; each starts its own engines and respmeter, then stops them):
#   direct   no proxy: runtest against a fresh redis-server (the baseline of the next three)
#   default  respmeter proxy --upstream E (one private engine connection per client)
#   shared   the same with --upstream-mode shared
#   pinned   --route pinned --shards E (one engine: every client pinned to it)
#   cluster  no proxy: runtest against a fresh single-node cluster (cluster-enabled, every slot
#            added), as Redis's external cluster CI does (the baseline of the next two)
#   slots    --route slots --shards over SLOT_SHARDS fresh redis-servers (default 1, as the proxy
#            tests' slots shape: a multi-key command across slots gets CROSSSLOT as from a
#            cluster node; with more, a test also sees each engine's own keys, replication
#            stream, INFO and so on)
#   facade   --route facade --shards E --facade-listen F, runtest at F: one virtual cluster node
#            that owns every slot
# and over TLS (MODES=tls is the four; runtest --tls, the engine serving TLS only):
#   tls-direct   no proxy: runtest --tls against a fresh redis-server started with --port 0
#                --tls-port (the baseline of tls-stunnel)
#   tls-stunnel  no respmeter: a plain TLS forwarder, stunnel (Debian's stunnel4), one process with
#                two services chained over a loopback hop: [tls-in] accepts runtest's TLS (client
#                certificate required, as the engine's tls-auth-clients yes) and connects in
#                plaintext to [tls-out], which connects with TLS to the engine (client certificate
#                presented, the engine's verified); stunnel has no TLS-to-TLS service of its own
#                (the baseline of the next two)
#   tls-default  respmeter proxy --listen off --tls-listen P (--tls-auth-clients yes) --upstream E
#                --upstream-tls (the engine's certificate verified, a client certificate presented)
#   tls-shared   the same with --upstream-mode shared
# Every engine is started as Redis's CI starts its external server (.github/workflows/external.yml):
#   --save "" --enable-protected-configs yes --enable-debug-command yes --enable-module-command yes
#
# The suite: Redis's test suite at the engine's version. REDIS_SRC=DIR takes a checkout (the
# redis repository at the engine's tag: `git clone -b 7.0.15 https://github.com/redis/redis`).
# Without it, for Debian's packaged redis-server (the default, /usr/bin), the script fetches the
# Debian source package of the installed version (`redis`, from bookworm and bookworm-security,
# with Debian's patches applied: the tests of the engine as built) with its own apt sources list
# and state directories, never touching the system's apt configuration, and keeps the unpacked
# tree under CACHE so that a rerun downloads nothing.
#
# runtest options: those of Redis's own external-server CI, the same for a mode and its baseline
# (OPTS_STANDALONE and OPTS_CLUSTER replace them):
#   direct default shared pinned   --tags -slow
#   cluster slots facade           --cluster-mode --tags -slow (--cluster-mode: database 0 only,
#                                  and no `cluster:skip` test: multi-key commands across slots,
#                                  SELECT, MOVE, SWAPDB, ... that a cluster node refuses)
# In every mode runtest itself leaves out the `external:skip` tests (they start their own servers,
# read the engine's log, restart it, ...), and two options are added:
#   --durable      a test that raises a Redis error is counted as failed and the suite goes on,
#                  instead of ending the whole run
#   --timeout RUNTEST_TIMEOUT  the test server gives up after that long without progress; the
#                  script then counts the test that was running as failed ("HANG: ...") and runs
#                  the units after its unit (--skip-till), so one hang does not end the mode
# runtest runs one test client in external mode (it ignores --clients), so a mode takes its time.
# TLS: certificates are made at run time by the suite's own utils/gen-test-certs.sh (a CA, server,
# client and generic certificates, DH parameters), once under OUT/tls-certs, and copied into each
# TLS mode's suite copy (tests/tls, where runtest --tls reads them), never into the repository;
# beside them, engine.{crt,key}: signed by the same CA for IP 127.0.0.1, which the engine serves
# (the suite's server.crt names no address, and respmeter and stunnel verify the engine's
# certificate for the address dialed; runtest's Tcl client does not verify). The forwarders serve
# the suite's server.crt. The engine gets the TLS settings the suite gives its own servers
# (tls-cert-file, tls-key-file, tls-client-cert-file, tls-client-key-file, tls-ca-cert-file,
# tls-dh-params-file, tls-replication yes; tls-auth-clients left at yes). Under --tls runtest
# leaves out the units tagged tls:skip (unit/cluster, external:skip too). unit/tls (TLS_LAST)
# reconfigures the engine's TLS listener (tls-auth-clients, tls-protocols, tls-ciphers, tls-port,
# the key file) and, in external mode, applies to the engine itself the settings of a replica it
# means to start (tls-cert-file) and makes it a replica; so in the TLS modes it runs alone, after
# the others, in a second runtest against the same engine (not when RUNTEST_ARGS has --single:
# then the units are the caller's).
#
# Usage: bench/redis-suite.sh                      every mode, one after another
#        MODES="direct shared" JOBS=2 bench/redis-suite.sh
#        RUNTEST_ARGS="--single unit/type/string" bench/redis-suite.sh   one unit (development)
#        MODES=tls JOBS=2 BASE_PORT=29000 bench/redis-suite.sh             the four TLS modes
# Env knobs (defaults): MODES="direct default shared pinned cluster slots facade", JOBS=1 (modes
#   run at once), SLOT_SHARDS=1 (1 to 9), RUNTEST_ARGS="" (added after the options: --single,
#   --skipunit, --only ...), OPTS_STANDALONE="--tags -slow", OPTS_CLUSTER="--cluster-mode --tags
#   -slow", RUNTEST_TIMEOUT=120, SUITE_TIMEOUT=5400 (s, a mode's whole run), PROXY_ARGS=""
#   (added to every respmeter proxy: --probe-interval 0 --engine-poll 0 leaves out its side
#   connections), BASE_PORT=27000 (mode i uses BASE_PORT+40*i .. +39; runtest's own test server
#   one of +4 .. +35), REDIS_SERVER, REDIS_CLI (default: PATH's), REDIS_SRC (default: fetched),
#   CACHE=/var/cache/respmeter/src, RESPMETER (default: go build), OUT=$(mktemp -d),
#   TLS_LAST="unit/tls" (TLS modes: the units run after the others; empty: runtest's order),
#   STUNNEL (default: PATH's stunnel4 or stunnel).
# Requirements: bash, tclsh 8.5+, redis-server, redis-cli; to fetch the suite: apt-get,
#   dpkg-source (dpkg-dev) and the network to deb.debian.org; for the TLS modes: a redis-server
#   built with TLS (Debian's is), openssl, Tcl's tls package 1.6+ (Debian's tcl-tls), and for
#   tls-stunnel stunnel 5 (Debian's stunnel4).
# Output: OUT/summary.tsv (mode, passed, failed, wall seconds, failing tests, failed through
#   respmeter only), OUT/MODE/{runtest.log,passed.txt,failed.txt,only.txt,result.txt,logs/},
#   and a table; the exit status is 1 if a mode failed a test its baseline passed or did not
#   finish.
#   "Failed through respmeter only" is a mode's failing tests that its baseline (direct or cluster;
#   tls-stunnel for tls-default and tls-shared, tls-direct for tls-stunnel, whose column is then
#   "failed through stunnel only" and does not set the exit status) passed in the same OUT
#   (BASELINE_DIR=DIR takes another run's OUT instead). tls-default and tls-shared are also
#   compared with tls-direct (OUT/MODE/only-direct.txt, printed below the table).
# Safety: every address is 127.0.0.1; every process the script starts (engines, respmeter, runtest
# under `timeout`, which ends runtest's own test client with it) is stopped by PID on exit; the
# engines run in OUT, runtest in its own copy of the suite under OUT.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

MODES=${MODES:-"direct default shared pinned cluster slots facade"}
TLS_MODES="tls-direct tls-stunnel tls-default tls-shared"
expanded=""
for w in $MODES; do # "tls": the four TLS modes
  [ "$w" = tls ] && w=$TLS_MODES
  expanded+="${expanded:+ }$w"
done
MODES=$expanded
JOBS=${JOBS:-1}
SLOT_SHARDS=${SLOT_SHARDS:-1}
RUNTEST_ARGS=${RUNTEST_ARGS:-}
RUNTEST_TIMEOUT=${RUNTEST_TIMEOUT:-120}
OPTS_STANDALONE=${OPTS_STANDALONE:-"--tags -slow"}
OPTS_CLUSTER=${OPTS_CLUSTER:-"--cluster-mode --tags -slow"}
PROXY_ARGS=${PROXY_ARGS:-}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-5400}
BASE_PORT=${BASE_PORT:-27000}
CACHE=${CACHE:-/var/cache/respmeter/src}
OUT=${OUT:-$(mktemp -d /tmp/redis-suite.XXXXXX)}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
REDIS_CLI=${REDIS_CLI:-$(command -v redis-cli || true)}
TLS_LAST=${TLS_LAST-unit/tls}
STUNNEL=${STUNNEL:-$(command -v stunnel4 || command -v stunnel || true)}

STARTED=() # every pid this (sub)shell started, stopped on exit
. "$HERE/lib.sh" # log, die, cleanup, stop_modes, start_bg, wait_ping

[[ $SLOT_SHARDS =~ ^[1-9]$ ]] || die "SLOT_SHARDS must be 1 to 9"
[ -n "$REDIS_SERVER" ] && [ -x "$REDIS_SERVER" ] || die "redis-server is needed (REDIS_SERVER)"
[ -n "$REDIS_CLI" ] && [ -x "$REDIS_CLI" ] || die "redis-cli is needed (REDIS_CLI)"
command -v tclsh >/dev/null || die "tclsh 8.5+ is needed (apt-get install tcl)"
has_mode() { [[ " $MODES " == *" $1 "* ]]; }
ANY_TLS=""
for m in $TLS_MODES; do has_mode "$m" && ANY_TLS=1; done
if [ -n "$ANY_TLS" ]; then
  echo 'if {[catch {package require tls 1.6}]} {exit 1}' | tclsh ||
    die "the TLS modes need Tcl's tls package 1.6+ (apt-get install tcl-tls)"
  command -v openssl >/dev/null || die "the TLS modes need openssl (apt-get install openssl)"
  if has_mode tls-stunnel; then
    [ -n "$STUNNEL" ] && [ -x "$STUNNEL" ] || die "tls-stunnel needs stunnel 5 (apt-get install stunnel4; STUNNEL)"
  fi
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ENGINE_VERSION=$("$REDIS_SERVER" --version | sed -n 's/.* v=\([0-9.]*\) .*/\1/p')
[ -n "$ENGINE_VERSION" ] || die "cannot read the version of $REDIS_SERVER"

# fetch_debian_suite prints the directory of Debian's `redis` source package at the version of the
# installed redis-server package, unpacked (with Debian's patches) under CACHE; downloads once.
fetch_debian_suite() {
  local pkgver dir W
  pkgver=$(dpkg-query -W -f '${Version}' redis-server 2>/dev/null) ||
    die "$REDIS_SERVER is not Debian's redis-server package: set REDIS_SRC to a checkout of redis at $ENGINE_VERSION"
  dir="$CACHE/redis-${pkgver#*:}"
  if [ -f "$dir/tests/test_helper.tcl" ]; then
    echo "$dir"
    return
  fi
  command -v dpkg-source >/dev/null || die "dpkg-source is needed to unpack the source package (apt-get install dpkg-dev), or set REDIS_SRC"
  mkdir -p "$CACHE"
  W=$(mktemp -d "$CACHE/.fetch.XXXXXX")
  mkdir -p "$W/apt/lists/partial" "$W/apt/cache/archives/partial" "$W/src"
  cat >"$W/apt/bookworm.sources" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  local O=(-o Dir::Etc::sourcelist="$W/apt/bookworm.sources" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$W/apt/lists" -o Dir::Cache="$W/apt/cache")
  log "fetching Debian's redis source package $pkgver (bookworm, bookworm-security) into $CACHE"
  apt-get "${O[@]}" update -q >"$W/apt.log" 2>&1 || { cat "$W/apt.log" >&2; rm -rf "$W"; die "apt-get update failed"; }
  (cd "$W/src" && apt-get "${O[@]}" source --download-only "redis=$pkgver" >>"$W/apt.log" 2>&1) ||
    { cat "$W/apt.log" >&2; rm -rf "$W"; die "no source package redis=$pkgver in bookworm or bookworm-security"; }
  (cd "$W/src" && dpkg-source --no-check -x ./*.dsc tree >>"$W/apt.log" 2>&1) ||
    { cat "$W/apt.log" >&2; rm -rf "$W"; die "dpkg-source -x failed"; }
  rm -rf "$dir"
  mv "$W/src/tree" "$dir"
  rm -rf "$W"
  echo "$dir"
}

if [ -n "${REDIS_SRC:-}" ]; then
  SRC=$(cd "$REDIS_SRC" && pwd)
else
  SRC=$(fetch_debian_suite)
fi
[ -f "$SRC/tests/test_helper.tcl" ] && [ -x "$SRC/runtest" ] || die "$SRC has no runtest and tests/test_helper.tcl"
SUITE_VERSION=$(sed -n 's/^#define REDIS_VERSION "\(.*\)"/\1/p' "$SRC/src/version.h" 2>/dev/null || true)
[ "$SUITE_VERSION" = "$ENGINE_VERSION" ] ||
  log "WARNING: the suite is Redis ${SUITE_VERSION:-?}, the engine $ENGINE_VERSION: failures may be version differences"

if [ -z "${RESPMETER:-}" ]; then
  RESPMETER=$OUT/respmeter
  log "building respmeter"
  (cd "$ROOT" && go build -o "$RESPMETER" ./cmd/respmeter)
fi
COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
log "results -> $OUT (suite $SRC, engine $REDIS_SERVER $ENGINE_VERSION, respmeter $COMMIT)"

# The TLS modes' certificates: the suite's own utils/gen-test-certs.sh (it writes tests/tls under
# the directory it runs in), once for every mode, plus engine.{crt,key} for the engine: the same
# CA, for IP 127.0.0.1, so that the forwarders can verify the engine for the address they dial.
if [ -n "$ANY_TLS" ]; then
  CERTS=$OUT/tls-certs
  mkdir -p "$CERTS"
  log "making the TLS certificates with the suite's utils/gen-test-certs.sh"
  (cd "$CERTS" && bash "$SRC/utils/gen-test-certs.sh") >"$CERTS/gen.log" 2>&1 ||
    { cat "$CERTS/gen.log" >&2; die "utils/gen-test-certs.sh failed"; }
  T=$CERTS/tests/tls
  cat >"$T/engine.cnf" <<'CNF'
[ engine_cert ]
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1
CNF
  {
    openssl genrsa -out "$T/engine.key" 2048 &&
      openssl req -new -sha256 -subj "/O=Redis Test/CN=127.0.0.1" -key "$T/engine.key" |
      openssl x509 -req -sha256 -CA "$T/ca.crt" -CAkey "$T/ca.key" -CAserial "$T/ca.txt" -days 30 \
        -extfile "$T/engine.cnf" -extensions engine_cert -out "$T/engine.crt"
  } >>"$CERTS/gen.log" 2>&1 || { cat "$CERTS/gen.log" >&2; die "the engine's certificate could not be made"; }
  for f in ca.crt server.crt server.key client.crt client.key redis.crt redis.key redis.dh engine.crt engine.key; do
    [ -s "$T/$f" ] || die "no $T/$f after utils/gen-test-certs.sh"
  done
fi

now() { date +%s.%N | cut -c1-14; }

# ---------------------------------------------------------------- one mode (run in a subshell)

# engine_start PORT [cluster|tls]: a fresh redis-server, configured as Redis's external-server CI
# does; with "cluster", a single-node cluster that owns every slot (its bus on PORT+20); with
# "tls", serving TLS only on PORT (--port 0), with the TLS settings the suite gives its own
# servers and the certificates of the mode's suite copy (TLSDIR).
engine_start() {
  local d="$MD/data/$1" i ping=()
  mkdir -p "$d"
  local args=(--port "$1")
  [ "${2:-}" = tls ] && args=(--port 0 --tls-port "$1")
  args+=(--bind 127.0.0.1 --dir "$d" --save '' --appendonly no --daemonize no
    --enable-protected-configs yes --enable-debug-command yes --enable-module-command yes)
  [ "${2:-}" = cluster ] && args+=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-port $(($1 + 20)))
  if [ "${2:-}" = tls ]; then
    args+=(--tls-cert-file "$TLSDIR/engine.crt" --tls-key-file "$TLSDIR/engine.key"
      --tls-client-cert-file "$TLSDIR/client.crt" --tls-client-key-file "$TLSDIR/client.key"
      --tls-ca-cert-file "$TLSDIR/ca.crt" --tls-dh-params-file "$TLSDIR/redis.dh" --tls-replication yes)
    ping=("${TLS_CLI[@]}")
  fi
  start_bg "redis-$1" "$REDIS_SERVER" "${args[@]}"
  wait_ping "redis-$1" "$1" "$LAST_PID" "${ping[@]}"
  [ "${2:-}" = cluster ] || return 0
  "$REDIS_CLI" -h 127.0.0.1 -p "$1" cluster addslotsrange 0 16383 >/dev/null
  for i in $(seq 100); do
    "$REDIS_CLI" -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && return 0
    sleep 0.1
  done
  die "the single-node cluster on $1 is not ok within 10 s"
}

baseline_of() { # MODE: the mode whose failures it is compared with
  case $1 in
  direct | cluster | tls-direct) echo - ;;
  slots | facade) echo cluster ;;
  tls-stunnel) echo tls-direct ;;
  tls-default | tls-shared) echo tls-stunnel ;;
  *) echo direct ;;
  esac
}

# run_pass [UNITS...]: runtest against $target, appended to runtest.raw, with the units UNITS in
# their own runtest (--single each), or without them those of runtest's own list less SKIPUNITS.
# A test that hangs (no progress for RUNTEST_TIMEOUT) ends runtest; the pass goes on with the
# units after the hung one (--skip-till), at most 5 times, and the hung test counts as failed.
# Sets PASS_RC, and PASS_DONE=yes when the last runtest printed "The End" and no [TIMEOUT].
run_pass() {
  local units=("$@") sel=() skip=() attempt off hung unit u
  for u in "${units[@]}"; do sel+=(--single "$u"); done
  [ ${#units[@]} -gt 0 ] || for u in "${SKIPUNITS[@]}"; do sel+=(--skipunit "$u"); done
  PASS_DONE=no
  for attempt in 1 2 3 4 5 6; do
    PASS_RC=0
    off=$(stat -c %s "$MD/runtest.raw")
    # shellcheck disable=SC2086 # the options are words
    (cd "$MD" && exec timeout -k 10 "$SUITE_TIMEOUT" ./runtest --host 127.0.0.1 --port "$target" \
      --baseport $((base + 36)) $opts "${tlsopt[@]}" --durable --timeout "$RUNTEST_TIMEOUT" $RUNTEST_ARGS \
      "${sel[@]}" "${skip[@]}") >>"$MD/runtest.raw" 2>&1 &
    STARTED+=($!)
    wait $! || PASS_RC=$?
    sed 's/\x1b\[[0-9;]*m//g' "$MD/runtest.raw" >"$MD/runtest.log"
    # finished: "The End" printed, and not after a [TIMEOUT] (the test server's own give-up)
    tail -c +$((off + 1)) "$MD/runtest.raw" | sed 's/\x1b\[[0-9;]*m//g' >"$MD/attempt.log"
    if grep -q 'The End' "$MD/attempt.log" && ! grep -q '^\[TIMEOUT\]' "$MD/attempt.log"; then
      PASS_DONE=yes
      return 0
    fi
    # the test the engine was told of last (runtest logs each test's start on the engine)
    hung=$(cat "$MD"/logs/redis-*.log | sed -n 's/.*DEBUG LOG: ### Starting test //p' | tail -1)
    unit=$(tail -c +$((off + 1)) "$MD/runtest.raw" | sed 's/\x1b\[[0-9;]*m//g' | grep -o '^Testing unit/[^ ]*' | tail -1 | sed 's/^Testing //')
    [ -n "$unit" ] || return 0
    echo "HANG: ${hung:-a test of $unit} (no progress for $RUNTEST_TIMEOUT s, rc $PASS_RC)" >>"$MD/hangs.txt"
    # the pass's last unit, or the sixth attempt: nothing is left to go on with
    [ "$attempt" -lt 6 ] && { [ ${#units[@]} -eq 0 ] || [ "$unit" != "${units[-1]}" ]; } || return 0
    log "$MODE: runtest stopped in $unit (${hung:-?}); going on after it"
    printf '\n### redis-suite.sh: runtest stopped in %s; again with --skip-till %s\n' "$unit" "$unit" >>"$MD/runtest.raw"
    skip=(--skip-till "$unit")
  done
}

run_mode() {
  MODE=$1
  local base=$2
  MD="$OUT/$MODE"
  rm -rf "$MD"
  mkdir -p "$MD/logs" "$MD/data"
  OUT=$MD # lib.sh's start_bg logs to $OUT/logs
  STARTED=()
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  local engines=() proxy=$((base + 10)) admin=$((base + 11)) facade=$((base + 12)) target p
  local opts=$OPTS_STANDALONE kind="" tlsopt=()
  case $MODE in
  direct | default | shared | pinned) engines=("$base") ;;
  cluster) engines=("$base") opts=$OPTS_CLUSTER kind=cluster ;;
  facade) engines=("$base") opts=$OPTS_CLUSTER ;;
  slots) for ((p = 0; p < SLOT_SHARDS; p++)); do engines+=($((base + p))); done; opts=$OPTS_CLUSTER ;;
  tls-direct | tls-stunnel | tls-default | tls-shared) engines=("$base") kind=tls tlsopt=(--tls) ;;
  *) die "unknown mode $MODE (direct default shared pinned cluster slots facade $TLS_MODES)" ;;
  esac
  for p in "${engines[@]}" "$proxy" "$admin" "$facade"; do
    if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then die "$MODE: port $p is in use (set BASE_PORT)"; fi
  done
  # runtest writes under tests/tmp and runs src/redis-*: its own copy, with the engine's binaries
  # (and in the TLS modes the certificates, in tests/tls, where runtest --tls reads them)
  cp -r "$SRC/tests" "$SRC/runtest" "$MD/"
  mkdir -p "$MD/src"
  ln -sf "$REDIS_SERVER" "$MD/src/redis-server"
  ln -sf "$REDIS_CLI" "$MD/src/redis-cli"
  for p in redis-benchmark redis-check-aof redis-check-rdb; do
    [ -x "$(dirname "$REDIS_SERVER")/$p" ] && ln -sf "$(dirname "$REDIS_SERVER")/$p" "$MD/src/$p"
  done
  TLSDIR=$MD/tests/tls
  TLS_CLI=(--tls --cacert "$TLSDIR/ca.crt" --cert "$TLSDIR/client.crt" --key "$TLSDIR/client.key")
  if [ "$kind" = tls ]; then
    rm -rf "$TLSDIR"
    cp -r "$CERTS/tests/tls" "$TLSDIR"
  fi
  for p in "${engines[@]}"; do engine_start "$p" "$kind"; done
  local shards
  shards=$(printf '127.0.0.1:%s,' "${engines[@]}")
  shards=${shards%,}
  # shellcheck disable=SC2206 # the extra arguments are words
  local args=(proxy --listen "127.0.0.1:$proxy" --admin "127.0.0.1:$admin" --log-level warn $PROXY_ARGS)
  # respmeter's TLS listener alone (--listen off), TLS to the engine; client certificates as the
  # engine asks for them (tls-auth-clients yes)
  local tlsargs=(proxy --listen off --tls-listen "127.0.0.1:$proxy" --tls-cert-file "$TLSDIR/server.crt"
    --tls-key-file "$TLSDIR/server.key" --tls-ca-cert-file "$TLSDIR/ca.crt" --tls-auth-clients yes
    --upstream "$shards" --upstream-tls --upstream-tls-ca-cert-file "$TLSDIR/ca.crt"
    --upstream-tls-cert-file "$TLSDIR/client.crt" --upstream-tls-key-file "$TLSDIR/client.key"
    --admin "127.0.0.1:$admin" --log-level warn)
  target=$proxy
  # shellcheck disable=SC2206 # PROXY_ARGS: words
  case $MODE in
  direct | cluster | tls-direct) target=${engines[0]} ;;
  default) args+=(--upstream "$shards") ;;
  shared) args+=(--upstream "$shards" --upstream-mode shared) ;;
  slots) args+=(--route slots --shards "$shards") ;;
  pinned) args+=(--route pinned --shards "$shards") ;;
  facade) args+=(--route facade --shards "$shards" --facade-listen "127.0.0.1:$facade") target=$facade ;;
  tls-default) args=("${tlsargs[@]}" $PROXY_ARGS) ;;
  tls-shared) args=("${tlsargs[@]}" --upstream-mode shared $PROXY_ARGS) ;;
  tls-stunnel)
    # [tls-in] takes runtest's TLS (a client certificate required, as by the engine) and hands the
    # plaintext to [tls-out] on a loopback hop, which connects to the engine with TLS, presenting
    # the suite's client certificate and verifying the engine's for 127.0.0.1
    cat >"$MD/stunnel.conf" <<CONF
foreground = yes
pid =
debug = warning
[tls-in]
accept = 127.0.0.1:$proxy
connect = 127.0.0.1:$facade
cert = $TLSDIR/server.crt
key = $TLSDIR/server.key
CAfile = $TLSDIR/ca.crt
verifyChain = yes
[tls-out]
client = yes
accept = 127.0.0.1:$facade
connect = 127.0.0.1:${engines[0]}
cert = $TLSDIR/client.crt
key = $TLSDIR/client.key
CAfile = $TLSDIR/ca.crt
verifyChain = yes
checkIP = 127.0.0.1
CONF
    start_bg stunnel "$STUNNEL" "$MD/stunnel.conf"
    wait_ping stunnel "$proxy" "$LAST_PID" "${TLS_CLI[@]}"
    ;;
  esac
  case $MODE in
  default | shared | slots | pinned | facade | tls-default | tls-shared)
    start_bg respmeter "$RESPMETER" "${args[@]}"
    local ping=()
    [ "$kind" = tls ] && ping=("${TLS_CLI[@]}")
    wait_ping respmeter "$target" "$LAST_PID" "${ping[@]}"
    ;;
  esac
  log "$MODE: engines ${engines[*]}, runtest at 127.0.0.1:$target"
  local t0 t1 rc=0 complete=yes
  t0=$(now)
  : >"$MD/runtest.raw"
  : >"$MD/hangs.txt"
  # TLS modes: TLS_LAST's units (they reconfigure the engine's TLS listener) in a runtest of their
  # own after the others, unless the caller picks units with --single
  SKIPUNITS=()
  if [ "$kind" = tls ] && [ -n "$TLS_LAST" ] && [[ " $RUNTEST_ARGS " != *" --single "* ]]; then
    read -r -a SKIPUNITS <<<"$TLS_LAST"
  fi
  run_pass
  rc=$PASS_RC
  [ "$PASS_DONE" = yes ] || complete=no
  if [ ${#SKIPUNITS[@]} -gt 0 ]; then
    printf '\n### redis-suite.sh: the TLS listener units last: %s\n' "${SKIPUNITS[*]}" >>"$MD/runtest.raw"
    run_pass "${SKIPUNITS[@]}"
    [ "$PASS_RC" = 0 ] || rc=$PASS_RC
    [ "$PASS_DONE" = yes ] || complete=no
  fi
  t1=$(now)
  # "[ok]: NAME (N ms)", "[err]: NAME in FILE" then the details; the closing summary repeats the
  # failures prefixed by "*** ", which are not counted again.
  sed -n 's/^\[ok\]: \(.*\) ([0-9]* ms)$/\1/p' "$MD/runtest.log" >"$MD/passed.txt"
  { sed -n 's/^\[err\]: //p; s/^\[exception\]: \(.*\)/EXCEPTION: \1/p' "$MD/runtest.log"; cat "$MD/hangs.txt"; } >"$MD/failed.txt"
  {
    echo "mode=$MODE"
    echo "passed=$(wc -l <"$MD/passed.txt")"
    echo "failed=$(wc -l <"$MD/failed.txt")"
    echo "wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}')"
    echo "rc=$rc complete=$complete"
    echo "options=$opts ${tlsopt[*]} --durable --timeout $RUNTEST_TIMEOUT $RUNTEST_ARGS${SKIPUNITS[*]:+ (then ${SKIPUNITS[*]})}"
  } >"$MD/result.txt"
  log "$MODE: $(tr '\n' ' ' <"$MD/result.txt")"
}

# ---------------------------------------------------------------- main

MODE_PIDS=()
trap stop_modes EXIT
trap 'exit 130' INT TERM

i=0
for m in $MODES; do
  (run_mode "$m" $((BASE_PORT + 40 * i))) &
  MODE_PIDS+=($!)
  i=$((i + 1))
  # at most JOBS modes at once: wait for the oldest before starting another
  if [ "${#MODE_PIDS[@]}" -ge "$JOBS" ]; then
    wait "${MODE_PIDS[0]}" || true
    MODE_PIDS=("${MODE_PIDS[@]:1}")
  fi
done
for p in "${MODE_PIDS[@]:-}"; do [ -n "$p" ] && { wait "$p" || true; }; done
MODE_PIDS=()

BASELINE_DIR=${BASELINE_DIR:-$OUT}
names() { sed 's/ in tests\/.*//' "$1" | sort -u; } # failing tests by name (the file name dropped)
status=0
printf 'mode\tpassed\tfailed\twall_s\tfailing_tests\tfailed_through_respmeter_only\n' >"$OUT/summary.tsv"
printf '\nRedis %s test suite (%s); respmeter %s; %s\n' "$ENGINE_VERSION" "$SRC" "$COMMIT" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf 'runtest --host 127.0.0.1 --port P [%s | %s] --durable --timeout %s %s\n' "$OPTS_STANDALONE" "$OPTS_CLUSTER" "$RUNTEST_TIMEOUT" "$RUNTEST_ARGS"
[ -z "$ANY_TLS" ] || printf 'tls-*: runtest --tls, %s last on its own; stunnel %s\n' "${TLS_LAST:-no unit}" \
  "$({ [ -n "$STUNNEL" ] && "$STUNNEL" -version 2>&1 | grep -m1 -io '^stunnel [0-9.]*'; } || echo -)"
printf '| mode | baseline | passed | failed | wall s | failed through respmeter only |\n|---|---|---|---|---|---|\n'
for m in $MODES; do
  r="$OUT/$m/result.txt"
  if [ ! -s "$r" ]; then
    printf '%s\t-\t-\t-\tno result (see %s/logs)\t-\n' "$m" "$OUT/$m" >>"$OUT/summary.tsv"
    printf '| %s | - | - | - | - | no result (see %s/logs) |\n' "$m" "$OUT/$m"
    status=1
    continue
  fi
  g() { sed -n "s/^$1=//p" "$r"; }
  b=$(baseline_of "$m") only="-"
  if [ "$b" != - ]; then
    if [ -f "$BASELINE_DIR/$b/failed.txt" ]; then
      comm -23 <(names "$OUT/$m/failed.txt") <(names "$BASELINE_DIR/$b/failed.txt") >"$OUT/$m/only.txt"
      only=$(paste -sd'|' "$OUT/$m/only.txt")
      [ -n "$only" ] || only="none"
    else
      only="no baseline ($b not run)"
    fi
  fi
  fails=$(paste -sd'|' "$OUT/$m/failed.txt")
  incomplete=""
  grep -q 'complete=no' "$r" && incomplete=" (suite did not finish: $(g rc))" && status=1
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$(g passed)" "$(g failed)$incomplete" "$(g wall_s)" "${fails:-none}" "$only" >>"$OUT/summary.tsv"
  n_only=0
  [ -s "$OUT/$m/only.txt" ] && n_only=$(wc -l <"$OUT/$m/only.txt")
  shown=${only//|/; }
  [ ${#shown} -le 400 ] || shown="${shown:0:400}... ($n_only tests: $OUT/$m/only.txt)"
  printf '| %s | %s | %s | %s%s | %s | %s |\n' "$m" "$b" "$(g passed)" "$(g failed)" "$incomplete" "$(g wall_s)" "$shown"
  # tls-stunnel's column is what failed through stunnel only: not respmeter's
  [ "$n_only" = 0 ] || [ "$m" = tls-stunnel ] || status=1
done
for m in tls-default tls-shared; do # the TLS modes through respmeter against the engine itself
  has_mode "$m" && [ -s "$OUT/$m/result.txt" ] && [ -f "$BASELINE_DIR/tls-direct/failed.txt" ] || continue
  comm -23 <(names "$OUT/$m/failed.txt") <(names "$BASELINE_DIR/tls-direct/failed.txt") >"$OUT/$m/only-direct.txt"
  printf '%s against tls-direct: %s failed through respmeter and passed directly%s\n' "$m" \
    "$(wc -l <"$OUT/$m/only-direct.txt")" "$([ -s "$OUT/$m/only-direct.txt" ] && printf ': %s' "$(paste -sd';' "$OUT/$m/only-direct.txt")")"
done
for m in $MODES; do
  [ -s "$OUT/$m/failed.txt" ] && { echo "$m failed:"; sed 's/^/  /' "$OUT/$m/failed.txt"; }
done
log "results in $OUT (summary.tsv)"
exit $status
