#!/usr/bin/env bash
# The Java SDK's side of grpc.sh's contract (every tests/compat/grpc-<sdk>/sdk.sh has it):
#   sdk.sh fetch          install the SDK and build the checks into ${CONVEYOR_CACHE:-~/.cache/conveyor} (idempotent)
#   sdk.sh version        print the SDK version (the checks report as grpc-<sdk>-<version>/<check>)
#   sdk.sh programs       print one "Program:check check ..." line per program, in running order
#   sdk.sh run PROGRAM    run one program against GRPC_ENDPOINT with GRPC_CHECKS (its checks to run), GRPC_RUN_ID
#                         (the suffix of the names conveyor.grpc.Resources created), GRPC_TLS, GRPC_TIMEOUT_SCALE
#                         and GRPC_LOG_DIR: "PASS grpc-<sdk>-<version>/<check>" or "FAIL …/<check>: reason" lines
#                         on stdout, diagnostics on stderr tagged "[check] seconds"
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/compat"

case "${1:-}" in
  fetch) "$HERE/../grpc-fetch.sh" ;;
  version) cat "$OUT/grpc-java.version" ;;
  programs)
    cat <<'PROGRAMS'
Producers:send-normal send-fifo send-delay tx-commit tx-rollback tx-check-commit
SimpleConsumers:simple-ack simple-redeliver simple-change-invisible-extend simple-change-invisible-ack simple-tag-filter
PushConsumers:push-success push-failure-redelivery push-dlq
FifoPush:push-fifo-order
MixedGroup:mixed-pop-group
PROGRAMS
    ;;
  run)
    log="${GRPC_LOG_DIR:?GRPC_LOG_DIR is not set}"
    # The SDK logs to a file below the log directory, never to stdout. MixedGroup runs remoting/*.java (the remoting
    # client 5.3.3) in a child JVM on fetch.sh's java-rmq5.classpath.
    export GRPC_RMQ5_CLASSPATH_FILE="$OUT/java-rmq5.classpath" GRPC_JAVA_DIR="$HERE"
    exec java -Xms64m -Xmx512m -Drocketmq.log.root="$log/sdk" -Dmq.consoleAppender.enabled=false \
      -Duser.home="$log/home" -cp "$(cat "$OUT/grpc-java.classpath")" "conveyor.grpc.${2:?program}"
    ;;
  *) echo "usage: sdk.sh fetch|version|programs|run PROGRAM" >&2; exit 2 ;;
esac
