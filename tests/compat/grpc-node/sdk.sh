#!/usr/bin/env bash
# The Node.js SDK's side of grpc.sh's contract (see grpc-java/sdk.sh):
#   sdk.sh fetch          install rocketmq-client-nodejs (pinned in package.json / package-lock.json) with npm into
#                         ${CONVEYOR_CACHE:-~/.cache/conveyor}/compat/grpc-node/ and syntax-check the programs
#                         (idempotent: a stamp of package.json + package-lock.json skips an unchanged install)
#   sdk.sh version        print the installed SDK version (the checks report as grpc-node-<version>/<check>)
#   sdk.sh programs       print one "Program:check check ..." line per program, in running order
#   sdk.sh run PROGRAM    run one program (PROGRAM.js beside this script; plain JavaScript, the SDK found through
#                         NODE_PATH) against GRPC_ENDPOINT with GRPC_CHECKS, GRPC_RUN_ID, GRPC_TLS,
#                         GRPC_TIMEOUT_SCALE and GRPC_LOG_DIR: PASS/FAIL lines on stdout, diagnostics on stderr
#                         tagged "[check] seconds"; the SDK's log goes to GRPC_LOG_DIR/sdk/ (level:
#                         GRPC_NODE_SDK_LOG_LEVEL, default INFO) and GRPC_LOG_DIR/home/logs/rocketmq/
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/compat"
DIR="$OUT/grpc-node"
PROGRAMS=(Producers SimpleConsumers PushConsumers FifoPush)

case "${1:-}" in
  fetch)
    command -v node >/dev/null || { echo "sdk.sh: node is not installed" >&2; exit 1; }
    command -v npm >/dev/null || { echo "sdk.sh: npm is not installed" >&2; exit 1; }
    mkdir -p "$DIR"
    stamp="$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -d' ' -f1)"
    if [[ "$(cat "$DIR/stamp" 2>/dev/null)" != "$stamp" || ! -f "$DIR/node_modules/rocketmq-client-nodejs/package.json" ]]; then
      rm -f "$DIR/stamp"
      cp "$HERE/package.json" "$HERE/package-lock.json" "$DIR/"
      (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error)
      echo "$stamp" >"$DIR/stamp"
    fi
    for p in "${PROGRAMS[@]}" g; do
      node --check "$HERE/$p.js"
    done
    NODE_PATH="$DIR/node_modules" node -e 'require("rocketmq-client-nodejs")'
    echo "sdk.sh: rocketmq-client-nodejs $(bash "$0" version) in $DIR" >&2
    ;;
  version)
    node -p 'require(process.argv[1]).version' "$DIR/node_modules/rocketmq-client-nodejs/package.json"
    ;;
  programs)
    cat <<'PROGRAMS'
Producers:send-normal send-fifo send-delay tx-commit tx-rollback tx-check-commit
SimpleConsumers:simple-ack simple-redeliver simple-change-invisible-extend simple-change-invisible-ack simple-tag-filter
PushConsumers:push-success push-failure-redelivery push-dlq
FifoPush:push-fifo-order
PROGRAMS
    ;;
  run)
    log="${GRPC_LOG_DIR:?GRPC_LOG_DIR is not set}"
    program="${2:?program}"
    [[ -f "$HERE/$program.js" ]] || { echo "sdk.sh: no program $program" >&2; exit 2; }
    mkdir -p "$log/home"
    # HOME: the SDK's consume services log to ~/logs/rocketmq/ themselves. --no-deprecation: grpc-js over TLS to an
    # IP address triggers DEP0123 (TLS ServerName set to an IP) on stderr.
    HOME="$log/home" NODE_PATH="$DIR/node_modules" exec node --no-deprecation "$HERE/$program.js"
    ;;
  *) echo "usage: sdk.sh fetch|version|programs|run PROGRAM" >&2; exit 2 ;;
esac
