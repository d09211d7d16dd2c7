#!/usr/bin/env bash
# .ci/build-engines.sh: build the newer engines the end-to-end suites also run against,
# Redis 8.0.x and Valkey 8.1.x, from the release tarballs that Debian 13 ("trixie")
# carries as source packages. The machine's apt configuration is left alone: a private
# sources list, package lists and cache in a temporary directory are used instead.
#
# Output (cache, outside the repository, reused when present):
#   $RESPMETER_ENGINES/redis-8.0.N/{redis-server,redis-cli}
#   $RESPMETER_ENGINES/valkey-8.1.N/{valkey-server,valkey-cli}
# RESPMETER_ENGINES defaults to /var/cache/respmeter/engines when that directory is
# writable, else ${XDG_CACHE_HOME:-$HOME/.cache}/respmeter/engines.
# The last two lines of standard output are the two server binaries' paths.
#
# Needs: apt-get (Debian or Ubuntu), build-essential, pkg-config, network access to
# deb.debian.org for the first build. Takes 6-10 minutes of two cores; a cached run
# takes under a second. TLS and Redis's bundled modules are left out
# (BUILD_TLS=no, BUILD_WITH_MODULES=no): the suites use neither, and the modules'
# build fetches third-party sources.
set -euo pipefail

engines_dir() {
	if [ -n "${RESPMETER_ENGINES:-}" ]; then
		echo "$RESPMETER_ENGINES"
	elif [ -w /var/cache/respmeter/engines ]; then
		echo /var/cache/respmeter/engines
	else
		echo "${XDG_CACHE_HOME:-$HOME/.cache}/respmeter/engines"
	fi
}
E=$(engines_dir)
mkdir -p "$E"

# cached NAME BIN: the newest cached build of NAME (e.g. redis-8.0) holding BIN.
cached() { { ls -d "$E/$1".*/"$2" 2>/dev/null || true; } | sort -V | tail -1; }

redis=$(cached redis-8.0 redis-server)
valkey=$(cached valkey-8.1 valkey-server)
if [ -n "$redis" ] && [ -n "$valkey" ]; then
	echo "cached in $E" >&2
	echo "$redis"
	echo "$valkey"
	exit 0
fi

for tool in make cc pkg-config apt-get; do
	command -v "$tool" >/dev/null || { echo "build-engines: $tool missing (apt-get install build-essential pkg-config)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/respmeter-engines.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
cat >"$work/trixie.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_opts=(-o Dir::Etc::sourcelist="$work/trixie.sources" -o Dir::Etc::sourceparts=-
	-o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache")
echo "build-engines: fetching the trixie source packages of redis and valkey" >&2
apt-get "${apt_opts[@]}" update -q >/dev/null
# Only the upstream tarballs (*.orig.tar.*) are used, not Debian's patches: the rest of a
# source package (.dsc, .debian.tar.xz) may be missing from a mirror, and apt-get then
# fails after fetching the tarballs, so its status is not what decides.
(cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only redis valkey >"$work/apt.log" 2>&1) || true
if ! ls "$work/src"/redis_8.0*.orig.tar.* "$work/src"/valkey_8.1*.orig.tar.* >/dev/null 2>&1; then
	echo "build-engines: the redis 8.0 and valkey 8.1 upstream tarballs were not fetched:" >&2
	tail -5 "$work/apt.log" >&2
	exit 1
fi

# build TARBALL_GLOB MAKE_ARGS...: unpack the upstream tarball and make it.
build() {
	local glob=$1; shift
	local tarball
	tarball=$(ls "$work/src"/$glob | head -1)
	tar -xf "$tarball" -C "$work/src"
	local dir
	dir=$(tar -tf "$tarball" | sed -n '1s,/.*,,p')
	echo "build-engines: make $dir" >&2
	make -C "$work/src/$dir" -j"$(nproc)" "$@" >"$work/$dir.log" 2>&1 ||
		{ tail -30 "$work/$dir.log" >&2; exit 1; }
	echo "$work/src/$dir"
}
r=$(build 'redis_8.0*.orig.tar.*' BUILD_TLS=no BUILD_WITH_MODULES=no)
v=$(build 'valkey_8.1*.orig.tar.*' BUILD_TLS=no)

rname=redis-$("$r/src/redis-server" --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')
vname=valkey-$("$v/src/valkey-server" --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')
mkdir -p "$E/$rname" "$E/$vname"
cp "$r/src/redis-server" "$r/src/redis-cli" "$E/$rname/"
cp "$v/src/valkey-server" "$v/src/valkey-cli" "$E/$vname/"
"$E/$rname/redis-server" --version >&2
"$E/$vname/valkey-server" --version >&2
echo "$E/$rname/redis-server"
echo "$E/$vname/valkey-server"
