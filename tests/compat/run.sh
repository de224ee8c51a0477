#!/usr/bin/env bash
# Runs the real-client compatibility scenarios against a running name server + broker.
#
#   NAMESRV_ADDR=127.0.0.1:9876 tests/compat/run.sh
#
# Environment:
#   NAMESRV_ADDR         required, host:port of the name server (';'-separated list allowed)
#   RESTART_BROKER_CMD   optional shell command run between the two phases of scenario (f); it must return
#                        once the broker is back. Unset: both phases still run, without a restart.
#   COMPAT_CLIENTS       subset to run, default "rmq4 rmq5 go mqadmin"
#   COMPAT_MQADMIN_CLIENTS  tools versions for the mqadmin checks, default "rmq5"; "rmq5 rmq4" adds 4.9.x
#                        (4.9.x clusterList needs getTransferedTps in the broker runtime info, which the
#                        Apache 5.x broker no longer reports)
#   COMPAT_SCENARIOS     scenario letters to run, default "abcdefghijklt" (a-f basic, g retry+DLQ, h delay levels,
#                        i timer messages (5.x only), j transactions, k orderly, l broadcasting, t scenario (a) with
#                        2,000 messages over TLS (-Dtls.enable=true, the clients' own switch; the server's
#                        certificate is not checked, their default); the Go client runs a, g, h, l; f includes the
#                        restart)
#   COMPAT_DELAY_LEVELS  the broker's delay levels (messageDelayLevel syntax) for the timing checks of g and h;
#                        default "1s 2s ... 18s" (level n = n seconds), what run-against-standalone.sh configures
#   COMPAT_TIMEOUT_SECS  per-wait timeout inside the programs (default 60-180 s depending on the wait)
#   COMPAT_TEST_TIMEOUT  hard limit per program in seconds (default 600)
#   COMPAT_LOG_DIR       where client logs and stderr go (default ~/.cache/conveyor/compat/logs/<time>)
#
# Prints one PASS/FAIL line per check (diagnostics indented with "#") and ends with "N passed, M failed".
# Exits non-zero if anything failed, or if fewer checks reported a result than the selected clients and
# scenarios call for (the expected list is derived up front from the scenario tables below; every
# check it names must have printed PASS or FAIL).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/compat"
CLIENTS="${COMPAT_CLIENTS:-rmq4 rmq5 go mqadmin}"
MQADMIN_CLIENTS="${COMPAT_MQADMIN_CLIENTS:-rmq5}"
SCENARIOS="${COMPAT_SCENARIOS:-abcdefghijklt}"
export COMPAT_DELAY_LEVELS="${COMPAT_DELAY_LEVELS:-1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s}"
TEST_TIMEOUT="${COMPAT_TEST_TIMEOUT:-600}"

if [[ -z "${NAMESRV_ADDR:-}" ]]; then
  echo "run.sh: NAMESRV_ADDR is not set" >&2
  exit 2
fi
export NAMESRV_ADDR

"$HERE/fetch.sh" >&2 || { echo "run.sh: fetch.sh failed" >&2; exit 2; }

LOG_DIR="${COMPAT_LOG_DIR:-$OUT/logs/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$LOG_DIR"
export COMPAT_LOG_DIR="$LOG_DIR"
echo "run.sh: name server $NAMESRV_ADDR, logs in $LOG_DIR" >&2

PASSED=0
FAILED=0
# Every check that reported a result (PASS or FAIL), by name.
declare -A REPORTED=()

pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); REPORTED["$1"]=1; }
want() { [[ "$SCENARIOS" == *"$1"* ]]; }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); REPORTED["$1"]=1; }

