#!/usr/bin/env bash
# Builds `conveyor`, starts `conveyor standalone` on free loopback ports with a fresh data directory and short
# delay levels, and runs the real-client compatibility suite (run.sh) against it, restarting the broker between
# the phases of scenario (f), then the 5.x gRPC SDK checks (grpc.sh) against its gRPC endpoint. tests/all.sh calls this when it is executable.
#
#   tests/compat/run-against-standalone.sh
#
# Environment (all optional):
#   CARGO_TARGET_DIR       honoured when locating the built binary (tests/all.sh sets it under CI)
#   CONVEYOR_BIN           use this binary instead of building one
#   COMPAT_BROKER_ARGS     extra flags for `conveyor standalone` (word-split), e.g. a --config FILE
#                          (--transaction-timeout-ms 3000 --transaction-check-interval-ms 5000 are added when the
#                          binary knows them; flags given here come later on the command line)
#   COMPAT_READY_SECS      how long to wait for /readyz after a (re)start (default 60)
#   COMPAT_STOP_SECS       how long SIGTERM may take before the broker counts as hung (default 30)
#   COMPAT_CLIENTS, COMPAT_TIMEOUT_SECS, COMPAT_TEST_TIMEOUT: passed on to run.sh
#   COMPAT_GRPC            "off" skips grpc.sh (default: it runs)
#   COMPAT_LOG_DIR         where client logs and the broker log go (default ~/.cache/conveyor/compat/logs/<time>)
#
# Exit status: run.sh's (0 when every check passed); 2 when the broker could not be built or started.
#
# Internal: `run-against-standalone.sh restart STATE_DIR` is the RESTART_BROKER_CMD handed to run.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
READY_SECS="${COMPAT_READY_SECS:-60}"
STOP_SECS="${COMPAT_STOP_SECS:-30}"
DELAY_LEVELS="1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"

say() { echo "standalone: $*" >&2; }

# --- broker control; the state directory holds everything needed to stop and restart the broker ---------------
#   bin, data (path of the store directory), log, ports (NS BROKER HTTP GRPC), pid (the conveyor process), rc (its exit status, once it exited),
#   starts (how many times it was started)

# start_broker STATE: starts conveyor in the background. A wrapper subshell waits for it and records its exit
# status in STATE/rc, so that whoever stops it (this script, or a later `restart` invocation that is not its
# parent) can check that it exited 0.
start_broker() {
  local st="$1" ns broker http grpc
  read -r ns broker http grpc <"$st/ports"
  rm -f "$st/pid" "$st/rc"
  local n
  n=$(($(cat "$st/starts" 2>/dev/null || echo 0) + 1))
  echo "$n" >"$st/starts"
  local extra=()
  # A short transaction timeout, so that scenario (j)'s check-backs come within seconds (when the binary has it).
  if "$(cat "$st/bin")" standalone --help 2>/dev/null | grep -q -- '--transaction-timeout-ms'; then
    extra+=(--transaction-timeout-ms 3000)
  fi
  if "$(cat "$st/bin")" standalone --help 2>/dev/null | grep -q -- '--transaction-check-interval-ms'; then
    extra+=(--transaction-check-interval-ms 5000)
  fi
  if [[ -n "${COMPAT_BROKER_ARGS:-}" ]]; then
    local user_args=()
    read -r -a user_args <<<"$COMPAT_BROKER_ARGS"
    extra+=("${user_args[@]}")
  fi
  echo "=== start #$n $(date '+%F %T'): standalone on ns=$ns broker=$broker http=$http ${extra[*]:-}" >>"$st/log"
  (
    "$(cat "$st/bin")" standalone --data-dir "$(cat "$st/data")" \
      --namesrv-listen "127.0.0.1:$ns" --listen "127.0.0.1:$broker" --http-listen "127.0.0.1:$http" \
      --grpc-listen "127.0.0.1:$grpc" --delay-levels "$DELAY_LEVELS" "${extra[@]}" >>"$st/log" 2>&1 </dev/null &
    echo $! >"$st/pid.tmp"
    mv "$st/pid.tmp" "$st/pid"
    rc=0
    wait $! || rc=$?
    echo "$rc" >"$st/rc.tmp"
    mv "$st/rc.tmp" "$st/rc"
    echo "=== conveyor (pid $(cat "$st/pid")) exited with status $rc at $(date '+%F %T')" >>"$st/log"
  ) >/dev/null 2>&1 </dev/null &
  local deadline=$((SECONDS + 10))
  while [[ ! -s "$st/pid" ]]; do
    ((SECONDS < deadline)) || { say "conveyor did not start"; return 1; }
    sleep 0.05
  done
}

