#!/usr/bin/env bash
# Builds what a real one-node cluster needs beyond the API server (issue 11): kubelet,
# kube-scheduler and kube-proxy (the ClusterIP data path, nftables mode) from the same
# k8s.io/kubernetes module graph as tests/k8s/build-apiserver.sh (run first: it makes the
# wrapper module and the staging replaces), and CoreDNS from the Go module proxy. Cached in
# $CONVEYOR_CACHE/k8s/<version>/bin; prints that directory on stdout.
# Recipe: ../shared/docs/real-pods.md §3-4.
set -euo pipefail
K8S="${CONVEYOR_K8S_VERSION:-1.35.4}"
COREDNS="${CONVEYOR_COREDNS_VERSION:-v1.15.0}"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
W="$CACHE/k8s/$K8S"
BIN="$W/bin"
WITH_CONTROLLER_MANAGER=1 "$HERE/build-apiserver.sh" >/dev/null
if [ -x "$BIN/kubelet" ] && [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/kube-proxy" ] && [ -x "$BIN/coredns" ]; then
  echo "$BIN"; exit 0
fi
# One build at a time, as in build-apiserver.sh.
exec 9>"$W/build-node.lock"
flock 9
if [ -x "$BIN/kubelet" ] && [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/kube-proxy" ] && [ -x "$BIN/coredns" ]; then
  echo "$BIN"; exit 0
fi
export GOMODCACHE="${GOMODCACHE:-$CACHE/go/mod}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
MINOR=$(echo "$K8S" | cut -d. -f2)
LDF="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR"
cd "$W/src"
for cmd in kube-scheduler kubelet kube-proxy; do
  [ -x "$BIN/$cmd" ] && continue
  start=$(date +%s)
  go get "k8s.io/kubernetes/cmd/$cmd@v$K8S" >&2
  CGO_ENABLED=0 go build -trimpath -o "$BIN/$cmd.tmp" -ldflags "$LDF" "k8s.io/kubernetes/cmd/$cmd" >&2
  mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  echo "build-node: $cmd v$K8S in $(( $(date +%s) - start )) s" | tee -a "$W/build-times.txt" >&2
done
if [ ! -x "$BIN/coredns" ]; then
  start=$(date +%s)
  # Its own module graph (no replaces): built outside the kubernetes wrapper module.
  GOBIN="$BIN" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS" >&2
  echo "build-node: coredns $COREDNS in $(( $(date +%s) - start )) s" | tee -a "$W/build-times.txt" >&2
fi
echo "$BIN"
