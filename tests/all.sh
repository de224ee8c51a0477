#!/usr/bin/env bash
# The one test command (README.md, .ci/run): installs what the tests need, caches it under
# ~/.cache/conveyor (outside the checkout, so a fresh clone on the same machine reuses it), and
# runs every test: formatting and clippy checks, the Rust workspace (unit, property, crash, torn-tail, full-disk and
# power-loss tests on tests/faultfs) and
# the real-client compatibility suite, the failover ledger with the Java client, the Kubernetes
# operator tests, consumer autoscaling with a real Prometheus, the container image and the
# operator on real pods.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONVEYOR_CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
mkdir -p "$CONVEYOR_CACHE"
if [ "${CI:-}" = "true" ]; then
  # CI clones afresh each run: keep compiled dependencies between runs.
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CONVEYOR_CACHE/target}"
  # Each run builds the workspace crates once: incremental compilation's caches would only
  # grow the cache (15 GB after a few runs, on a disk the brokers under test refuse to fill
  # past 90 %).
  export CARGO_INCREMENTAL=0
  # File and line tables only (backtraces keep file:line): full debug info made every one of the ~40 test
  # binaries slower to link and the cache larger, and no test reads it.
  export CARGO_PROFILE_DEV_DEBUG=line-tables-only
fi
export CARGO_TERM_COLOR=never

# The brokers refuse writes once their disk is 90 % full (RocketMQ's diskMaxUsedSpaceRatio), so a
# nearly full /tmp makes every suite that sends fail with timeouts far from the cause: say it
# first. (Leftovers of interrupted runs are the usual cause: /tmp/tmp.*, /tmp/conveyor-*.)
tmp_used=$(df -P "${TMPDIR:-/tmp}" | awk 'NR==2 {sub("%", "", $5); print $5}')
if [ "${tmp_used:-0}" -ge 80 ]; then
  echo "!! ${TMPDIR:-/tmp} is ${tmp_used} % full: brokers refuse writes at 90 %, tests that send will fail"
  du -sh "${TMPDIR:-/tmp}"/tmp.* "${TMPDIR:-/tmp}"/conveyor-* 2>/dev/null | sort -h | tail -5 || true
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "== no import circle inside any crate (tests/arch/import_cycles.py)"
python3 tests/arch/import_cycles.py broker/protocol broker/remoting broker/settings broker/store broker/client broker/server operator tests/faultfs

# Debian packages the Rust tests need, installed when missing (once: later runs find them):
# - fuse3 (fusermount3): the power-loss test (broker/server/tests/power_loss.rs) serves tests/faultfs
#   over FUSE; as root it mounts with mount(2), otherwise fuser goes through fusermount3. /dev/fuse
#   itself must exist: under CI=true the test fails without it.
# - iproute2 (ip) and nftables (nft): the partition tests (broker/server/tests/failover.rs,
#   tests/compat/failover-gaps.sh) put brokers in network namespaces and cut them apart with
#   nftables rules.
missing=()
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v ip >/dev/null || missing+=(iproute2)
command -v nft >/dev/null || missing+=(nftables)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing ${missing[*]} for the power-loss and partition tests"
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] \
    && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >"$CONVEYOR_CACHE/apt-test-tools.log" 2>&1; then
    :
  else
    echo "tests/all.sh: could not install ${missing[*]} (see $CONVEYOR_CACHE/apt-test-tools.log)" >&2
    if [ "${CI:-}" = "true" ]; then exit 1; fi
  fi
fi

# A machine without the Kubernetes binaries builds them from the Go module proxy (about 10 min on 2 cores, most of
# it downloading and compiling kube-apiserver's packages). Started now, at the lowest CPU and I/O priority, it uses
# what the cargo tests and the compatibility suites leave idle; the Kubernetes suites call the same build scripts,
# which wait for it (they take a lock) or build whatever it could not. Only with a go already on the PATH (else
# install-tools.sh fetches one when the Kubernetes suites start).
if command -v go >/dev/null && ! [ -x "$CONVEYOR_CACHE/k8s/${CONVEYOR_K8S_VERSION:-1.35.4}/bin/coredns" ]; then
  echo "== building the Kubernetes binaries in the background (log: $CONVEYOR_CACHE/k8s-prebuild.log)"
  nice -n 19 ionice -c 3 bash tests/k8s/build-node.sh >"$CONVEYOR_CACHE/k8s-prebuild.log" 2>&1 &
fi

echo "== cargo test --workspace"
cargo test --workspace --all-targets 2>&1 | tee "$CONVEYOR_CACHE/cargo-test.log"
echo "== cargo test: done $((SECONDS / 60)) min after the start"

# Every suite runs, whatever the file mode of its script (a checkout that lost the executable bit
# must not skip a suite silently); a missing script is a failure.
suite() { # suite TITLE SCRIPT
  echo "== $1 ($2)"
  if [ ! -f "$2" ]; then
    echo "tests/all.sh: suite script $2 is missing" >&2
    exit 1
  fi
  local started=$SECONDS
  bash "$2"
  echo "== $1: passed in $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s (since the start: $((SECONDS / 60)) min)"
}

# The container image first: built from ./Dockerfile with buildah, checked with podman (installed when missing).
# Its release build is the only one of the run: the real-client suite runs the image's conveyor (copied out
# to the cache), the binary users get.
suite "container image" tests/k8s/image.sh
CONVEYOR_BIN="$CONVEYOR_CACHE/image/bin/conveyor" \
  suite "real RocketMQ clients against conveyor standalone (the image's binary)" tests/compat/run-against-standalone.sh
suite "ACL with real clients" tests/compat/acl.sh
suite "5.x SDKs with ACL" tests/compat/grpc-acl.sh
suite "TLS certificate rotation under load" tests/compat/tls-rotation.sh
# Replication: the Java producer through 20 SIGKILLs of the master (controller mode), with a ledger.
suite "failover with the Java client" tests/compat/failover.sh
# Failover as the unmodified client sees it: the Java producer at its defaults through 5 kills (kept
# down), 5 freezes (30 s) and 5 network cuts of the master, each broker in its own network
# namespace, with the group's address; 0 acknowledged lost and a median gap of 10 s or less each.
suite "failover gaps with the Java client at its defaults" tests/compat/failover-gaps.sh
# mqadmin's replication commands (haStatus, getSyncStateSet, getBrokerEpoch, electMaster, …) and draining a
# broker group with wipeWritePerm under a running Java producer and consumer.
suite "mqadmin replication and drain" tests/compat/mqadmin-replication.sh
# Kubernetes operator: helm/schema/hadolint checks and the real kube-apiserver + etcd tests. The tools
# are installed by the script; under CI=true a part it still has to skip fails.
suite "Kubernetes operator" tests/k8s/e2e.sh
# Consumer autoscaling: ConsumerAutoscalers on the real API server, two real broker groups and a real
# Prometheus (Debian's package, fetched into the cache).
suite "consumer autoscaling" tests/k8s/autoscaler-e2e.sh
# Real pods: a one-node cluster (kubelet on containerd, scheduler, controller manager, CoreDNS) running the
# image just built; the operator's cluster serves a Java producer and consumer, a killed broker restarts.
suite "Kubernetes operator on real pods" tests/k8s/pods-e2e.sh
