#!/usr/bin/env bash
# .ci/build-engines.sh: build the newer engines the end-to-end suites also run against,
# Valkey 9.1.x and Redis 8.0.x (8.0.6 or later) from Debian unstable ("sid") and
# Valkey 8.1.x from Debian 13 ("trixie"), each from the upstream release tarball that the suite
# carries as a source package. The machine's apt configuration is left alone: a private
# sources list, package lists and cache in a temporary directory are used instead.
#
# Output (cache, outside the repository, reused when present; each engine on its own):
#   $RESPMETER_ENGINES/valkey-9.1.N/{valkey-server,valkey-cli}
#   $RESPMETER_ENGINES/redis-8.0.N/{redis-server,redis-cli}     (N >= 6)
#   $RESPMETER_ENGINES/valkey-8.1.N/{valkey-server,valkey-cli}
# RESPMETER_ENGINES defaults to /var/cache/respmeter/engines when that directory is
# writable, else ${XDG_CACHE_HOME:-$HOME/.cache}/respmeter/engines.
# Standard output holds only the server binaries' paths, one a line, in the order above
# (.ci/run loops over them); progress and build times go to standard error.
#
# Needs: apt-get (Debian or Ubuntu), build-essential, pkg-config, network access to
# deb.debian.org for the first build. Each engine takes 5-15 minutes of two cores; a
# cached run takes under a second. TLS and Redis's bundled modules are left out
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

# The matrix, one engine a line: SERIES MIN SUITE MAKE_ARGS. SERIES is the source package
# and the version's major.minor (its cache directory is SERIES.N); MIN is the oldest
# release accepted from the cache (a cached redis-8.0.2 is not redis 8.0.6).
matrix=(
	"valkey-9.1 9.1.0 sid BUILD_TLS=no"
	"redis-8.0 8.0.6 sid BUILD_TLS=no BUILD_WITH_MODULES=no"
	"valkey-8.1 8.1.0 trixie BUILD_TLS=no"
)

# server SERIES: the server binary's name (valkey-server, redis-server).
server() { echo "${1%%-*}-server"; }

# cached SERIES MIN: the newest cached build of SERIES at release MIN or later holding
# its server binary, or nothing.
cached() {
	local bin newest
	bin=$(server "$1")
	newest=$({ ls -d "$E/$1".*/"$bin" 2>/dev/null || true; } | sort -V | tail -1)
	[ -n "$newest" ] || return 0
	local v=${newest%/*}
	v=${v##*-}
	if [ "$(printf '%s\n%s\n' "$2" "$v" | sort -V | head -1)" = "$2" ]; then echo "$newest"; fi
}

missing=()
for line in "${matrix[@]}"; do
	read -r series min _ <<<"$line"
	[ -n "$(cached "$series" "$min")" ] || missing+=("$line")
done

if [ ${#missing[@]} -gt 0 ]; then
	for tool in make cc pkg-config apt-get; do
		command -v "$tool" >/dev/null || { echo "build-engines: $tool missing (apt-get install build-essential pkg-config)" >&2; exit 1; }
	done

	work=$(mktemp -d /tmp/respmeter-engines.XXXXXX)
	trap 'rm -rf "$work"' EXIT
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
	cat >"$work/debian.sources" <<'EOF2'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF2
	apt_opts=(-o Dir::Etc::sourcelist="$work/debian.sources" -o Dir::Etc::sourceparts=-
		-o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache")
	echo "build-engines: reading the trixie and sid source package lists" >&2
	apt-get "${apt_opts[@]}" update -q >/dev/null

	for line in "${missing[@]}"; do
		read -r series min suite make_args <<<"$line"
		pkg=${series%%-*}
		src="$work/src/$series"
		mkdir -p "$src"
		echo "build-engines: fetching $pkg/$suite" >&2
		# Only the upstream tarball (*.orig.tar.*) is used, not Debian's patches: the rest of
		# a source package (.dsc, .debian.tar.xz) may be missing from a mirror, and apt-get
		# then fails after fetching the tarball, so its status is not what decides.
		(cd "$src" && apt-get "${apt_opts[@]}" source --download-only "$pkg/$suite" >"$work/$series.apt.log" 2>&1) || true
		tarball=$({ ls "$src/${pkg}_${series#*-}".*.orig.tar.* 2>/dev/null || true; } | head -1)
		if [ -z "$tarball" ]; then
			echo "build-engines: no ${series#*-}.x upstream tarball of $pkg in $suite:" >&2
			tail -5 "$work/$series.apt.log" >&2
			exit 1
		fi
		tar -xf "$tarball" -C "$src"
		# Valkey's tarball unpacks to valkey-io-valkey-<commit>/, Redis's to redis-<version>/.
		dir=$(tar -tf "$tarball" | sed -n '1s,/.*,,p')
		echo "build-engines: make $dir ($make_args)" >&2
		start=$SECONDS
		# shellcheck disable=SC2086 # make_args is a list of VAR=value words
		make -C "$src/$dir" -j"$(nproc)" $make_args >"$work/$series.make.log" 2>&1 ||
			{ tail -30 "$work/$series.make.log" >&2; exit 1; }
		version=$("$src/$dir/src/$(server "$series")" --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')
		mkdir -p "$E/$pkg-$version"
		cp "$src/$dir/src/$pkg-server" "$src/$dir/src/$pkg-cli" "$E/$pkg-$version/"
		echo "build-engines: $pkg $version built in $((SECONDS - start)) s" >&2
		rm -rf "${src:?}/$dir"
	done
else
	echo "cached in $E" >&2
fi

for line in "${matrix[@]}"; do
	read -r series min _ <<<"$line"
	bin=$(cached "$series" "$min")
	[ -n "$bin" ] || { echo "build-engines: $series $min+ missing after the build" >&2; exit 1; }
	"$bin" --version >&2
	echo "$bin"
done
