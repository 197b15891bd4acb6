#!/usr/bin/env bash
# Smoke test of the locally built control plane: starts etcd, kube-apiserver
# and kube-scheduler on loopback in a temp dir, creates a GPU Node and a Pod,
# and checks that the real scheduler binds the Pod. With --workload it also
# enables the GenericWorkload feature (scheduling.k8s.io/v1beta1 Workload and
# PodGroup) and checks the in-tree gang scheduling of a PodGroup.
#
#   bash tests/e2e/controlplane/smoke.sh [--workload] [--keep]
#
# --keep leaves the work dir (logs, kubeconfig) behind; processes are always
# stopped on exit. Ports can be overridden with ETCD_CLIENT_PORT,
# ETCD_PEER_PORT, APISERVER_PORT and SCHEDULER_PORT.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
workload=0
keep=0
for a in "$@"; do
  case "$a" in
    --workload) workload=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 [--workload] [--keep]" >&2; exit 2 ;;
  esac
done

ETCD_CLIENT_PORT="${ETCD_CLIENT_PORT:-23790}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${APISERVER_PORT:-26443}"
SCHEDULER_PORT="${SCHEDULER_PORT:-20259}"
TOKEN=admin-token

log() { printf '[smoke %s] %s\n' "$(date +%T)" "$*" >&2; }
fail() { printf '[smoke] FAIL: %s\n' "$*" >&2; exit 1; }

bin="${MUSTER_CONTROLPLANE_BIN:-$(bash "$here/build.sh" | tail -n1)}"
for b in etcd kube-apiserver kube-scheduler kubectl; do
  [[ -x "$bin/$b" ]] || fail "$bin/$b missing; run build.sh"
done

W="$(mktemp -d "${TMPDIR:-/tmp}/muster-cp.XXXXXX")"
pids=()
cleanup() {
  local rc=$?
  # Stop in reverse start order (scheduler, apiserver, etcd), one at a time:
  # an apiserver whose etcd is already gone hangs in its shutdown.
  local i p t0=$SECONDS
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[i]}
    kill -TERM "$p" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null && log "pid $p ignored SIGTERM for 10s; killed"
    wait "$p" 2>/dev/null || true
  done
  ((${#pids[@]} == 0)) || log "stopped ${#pids[@]} processes in $((SECONDS - t0))s"
  if [[ $rc -ne 0 ]]; then
    for f in etcd apiserver scheduler; do
      [[ -f "$W/$f.log" ]] && { echo "---- last lines of $f.log" >&2; tail -n 25 "$W/$f.log" >&2; }
    done
  fi
  if [[ $keep == 1 ]]; then log "work dir kept: $W"; else rm -rf "$W"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for NAME SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
  local name=$1 secs=$2 t0=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - t0 < secs)) || fail "$name not ready after ${secs}s"
    sleep 0.2
  done
  log "$name ready after $((SECONDS - t0))s"
}

# ---- etcd --------------------------------------------------------------
t_start=$SECONDS
"$bin/etcd" --data-dir="$W/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync --watch-progress-notify-interval=5s >"$W/etcd.log" 2>&1 &
pids+=($!)
wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

# ---- kube-apiserver ------------------------------------------------------
mkdir -p "$W/pki"
openssl genrsa -out "$W/sa.key" 2048 2>/dev/null
echo "$TOKEN,admin,admin-uid,\"system:masters\"" >"$W/tokens.csv"
apiserver_flags=(
  --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT"
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT"
  --cert-dir="$W/pki"
  --service-account-issuer=https://kubernetes.default.svc.cluster.local
  --service-account-key-file="$W/sa.key" --service-account-signing-key-file="$W/sa.key"
  --service-cluster-ip-range=10.0.0.0/24
  --token-auth-file="$W/tokens.csv"
  --authorization-mode=RBAC
  --disable-admission-plugins=ServiceAccount,TaintNodesByCondition
  --endpoint-reconciler-type=none --allow-privileged=true
)
# The apiserver identity lease controller's pre-shutdown hook blocks on etcd: if
# etcd is stopped first (or together with it) the apiserver hangs for 10s to
# minutes on SIGTERM. Turning it off (and the proxy that depends on it) makes
# shutdown take ~1s in any order. One --feature-gates flag carries all gates.
gates="APIServerIdentity=false,UnknownVersionInteroperabilityProxy=false"
if [[ $workload == 1 ]]; then
  gates+=",GenericWorkload=true"
  apiserver_flags+=(--runtime-config=scheduling.k8s.io/v1beta1=true)
