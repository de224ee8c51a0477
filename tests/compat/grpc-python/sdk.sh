#!/usr/bin/env bash
# The Python SDK's side of grpc.sh's contract (see grpc-java/sdk.sh), for the official RocketMQ 5.x Python SDK
# (PyPI rocketmq-python-client, package rocketmq; apache/rocketmq-clients python/):
#   sdk.sh fetch          install the pinned SDK (requirements.txt) from PyPI into a venv under
#                         ${CONVEYOR_CACHE:-~/.cache/conveyor}/compat/grpc-python-venv and byte-compile the checks
#                         into .../compat/grpc-python (idempotent)
#   sdk.sh version        print the SDK version (the checks report as grpc-python-<version>/<check>)
#   sdk.sh programs       print one "program:check check ..." line per program, in running order
#   sdk.sh run PROGRAM    run one program against GRPC_ENDPOINT with GRPC_CHECKS, GRPC_RUN_ID, GRPC_TLS,
#                         GRPC_TIMEOUT_SCALE and GRPC_LOG_DIR: PASS/FAIL lines on stdout, diagnostics on stderr
#                         tagged "[check] seconds"; the SDK's own log goes to GRPC_LOG_DIR/python-home/logs/
#                         (GRPC_PYTHON_SDK_DEBUG=1: at DEBUG level)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/compat"
VENV="$OUT/grpc-python-venv"
BUILD="$OUT/grpc-python"

python_bin() {
  local p
  for p in python3.11 python3; do
    if command -v "$p" >/dev/null 2>&1; then
      echo "$p"
      return
    fi
  done
  echo "sdk.sh: no python3 found" >&2
  exit 2
}

case "${1:-}" in
  fetch)
    want="$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1)"
    if [[ ! -x "$VENV/bin/python" || "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$want" ]]; then
      rm -rf "$VENV"
      "$(python_bin)" -m venv "$VENV"
      "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$HERE/requirements.txt"
      echo "$want" >"$VENV/.requirements.sha256"
    fi
    "$VENV/bin/python" -c 'from rocketmq.v5.util.version import SDK_VERSION; print(SDK_VERSION)' \
      >"$OUT/grpc-python.version.tmp"
    mv "$OUT/grpc-python.version.tmp" "$OUT/grpc-python.version"
    rm -rf "$BUILD.tmp"
    mkdir -p "$BUILD.tmp"
    cp "$HERE"/src/*.py "$BUILD.tmp/"
    "$VENV/bin/python" -m compileall -q "$BUILD.tmp"
    rm -rf "$BUILD"
    mv "$BUILD.tmp" "$BUILD"
    echo "grpc-python: rocketmq-python-client $(cat "$OUT/grpc-python.version") in $VENV, checks in $BUILD" >&2
    ;;
  version) cat "$OUT/grpc-python.version" ;;
  programs)
    cat <<'PROGRAMS'
producers:send-normal send-fifo send-delay tx-commit tx-rollback tx-check-commit
simple_consumers:simple-ack simple-redeliver simple-change-invisible-extend simple-change-invisible-ack simple-tag-filter
push_consumers:push-success push-failure-redelivery push-dlq
fifo_push:push-fifo-order
PROGRAMS
    ;;
  run)
    log="${GRPC_LOG_DIR:?GRPC_LOG_DIR is not set}"
    program="${2:?program}"
    [[ -f "$BUILD/$program.py" ]] || { echo "sdk.sh: no program $program (run sdk.sh fetch)" >&2; exit 2; }
    mkdir -p "$log/python-home"
    # The SDK logs to ~/logs/rocketmq_python/, never to stdout: HOME points it below the log directory.
    HOME="$log/python-home" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
      exec "$VENV/bin/python" "$BUILD/$program.py"
    ;;
  *) echo "usage: sdk.sh fetch|version|programs|run PROGRAM" >&2; exit 2 ;;
esac