# wait_ready STATE: polls /readyz until it answers 200; fails when the process exits or the deadline passes.
wait_ready() {
  local st="$1" ns broker http grpc
  read -r ns broker http grpc <"$st/ports"
  local start=$SECONDS deadline=$((SECONDS + READY_SECS))
  while ! curl -sf -m 2 -o /dev/null "http://127.0.0.1:$http/readyz"; do
    if [[ -s "$st/rc" ]]; then
      say "conveyor exited with status $(cat "$st/rc") before it was ready"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      say "conveyor not ready after ${READY_SECS}s: $(curl -s -m 2 "http://127.0.0.1:$http/readyz" 2>&1 | head -3)"
      return 1
    fi
    sleep 0.2
  done
  say "conveyor (pid $(cat "$st/pid")) ready after $((SECONDS - start))s"
}

# stop_broker STATE: SIGTERM, then waits for the exit; returns 1 unless it exited 0 within the deadline.
stop_broker() {
  local st="$1" pid
  pid="$(cat "$st/pid" 2>/dev/null || true)"
  [[ -n "$pid" ]] || { say "no broker pid recorded"; return 1; }
  if [[ -s "$st/rc" ]]; then
    say "conveyor (pid $pid) had already exited with status $(cat "$st/rc")"
    return 1
  fi
  local t0=$SECONDS deadline=$((SECONDS + STOP_SECS))
  kill -TERM "$pid" 2>/dev/null || true
  while [[ ! -s "$st/rc" ]]; do
    if ((SECONDS >= deadline)); then
      say "conveyor (pid $pid) still running ${STOP_SECS}s after SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      local d2=$((SECONDS + 10))
      while [[ ! -s "$st/rc" ]] && ((SECONDS < d2)); do sleep 0.1; done
      return 1
    fi
    sleep 0.1
  done
  local rc
  rc="$(cat "$st/rc")"
  if [[ "$rc" != 0 ]]; then
    say "conveyor (pid $pid) exited with status $rc after SIGTERM (expected 0)"
    return 1
  fi
  say "conveyor (pid $pid) stopped cleanly after $((SECONDS - t0))s"
}

log_tail() {
  local st="$1"
  echo "---- last 80 lines of the broker log $(cat "$st/log_path" 2>/dev/null || echo "$st/log") ----" >&2
  tail -n 80 "$st/log" >&2 || true
  echo "---- end of broker log ----" >&2
}

if [[ "${1:-}" == "restart" ]]; then
  # RESTART_BROKER_CMD: stop cleanly, start again on the same ports and data, wait until ready.
  st="${2:?usage: $0 restart STATE_DIR}"
  if ! stop_broker "$st"; then
    log_tail "$st"
    echo "RESTART FAILED: the broker did not shut down cleanly on SIGTERM" >&2
    exit 1
  fi
  if ! start_broker "$st" || ! wait_ready "$st"; then
    log_tail "$st"
    echo "RESTART FAILED: the broker did not come back" >&2
    exit 1
  fi
  exit 0
fi

# --- main ------------------------------------------------------------------------------------------------------
T0=$SECONDS
for tool in cargo curl python3; do
  command -v "$tool" >/dev/null || { echo "run-against-standalone.sh: $tool not found on PATH" >&2; exit 2; }
done

cd "$ROOT"
if [[ -n "${CONVEYOR_BIN:-}" ]]; then
  BIN="$CONVEYOR_BIN"