# The scenarios each client runs: letter:name (Java: letter:class). run_java_client and run_go_client run
# exactly these, and expected_checks derives the list of checks that must report from them.
JAVA_SCENARIOS="a:SendReceive b:SplitGroup c:LitePull d:QueryMessage e:TagFilter g:RetryDlq h:DelayLevels \
i:TimerMessages j:Transactions k:Orderly l:Broadcast t:SendReceive"
GO_SCENARIOS="a:send-receive e:e-tag-filter g:g-retry-dlq h:h-delay-levels l:l-broadcast"
MQADMIN_CHECKS="clusterList updateTopic topicList topicRoute topicStatus consumerProgress skipAccumulatedMessage consumerProgress-skipped resetOffsetByTime consumerProgress-rewound updateBrokerConfig-readOnly getBrokerConfig updateBrokerConfig-readWrite wipeWritePerm topicRoute-wiped addWritePerm topicRoute-writable"

# mqadmin_check, and the operations checks against an online group (issue 13).
# shellcheck source=tests/compat/mqadmin_lib.sh
source "$HERE/mqadmin_lib.sh"
# shellcheck source=tests/compat/mqadmin_ops.sh
source "$HERE/mqadmin_ops.sh"

# run_program NAME CMD... : runs a test program that prints its own PASS/FAIL line.
# A program that dies or hangs without printing a result is reported as FAIL NAME.
run_program() {
  local name="$1"
  shift
  local err="$LOG_DIR/${name//\//_}.stderr"
  local out rc t0=$SECONDS
  out="$(timeout -k 10 "$TEST_TIMEOUT" "$@" 2>"$err")"
  rc=$?
  [[ -n "$out" ]] && echo "$out"
  echo "run.sh: $name took $((SECONDS - t0)) s" >&2
  REPORTED["$name"]=1
  if [[ $rc -eq 0 ]] && grep -q '^PASS ' <<<"$out"; then
    PASSED=$((PASSED + 1))
    return 0
  fi
  if ! grep -q '^FAIL ' <<<"$out"; then
    tail -n 20 "$err" | sed 's/^/  # stderr: /'
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
      echo "FAIL $name: killed after ${TEST_TIMEOUT}s"
    else
      echo "FAIL $name: exited with status $rc without a result"
    fi
  fi
  FAILED=$((FAILED + 1))
  return 1
}

# java_cmd PROFILE CLASS ARGS... : the java command line for one client generation (an argv, so that
# `timeout` can run it directly).
java_cmd() {
  local profile="$1"
  shift
  local logroot="$LOG_DIR/java-$profile"
  mkdir -p "$logroot"
  # The logback file keeps 4.9.x client logging (slf4j via the tools' logback) off stdout.
  # rocketmq.client.logRoot: 4.9.x client log; rocketmq.log.root: 5.x client log. With rocketmq-tools on the
  # classpath the 5.x client logs through the tools' logback file to ${user.home}/logs/rocketmqlogs, hence user.home.
  JAVA_ARGV=(java -Xms64m -Xmx1g -Drocketmq.client.logRoot="$logroot" -Drocketmq.log.root="$logroot"
    -Duser.home="$logroot/home"
    -Dlogback.configurationFile="$HERE/mqadmin/conf/logback_tools.xml" -Dcompat.logDir="$logroot"
    -cp "$(cat "$OUT/java-$profile.classpath")" "$@")
}

scenario_name() {
  case "$1" in
    a) echo send-receive ;; b) echo split-group ;; c) echo lite-pull ;; d) echo query-message ;;
    e) echo tag-filter ;; g) echo retry-dlq ;; h) echo delay-levels ;; i) echo timer-messages ;;
    j) echo transactions ;; k) echo orderly ;; l) echo broadcast ;; t) echo send-receive-tls ;;
  esac
}

# java_runs PROFILE LETTER: whether that client generation runs that scenario.
java_runs() {
  want "$2" || return 1
  # Timer messages (Message.setDeliverTimeMs/setDelayTimeSec) exist only in 5.x clients.
  [[ "$2" == i && "$1" == rmq4 ]] && return 1
  return 0
}
java_prefix() { echo "java-$(cat "$OUT/java-$1.version")"; }
go_prefix() {
  local ver
  ver="$(go version -m "$OUT/compat-go" 2>/dev/null | awk '$2 == "github.com/apache/rocketmq-client-go/v2" {print $3}')"
  echo "go-${ver:-unknown}"
}
mqadmin_prefix() { echo "mqadmin-$(cat "$OUT/java-$1.version")"; }