fi
apiserver_flags+=(--feature-gates="$gates")
"$bin/kube-apiserver" "${apiserver_flags[@]}" >"$W/apiserver.log" 2>&1 &
pids+=($!)
wait_for kube-apiserver 120 curl -fsS --cacert "$W/pki/apiserver.crt" \
  -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$APISERVER_PORT/readyz"

cat >"$W/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: "$W/pki/apiserver.crt"}
users:
- name: admin
  user: {token: "$TOKEN"}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
EOF
export KUBECONFIG="$W/kubeconfig"
k() { "$bin/kubectl" "$@"; }
log "kubectl version: $(k version -o json | tr -d ' \n')"

# ---- kube-scheduler ------------------------------------------------------
cat >"$W/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "$W/kubeconfig"
leaderElection:
  leaderElect: false
EOF
scheduler_flags=(--config="$W/scheduler.yaml" --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" -v=2)
if [[ $workload == 1 ]]; then
  scheduler_flags+=(--feature-gates=GenericWorkload=true)
fi
"$bin/kube-scheduler" "${scheduler_flags[@]}" >"$W/scheduler.log" 2>&1 &
pids+=($!)
wait_for kube-scheduler 60 curl -fsSk "https://127.0.0.1:$SCHEDULER_PORT/readyz"
log "control plane up in $((SECONDS - t_start))s"

# ---- a GPU node (status is accepted on create for Nodes) ----------------
k create -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-0
  labels: {kubernetes.io/hostname: gpu-node-0}
status:
  capacity: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}
  allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}
  conditions:
  - {type: Ready, status: "True", reason: KubeletReady, message: fake}
EOF
gpus="$(k get node gpu-node-0 -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')"
if [[ "$gpus" != 8 ]]; then
  log "status was dropped on create (allocatable gpu='$gpus'); patching the status subresource"
  k patch node gpu-node-0 --subresource=status --type=merge -p \
    '{"status":{"capacity":{"cpu":"64","memory":"512Gi","nvidia.com/gpu":"8","pods":"110"},"allocatable":{"cpu":"64","memory":"512Gi","nvidia.com/gpu":"8","pods":"110"}}}'
  gpus="$(k get node gpu-node-0 -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')"
  [[ "$gpus" == 8 ]] || fail "node allocatable nvidia.com/gpu is '$gpus' after status patch"
else
  log "node created with status kept: allocatable nvidia.com/gpu=$gpus"
fi
taints="$(k get node gpu-node-0 -o jsonpath='{.spec.taints}')"
[[ -z "$taints" ]] || fail "node has taints: $taints"

# pod_yaml NAME GPUS [PODGROUP]
pod_yaml() {
  local group=""
  [[ -n "${3:-}" ]] && group="schedulingGroup: {podGroupName: $3}"
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  $group
  containers:
  - name: main
    image: registry.invalid/none:latest
    resources:
      requests: {cpu: "1", nvidia.com/gpu: "$2"}
      limits: {nvidia.com/gpu: "$2"}
EOF
}

wait_bound() { # NAME [SECONDS]
  local t0=$SECONDS node=""
  while ((SECONDS - t0 < ${2:-30})); do
    node="$(k get pod "$1" -o jsonpath='{.spec.nodeName}')"
    [[ -n "$node" ]] && { log "pod $1 bound to $node after $((SECONDS - t0))s"; return 0; }
    sleep 0.2
  done
  return 1
}

