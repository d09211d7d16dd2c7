#!/usr/bin/env bash
# .ci/staticcheck.sh: run staticcheck (its default checks) over the tree,
# installing the pinned version first when it is missing. Every finding
# fails the run; an exception is written where it is made, as a
# //lint:ignore CHECK reason comment on the line before.
set -euo pipefail
cd "$(dirname "$0")/.."

# The module version (v0.8.2 is staticcheck 2026.2.2): the Go module proxy
# serves semver versions; a release name such as 2026.2.2 is a branch-style
# query it may refuse.
STATICCHECK_VERSION=${STATICCHECK_VERSION:-v0.8.2}
bin="$(go env GOPATH)/bin/staticcheck"
if ! "$bin" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
	go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
"$bin" ./...
