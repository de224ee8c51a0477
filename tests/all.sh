#!/usr/bin/env bash
# The one test command (README.md, .ci/run): installs what the tests need, caches it under
# ~/.cache/conveyor (outside the checkout, so a fresh clone on the same machine reuses it), and
# runs every test: formatting and clippy checks, the Rust workspace (unit, property, crash, torn-tail, full-disk tests) and
# the real-client compatibility suite, the Kubernetes operator tests and the container image.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONVEYOR_CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
mkdir -p "$CONVEYOR_CACHE"
if [ "${CI:-}" = "true" ]; then
  # CI clones afresh each run: keep compiled dependencies between runs.
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CONVEYOR_CACHE/target}"
fi
export CARGO_TERM_COLOR=never

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "== no import circle inside any crate (tests/arch/import_cycles.py)"
python3 tests/arch/import_cycles.py broker/protocol broker/remoting broker/settings broker/store broker/client broker/server operator

echo "== cargo test --workspace"
cargo test --workspace --all-targets 2>&1 | tee "$CONVEYOR_CACHE/cargo-test.log"

# Every suite runs, whatever the file mode of its script (a checkout that lost the executable bit
# must not skip a suite silently); a missing script is a failure.
suite() { # suite TITLE SCRIPT
  echo "== $1 ($2)"
  if [ ! -f "$2" ]; then
    echo "tests/all.sh: suite script $2 is missing" >&2
    exit 1
  fi
  bash "$2"
}

suite "real RocketMQ clients against conveyor standalone" tests/compat/run-against-standalone.sh
# Kubernetes operator: helm/schema/hadolint checks and the real kube-apiserver + etcd tests. The tools
# are installed by the script; under CI=true a part it still has to skip fails.
suite "Kubernetes operator" tests/k8s/e2e.sh
# The container image: built from ./Dockerfile with buildah, checked with podman (installed when missing).
suite "container image" tests/k8s/image.sh
