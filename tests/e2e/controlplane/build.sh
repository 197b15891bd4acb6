#!/usr/bin/env bash
# Build Muster's local Kubernetes control plane binaries (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl) from the Go module pinned in
# this folder, and KWOK from its own module in kwok/ (see README.md for why two).
#
#   bash tests/e2e/controlplane/build.sh         # build if needed
#   BIN=$(bash tests/e2e/controlplane/build.sh)  # last stdout line = bin dir
#
# Output:  $MUSTER_CACHE_DIR/controlplane/<k8s version>/bin/{etcd,kube-apiserver,kube-scheduler,
#          kube-controller-manager,kubectl,kwok}
# Caches:  $MUSTER_CACHE_DIR/go/{mod,build}  (GOMODCACHE, GOCACHE)
# MUSTER_CACHE_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/muster.
#
# Idempotent: when every binary exists and the stamp file matches a hash of
# both go.mod/go.sum pairs, every cmd/*/main.go and this script, nothing is built.
# Progress goes to stderr; stdout carries only the bin dir (last line).
# Set MUSTER_CONTROLPLANE_REBUILD=1 to force a rebuild.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${MUSTER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/muster}"
binaries=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok jobset)

log() { printf '[controlplane] %s\n' "$*" >&2; }
die() { printf '[controlplane] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go not found on PATH (Go >= 1.26 is needed to build the control plane)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"

# The Kubernetes release is whatever go.mod pins for k8s.io/kubernetes.
version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")"
[[ -n "$version" ]] || die "could not read the k8s.io/kubernetes version from $here/go.mod"
[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || die "unexpected k8s version '$version' in go.mod"
major="${BASH_REMATCH[1]}"
minor="${BASH_REMATCH[2]}"

out="$cache/controlplane/$version"
bin="$out/bin"
stamp="$out/stamp"

# Hash of everything that determines the binaries.
hash="$(
  cd "$here"
  {
    go version
    sha256sum go.mod go.sum build.sh kwok/go.mod kwok/go.sum jobset/go.mod jobset/go.sum
    find cmd -name '*.go' -type f | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -d' ' -f1
)"

up_to_date() {
  [[ "${MUSTER_CONTROLPLANE_REBUILD:-0}" != 1 ]] || return 1
  [[ -f "$stamp" && "$(cat "$stamp")" == "$hash" ]] || return 1
  local b
  for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
}

if up_to_date; then
  log "control plane $version is up to date in $bin"
  echo "$bin"
  exit 0
fi

mkdir -p "$out" "$cache/go/mod" "$cache/go/build"

# Serialise concurrent builds (e.g. several test workers) on one lock.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$out/.lock"
  if ! flock -n 9; then
    log "another build is running; waiting for lock $out/.lock"
    flock 9
  fi
  if up_to_date; then  # another process finished the build meanwhile
    log "control plane $version is up to date in $bin"
    echo "$bin"
    exit 0
  fi
fi

export GOMODCACHE="$cache/go/mod"
export GOCACHE="$cache/go/build"
export CGO_ENABLED=0
# Never fetch a Go toolchain: use the installed go (go.mod needs >= 1.26.0).
export GOTOOLCHAIN=local
# go.sum is committed: refuse to rewrite go.mod/go.sum during a build.
export GOFLAGS="-mod=readonly -buildvcs=false"

# Version stamping as upstream's hack/lib/version.sh does, so /version and
# `kubectl version` report the release. The module proxy does not tell the git
# commit; buildDate is the release's publication time (reproducible builds).
build_date="$(cd "$here" && go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null || true)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit="
  [[ -z "$build_date" ]] || ldflags+=" -X $pkg.buildDate=$build_date"
done

log "Kubernetes $version; Go $(go env GOVERSION); output $bin"
log "module cache $GOMODCACHE, build cache $GOCACHE"

cd "$here"
start_all=$SECONDS
log "downloading Go modules (first time: a few hundred MB from the Go module proxy)..."
go mod download || die "go mod download failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
(cd kwok && go mod download) || die "go mod download failed for kwok/ (is the Go module proxy reachable?)"
(cd jobset && go mod download) || die "go mod download failed for jobset/ (is the Go module proxy reachable?)"

rm -f "$stamp"
mkdir -p "$bin"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

for b in "${binaries[@]}"; do
  log "building $b (first build takes several minutes; cached rebuilds are quick)..."
  t0=$SECONDS
  if [[ "$b" == kwok ]]; then
    # KWOK's own module (k8s.io/* v0.36.1 as KWOK v0.8.0 pins them); it stamps its
    # own version in sigs.k8s.io/kwok/pkg/consts, so only strip here.
    built() { (cd kwok && go build -p 2 -trimpath -ldflags "-s -w" -o "$tmp/$b" sigs.k8s.io/kwok/cmd/kwok); }
  elif [[ "$b" == jobset ]]; then
    # The JobSet controller's own module (k8s.io/* v0.34.1, controller-runtime v0.22.1).
    built() { (cd jobset && go build -p 2 -trimpath -ldflags "-s -w" -o "$tmp/$b" sigs.k8s.io/jobset); }
  else
    built() { go build -p 2 -trimpath -ldflags "$ldflags" -o "$tmp/$b" "./cmd/$b"; }
  fi
  if ! built; then
    die "building $b failed; see the go output above"
  fi
  mv -f "$tmp/$b" "$bin/$b"
  log "built $b in $((SECONDS - t0))s ($(du -h "$bin/$b" | cut -f1))"
done

# The JobSet CRD and webhook configurations of the very release built, for the sandbox.
jobset_dir="$(cd jobset && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)" || die "sigs.k8s.io/jobset is not in the module cache"
cp -f "$jobset_dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$bin/jobset-crd.yaml"
cp -f "$jobset_dir/config/components/webhook/manifests.yaml" "$bin/jobset-webhooks.yaml"
chmod 0644 "$bin/jobset-crd.yaml" "$bin/jobset-webhooks.yaml"

echo "$hash" >"$stamp"
log "all control plane binaries built in $((SECONDS - start_all))s"
echo "$bin"
