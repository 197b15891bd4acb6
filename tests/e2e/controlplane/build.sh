#!/usr/bin/env bash
# Build Muster's local Kubernetes control plane binaries (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl) from the Go module pinned in this folder,
# and KWOK and the real operators (JobSet, LeaderWorkerSet, KubeRay, the MPI operator, Kubeflow
# Trainer, Kueue) each from its own module (kwok/, jobset/, lws/, kuberay/, mpi/, trainer/,
# kueue/; see README.md for why separate modules).
#
#   bash tests/e2e/controlplane/build.sh         # build if needed
#   BIN=$(bash tests/e2e/controlplane/build.sh)  # last stdout line = bin dir
#
# Output:  $MUSTER_CACHE_DIR/controlplane/<k8s version>/bin/{etcd,kube-apiserver,kube-scheduler,
#          kube-controller-manager,kubectl,kwok,jobset,lws,kuberay,mpi-operator,trainer,kueue,helm}
#          and the operators' release files
# Caches:  $MUSTER_CACHE_DIR/go/{mod,build}  (GOMODCACHE, GOCACHE)
# MUSTER_CACHE_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/muster.
#
# Idempotent: each binary has a stamp (<version>/stamps/<name>) holding the hash of what
# determines it; when every binary exists and matches its stamp, no Go command runs.
# Progress goes to stderr; stdout carries only the bin dir (last line).
# Set MUSTER_CONTROLPLANE_REBUILD=1 to force a rebuild.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${MUSTER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/muster}"
binaries=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok jobset lws kuberay
          mpi-operator trainer kueue helm)

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
stamps="$out/stamps"

# How each binary is built: "<module dir> <package> <ldflags kind>". The operators and KWOK
# have their own modules (each pins its own k8s.io/*; see README.md), built with only -s -w
# (they stamp their own versions); Helm gets the version stamp its Makefile sets for a release
# tag; the rest are Kubernetes' and get its version stamps.
recipe() {
  case "$1" in
    kwok) echo "kwok sigs.k8s.io/kwok/cmd/kwok own" ;;
    jobset) echo "jobset sigs.k8s.io/jobset own" ;;
    lws) echo "lws sigs.k8s.io/lws/cmd own" ;;
    kuberay) echo "kuberay github.com/ray-project/kuberay/ray-operator own" ;;
    mpi-operator) echo "mpi github.com/kubeflow/mpi-operator/cmd/mpi-operator own" ;;
    trainer) echo "trainer github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager own" ;;
    kueue) echo "kueue sigs.k8s.io/kueue/cmd/kueue own" ;;
    helm) echo "helm helm.sh/helm/v4/cmd/helm helm" ;;
    *) echo ". ./cmd/$1 kubernetes" ;;
  esac
}

# The release files each operator needs beside its binary: "<module dir> <module> <src>=<dst>...".
# The CRDs and webhook configurations of the very release built, and the webhook patches its
# webhook kustomization.yaml applies (they narrow the pod webhooks to the operator's pods).
release_files() {
  case "$1" in
    jobset) echo "jobset sigs.k8s.io/jobset" \
      "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml=jobset-crd.yaml" \
      "config/components/webhook/manifests.yaml=jobset-webhooks.yaml" \
      "config/components/webhook/patches/mutating-patch.yaml=jobset-webhooks-mutating-patch.yaml" \
      "config/components/webhook/patches/validating-patch.yaml=jobset-webhooks-validating-patch.yaml" ;;
    lws) echo "lws sigs.k8s.io/lws" \
      "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml=lws-crd.yaml" \
      "config/webhook/manifests.yaml=lws-webhooks.yaml" \
      "config/webhook/mutating-patch.yaml=lws-webhooks-mutating-patch.yaml" \
      "config/webhook/validating-patch.yaml=lws-webhooks-validating-patch.yaml" ;;
    kuberay) echo "kuberay github.com/ray-project/kuberay/ray-operator" \
      "config/crd/bases/ray.io_rayclusters.yaml=kuberay-crd-rayclusters.yaml" \
      "config/crd/bases/ray.io_rayjobs.yaml=kuberay-crd-rayjobs.yaml" \
      "config/crd/bases/ray.io_rayservices.yaml=kuberay-crd-rayservices.yaml" ;;
    mpi-operator) echo "mpi github.com/kubeflow/mpi-operator" \
      "manifests/base/kubeflow.org_mpijobs.yaml=mpi-operator-crd.yaml" ;;
    trainer) echo "trainer github.com/kubeflow/trainer/v2" \
      "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml=trainer-crd-trainjobs.yaml" \
      "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml=trainer-crd-trainingruntimes.yaml" \
      "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml=trainer-crd-clustertrainingruntimes.yaml" \
      "manifests/base/webhook/manifests.yaml=trainer-webhooks.yaml" \
      "manifests/base/runtimes/torch_distributed.yaml=trainer-runtime-torch-distributed.yaml" ;;
    kueue) echo "kueue sigs.k8s.io/kueue" \
      "config/components/crd/bases/kueue.x-k8s.io_admissionchecks.yaml=kueue-crd-admissionchecks.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml=kueue-crd-clusterqueues.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_cohorts.yaml=kueue-crd-cohorts.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml=kueue-crd-localqueues.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_multikueueclusters.yaml=kueue-crd-multikueueclusters.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_multikueueconfigs.yaml=kueue-crd-multikueueconfigs.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_provisioningrequestconfigs.yaml=kueue-crd-provisioningrequestconfigs.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml=kueue-crd-resourceflavors.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_topologies.yaml=kueue-crd-topologies.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_workloadpriorityclasses.yaml=kueue-crd-workloadpriorityclasses.yaml" \
      "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml=kueue-crd-workloads.yaml" \
      "config/components/webhook/manifests.yaml=kueue-webhooks.yaml" ;;
  esac
}

