#!/usr/bin/env bash
# ACL with real, unmodified RocketMQ clients (issue 25). Starts `conveyor standalone` on free loopback ports with
# [acl] on (a plain_acl.yml users file, a cluster secret, reload every 500 ms) and checks:
#
#   mqadmin (rocketmq-tools 5.3.3 and 4.9.8, MQAdminStartup from fetch.sh's classpath; the credentials come from
#   $ROCKETMQ_HOME/conf/tools.yml, as in Apache's distribution):
#     updateTopic/topicList as the admin user succeed; updateTopic as a non-admin user (PUB|SUB on every topic, but
#     not admin) is refused with NO_PERMISSION (code 16) and the topic does not exist afterwards (topicList).
#   Java 4.9.8 (rocketmq-client + rocketmq-acl) and Java 5.3.3 (rocketmq-client alone), each with
#   new DefaultMQProducer(group, new AclClientRPCHook(new SessionCredentials(ak, sk))) (acl/src, AclClients):
#     send       the producer user (PUB on AclOrders) sends N messages, all SEND_OK
#     consume    the consumer user (SUB on AclOrders and its group) gets all N with DefaultMQPushConsumer(group, hook,
#                new AllocateMessageQueueAveragely())
#     lacks-pub  the producer sends to AclAudit (SUB only; it can read the route): the broker refuses, the send
#                throws MQBrokerException code 16 "... needs PUB on topic AclAudit" (both generations retry
#                NO_PERMISSION and throw MQClientException "Send [3] times, still failed" caused by it)
#     no-perm-topic, unsigned, wrong-secret
#                the send fails on the client ("No route info": the client cannot get a route), and the name server's
#                answer to that client's route request is code 16 with the reason (no permission on the topic / not
#                signed / check signature failed)
#     wrong-secret-at-broker
#                a producer whose route is known, its SessionCredentials' secret then changed: the broker refuses
#                the send, MQBrokerException code 16 "check signature failed"
#   Go rocketmq-client-go v2 (the version of tests/compat/go) with producer/consumer.WithCredentials (acl/go):
#     send, consume, lacks-pub ("CODE: 16"), no-perm-topic and unsigned (the send fails; the client logged the name
#     server's CODE: 16 answer to its route request)
#   Reload (Java 4.9.8): the producer user is removed from plain_acl.yml while its producer runs; a send must be
#   refused ("no user with AccessKey ...") within ACL_RELOAD_DEADLINE_MS (default 5000, ten reload intervals) of
#   the change, a freshly started producer of that user too, and the admin user still sends.
#
#   tests/compat/acl.sh
#
# Environment (all optional): CONVEYOR_BIN (default: build the debug binary), ACL_MESSAGES (N, default 50),
# ACL_MQADMIN_CLIENTS (default "rmq5 rmq4"), ACL_RELOAD_DEADLINE_MS, ACL_DISK_FULL_RATIO (the broker's
# [store] disk-full-ratio, for a machine whose disk is past the default 90 %: the broker refuses writes there),
# COMPAT_LOG_DIR (logs go to a new acl-<time> directory under it; default ~/.cache/conveyor/compat/logs).
# Prints one "ok NAME: detail" or "FAIL NAME: reason" line per check and "acl: N passed, M failed"; exits 1 if
# anything failed or did not report, 2 if the suite could not be set up.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
AOUT="$OUT/acl"
N="${ACL_MESSAGES:-50}"
MQADMIN_CLIENTS="${ACL_MQADMIN_CLIENTS:-rmq5 rmq4}"
RELOAD_INTERVAL_MS=500
RELOAD_DEADLINE_MS="${ACL_RELOAD_DEADLINE_MS:-$((10 * RELOAD_INTERVAL_MS))}"
T0=$SECONDS

say() { echo "acl: $*" >&2; }
die() { say "$*"; exit 2; }

PASSED=0
FAILED=0
declare -A REPORTED=()
ok() { echo "ok $1: $2"; PASSED=$((PASSED + 1)); REPORTED["$1"]=1; }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); REPORTED["$1"]=1; }

