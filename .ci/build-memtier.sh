#!/usr/bin/env bash
# .ci/build-memtier.sh: build memtier_benchmark (RedisLabs), the closed-loop load generator of
# the 200-connection scenario test (TestScenarioMemtier200, cmd/respmeter/scenario_test.go)
# and of bench/ in ../shared. Debian ships no package of it, so it is built from its release
# source, as ../shared/bench/setup-peers.sh does.
#
# Output (cache, outside the repository, reused when present):
#   $RESPMETER_TOOLS/memtier_benchmark-$MEMTIER_REF/memtier_benchmark
# RESPMETER_TOOLS defaults to /var/cache/respmeter/tools when /var/cache/respmeter is
# writable, else ${XDG_CACHE_HOME:-$HOME/.cache}/respmeter/tools. The last line of standard
# output is the binary's path.
#
# Source, the first found of (MEMTIER_REF defaults to 2.3.0):
#   $MEMTIER_SRC                                       a release tarball or a git directory
#   ../shared/tools/memtier_benchmark-$MEMTIER_REF.tar.gz   (beside the repository)
#   $RESPMETER_TOOLS/src/memtier_benchmark-$MEMTIER_REF.tar.gz
#   github.com/RedisLabs/memtier_benchmark's release tarball, downloaded and checked against
#   its SHA-256 (known for 2.3.0; curl installed when missing)
# A git directory is archived at MEMTIER_REF; the tarball found is copied into the cache's
# src/ so that a later build needs nothing beside the repository.
#
# Needs: apt-get (Debian or Ubuntu) for the build dependencies it installs when missing
# (build-essential autoconf automake libtool pkg-config libevent-dev libssl-dev zlib1g-dev).
# Takes about 1-2 minutes of two cores; a cached run takes well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

MEMTIER_REF=${MEMTIER_REF:-2.3.0}
name=memtier_benchmark-$MEMTIER_REF

tools_dir() {
	if [ -n "${RESPMETER_TOOLS:-}" ]; then
		echo "$RESPMETER_TOOLS"
	elif mkdir -p /var/cache/respmeter 2>/dev/null && [ -w /var/cache/respmeter ]; then
		echo /var/cache/respmeter/tools
	else
		echo "${XDG_CACHE_HOME:-$HOME/.cache}/respmeter/tools"
	fi
}
T=$(tools_dir)
mkdir -p "$T/src"
bin=$T/$name/memtier_benchmark

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
	echo "cached in $T" >&2
	echo "$bin"
	exit 0
fi

# The source tarball, into the cache first.
tarball=$T/src/$name.tar.gz
if [ -n "${MEMTIER_SRC:-}" ]; then
	if [ -d "$MEMTIER_SRC" ]; then
		git --git-dir="$MEMTIER_SRC" archive --format=tar.gz --prefix="$name/" "$MEMTIER_REF" >"$tarball.tmp"
		mv "$tarball.tmp" "$tarball"
	else
		cp "$MEMTIER_SRC" "$tarball"
	fi
elif [ -f "../shared/tools/$name.tar.gz" ]; then
	cp "../shared/tools/$name.tar.gz" "$tarball"
fi
# Else the release tarball from GitHub, checked against its known SHA-256.
if [ ! -f "$tarball" ]; then
	url=https://github.com/RedisLabs/memtier_benchmark/archive/refs/tags/$MEMTIER_REF.tar.gz
	declare -A sha256=([2.3.0]=c093d85573e9d143e92a2d107f516caf2f09cf716eeb178047a03165fdde05b8)
	if [ -z "${sha256[$MEMTIER_REF]:-}" ]; then
		echo "build-memtier: no source of $name and no known checksum to download it with: set" >&2
		echo "MEMTIER_SRC to its release tarball or git directory, or put $name.tar.gz in" >&2
		echo "../shared/tools/ or $T/src/" >&2
		exit 1
	fi
	if ! command -v curl >/dev/null; then
		sudo=""
		if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
		$sudo apt-get update -q >&2
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q curl ca-certificates >&2
	fi
	echo "build-memtier: downloading $url" >&2
	if ! curl -fsSL --retry 2 -o "$tarball.tmp" "$url"; then
		rm -f "$tarball.tmp"
		echo "build-memtier: cannot download $url: set MEMTIER_SRC to its release tarball or git" >&2
		echo "directory, or put $name.tar.gz in ../shared/tools/ or $T/src/" >&2
		exit 1
	fi
	if ! echo "${sha256[$MEMTIER_REF]}  $tarball.tmp" | sha256sum -c --quiet >&2; then
		rm -f "$tarball.tmp"
		echo "build-memtier: $url does not have the SHA-256 expected of $name" >&2
		exit 1
	fi
	mv "$tarball.tmp" "$tarball"
fi

# Build dependencies, installed when missing.
deps=(build-essential autoconf automake libtool pkg-config libevent-dev libssl-dev zlib1g-dev)
missing=()
for p in "${deps[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	echo "build-memtier: installing ${missing[*]}" >&2
	$sudo apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" >&2
fi

work=$(mktemp -d /tmp/respmeter-memtier.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
dir=$work/$(tar -tzf "$tarball" | sed -n '1s,/.*,,p')
echo "build-memtier: building $name" >&2
(cd "$dir" && autoreconf -ivf && ./configure && make -j"$(nproc)") >"$work/build.log" 2>&1 ||
	{ tail -30 "$work/build.log" >&2; exit 1; }
mkdir -p "$T/$name"
install -m 0755 "$dir/memtier_benchmark" "$bin"
"$bin" --version | head -1 >&2
echo "$bin"
