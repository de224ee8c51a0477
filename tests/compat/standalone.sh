# shellcheck shell=bash
# Sourced by the suites that run one `conveyor standalone` from a settings file on free loopback
# ports (acl.sh, tls-rotation.sh).

# standalone_start BIN WORK LOG WRITE_CONFIG: picks four free ports into NS_PORT, BROKER_PORT,
# HTTP_PORT and GRPC_PORT, has WRITE_CONFIG (a function) write $WORK/conveyor.toml from them,
# starts conveyor standalone with it (data in $WORK/data, output appended to LOG) and waits up to
# 60 s for /readyz. A port taken between the pick and the bind makes conveyor exit: retried with
# new ports, three times at most. BROKER_PID is the process (set as soon as it runs, so the
# caller's cleanup stops it whatever happens); returns 1, with the log's tail on stderr, when it
# did not start.
standalone_start() {
  local bin=$1 work=$2 log=$3 write_config=$4 attempt deadline
  for attempt in 1 2 3; do
    read -r NS_PORT BROKER_PORT HTTP_PORT GRPC_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
    "$write_config"
    rm -rf "$work/data"
    "$bin" standalone --data-dir "$work/data" --config "$work/conveyor.toml" >>"$log" 2>&1 </dev/null &
    BROKER_PID=$!
    deadline=$((SECONDS + 60))
    while kill -0 "$BROKER_PID" 2>/dev/null; do
      curl -sf -m 2 -o /dev/null "http://127.0.0.1:$HTTP_PORT/readyz" && return 0
      if ((SECONDS >= deadline)); then
        tail -20 "$log" >&2
        echo "conveyor standalone not ready after 60 s" >&2
        return 1
      fi
      sleep 0.1
    done
    wait "$BROKER_PID" 2>/dev/null
    BROKER_PID=""
    grep -qi 'address already in use\|address in use' "$log" || break
    echo "a port was taken; retrying with new ports (attempt $attempt)" >&2
  done
  tail -20 "$log" >&2
  echo "conveyor standalone did not start" >&2
  return 1
}

# conveyor_bin ROOT: sets BIN to $CONVEYOR_BIN, else to the debug build of the checkout at ROOT,
# built now under the cargo lock (in CARGO_TARGET_DIR when set). Returns 1 when there is none.
conveyor_bin() {
  local root=$1 target
  if [[ -n "${CONVEYOR_BIN:-}" ]]; then
    BIN="$CONVEYOR_BIN"
  else
    echo "cargo build -q -p conveyor${CARGO_TARGET_DIR:+ (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)}" >&2
    (cd "$root" && flock /tmp/conveyor-cargo.lock cargo build -q -p conveyor) >&2 || return 1
    target="${CARGO_TARGET_DIR:-$root/target}"
    [[ "$target" == /* ]] || target="$root/$target"
    BIN="$target/debug/conveyor"
  fi
  [[ -x "$BIN" ]]
}
