#!/usr/bin/env bash
# Runs the RocketMQ 5.x gRPC checks (grpc-java/, the official Java gRPC SDK rocketmq-client-java) against a
# running gRPC endpoint, whose topics and groups it first creates with mqadmin through the name server.
#
#   GRPC_ENDPOINT=127.0.0.1:8081 NAMESRV_ADDR=127.0.0.1:9876 tests/compat/grpc.sh
#   tests/compat/grpc-against-apache.sh        # the same against Apache RocketMQ 5.3.3's proxy (checks the checks)
#
# Environment:
#   GRPC_ENDPOINT        required, host:port of the gRPC endpoint (Apache's proxy: grpcServerPort, default 8081)
#   NAMESRV_ADDR         required, host:port of the name server, for mqadmin
#   GRPC_TLS             "true": the SDK connects with TLS (enableSsl(true), any certificate accepted); default
#                        plaintext (enableSsl(false))
#   GRPC_CLUSTER         cluster for mqadmin's -c (default: the first cluster the name server knows)
#   GRPC_CHECKS          space-separated subset of the check names below (default: all); only the programs that
#                        hold a selected check run
#   GRPC_RUN_ID          suffix of every topic and group name (default: new per run, from the clock)
#   GRPC_TIMEOUT_SCALE   factor on the programs' waits for things that should happen (default 1)
#   GRPC_TEST_TIMEOUT    hard limit per program in seconds (default 240)
#   GRPC_LOG_DIR         where program stderr and SDK logs go (default ~/.cache/conveyor/compat/logs/<time>-grpc)
#
# Setup (one check, mqadmin-VERSION/grpc-setup): Resources prints the mqadmin commands (updateTopic with
# -a +message.type=NORMAL|FIFO|DELAY|TRANSACTION, updateSubGroup with -o true for the FIFO groups and -r 2 for the
# retry/DLQ group, the DLQ topic %DLQ%<group>, then topicRoute of each topic), run in one JVM by MqadminBatch
# (rocketmq-tools 5.3.3's MQAdminStartup, as mqadmin.sh runs it). Then each program runs in sequence; inside a
# program the scenarios run concurrently, each with its own topic and groups.
#
# Prints one PASS/FAIL line per check (a failed check's own diagnostics follow indented with "#") and ends with
# "N passed, M failed". Exits non-zero if anything failed or if a selected check never reported.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/compat"
TEST_TIMEOUT="${GRPC_TEST_TIMEOUT:-240}"

# program:checks. The expected list is derived from this table up front.
PROGRAMS=(
  "Producers:send-normal send-fifo send-delay tx-commit tx-rollback tx-check-commit"
  "SimpleConsumers:simple-ack simple-redeliver simple-change-invisible-extend simple-change-invisible-ack simple-tag-filter"
  "PushConsumers:push-success push-failure-redelivery push-dlq"
  "FifoPush:push-fifo-order"
)

for v in GRPC_ENDPOINT NAMESRV_ADDR; do
  if [[ -z "${!v:-}" ]]; then
    echo "grpc.sh: $v is not set" >&2
    exit 2
  fi
done
export GRPC_ENDPOINT NAMESRV_ADDR
export GRPC_TLS="${GRPC_TLS:-false}"

T0=$SECONDS
"$HERE/fetch.sh" >&2 || { echo "grpc.sh: fetch.sh failed" >&2; exit 2; }
"$HERE/grpc-fetch.sh" >&2 || { echo "grpc.sh: grpc-fetch.sh failed" >&2; exit 2; }

LOG_DIR="${GRPC_LOG_DIR:-$OUT/logs/$(date +%Y%m%d-%H%M%S)-grpc}"
mkdir -p "$LOG_DIR"
export GRPC_RUN_ID="${GRPC_RUN_ID:-$(printf '%x%04x' "$(date +%s)" "$RANDOM")}"
SDK_VERSION="$(cat "$OUT/grpc-java.version")"
PREFIX="grpc-java-$SDK_VERSION"
SETUP="mqadmin-$(cat "$OUT/java-rmq5.version")/grpc-setup"
echo "grpc.sh: endpoint $GRPC_ENDPOINT (tls $GRPC_TLS), name server $NAMESRV_ADDR, run id $GRPC_RUN_ID," \
  "logs in $LOG_DIR" >&2

PASSED=0
FAILED=0
declare -A REPORTED=()
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); REPORTED["$1"]=1; }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); REPORTED["$1"]=1; }

selected() {
  [[ -z "${GRPC_CHECKS:-}" ]] && return 0
  [[ " $GRPC_CHECKS " == *" $1 "* ]]
}

