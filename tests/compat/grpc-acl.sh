#!/usr/bin/env bash
# The official RocketMQ 5.x gRPC SDKs against `conveyor standalone` with ACL on: starts it on free loopback ports
# with a fresh data directory and a TOML config ([acl] enabled, a plain_acl.yml users file, a cluster secret),
# creates the topics with `conveyor admin create-topic` signed as the admin user, then runs, side by side:
#   grpc-acl/AclJava.java  rocketmq-client-java 5.2.0 (grpc-java's classpath, built by grpc-fetch.sh), credentials from
#                          ClientConfiguration.setCredentialProvider(StaticSessionCredentialsProvider): send-permitted,
#                          receive-permitted (SimpleConsumer, acked), send-denied-topic, consumer-cannot-send,
#                          receive-denied-group, wrong-secret, unknown-user, no-credentials
#   grpc-acl/go/           rocketmq-clients/golang v5 (pinned by grpc-go/go.mod and go.sum: built with -modfile),
#                          credentials in its Config: send-permitted, receive-permitted, send-denied-topic, wrong-secret
# Both connect as the SDKs do by default, over TLS (the broker's generated certificate, on the same port as
# plaintext). A refusal must be UNAUTHORIZED (40100) with the server's reason (which permission is missing, a failed
# signature, no credentials); the SDKs' exceptions are printed in the log directory.
#
#   tests/compat/grpc-acl.sh
#
# Environment (all optional):
#   CONVEYOR_BIN        use this binary instead of building one (default: cargo build -p conveyor, the debug binary
#                       in ${CARGO_TARGET_DIR:-target})
#   GRPC_ACL_MESSAGES   messages each SDK sends and receives (default 20)
#   GRPC_ACL_LOG_DIR    where the broker log, the programs' output and the SDK logs go
#                       (default ~/.cache/conveyor/compat/logs/<time>-grpc-acl)
#
# Prints one "ok NAME" or "FAIL NAME: reason" line per check and "N passed, M failed"; exits non-zero when a check
# failed (2 when the broker or the SDKs could not be set up).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
MESSAGES="${GRPC_ACL_MESSAGES:-20}"
T0=$SECONDS

say() { echo "grpc-acl: $*" >&2; }

PASSED=0
FAILED=0
ok() { echo "ok $1${2:+ ($2)}"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); }
# A failure that leaves nothing to check: the summary, and exit 2.
abort() {
  fail "$1" "$2"
  echo "$PASSED passed, $FAILED failed (stopped: $1)"
  exit 2
}

for tool in curl python3 java javac mvn go sha256sum timeout; do
  command -v "$tool" >/dev/null || abort "setup/tools" "$tool not found on PATH"
done

# --- the binary --------------------------------------------------------------------------------------------------
if [[ -n "${CONVEYOR_BIN:-}" ]]; then
  BIN="$CONVEYOR_BIN"