# --- tools: installed when missing (never skipped: one that cannot be installed fails the suite) -------------------
# shellcheck source=tests/compat/host_tools.sh
source "$HERE/host_tools.sh"
compat_host_tools acl || die "missing tools (above)"

# --- build: mqadmin's classpath (fetch.sh), the Java program for both client generations, the Go program --------
"$HERE/fetch.sh" >&2 || die "fetch.sh failed"
strip_colors() { sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d'; }
acl_hash() {
  (
    cd "$HERE/acl"
    find pom.xml src go -type f | LC_ALL=C sort | xargs sha256sum
    java -version 2>&1 | head -1
    go version
  ) | sha256sum | cut -d' ' -f1
}
acl_built() {
  local p entry
  for p in rmq4 rmq5; do
    [[ -s "$AOUT/$p.classpath" && -d "$AOUT/$p/classes/conveyor/acl" ]] || return 1
    while IFS= read -r entry; do [[ -e "$entry" ]] || return 1; done < <(tr ':' '\n' <"$AOUT/$p.classpath")
  done
  [[ -x "$AOUT/compat-acl-go" ]]
}
hash="$(acl_hash)"
if [[ ! -f "$AOUT/stamp" || "$(cat "$AOUT/stamp")" != "$hash" ]] || ! acl_built; then
  rm -f "$AOUT/stamp"
  mkdir -p "$AOUT"
  for p in rmq4 rmq5; do
    say "resolving and compiling the Java program ($p)"
    rm -rf "${AOUT:?}/$p" "$AOUT/$p.deps"
    mkdir -p "$AOUT/$p/classes"
    mvn -B -q -ntp -f "$HERE/acl/pom.xml" -P "$p" -Dmaven.repo.local="$CACHE/m2" \
      dependency:build-classpath -Dmdep.outputFile="$AOUT/$p.deps" 2>&1 | strip_colors >&2
    [[ -s "$AOUT/$p.deps" ]] || die "mvn could not resolve the $p classpath"
    javac -nowarn --release 11 -d "$AOUT/$p/classes" -cp "$(cat "$AOUT/$p.deps")" "$HERE"/acl/src/conveyor/acl/*.java >&2 \
      || die "javac failed ($p)"
    echo "$AOUT/$p/classes:$(cat "$AOUT/$p.deps")" >"$AOUT/$p.classpath"
  done
  say "building the Go program"
  (
    cd "$HERE/acl/go"
    export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false"
    go build -o "$AOUT/compat-acl-go.tmp" .
  ) >&2 || die "go build failed"
  mv "$AOUT/compat-acl-go.tmp" "$AOUT/compat-acl-go"
  echo "$hash" >"$AOUT/stamp"
fi
version_of() { tr ':' '\n' <"$1" | sed -n 's|.*/rocketmq-client-\([0-9][^/]*\)\.jar$|\1|p' | head -1; }
J4="$(version_of "$AOUT/rmq4.classpath")"
J5="$(version_of "$AOUT/rmq5.classpath")"
GOV_CLIENT="$(go version -m "$AOUT/compat-acl-go" | awk '$2 == "github.com/apache/rocketmq-client-go/v2" {print $3}')"

# shellcheck source=tests/compat/standalone.sh
source "$HERE/standalone.sh"
conveyor_bin "$ROOT" || die "no conveyor binary (cargo build failed?)"
T_BUILD=$((SECONDS - T0))

# --- the broker --------------------------------------------------------------------------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-acl.XXXXXX")"
LOGS="${COMPAT_LOG_DIR:-$OUT/logs}/acl-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$LOGS"
BROKER_PID=""
BG_PIDS=()
NS=""

# ours PID: the process is still one this script started (its command line names this run's work directory or
# name server; a reaped PID may have been reused by anyone).
ours() {
  local cmd
  cmd="$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline")" || return 1
  [[ "$cmd" == *"$WORK"* ]] || { [[ -n "$NS" ]] && [[ "$cmd" == *"ns=$NS "* || "$cmd" == *"-ns $NS "* ]]; }
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p deadline
  # The client programs run under timeout(1), which passes SIGTERM on to them (and SIGKILLs them 5 s later).
  for p in "${BG_PIDS[@]}"; do ours "$p" && kill -TERM "$p" 2>/dev/null; done
  deadline=$((SECONDS + 10))
  for p in "${BG_PIDS[@]}"; do
    while ours "$p" && ((SECONDS < deadline)); do sleep 0.1; done
  done
  if [[ -n "$BROKER_PID" ]] && ours "$BROKER_PID"; then
    kill -TERM "$BROKER_PID" 2>/dev/null
    deadline=$((SECONDS + 20))
    while ours "$BROKER_PID" && ((SECONDS < deadline)); do sleep 0.1; done
    ours "$BROKER_PID" && kill -KILL "$BROKER_PID" 2>/dev/null
  fi
  cp "$WORK"/*.log "$WORK"/*.yml "$LOGS"/ 2>/dev/null || true
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The users, in RocketMQ's plain_acl.yml format. users_yaml without-producer: the same without acl-producer.
ADMIN=acl-admin:acl-admin-secret
PRODUCER=acl-producer:acl-producer-secret
CONSUMER=acl-consumer:acl-consumer-secret
OPERATOR=acl-operator:acl-operator-secret
users_yaml() {
  cat <<'EOF'
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: acl-admin
    secretKey: acl-admin-secret
    whiteRemoteAddress:
    admin: true
EOF
  [[ "${1:-}" == without-producer ]] || cat <<'EOF'
  - accessKey: acl-producer
    secretKey: acl-producer-secret
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclOrders=PUB
      - AclAudit=SUB
EOF
  cat <<'EOF'
  - accessKey: acl-consumer
    secretKey: acl-consumer-secret
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclOrders=SUB
    groupPerms:
      - AclJava4Group=SUB
      - AclJava5Group=SUB
      - AclGoGroup=SUB
  - accessKey: acl-operator
    secretKey: acl-operator-secret
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
EOF
}
users_yaml >"$WORK/plain_acl.yml"
echo "acl-compat-cluster-secret-$RANDOM$RANDOM" >"$WORK/cluster-secret"

# Started with --config (the [acl] section as an operator writes it); ready when /readyz answers. A port taken
# between the pick and the bind makes conveyor exit: retried with new ports.
write_config() {
  cat >"$WORK/conveyor.toml" <<EOF
[namesrv]
listen = "127.0.0.1:$NS_PORT"
[broker]
listen = "127.0.0.1:$BROKER_PORT"
[http]
listen = "127.0.0.1:$HTTP_PORT"
[grpc]
listen = "off"
[store]
segment-size = 16777216
${ACL_DISK_FULL_RATIO:+disk-full-ratio = $ACL_DISK_FULL_RATIO}
[acl]
enabled = true
users-file = "$WORK/plain_acl.yml"
cluster-secret-file = "$WORK/cluster-secret"
reload-interval-ms = $RELOAD_INTERVAL_MS
EOF
}
standalone_start "$BIN" "$WORK" "$WORK/broker.log" write_config || die "conveyor standalone did not start"
NS="127.0.0.1:$NS_PORT"
say "conveyor (pid $BROKER_PID) ready with ACL on: name server $NS, broker 127.0.0.1:$BROKER_PORT, logs in $LOGS"
T_START=$((SECONDS - T0))

# --- running the clients ---------------------------------------------------------------------------------------
# collect NAME_PREFIX OUTFILE ERRFILE RC EXPECTED...: prints and counts the program's ok/FAIL lines; every expected
# check that printed nothing (the program died, hung, or stopped early) is a failure.
collect() {
  local prefix="$1" out="$2" err="$3" rc="$4" name line
  shift 4
  while IFS= read -r line; do
    case "$line" in
      "ok "*) name="${line#ok }"; name="${name%%: *}"; echo "$line"; PASSED=$((PASSED + 1)); REPORTED["$name"]=1 ;;
      "FAIL "*) name="${line#FAIL }"; name="${name%%: *}"; echo "$line"; FAILED=$((FAILED + 1)); REPORTED["$name"]=1 ;;
    esac
  done <"$out"
  local missing=0
  for name in "$@"; do
    if [[ -z "${REPORTED["$prefix/$name"]:-}" ]]; then
      fail "$prefix/$name" "no result (the program exited with status $rc)"
      missing=1
    fi
  done
  if ((missing == 0 && rc != 0)) && ! grep -q '^FAIL ' "$out"; then
    fail "$prefix/exit" "the program reported every check but exited with status $rc"
    missing=1
  fi
  if ((missing)) || grep -q '^FAIL ' "$out"; then
    tail -n 15 "$err" | sed 's/^/  # stderr: /'
  fi
}

# java_argv PROFILE: the java command line for one client generation (logs in LOGS/java-PROFILE).
java_argv() {
  local log="$LOGS/java-$1"
  mkdir -p "$log"
  JAVA_ARGV=(java -Xms64m -Xmx512m -Drocketmq.client.logRoot="$log" -Drocketmq.log.root="$log" -Duser.home="$log/home"
    -cp "$(cat "$AOUT/$1.classpath")" conveyor.acl.AclClients)
}

# mqadmin MQADMIN_CLIENT HOME ARGS...: Apache's mqadmin (MQAdminStartup) with ROCKETMQ_HOME=HOME, whose
# conf/tools.yml holds the credentials (as in Apache's distribution). Sets MQADMIN_OUT (stdout and stderr) and
# MQADMIN_RC (its exit status; mqadmin exits 0 on most failures, so the output is what tells).
mqadmin() {
  local client="$1" home="$2" cmd="$3"
  shift 3
  MQADMIN_RC=0
  MQADMIN_OUT="$(ROCKETMQ_HOME="$home" timeout -k 5 120 java -XX:TieredStopAtLevel=1 -Xms32m -Xmx256m -Dcompat.logDir="$LOGS" \
    -Drocketmq.client.logRoot="$LOGS" -Drocketmq.log.root="$LOGS" -Duser.home="$LOGS/mqadmin-home" \
    -cp "$(cat "$OUT/java-$client.classpath")" org.apache.rocketmq.tools.command.MQAdminStartup \
    "$cmd" -n "$NS" "$@" 2>&1)" || MQADMIN_RC=$?
  printf '=== %s mqadmin %s %s (ROCKETMQ_HOME=%s): exit %s\n%s\n' "$(date +%T)" "$client" "$cmd $*" "$home" \
    "$MQADMIN_RC" "$MQADMIN_OUT" >>"$LOGS/mqadmin.out"
}
mqadmin_home() { # mqadmin_home DIR AK:SK
  mkdir -p "$1/conf"
  cp "$HERE/mqadmin/conf/logback_tools.xml" "$1/conf/"
  printf 'accessKey: %s\nsecretKey: %s\n' "${2%%:*}" "${2#*:}" >"$1/conf/tools.yml"
}
mqadmin_home "$WORK/home-admin" "$ADMIN"
mqadmin_home "$WORK/home-operator" "$OPERATOR"
indent() { head -n "${1:-12}" | sed 's/^/  # /'; }

# mqadmin_checks CLIENT TOPIC... : as admin, updateTopic the first TOPIC; as the non-admin operator, updateTopic
# FORBIDDEN (refused); as admin, updateTopic the other TOPICs, then topicList must show every TOPIC (created
# before and after the refusal) and not FORBIDDEN.
mqadmin_checks() {
  local client="$1" forbidden="$2"
  shift 2
  local version prefix out t created=()
  version="$(cat "$OUT/java-$client.version")"
  prefix="mqadmin-$version"
  for t in "$@"; do
    mqadmin "$client" "$WORK/home-admin" updateTopic -c DefaultCluster -t "$t" -r 4 -w 4
    out="$MQADMIN_OUT"
    if grep -qE "create topic to .* success" <<<"$out" && ! grep -qE "Exception|command failed" <<<"$out"; then
      ok "$prefix/updateTopic-admin-$t" "$(grep -m1 -E 'create topic to' <<<"$out")"
      created+=("$t")
    else
      fail "$prefix/updateTopic-admin-$t" "mqadmin updateTopic as the admin user did not create $t (exit $MQADMIN_RC)"
      indent 15 <<<"$out"
    fi
    if [[ "$t" == "$1" ]]; then
      mqadmin "$client" "$WORK/home-operator" updateTopic -c DefaultCluster -t "$forbidden" -r 4 -w 4
      out="$MQADMIN_OUT"
      local code
      code="$(grep -m1 -oE 'NO_PERMISSION|CODE: *16 .*' <<<"$out" | head -c 220)"
      if [[ -n "$code" ]] && ! grep -qE "create topic to .* success" <<<"$out"; then
        ok "$prefix/updateTopic-non-admin-refused" "exit $MQADMIN_RC, mqadmin said: $code"
      else
        fail "$prefix/updateTopic-non-admin-refused" "expected NO_PERMISSION / CODE: 16 (exit $MQADMIN_RC)"
        indent 15 <<<"$out"
      fi
    fi
  done
  # The name server's list follows the broker's registrations: wait (deadline) until it shows every topic just
  # created; FORBIDDEN, attempted between them, must not be there.
  local deadline=$((SECONDS + 20)) all
  while true; do
    mqadmin "$client" "$WORK/home-admin" topicList
    out="$MQADMIN_OUT"
    all=1
    for t in "${created[@]}"; do grep -qx "$t" <<<"$out" || all=0; done
    if ((all)) || ((SECONDS >= deadline)); then break; fi
    sleep 0.5
  done
  if ((all)) && ((${#created[@]} == $#)) && ! grep -qE "Exception|command failed" <<<"$out"; then
    ok "$prefix/topicList-admin" "lists ${created[*]} ($(grep -c . <<<"$out") topics)"
  else
    fail "$prefix/topicList-admin" "topicList as admin did not list ${*} within 20 s (exit $MQADMIN_RC)"
    indent 15 <<<"$out"
  fi
  if ((all)) && ! grep -qx "$forbidden" <<<"$out"; then
    ok "$prefix/refused-topic-absent" "$forbidden is not in the admin's topicList"
  else
    fail "$prefix/refused-topic-absent" "$forbidden exists (or the topic list could not be read)"
  fi
}

# 1. mqadmin: the admin user creates the topics the clients use; the non-admin user cannot.
for client in $MQADMIN_CLIENTS; do
  case "$client" in
    rmq5) mqadmin_checks rmq5 AclForbidden5 AclOrders AclAudit ;;
    rmq4) mqadmin_checks rmq4 AclForbidden4 AclTools4 ;;
    *) die "unknown ACL_MQADMIN_CLIENTS entry $client (rmq5, rmq4)" ;;
  esac
done
T_MQADMIN=$((SECONDS - T0))
if [[ " $MQADMIN_CLIENTS " != *" rmq5 "* ]]; then
  # The clients need AclOrders and AclAudit; without the 5.x mqadmin checks, the 4.9.8 tools create them.
  for t in AclOrders AclAudit; do mqadmin rmq4 "$WORK/home-admin" updateTopic -c DefaultCluster -t "$t" -r 4 -w 4; done
fi

# 2.-3. The Java clients of both generations and the Go client, side by side (each its own groups and keys).
CLIENT_CHECKS="send consume lacks-pub no-perm-topic unsigned wrong-secret wrong-secret-at-broker"
GO_CHECKS="send consume lacks-pub no-perm-topic unsigned"
common=(ns="$NS" topic=AclOrders subOnlyTopic=AclAudit noPermTopic=AclSecret producer="$PRODUCER"
  consumer="$CONSUMER" n="$N" deadlineMs=60000)
declare -A RC=()
java_argv rmq4
timeout -k 5 180 "${JAVA_ARGV[@]}" clients "${common[@]}" pgroup=AclJava4Producer cgroup=AclJava4Group \
  prefix="java-$J4" >"$WORK/java4.out" 2>"$WORK/java4.log" &
PID_J4=$!
java_argv rmq5
timeout -k 5 180 "${JAVA_ARGV[@]}" clients "${common[@]}" pgroup=AclJava5Producer cgroup=AclJava5Group \
  prefix="java-$J5" >"$WORK/java5.out" 2>"$WORK/java5.log" &
PID_J5=$!
timeout -k 5 180 "$AOUT/compat-acl-go" -ns "$NS" -topic AclOrders -sub-only-topic AclAudit -no-perm-topic AclSecret \
  -producer "$PRODUCER" -consumer "$CONSUMER" -group AclGoGroup -n "$N" >"$WORK/go.out" 2>"$WORK/go.log" &
PID_GO=$!
BG_PIDS+=("$PID_J4" "$PID_J5" "$PID_GO")
wait "$PID_J4"; RC[j4]=$?
wait "$PID_J5"; RC[j5]=$?
wait "$PID_GO"; RC[go]=$?
# shellcheck disable=SC2086
collect "java-$J4" "$WORK/java4.out" "$WORK/java4.log" "${RC[j4]}" $CLIENT_CHECKS
# shellcheck disable=SC2086
collect "java-$J5" "$WORK/java5.out" "$WORK/java5.log" "${RC[j5]}" $CLIENT_CHECKS
# shellcheck disable=SC2086
collect "go-$GOV_CLIENT" "$WORK/go.out" "$WORK/go.log" "${RC[go]}" $GO_CHECKS
T_CLIENTS=$((SECONDS - T0))

# 4. Reload: the producer user leaves the users file while its Java producer runs.
java_argv rmq4
rm -f "$WORK/reload.ready" "$WORK/reload.trigger"
timeout -k 5 180 "${JAVA_ARGV[@]}" reload ns="$NS" topic=AclOrders producer="$PRODUCER" admin="$ADMIN" \
  pgroup=AclReloadProducer prefix="java-$J4" ready="$WORK/reload.ready" trigger="$WORK/reload.trigger" \
  deadlineMs="$RELOAD_DEADLINE_MS" >"$WORK/reload.out" 2>"$WORK/reload.log" &
PID_RELOAD=$!
BG_PIDS+=("$PID_RELOAD")
deadline=$((SECONDS + 60))
while [[ ! -e "$WORK/reload.ready" ]] && kill -0 "$PID_RELOAD" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
if [[ -e "$WORK/reload.ready" ]]; then
  # Replaced whole (a new file, renamed over the old one), as an editor or a config management tool does.
  users_yaml without-producer >"$WORK/plain_acl.yml.new"
  mv "$WORK/plain_acl.yml.new" "$WORK/plain_acl.yml"
  date +%s%3N >"$WORK/reload.trigger.tmp"
  mv "$WORK/reload.trigger.tmp" "$WORK/reload.trigger"
fi
wait "$PID_RELOAD"; RC[reload]=$?
collect "java-$J4" "$WORK/reload.out" "$WORK/reload.log" "${RC[reload]}" reload-refused reload-new-producer \
  reload-others-unaffected
T_RELOAD=$((SECONDS - T0))

# The broker must still be up.
if ! kill -0 "$BROKER_PID" 2>/dev/null; then
  fail "broker/alive" "conveyor exited during the run"
fi
if ((FAILED > 0)); then
  say "last broker log lines:"
  tail -n 30 "$WORK/broker.log" | sed 's/^/  # broker: /' >&2
fi
say "build ${T_BUILD}s, broker ready at ${T_START}s, mqadmin done at ${T_MQADMIN}s, clients at ${T_CLIENTS}s," \
  "reload at ${T_RELOAD}s; logs in $LOGS"
echo "acl: $PASSED passed, $FAILED failed"
((FAILED == 0))
