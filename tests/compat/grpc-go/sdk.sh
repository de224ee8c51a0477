#!/usr/bin/env bash
# The Go SDK's side of grpc.sh's contract (see grpc-java/sdk.sh): the official Go 5.x gRPC SDK,
# github.com/apache/rocketmq-clients/golang/v5 (pinned in go.mod/go.sum), from the Go module proxy.
#   sdk.sh fetch          download the SDK and build the checks into ${CONVEYOR_CACHE:-~/.cache/conveyor} (idempotent):
#                         compat/grpc-go (the binary), compat/grpc-go.version, compat/grpc-go-stamp; module and build
#                         caches in go/mod and go/build (shared with fetch.sh)
#   sdk.sh version        print the SDK version (the checks report as grpc-go-<version>/<check>)
#   sdk.sh programs       print one "Program:check check ..." line per program, in running order
#   sdk.sh run PROGRAM    run one program against GRPC_ENDPOINT with GRPC_CHECKS, GRPC_RUN_ID, GRPC_TLS,
#                         GRPC_TIMEOUT_SCALE and GRPC_LOG_DIR (the SDK logs to GRPC_LOG_DIR/sdk/; GRPC_SDK_LOG_LEVEL=debug
#                         for its debug log)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
BIN="$OUT/grpc-go"

inputs_hash() {
  (
    cd "$HERE"
    find . -maxdepth 1 -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) | LC_ALL=C sort | xargs sha256sum
    go version
  ) | sha256sum | cut -d' ' -f1
}

fetch() {
  command -v go >/dev/null || { echo "grpc-go/sdk.sh: go not found on PATH" >&2; exit 1; }
  mkdir -p "$OUT"
  local hash
  hash="$(inputs_hash)"
  if [[ -x "$BIN" && -s "$OUT/grpc-go.version" && -f "$OUT/grpc-go-stamp" && "$(cat "$OUT/grpc-go-stamp")" == "$hash" ]]; then
    echo "grpc-go: up to date in $OUT (rocketmq-clients/golang $(cat "$OUT/grpc-go.version"))"
    return
  fi
  rm -f "$OUT/grpc-go-stamp"
  (
    cd "$HERE"
    export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local
    export GOFLAGS="-mod=readonly -buildvcs=false"
    go build -o "$BIN.tmp" .
  )
  mv "$BIN.tmp" "$BIN"
  "$BIN" version >"$OUT/grpc-go.version"
  echo "$hash" >"$OUT/grpc-go-stamp"
  echo "grpc-go: built $BIN (rocketmq-clients/golang $(cat "$OUT/grpc-go.version"))"
}

case "${1:-}" in
  fetch) fetch ;;
  version) cat "$OUT/grpc-go.version" ;;
  programs)
    cat <<'PROGRAMS'
Producers:send-normal send-fifo send-delay tx-commit tx-rollback tx-check-commit
SimpleConsumers:simple-ack simple-redeliver simple-change-invisible-extend simple-change-invisible-ack simple-tag-filter
PushConsumers:push-success push-failure-redelivery push-dlq
FifoPush:push-fifo-order
PROGRAMS
    ;;
  run)
    : "${GRPC_LOG_DIR:?GRPC_LOG_DIR is not set}"
    exec "$BIN" "${2:?program}"
    ;;
  *) echo "usage: sdk.sh fetch|version|programs|run PROGRAM" >&2; exit 2 ;;
esac