# expected_checks: prints the name of every check the selected clients and scenarios must report.
expected_checks() {
  local client p e prefix letter
  for client in $CLIENTS; do
    case "$client" in
      rmq4 | rmq5)
        prefix="$(java_prefix "$client")"
        for e in $JAVA_SCENARIOS; do
          letter="${e%%:*}"
          java_runs "$client" "$letter" && echo "$prefix/$letter-$(scenario_name "$letter")"
        done
        if want f; then
          echo "$prefix/f-resume-phase1"
          [[ -n "${RESTART_BROKER_CMD:-}" ]] && echo "$prefix/f-restart-broker"
          echo "$prefix/f-resume-phase2"
        fi
        ;;
      go)
        prefix="$(go_prefix)"
        for e in $GO_SCENARIOS; do
          want "${e%%:*}" && echo "$prefix/${e#*:}"
        done
        ;;
      mqadmin)
        for p in $MQADMIN_CLIENTS; do
          prefix="$(mqadmin_prefix "$p")"
          for e in $MQADMIN_CHECKS $(mqadmin_ops_checks "$p"); do echo "$prefix/$e"; done
        done
        ;;
    esac
  done
  return 0
}

run_java_client() {
  local p="$1"
  local prefix
  prefix="$(java_prefix "$p")"

  local letter class
  for letter in $JAVA_SCENARIOS; do
    class="${letter#*:}"
    letter="${letter%%:*}"
    java_runs "$p" "$letter" || continue
    if [[ "$letter" == t ]]; then
      # Scenario (a) again, every connection (name server and broker) over TLS.
      java_cmd "$p" -Dtls.enable=true "conveyor.compat.$class" 2000
    else
      java_cmd "$p" "conveyor.compat.$class"
    fi
    run_program "$prefix/$letter-$(scenario_name "$letter")" "${JAVA_ARGV[@]}"
  done
  want f || return 0

  local state="$LOG_DIR/resume-$p.state"
  java_cmd "$p" conveyor.compat.Resume phase1 "$state"
  if run_program "$prefix/f-resume-phase1" "${JAVA_ARGV[@]}"; then
    if [[ -n "${RESTART_BROKER_CMD:-}" ]]; then
      echo "run.sh: restarting the broker: $RESTART_BROKER_CMD" >&2
      if bash -c "$RESTART_BROKER_CMD" >"$LOG_DIR/restart-$p.log" 2>&1; then
        pass "$prefix/f-restart-broker"
      else
        sed 's/^/  # /' "$LOG_DIR/restart-$p.log" | tail -n 20
        fail "$prefix/f-restart-broker" "RESTART_BROKER_CMD exited non-zero"
      fi
    else
      echo "run.sh: RESTART_BROKER_CMD not set; scenario (f) phase 2 runs without a broker restart" >&2
    fi
    java_cmd "$p" conveyor.compat.Resume phase2 "$state"
    run_program "$prefix/f-resume-phase2" "${JAVA_ARGV[@]}"
  else
    fail "$prefix/f-resume-phase2" "not run because phase 1 failed"
  fi
}