# Kubernetes' version stamps, as upstream's hack/lib/version.sh sets them, so /version and
# `kubectl version` report the release. The module proxy does not tell the git commit;
# buildDate (the release's publication time, added at build time) follows from go.mod.
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit="
done
# Helm's Makefile, building a release tag, sets the version and an empty "unreleased" metadata;
# without them `helm version` says only v4.3. The version is what helm/go.mod pins.
helm_version="$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ { print $2; exit }' "$here/helm/go.mod")"
[[ -n "$helm_version" ]] || die "could not read the helm.sh/helm/v4 version from $here/helm/go.mod"
helm_ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version"
helm_ldflags+=" -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
# Hashed into every stamp: keep it in step with the exports and the go build line below.
build_env="CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly -buildvcs=false -trimpath"

# One stamp per binary: the hash of everything that determines it (the Go toolchain, the
# build settings, its module's go.mod and go.sum, its ldflags and, for a binary of this
# module, its main.go). Adding or bumping one operator rebuilds only that operator.
go_version="$(go version)"
binary_hash() {
  local dir pkg kind
  read -r dir pkg kind <<<"$(recipe "$1")"
  (
    cd "$here"
    echo "$go_version"
    echo "$build_env $dir $pkg $kind"
    [[ "$kind" != kubernetes ]] || echo "$k8s_ldflags"
    [[ "$kind" != helm ]] || echo "$helm_ldflags"
    sha256sum "$dir/go.mod" "$dir/go.sum"
    [[ "$dir" != . ]] || find "cmd/$1" -name '*.go' -type f | LC_ALL=C sort | xargs sha256sum
    echo "$(release_files "$1")"
  ) | sha256sum | cut -d' ' -f1
}

declare -A hashes
for b in "${binaries[@]}"; do hashes[$b]="$(binary_hash "$b")"; done

fresh() {
  [[ "${MUSTER_CONTROLPLANE_REBUILD:-0}" != 1 ]] || return 1
  [[ -x "$bin/$1" && -f "$stamps/$1" && "$(cat "$stamps/$1")" == "${hashes[$1]}" ]] || return 1
  local spec
  for spec in $(release_files "$1" | cut -d' ' -f3-); do [[ -f "$bin/${spec#*=}" ]] || return 1; done
}

up_to_date() {
  local b
  for b in "${binaries[@]}"; do fresh "$b" || return 1; done
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

log "Kubernetes $version; Go $(go env GOVERSION); output $bin"
log "module cache $GOMODCACHE, build cache $GOCACHE"

cd "$here"
start_all=$SECONDS
mkdir -p "$bin" "$stamps"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
downloaded=" "

for b in "${binaries[@]}"; do
  if fresh "$b"; then
    continue
  fi
  read -r dir pkg kind <<<"$(recipe "$b")"
  if [[ "$downloaded" != *" $dir "* ]]; then
    log "downloading the Go modules of ${dir/#./the control plane} (first time: a few hundred MB from the Go module proxy)..."
    (cd "$dir" && go mod download) \
      || die "go mod download failed in $dir (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
    downloaded+="$dir "
  fi
  ldflags="-s -w"
  [[ "$kind" != helm ]] || ldflags="$helm_ldflags"
  if [[ "$kind" == kubernetes ]]; then
    build_date="$(go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null || true)"
    ldflags="$k8s_ldflags"
    if [[ -n "$build_date" ]]; then
      for vpkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $vpkg.buildDate=$build_date"
      done
    fi
  fi
  log "building $b (first build takes several minutes; cached rebuilds are quick)..."
  t0=$SECONDS
  rm -f "$stamps/$b"
  (cd "$dir" && go build -p 2 -trimpath -ldflags "$ldflags" -o "$tmp/$b" "$pkg") \
    || die "building $b failed; see the go output above"
  mv -f "$tmp/$b" "$bin/$b"
  read -r -a files <<<"$(release_files "$b")"
  if (( ${#files[@]} )); then
    src="$(cd "${files[0]}" && go list -m -f '{{.Dir}}' "${files[1]}")" \
      || die "${files[1]} is not in the module cache"
    for spec in "${files[@]:2}"; do
      cp -f "$src/${spec%%=*}" "$bin/${spec#*=}"
      chmod 0644 "$bin/${spec#*=}"
    done
  fi
  echo "${hashes[$b]}" >"$stamps/$b"
  log "built $b in $((SECONDS - t0))s ($(du -h "$bin/$b" | cut -f1))"
done

log "control plane ready in $((SECONDS - start_all))s"
echo "$bin"