else
  say "cargo build --release -p conveyor${CARGO_TARGET_DIR:+ (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)}"
  if ! cargo build --release -p conveyor >&2; then
    echo "run-against-standalone.sh: cargo build failed" >&2
    exit 2
  fi
  TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
  [[ "$TARGET_DIR" == /* ]] || TARGET_DIR="$ROOT/$TARGET_DIR"
  BIN="$TARGET_DIR/release/conveyor"
fi
[[ -x "$BIN" ]] || { echo "run-against-standalone.sh: $BIN is not an executable" >&2; exit 2; }
T_BUILD=$((SECONDS - T0))

LOG_DIR="${COMPAT_LOG_DIR:-$CACHE/compat/logs/$(date +%Y%m%d-%H%M%S)-standalone}"
mkdir -p "$LOG_DIR"
export COMPAT_LOG_DIR="$LOG_DIR"
ST="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-compat.XXXXXX")"
echo "$BIN" >"$ST/bin"
# The data directory lives inside the state directory: one rm cleans both.
mkdir -p "$ST/store"
echo "$ST/store" >"$ST/data"
ln -s "$LOG_DIR/broker.log" "$ST/log"
echo "$LOG_DIR/broker.log" >"$ST/log_path"
: >"$LOG_DIR/broker.log"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -s "$ST/pid" && ! -s "$ST/rc" ]]; then
    kill -TERM "$(cat "$ST/pid")" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_SECS))
    while [[ ! -s "$ST/rc" ]] && ((SECONDS < deadline)); do sleep 0.1; done
    if [[ ! -s "$ST/rc" ]]; then
      kill -KILL "$(cat "$ST/pid")" 2>/dev/null || true
    fi
  fi
  rm -rf "$ST"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Four distinct free loopback ports, name server, broker, HTTP and gRPC (held open together so that they differ). A port taken by someone else
# between this check and the broker's bind makes the start fail; that is retried with new ports.
pick_ports() {
  python3 -c '
import socket
socks = []
for _ in range(4):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
'
}

started=0
for attempt in 1 2 3; do
  pick_ports >"$ST/ports"
  read -r NS_PORT BROKER_PORT HTTP_PORT GRPC_PORT <"$ST/ports"
  say "starting $BIN standalone (name server 127.0.0.1:$NS_PORT, broker 127.0.0.1:$BROKER_PORT," \
    "http 127.0.0.1:$HTTP_PORT, grpc 127.0.0.1:$GRPC_PORT, data $(cat "$ST/data"), log $LOG_DIR/broker.log)"
  if start_broker "$ST" && wait_ready "$ST"; then
    started=1
    break
  fi
  if [[ -s "$ST/rc" ]] && grep -qi 'address already in use\|address in use' "$LOG_DIR/broker.log"; then
    say "a port was taken; retrying with new ports (attempt $attempt)"
    continue
  fi
  break
done
if [[ $started -ne 1 ]]; then
  log_tail "$ST"
  echo "run-against-standalone.sh: could not start conveyor standalone" >&2
  exit 2
fi
T_START=$((SECONDS - T0))

export NAMESRV_ADDR="127.0.0.1:$NS_PORT"
export RESTART_BROKER_CMD="'$SELF' restart '$ST'"
export COMPAT_MQADMIN_CLIENTS="${COMPAT_MQADMIN_CLIENTS:-rmq5 rmq4}"
export COMPAT_DELAY_LEVELS="$DELAY_LEVELS"

rc=0
"$HERE/run.sh" || rc=$?

# The 5.x gRPC SDK checks (grpc.sh) against the same broker, unless COMPAT_GRPC=off.
if [[ "${COMPAT_GRPC:-on}" != off ]]; then
  say "gRPC SDK checks against 127.0.0.1:$GRPC_PORT"
  # Over TLS (the broker's generated certificate, on the same port as plaintext) for every SDK that can accept it
  # (the Java SDK's default is TLS); the Rust SDK checks certificates against the system roots only: plaintext.
  GRPC_TLS="${GRPC_TLS:-java go python node}" GRPC_ENDPOINT="127.0.0.1:$GRPC_PORT" GRPC_LOG_DIR="$LOG_DIR/grpc" \
    "$HERE/grpc.sh" || rc=$?
fi

# The broker must still be alive and must stop cleanly at the end, too.
if [[ -s "$ST/rc" ]]; then
  say "conveyor exited during the run with status $(cat "$ST/rc")"
  [[ $rc -ne 0 ]] || rc=1
elif ! stop_broker "$ST"; then
  echo "FAIL standalone/shutdown: conveyor did not exit 0 within ${STOP_SECS}s of SIGTERM"
  [[ $rc -ne 0 ]] || rc=1
fi
if [[ $rc -ne 0 ]]; then
  log_tail "$ST"
  grep -E ' (WARN|ERROR) ' "$LOG_DIR/broker.log" | tail -n 40 | sed 's/^/  # broker: /' >&2 || true
fi
T_ALL=$((SECONDS - T0))
say "build ${T_BUILD}s, broker up after ${T_START}s, total ${T_ALL}s; logs in $LOG_DIR (exit $rc)"
exit "$rc"