run_go_client() {
  local prefix run topics=() scenarios=() sc
  prefix="$(go_prefix)"
  for sc in $GO_SCENARIOS; do
    want "${sc%%:*}" && scenarios+=("${sc#*:}")
  done
  [[ ${#scenarios[@]} -gt 0 ]] || return 0
  # The Go push consumer refuses to start on a topic without a route: create the topics up front.
  run="$(date +%s)_$RANDOM"
  for sc in "${scenarios[@]}"; do topics+=("compat_t_go_${sc//-/_}_$run"); done
  java_cmd rmq5 conveyor.compat.Tool create-topics 4 "${topics[@]}"
  if ! "${JAVA_ARGV[@]}" >"$LOG_DIR/go-topic.log" 2>&1; then
    sed 's/^/  # /' "$LOG_DIR/go-topic.log" | tail -n 20
    for sc in "${scenarios[@]}"; do fail "$prefix/$sc" "could not create topic ${topics[0]} etc."; done
    return
  fi
  local i
  for i in "${!scenarios[@]}"; do
    # Broadcasting consumers keep offsets in local files (read from this variable at client start-up).
    COMPAT_GO_LOG_LEVEL="${COMPAT_GO_LOG_LEVEL:-warn}" \
      run_program "$prefix/${scenarios[$i]}" env "rocketmq.client.localOffsetStoreDir=$LOG_DIR/go-offsets" \
      "$OUT/compat-go" -scenario "${scenarios[$i]}" -topic "${topics[$i]}"
  done
}

run_mqadmin() {
  local p="$1" cluster topic group
  local prefix
  prefix="$(mqadmin_prefix "$p")"
  export MQADMIN_CLIENT="$p"
  mqadmin_server_start "$p"

  java_cmd "$p" conveyor.compat.Tool cluster-name
  if ! cluster="$("${JAVA_ARGV[@]}" 2>"$LOG_DIR/mqadmin-cluster.log")"; then
    sed 's/^/  # /' "$LOG_DIR/mqadmin-cluster.log" | tail -n 10
    fail "$prefix" "could not read the cluster name from the name server"
    return
  fi
  topic="compat_t_mqadmin_${p}_$(date +%s)_$RANDOM"

  mqadmin_check "$prefix/clusterList" '#Cluster Name' "^$cluster[[:space:]]" -- clusterList
  mqadmin_check "$prefix/updateTopic" 'success' -- updateTopic -c "$cluster" -t "$topic" -r 4 -w 4
  mqadmin_check "$prefix/topicList" "^$topic\$" -- topicList
  mqadmin_check "$prefix/topicRoute" '"brokerDatas"' '"readQueueNums" *: *4' -- topicRoute -t "$topic"
  mqadmin_check "$prefix/topicStatus" '#Broker Name' "[[:space:]]3[[:space:]]" -- topicStatus -t "$topic"

  # A broker made read-only and writable again at run time (how a broker is drained before
  # it is removed): brokerPermission is the one setting Conveyor changes without a restart.
  mqadmin_check "$prefix/updateBrokerConfig-readOnly" 'update broker config success' -- \
    updateBrokerConfig -c "$cluster" -k brokerPermission -v 4
  mqadmin_check "$prefix/getBrokerConfig" 'brokerPermission += *4' -- getBrokerConfig -c "$cluster"
  mqadmin_check "$prefix/updateBrokerConfig-readWrite" 'update broker config success' -- \
    updateBrokerConfig -c "$cluster" -k brokerPermission -v 6

  # A broker group's write permission taken off in the name server and given back (mqadmin's
  # way to drain a broker): its topics' routes turn read-only, then read-write again.
  local broker
  java_cmd "$p" conveyor.compat.Tool broker-name
  if broker="$("${JAVA_ARGV[@]}" 2>"$LOG_DIR/mqadmin-broker.log")"; then
    mqadmin_check "$prefix/wipeWritePerm" 'wipe write perm of broker\[.*\] in name server\[.*\] OK, [1-9]' -- \
      wipeWritePerm -b "$broker"
    mqadmin_check "$prefix/topicRoute-wiped" '"perm" *: *4' -- topicRoute -t "$topic"
    mqadmin_check "$prefix/addWritePerm" 'add write perm of broker\[.*\] in name server\[.*\] OK, [1-9]' -- \
      addWritePerm -b "$broker"
    mqadmin_check "$prefix/topicRoute-writable" '"perm" *: *6' -- topicRoute -t "$topic"
  else
    sed 's/^/  # /' "$LOG_DIR/mqadmin-broker.log" | tail -n 10
    for c in wipeWritePerm topicRoute-wiped addWritePerm topicRoute-writable; do
      fail "$prefix/$c" "could not read a broker name from the name server"
    done
  fi

  # consumerProgress needs a group with committed offsets: use the one scenario (f) left behind.
  group="$(sed -n 's/^group=//p' "$LOG_DIR/resume-$p.state" 2>/dev/null)"
  if [[ -z "$group" ]]; then
    group="$(sed -n 's/^group=//p' "$LOG_DIR"/resume-*.state 2>/dev/null | head -1)"
  fi
  local state_topic
  state_topic="$(sed -n 's/^topic=//p' "$LOG_DIR/resume-$p.state" 2>/dev/null)"
  if [[ -z "$state_topic" ]]; then
    state_topic="$(sed -n 's/^topic=//p' "$LOG_DIR"/resume-*.state 2>/dev/null | head -1)"
  fi
  if [[ -n "$group" && -n "$state_topic" ]]; then
    mqadmin_check "$prefix/consumerProgress" 'Diff Total' -- consumerProgress -g "$group"
    # Rewinding a group (INVOKE_BROKER_TO_RESET_OFFSET): to the end (skip the backlog), then
    # back to the start (time 0, forced): the group's backlog is 0, then every message again.
    mqadmin_check "$prefix/skipAccumulatedMessage" '#brokerName +#queueId +#offset' -- \
      skipAccumulatedMessage -g "$group" -t "$state_topic" -f true
    mqadmin_check "$prefix/consumerProgress-skipped" 'Diff Total: 0$' -- consumerProgress -g "$group"
    mqadmin_check "$prefix/resetOffsetByTime" '#brokerName +#queueId +#offset' -- \
      resetOffsetByTime -g "$group" -t "$state_topic" -s 0 -f true
    mqadmin_check "$prefix/consumerProgress-rewound" 'Diff Total: [1-9]' -- consumerProgress -g "$group"
  else
    for c in consumerProgress skipAccumulatedMessage consumerProgress-skipped resetOffsetByTime consumerProgress-rewound; do
      fail "$prefix/$c" "no consumer group with offsets (scenario f did not run or failed)"
    done
  fi
  run_mqadmin_ops "$p" "$prefix" "$cluster" "$topic"
  mqadmin_servers_stop
}

mapfile -t EXPECTED < <(expected_checks)
echo "run.sh: ${#EXPECTED[@]} checks expected" >&2

for client in $CLIENTS; do
  case "$client" in
    rmq4 | rmq5) run_java_client "$client" ;;
    go) run_go_client ;;
    mqadmin)
      for p in $MQADMIN_CLIENTS; do run_mqadmin "$p"; done
      ;;
    *) fail "run.sh" "unknown client '$client' in COMPAT_CLIENTS" ;;
  esac
done

# Fewer results than expected means a check was skipped without a word: that is a failure too.
MISSING=()
for name in "${EXPECTED[@]}"; do
  [[ -n "${REPORTED[$name]:-}" ]] || MISSING+=("$name")
done
if [[ ${#EXPECTED[@]} -eq 0 ]]; then
  fail "run.sh" "no checks selected (COMPAT_CLIENTS='$CLIENTS', COMPAT_SCENARIOS='$SCENARIOS')"
fi
if [[ ${#MISSING[@]} -gt 0 ]] || ((PASSED + FAILED < ${#EXPECTED[@]})); then
  for name in "${MISSING[@]}"; do echo "  # never reported: $name"; done
  fail "run.sh" "$((PASSED + FAILED)) checks reported, ${#EXPECTED[@]} expected (${#MISSING[@]} never ran)"
fi
echo "$PASSED passed, $FAILED failed (${#EXPECTED[@]} expected)"
[[ $FAILED -eq 0 ]]