pod_yaml gpu-pod-4 4 | k create -f -
wait_bound gpu-pod-4 30 || fail "gpu-pod-4 was not bound; events: $(k get events -o wide 2>&1 | tail -5)"

# A pod that cannot fit (5 more GPUs, 4 left) must stay Pending with a reason.
pod_yaml gpu-pod-5 5 | k create -f -
sleep 3
[[ -z "$(k get pod gpu-pod-5 -o jsonpath='{.spec.nodeName}')" ]] || fail "gpu-pod-5 bound although only 4 GPUs are free"
log "gpu-pod-5 unschedulable as expected: $(k get pod gpu-pod-5 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')"
k delete pod gpu-pod-4 gpu-pod-5 --grace-period=0 --force >/dev/null 2>&1 || true

if [[ $workload == 1 ]]; then
  log "scheduling.k8s.io resources:"
  k api-resources --api-group=scheduling.k8s.io >&2
  k get --raw /apis/scheduling.k8s.io/v1beta1 >/dev/null || fail "scheduling.k8s.io/v1beta1 not served"
  k create -f - <<EOF
apiVersion: scheduling.k8s.io/v1beta1
kind: Workload
metadata: {name: train, namespace: default}
spec:
  podGroupTemplates:
  - name: workers
    schedulingPolicy: {gang: {minCount: 2}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: train-workers-0, namespace: default}
spec:
  workloadRef: {workloadName: train, templateName: workers}
  schedulingPolicy: {gang: {minCount: 2}}
EOF
  k get workloads.scheduling.k8s.io,podgroups.scheduling.k8s.io -o wide >&2
  # Gang: one member alone must not be bound; both members then bind together.
  pod_yaml train-0 4 train-workers-0 | k create -f -
  sleep 5
  [[ -z "$(k get pod train-0 -o jsonpath='{.spec.nodeName}')" ]] \
    || fail "train-0 bound alone although gang minCount=2"
  log "train-0 waits for its gang: $(k get pod train-0 -o jsonpath='{.status.conditions}')"
  pod_yaml train-1 4 train-workers-0 | k create -f -
  wait_bound train-0 30 || fail "train-0 not bound once the gang was complete"
  wait_bound train-1 30 || fail "train-1 not bound once the gang was complete"
  k get podgroup train-workers-0 -o jsonpath='{.status}' >&2; echo >&2
  # All-or-nothing: with 8 GPUs free, a gang of 4 + 8 GPUs must stay unbound
  # although its 4-GPU member would fit alone.
  k delete pod train-0 train-1 --grace-period=0 --force >/dev/null 2>&1
  k create -f - <<EOF
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: big, namespace: default}
spec:
  schedulingPolicy: {gang: {minCount: 2}}
EOF
  pod_yaml big-0 4 big | k create -f -
  pod_yaml big-1 8 big | k create -f -
  sleep 5
  [[ -z "$(k get pod big-0 -o jsonpath='{.spec.nodeName}')$(k get pod big-1 -o jsonpath='{.spec.nodeName}')" ]] \
    || fail "part of an unsatisfiable gang was bound"
  log "unsatisfiable gang left unbound: big-0: $(k get pod big-0 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')"
  log "big-1: $(k get pod big-1 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')"
  # Removing the oversized member and adding a fitting one completes the gang.
  k delete pod big-1 --grace-period=0 --force >/dev/null 2>&1
  pod_yaml big-2 4 big | k create -f -
  wait_bound big-0 30 || fail "big-0 not bound once its gang could fit"
  wait_bound big-2 30 || fail "big-2 not bound once its gang could fit"
fi

log "version: $(k get --raw /version | tr -d ' \n')"
echo "SMOKE OK (workload checks: $workload)"