EXPECTED=("$SETUP")
for entry in "${PROGRAMS[@]}"; do
  for c in ${entry#*:}; do
    selected "$c" && EXPECTED+=("$PREFIX/$c")
  done
done
echo "grpc.sh: ${#EXPECTED[@]} checks expected" >&2

# Java flags shared by the programs: the SDK logs to a file below the log directory, never to stdout.
grpc_java() {
  java -Xms64m -Xmx512m -Drocketmq.log.root="$LOG_DIR/sdk" -Dmq.consoleAppender.enabled=false \
    -Duser.home="$LOG_DIR/home" -cp "$(cat "$OUT/grpc-java.classpath")" "$@"
}

# --- setup: topics and groups with mqadmin ---
setup_ok=0
cluster="${GRPC_CLUSTER:-}"
if [[ -z "$cluster" ]]; then
  cluster="$(java -Xms32m -Xmx256m -Drocketmq.client.logRoot="$LOG_DIR/mqadmin" -Drocketmq.log.root="$LOG_DIR/mqadmin" \
    -Duser.home="$LOG_DIR/mqadmin/home" -Dlogback.configurationFile="$HERE/mqadmin/conf/logback_tools.xml" \
    -Dcompat.logDir="$LOG_DIR/mqadmin" -cp "$(cat "$OUT/java-rmq5.classpath")" conveyor.compat.Tool cluster-name \
    2>"$LOG_DIR/cluster-name.stderr")" || cluster=""
fi
if [[ -z "$cluster" ]]; then
  sed 's/^/  # /' "$LOG_DIR/cluster-name.stderr" | tail -n 10
  fail "$SETUP" "could not read the cluster name from the name server $NAMESRV_ADDR"
else
  grpc_java conveyor.grpc.Resources "$cluster" >"$LOG_DIR/mqadmin-commands.txt" 2>"$LOG_DIR/resources.stderr"
  t=$SECONDS
  if timeout -k 5 180 java -Xms32m -Xmx256m -Drocketmq.home.dir="$HERE/mqadmin" -Dcompat.logDir="$LOG_DIR/mqadmin" \
    -Drocketmq.client.logRoot="$LOG_DIR/mqadmin" -Drocketmq.log.root="$LOG_DIR/mqadmin" \
    -Duser.home="$LOG_DIR/mqadmin/home" -cp "$(cat "$OUT/java-rmq5.classpath")" \
    "$HERE/grpc-java/mqadmin/MqadminBatch.java" "$NAMESRV_ADDR" "$LOG_DIR/mqadmin-commands.txt" \
    >"$LOG_DIR/mqadmin.log" 2>&1; then
    echo "grpc.sh: $(grep -c '^ok ' "$LOG_DIR/mqadmin.log") mqadmin commands in $((SECONDS - t)) s (cluster $cluster)" >&2
    pass "$SETUP"
    setup_ok=1
  else
    grep -v '^ok ' "$LOG_DIR/mqadmin.log" | head -n 40 | sed 's/^/  # /'
    fail "$SETUP" "mqadmin could not create the topics and groups (see $LOG_DIR/mqadmin.log)"
  fi
fi

# --- the programs ---
for entry in "${PROGRAMS[@]}"; do
  program="${entry%%:*}"
  checks=()
  for c in ${entry#*:}; do
    selected "$c" && checks+=("$c")
  done
  ((${#checks[@]} > 0)) || continue
  if ((setup_ok == 0)); then
    for c in "${checks[@]}"; do fail "$PREFIX/$c" "not run: the mqadmin setup failed"; done
    continue
  fi
  err="$LOG_DIR/$program.stderr"
  t=$SECONDS
  out="$(GRPC_CHECKS="${checks[*]}" timeout -k 10 "$TEST_TIMEOUT" \
    java -Xms64m -Xmx512m -Drocketmq.log.root="$LOG_DIR/sdk" -Dmq.consoleAppender.enabled=false \
    -Duser.home="$LOG_DIR/home" -cp "$(cat "$OUT/grpc-java.classpath")" "conveyor.grpc.$program" 2>"$err")"
  rc=$?
  echo "grpc.sh: $program took $((SECONDS - t)) s (exit $rc)" >&2
  while IFS= read -r line; do
    case "$line" in
      "PASS $PREFIX/"*)
        name="${line#PASS }"
        echo "$line"
        PASSED=$((PASSED + 1))
        REPORTED["$name"]=1
        ;;
      "FAIL $PREFIX/"*)
        name="${line#FAIL }"
        name="${name%%: *}"
        echo "$line"
        # The check's own diagnostics (its stderr lines are tagged [check]).
        grep -F "[${name#"$PREFIX/"}] " "$err" | tail -n 15 | sed 's/^/  # /'
        FAILED=$((FAILED + 1))
        REPORTED["$name"]=1
        ;;
      "") ;;
      *) echo "  # $program: $line" ;;
    esac
  done <<<"$out"
  for c in "${checks[@]}"; do
    if [[ -z "${REPORTED[$PREFIX/$c]:-}" ]]; then
      tail -n 15 "$err" | sed 's/^/  # stderr: /'
      if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        fail "$PREFIX/$c" "$program killed after ${TEST_TIMEOUT}s before reporting"
      else
        fail "$PREFIX/$c" "$program exited with status $rc without reporting this check"
      fi
    fi
  done
done

MISSING=()
for name in "${EXPECTED[@]}"; do
  [[ -n "${REPORTED[$name]:-}" ]] || MISSING+=("$name")
done
if ((${#EXPECTED[@]} <= 1)); then
  fail "grpc.sh" "no checks selected (GRPC_CHECKS='${GRPC_CHECKS:-}')"
fi
if ((${#MISSING[@]} > 0)) || ((PASSED + FAILED < ${#EXPECTED[@]})); then
  for name in "${MISSING[@]}"; do echo "  # never reported: $name"; done
  fail "grpc.sh" "$((PASSED + FAILED)) checks reported, ${#EXPECTED[@]} expected (${#MISSING[@]} never ran)"
fi
echo "grpc.sh: total $((SECONDS - T0)) s; logs in $LOG_DIR" >&2
echo "$PASSED passed, $FAILED failed (${#EXPECTED[@]} expected)"
[[ $FAILED -eq 0 ]]
