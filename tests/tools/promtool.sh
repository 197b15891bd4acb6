#!/usr/bin/env bash
# Build Prometheus's promtool, which the alert-rule tests run (tests/unit/server/
# test_the_long_wait_alert_fires_for_a_gang_that_never_starts.py), from the Go module proxy.
#
#   bash tests/tools/promtool.sh      # build if needed; the last stdout line is the binary
#
# Output:  $MUSTER_CACHE_DIR/promtool/bin/promtool, with a stamp naming the version built.
# Caches:  $MUSTER_CACHE_DIR/go/{mod,build} (GOMODCACHE, GOCACHE), shared with the control plane.
# `go install ...@version` refuses this module (its go.mod has exclude directives), so the
# exact version is downloaded and built in a writable copy. About 25 minutes the first time on
# two shared cores; nothing runs when the stamp matches.
set -euo pipefail
version="v0.307.3"
cache="${MUSTER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/muster}"
out="$cache/promtool/bin/promtool"
stamp="$cache/promtool/stamp"
log() { printf '[promtool] %s\n' "$*" >&2; }
die() { printf '[promtool] ERROR: %s\n' "$*" >&2; exit 1; }
if [[ -x "$out" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "go not found on PATH (needed to build promtool $version)"
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOFLAGS="-mod=mod" GOTOOLCHAIN=local
log "downloading github.com/prometheus/prometheus@$version"
dir="$(go mod download -json "github.com/prometheus/prometheus@$version" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -n "$dir" && -d "$dir" ]] || die "the module proxy did not give github.com/prometheus/prometheus@$version"
work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$dir/." "$work/src"
chmod -R u+w "$work/src"
mkdir -p "$(dirname "$out")"
log "building promtool $version (about 25 minutes the first time)"
(cd "$work/src" && go build -p 1 -trimpath -ldflags "-s -w" -o "$out.new" ./cmd/promtool)
mv "$out.new" "$out"
echo "$version" > "$stamp"
log "built $out"
echo "$out"
