#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy (no release download) and caches them in
# $CONVEYOR_CACHE/k8s/<version>/bin, outside the checkout, so later runs and fresh clones reuse them.
# Prints the bin directory on stdout. Recipe: ../shared/docs/k8s-testing.md §1.3.
set -euo pipefail
K8S="${CONVEYOR_K8S_VERSION:-1.35.4}"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
W="$CACHE/k8s/$K8S"
BIN="$W/bin"
if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/etcd" ] && { [ -z "${WITH_CONTROLLER_MANAGER:-}" ] || [ -x "$BIN/kube-controller-manager" ]; }; then
  echo "$BIN"; exit 0
fi
command -v go >/dev/null || { echo "build-apiserver: go not found" >&2; exit 2; }
mkdir -p "$W"
# One build at a time (tests/all.sh may be building these in the background when a suite asks): the second
# waits, then finds what the first built.
exec 9>"$W/build-apiserver.lock"
flock 9
if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/etcd" ] && { [ -z "${WITH_CONTROLLER_MANAGER:-}" ] || [ -x "$BIN/kube-controller-manager" ]; }; then
  echo "$BIN"; exit 0
fi
export GOMODCACHE="${GOMODCACHE:-$CACHE/go/mod}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
MINOR=$(echo "$K8S" | cut -d. -f2); STAGING="v0.${K8S#1.}"
mkdir -p "$W/src" "$BIN"
cd "$W/src"
start=$(date +%s)
[ -f go.mod ] || go mod init local/envtest-bins >&2
GOMOD=$(go mod download -json "k8s.io/kubernetes@v$K8S" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[A-Za-z0-9._-]*\) => ./staging/.*#\1#p' "$GOMOD"); do
  go mod edit -replace="$m=$m@$STAGING"
done
go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S" >&2
[ -x "$BIN/kube-apiserver" ] || CGO_ENABLED=0 go build -trimpath -o "$BIN/kube-apiserver.tmp" \
  -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR" \
  k8s.io/kubernetes/cmd/kube-apiserver >&2
[ -x "$BIN/kube-apiserver" ] || mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
if [ -n "${WITH_CONTROLLER_MANAGER:-}" ] && [ ! -x "$BIN/kube-controller-manager" ]; then
  # Only for the garbage collector (cascading deletion through owner references).
  go get "k8s.io/kubernetes/cmd/kube-controller-manager@v$K8S" >&2
  CGO_ENABLED=0 go build -trimpath -o "$BIN/kube-controller-manager.tmp" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR" \
    k8s.io/kubernetes/cmd/kube-controller-manager >&2
  mv "$BIN/kube-controller-manager.tmp" "$BIN/kube-controller-manager"
  echo "build-apiserver: kube-controller-manager in $(( $(date +%s) - start )) s since start" >&2
fi
t1=$(date +%s)
# etcd from the same module graph (the client version the apiserver was built against).
# The etcd client version the apiserver is built against; build the server of that version.
ETCD_VER=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/client/v3)
if [ ! -x "$BIN/etcd" ]; then
  go get "go.etcd.io/etcd/server/v3@$ETCD_VER" >&2
  echo "build-apiserver: etcd $ETCD_VER" >&2
  CGO_ENABLED=0 go build -trimpath -o "$BIN/etcd.tmp" -ldflags "-s -w" go.etcd.io/etcd/server/v3 >&2
  mv "$BIN/etcd.tmp" "$BIN/etcd"
fi
t2=$(date +%s)
echo "build-apiserver: kube-apiserver v$K8S in $((t1-start)) s, etcd in $((t2-t1)) s" | tee -a "$W/build-times.txt" >&2
echo "$BIN"
