#!/usr/bin/env bash
# The Rust SDK's side of grpc.sh's contract (see grpc-java/sdk.sh): the official Rust client, crates.io `rocketmq`
# (apache/rocketmq-clients rust/), pinned with every dependency by Cargo.lock.
#   sdk.sh fetch          build the checks (src/, a standalone Cargo project) into
#                         ${CONVEYOR_CACHE:-~/.cache/conveyor}/compat/grpc-rust-target (idempotent)
#   sdk.sh version        print the SDK version (the `rocketmq` version in Cargo.lock)
#   sdk.sh programs       print one "Program:check check ..." line per program, in running order
#   sdk.sh run PROGRAM    run one program (GRPC_ENDPOINT, GRPC_CHECKS, GRPC_RUN_ID, GRPC_TLS, GRPC_TIMEOUT_SCALE,
#                         GRPC_LOG_DIR as for every SDK); the SDK's own log goes to GRPC_LOG_DIR/sdk/PROGRAM.log
# Every cargo call takes /tmp/conveyor-cargo.lock, so it never builds beside another build of this machine.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/compat"
export CARGO_TARGET_DIR="$OUT/grpc-rust-target"
BIN="$CARGO_TARGET_DIR/release/grpc-rust-checks"

version() {
  awk '/^name = "rocketmq"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$HERE/Cargo.lock"
}

case "${1:-}" in
  fetch)
    mkdir -p "$OUT"
    # The crate ships its generated protobuf code (build.rs runs protoc only with BUILD_PROTO set): no protoc needed.
    flock /tmp/conveyor-cargo.lock cargo build --release --locked --manifest-path "$HERE/Cargo.toml"
    test -x "$BIN"
    ;;
  version) version ;;
  programs)
    # Not here, because rocketmq 5.0.0 (the newest on crates.io) lacks them (see README.md):
    #   simple-change-invisible-extend simple-change-invisible-ack (SimpleConsumer has no changeInvisibleDuration)
    #   push-success push-failure-redelivery push-dlq push-fifo-order (no PushConsumer)
    cat <<'PROGRAMS'
Producers:send-normal send-fifo send-delay tx-commit tx-rollback tx-check-commit
SimpleConsumers:simple-ack simple-redeliver simple-tag-filter
PROGRAMS
    ;;
  run)
    : "${GRPC_LOG_DIR:?GRPC_LOG_DIR is not set}"
    GRPC_RUST_SDK_VERSION="$(version)" exec "$BIN" "${2:?program}"
    ;;
  *) echo "usage: sdk.sh fetch|version|programs|run PROGRAM" >&2; exit 2 ;;
esac