else
  build=(cargo build -q -p conveyor)
  # Other builds of this checkout may run at the same time (flock when there is one).
  command -v flock >/dev/null && build=(flock /tmp/conveyor-cargo.lock "${build[@]}")
  (cd "$ROOT" && "${build[@]}") >&2 || abort "setup/build" "cargo build -p conveyor failed"
  TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
  [[ "$TARGET_DIR" == /* ]] || TARGET_DIR="$ROOT/$TARGET_DIR"
  BIN="$TARGET_DIR/debug/conveyor"
fi
[[ -x "$BIN" ]] || abort "setup/build" "$BIN is not an executable"
T_BUILD=$((SECONDS - T0))

LOG_DIR="${GRPC_ACL_LOG_DIR:-$OUT/logs/$(date +%Y%m%d-%H%M%S)-grpc-acl}"
mkdir -p "$LOG_DIR"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-grpc-acl.XXXXXX")"

# The broker runs under a wrapper subshell that records its pid in WORK/pid and, once it exits, its exit status in
# WORK/rc (so that an exit is seen at once, whoever waits).
start_broker() {
  rm -f "$WORK/pid" "$WORK/rc"
  (
    "$BIN" standalone --config "$WORK/conveyor.toml" >>"$LOG_DIR/broker.log" 2>&1 </dev/null &
    echo $! >"$WORK/pid.tmp"
    mv "$WORK/pid.tmp" "$WORK/pid"
    rc=0
    wait $! || rc=$?
    echo "$rc" >"$WORK/rc.tmp"
    mv "$WORK/rc.tmp" "$WORK/rc"
  ) >/dev/null 2>&1 </dev/null &
  local deadline=$((SECONDS + 10))
  until [[ -s "$WORK/pid" ]]; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}
running() { [[ -s "$WORK/pid" && ! -s "$WORK/rc" ]]; }

# stop_broker SECS: SIGTERM, then waits up to SECS for the exit (SIGKILL after that); STOP_RC is its exit status,
# or "killed".
STOP_RC=""
stop_broker() {
  STOP_RC=""
  running || return 0
  local pid
  pid="$(cat "$WORK/pid")"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + $1))
  while [[ ! -s "$WORK/rc" ]] && ((SECONDS < deadline)); do sleep 0.1; done
  if [[ -s "$WORK/rc" ]]; then
    STOP_RC="$(cat "$WORK/rc")"
    return 0
  fi
  STOP_RC=killed
  kill -KILL "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 10))
  while [[ ! -s "$WORK/rc" ]] && ((SECONDS < deadline)); do sleep 0.1; done
}

JOBS=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local j
  for j in "${JOBS[@]}"; do kill -TERM "$j" 2>/dev/null || true; done
  stop_broker 20
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the SDKs (idempotent; warm, well under a second each) ---------------------------------------------------------
# Java: grpc-fetch.sh builds grpc-java/ and records rocketmq-client-java's classpath, which AclJava.java runs on.
"$HERE/grpc-fetch.sh" >"$LOG_DIR/fetch-java.log" 2>&1 \
  || { tail -n 20 "$LOG_DIR/fetch-java.log" | sed 's/^/  # /'; abort "setup/java-sdk" "grpc-fetch.sh failed"; }
# Go: grpc-acl/go/ builds against grpc-go's go.mod and go.sum, with the module and build caches grpc-go/sdk.sh uses.
GO_BIN="$OUT/grpc-acl-go"
go_hash="$(
  cd "$HERE"
  { sha256sum grpc-acl/go/*.go grpc-acl/go/go.mod grpc-go/go.mod grpc-go/go.sum; go version; } | sha256sum | cut -d' ' -f1
)"
if [[ ! -x "$GO_BIN" || ! -f "$GO_BIN.stamp" || "$(cat "$GO_BIN.stamp")" != "$go_hash" ]]; then
  rm -f "$GO_BIN.stamp"
  if ! (
    cd "$HERE/grpc-acl/go"
    export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local
    export GOFLAGS="-mod=readonly -buildvcs=false"
    go build -modfile="$HERE/grpc-go/go.mod" -o "$GO_BIN.tmp.$$" .
  ) >"$LOG_DIR/fetch-go.log" 2>&1; then
    tail -n 20 "$LOG_DIR/fetch-go.log" | sed 's/^/  # /'
    abort "setup/go-sdk" "go build of grpc-acl/go failed"
  fi
  mv "$GO_BIN.tmp.$$" "$GO_BIN"
  echo "$go_hash" >"$GO_BIN.stamp"
fi
T_SDKS=$((SECONDS - T0))

# --- users, secret, config -----------------------------------------------------------------------------------------
ADMIN="acl-admin:admin-secret-key"
PRODUCER="acl-producer:producer-secret-key"
CONSUMER="acl-consumer:consumer-secret-key"
JAVA_TOPIC="AclJavaTopic" GO_TOPIC="AclGoTopic" DENIED_TOPIC="AclDeniedTopic"
JAVA_GROUP="AclJavaGroup" GO_GROUP="AclGoGroup" DENIED_GROUP="AclDeniedGroup"
cat >"$WORK/plain_acl.yml" <<EOF
accounts:
  - accessKey: ${ADMIN%%:*}
    secretKey: ${ADMIN#*:}
    admin: true
  - accessKey: ${PRODUCER%%:*}
    secretKey: ${PRODUCER#*:}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["$JAVA_TOPIC=PUB", "$GO_TOPIC=PUB"]
  - accessKey: ${CONSUMER%%:*}
    secretKey: ${CONSUMER#*:}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["$JAVA_TOPIC=SUB", "$GO_TOPIC=SUB"]
    groupPerms: ["$JAVA_GROUP=SUB", "$GO_GROUP=SUB"]
EOF
echo "grpc-acl-cluster-secret-$RANDOM$RANDOM$RANDOM" >"$WORK/secret"

# Four distinct free loopback ports (held open together so that they differ); a port taken by someone else before
# the broker binds it makes the start fail, which is retried with new ones.
pick_ports() {
  python3 -c '
import socket
socks = []
for _ in range(4):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
'
}

: >"$LOG_DIR/broker.log"
started=0
t=$SECONDS
for attempt in 1 2 3; do
  read -r NS_PORT BROKER_PORT HTTP_PORT GRPC_PORT < <(pick_ports)
  rm -rf "$WORK/store"
  cat >"$WORK/conveyor.toml" <<EOF
[namesrv]
listen = "127.0.0.1:$NS_PORT"

[broker]
listen = "127.0.0.1:$BROKER_PORT"

[store]
data-dir = "$WORK/store"

[http]
listen = "127.0.0.1:$HTTP_PORT"

[grpc]
listen = "127.0.0.1:$GRPC_PORT"

[acl]
enabled = true
users-file = "$WORK/plain_acl.yml"
cluster-secret-file = "$WORK/secret"
reload-interval-ms = 500
EOF
  echo "=== start (attempt $attempt) $(date '+%F %T'): name server $NS_PORT, broker $BROKER_PORT, http $HTTP_PORT, grpc $GRPC_PORT" \
    >>"$LOG_DIR/broker.log"
  start_broker || break
  deadline=$((SECONDS + 60))
  while running && ((SECONDS < deadline)); do
    if curl -sf -m 2 -o /dev/null "http://127.0.0.1:$HTTP_PORT/readyz"; then
      started=1
      break
    fi
    sleep 0.1
  done
  ((started)) && break
  if running; then
    stop_broker 10
    break # not ready within 60 s: no retry
  fi
  grep -qi 'address already in use\|address in use' "$LOG_DIR/broker.log" || break
  say "a port was taken; retrying with new ports"
done
if ((started == 0)); then
  tail -n 40 "$LOG_DIR/broker.log" | sed 's/^/  # broker: /'
  abort "setup/broker" "conveyor standalone with ACL on did not become ready (log: $LOG_DIR/broker.log)"
fi
ok "setup/broker" "ready in $((SECONDS - t)) s; name server 127.0.0.1:$NS_PORT, gRPC 127.0.0.1:$GRPC_PORT"

# --- topics, created as the admin user (the broker registers them with the name server shortly after) -------------
t=$SECONDS
admin() { "$BIN" admin "$1" --namesrv-addr "127.0.0.1:$NS_PORT" --access-key "${ADMIN%%:*}" --secret-key "${ADMIN#*:}" "${@:2}"; }
topics_ok=1
for topic in "$JAVA_TOPIC" "$GO_TOPIC" "$DENIED_TOPIC"; do
  # Until the broker has registered with the name server, the cluster has no master to create the topic on.
  deadline=$((SECONDS + 20))
  until admin create-topic --topic "$topic" --queues 4 >>"$LOG_DIR/admin.log" 2>&1; do
    if ((SECONDS >= deadline)); then
      tail -n 5 "$LOG_DIR/admin.log" | sed 's/^/  # /'
      topics_ok=0
      break
    fi
    sleep 0.2
  done
done
if ((topics_ok)); then
  deadline=$((SECONDS + 20))
  while :; do
    admin topics >"$WORK/topics" 2>>"$LOG_DIR/admin.log" || true
    missing=()
    for topic in "$JAVA_TOPIC" "$GO_TOPIC" "$DENIED_TOPIC"; do
      grep -q "^$topic " "$WORK/topics" || missing+=("$topic")
    done
    ((${#missing[@]} == 0)) && break
    if ((SECONDS >= deadline)); then
      topics_ok=0
      echo "  # no route after 20 s: ${missing[*]}"
      break
    fi
    sleep 0.2
  done
fi
((topics_ok)) || abort "setup/topics" "conveyor admin create-topic as the admin user failed (log: $LOG_DIR/admin.log)"
ok "setup/topics" "$JAVA_TOPIC, $GO_TOPIC, $DENIED_TOPIC routed in $((SECONDS - t)) s"

# --- the SDKs, side by side ----------------------------------------------------------------------------------------
export GRPC_ENDPOINT="127.0.0.1:$GRPC_PORT" ACL_DENIED_TOPIC="$DENIED_TOPIC" ACL_DENIED_GROUP="$DENIED_GROUP" ACL_PRODUCER="$PRODUCER" \
  ACL_CONSUMER="$CONSUMER" ACL_MESSAGES="$MESSAGES" ACL_RECEIVE_SECS=30
t=$SECONDS
mkdir -p "$LOG_DIR/java" "$LOG_DIR/go"
ACL_TOPIC="$JAVA_TOPIC" ACL_GROUP="$JAVA_GROUP" timeout -k 10 120 \
  java -Xms64m -Xmx512m -Drocketmq.log.root="$LOG_DIR/java/sdk" -Dmq.consoleAppender.enabled=false \
  -Duser.home="$LOG_DIR/java/home" -cp "$(cat "$OUT/grpc-java.classpath")" "$HERE/grpc-acl/AclJava.java" \
  >"$LOG_DIR/java/stdout" 2>"$LOG_DIR/java/stderr" &
JOBS+=($!)
ACL_TOPIC="$GO_TOPIC" ACL_GROUP="$GO_GROUP" ACL_LOG_DIR="$LOG_DIR/go" timeout -k 10 120 "$GO_BIN" \
  >"$LOG_DIR/go/stdout" 2>"$LOG_DIR/go/stderr" &
JOBS+=($!)
declare -A RC=()
RC[java]=0
wait "${JOBS[0]}" || RC[java]=$?
RC[go]=0
wait "${JOBS[1]}" || RC[go]=$?
JOBS=()
say "the SDKs' programs took $((SECONDS - t)) s"

declare -A EXPECT=(
  [java]="send-permitted receive-permitted send-denied-topic consumer-cannot-send receive-denied-group wrong-secret unknown-user no-credentials"
  [go]="send-permitted receive-permitted send-denied-topic wrong-secret"
)
for sdk in java go; do
  for check in ${EXPECT[$sdk]}; do
    line="$(grep -E "^(ok|FAIL) $sdk/$check( |:|$)" "$LOG_DIR/$sdk/stdout" | head -n 1)"
    case "$line" in
      "ok "*)
        ok "${line#ok }"
        ;;
      "FAIL "*)
        reason="${line#FAIL "$sdk/$check": }"
        fail "$sdk/$check" "$reason"
        grep -F "[$check] " "$LOG_DIR/$sdk/stderr" | tail -n 10 | sed 's/^/  # /'
        ;;
      *)
        tail -n 10 "$LOG_DIR/$sdk/stderr" | sed 's/^/  # stderr: /'
        if [[ ${RC[$sdk]} -eq 124 || ${RC[$sdk]} -eq 137 ]]; then
          fail "$sdk/$check" "the $sdk program was killed after 120 s before reporting"
        else
          fail "$sdk/$check" "the $sdk program exited with status ${RC[$sdk]} without reporting"
        fi
        ;;
    esac
  done
  # What the server answered the refused calls, as the SDK reported it.
  grep -E "^$sdk/[a-z-]+ (raised|returned): " "$LOG_DIR/$sdk/stderr" | cut -c1-500 | sed 's/^/  # /'
done

# --- the broker served everything and stops cleanly ----------------------------------------------------------------
if ! running; then
  fail "standalone/stop" "conveyor exited during the run with status $(cat "$WORK/rc" 2>/dev/null)"
else
  stop_broker 30
  if [[ "$STOP_RC" == 0 ]]; then
    ok "standalone/stop" "exited 0 on SIGTERM"
  else
    fail "standalone/stop" "conveyor did not exit 0 within 30 s of SIGTERM (status: $STOP_RC)"
  fi
fi
if ((FAILED > 0)); then
  grep -E ' (WARN|ERROR) ' "$LOG_DIR/broker.log" | tail -n 20 | sed 's/^/  # broker: /'
fi
say "build ${T_BUILD} s, SDKs ready after ${T_SDKS} s, total $((SECONDS - T0)) s; logs in $LOG_DIR"
echo "$PASSED passed, $FAILED failed"
((FAILED == 0))
