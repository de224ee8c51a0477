#!/usr/bin/env bash
# mqadmin's replication and drain commands against a Conveyor cluster of real processes (issue 13): a controller, a
# name server, broker group broker-a (master 0 and slave 1, controller mode, synchronous replication) and broker
# group broker-b (one master). With mqadmin 5.x (the 4.9.x tools have no replication commands):
#   getControllerMetaData, getSyncStateSet, haStatus (master and slave), getBrokerEpoch: their values equal the
#   controller's and the brokers' own (conveyor admin replication, the brokers' log ends);
#   electMaster of the slave: it becomes master in the next epoch, sends go on, the old master follows it; electing
#   the alive master again is refused (CONTROLLER_MASTER_STILL_EXIST);
#   wipeWritePerm of broker-a while a Java producer sends and a consumer reads (conveyor.compat.Drain): the producer
#   moves to broker-b with no failed send beyond client retries and the consumer finishes broker-a's backlog;
#   addWritePerm gives it back.
#
#   tests/compat/mqadmin-replication.sh
#   COMPAT_TARGET=apache tests/compat/mqadmin-replication.sh   # the same checks against Apache RocketMQ 5.3.3
#
# COMPAT_TARGET=apache checks the checks: a controller (ControllerStartup, one DLedger node), a name server, broker-a
# as two controller-mode brokers (ids assigned by the controller) and broker-b (one master), all Apache RocketMQ 5.3.3
# from Maven Central. Broker ids and addresses are read from the controller there (getSyncStateSet) instead of from
# `conveyor admin replication`; `conveyor admin drain` runs against Apache's name server too.
#
# Environment: CONVEYOR_BIN (default: build the debug binary), COMPAT_LOG_DIR, COMPAT_TARGET (conveyor or apache).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
"$HERE/fetch.sh" >&2 || exit 2
if [[ -n "${CONVEYOR_BIN:-}" ]]; then
  BIN="$CONVEYOR_BIN"
else
  (cd "$ROOT" && cargo build -q -p conveyor) || exit 2
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/conveyor"
fi
WORK="$(mktemp -d /tmp/conveyor-mqadmin-ha.XXXXXX)"
LOG_DIR="${COMPAT_LOG_DIR:-$OUT/logs/mqadmin-ha-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$LOG_DIR"
export COMPAT_LOG_DIR="$LOG_DIR"
say() { echo "mqadmin-replication: $*" >&2; }
cleanup() {
  local f pids=()
  for f in "$WORK"/*.pid "$WORK"/apache/*.pid; do
    [[ -f "$f" ]] && pids+=("$(cat "$f")")
  done
  ((${#pids[@]})) && kill -9 "${pids[@]}" 2>/dev/null
  # Gone before their directories are removed (a JVM still writing its store makes rm fail).
  local alive
  for _ in $(seq 100); do
    alive=0
    for f in "${pids[@]}"; do kill -0 "$f" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  cp "$WORK"/*.log "$WORK"/apache/*.log "$LOG_DIR"/ 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
TARGET="${COMPAT_TARGET:-conveyor}"
CLUSTER=DefaultCluster
# shellcheck source=tests/compat/processes.sh
source "$HERE/processes.sh"

# Conveyor: a controller, a name server, brokers a0 (master) and a1 (slave) of broker-a in controller mode, b0.
start_conveyor() {
  declare -gA PORT
  local p
  for p in controller namesrv controller_http namesrv_http a0 a0_ha a0_http a1 a1_ha a1_http b0 b0_ha b0_http; do
    PORT[$p]="$(free_port)"
  done
  CONTROLLER="127.0.0.1:${PORT[controller]}"
  export NAMESRV_ADDR="127.0.0.1:${PORT[namesrv]}"
  cat >"$WORK/controller.toml" <<'EOF2'
[controller]
detection-ms = 2000
EOF2
  local g
  for g in a b; do
    cat >"$WORK/broker-$g.toml" <<EOF2
[broker]
broker-name = "broker-$g"
[store]
segment-size = 16777216
[replication]
heartbeat-interval-ms = 200
metadata-sync-interval-ms = 200
controller-heartbeat-ms = 200
EOF2
  done
  start controller controller --config "$WORK/controller.toml" --data-dir "$WORK/controller" --listen "$CONTROLLER" \
    --http-listen "127.0.0.1:${PORT[controller_http]}"
  wait_http "${PORT[controller_http]}" controller
  start namesrv namesrv --listen "$NAMESRV_ADDR" --http-listen "127.0.0.1:${PORT[namesrv_http]}"
  wait_http "${PORT[namesrv_http]}" namesrv
  start_broker a 0
  start_broker a 1
  start_broker b 0
  B0="127.0.0.1:${PORT[b0]}"
}
start() { # name args...
  local name="$1"
  shift
  ("$BIN" "$@" >>"$WORK/$name.log" 2>&1 &
  echo $! >"$WORK/$name.pid")
}
start_broker() { # group id
  local g=$1 id=$2 extra=()
  [[ $g == a ]] && extra=(--controller-addr "$CONTROLLER")
  start "$g$id" broker --config "$WORK/broker-$g.toml" --data-dir "$WORK/$g$id" --namesrv-addr "$NAMESRV_ADDR" \
    --broker-id "$id" --listen "127.0.0.1:${PORT[$g$id]}" --replication-listen "127.0.0.1:${PORT[$g${id}_ha]}" \
    --http-listen "127.0.0.1:${PORT[$g${id}_http]}" --grpc-listen 127.0.0.1:0 "${extra[@]}"
  wait_http "${PORT[$g${id}_http]}" "$g$id"
}

# Apache RocketMQ 5.3.3: the same topology; broker-a's brokers start as candidates (brokerId -1) and the controller
# assigns their ids and elects the first one master.
start_apache() {
  # shellcheck source=tests/compat/apache_lib.sh
  source "$HERE/apache_lib.sh"
  ST="$WORK/apache"
  apache_classpath "$ST" || exit 2
  local cport nport a0 a1 b0
  cport="$(apache_free_port)"
  nport="$(apache_free_port)"
  a0="$(apache_broker_port "$cport" "$nport")"
  a1="$(apache_broker_port "$cport" "$nport" "$a0" $((a0 - 2)) $((a0 + 1)))"
  b0="$(apache_broker_port "$cport" "$nport" "$a0" $((a0 - 2)) $((a0 + 1)) "$a1" $((a1 - 2)) $((a1 + 1)))"
  CONTROLLER="127.0.0.1:$cport"
  export NAMESRV_ADDR="127.0.0.1:$nport"
  B0="127.0.0.1:$b0"
  cat >"$ST/controller.conf" <<EOF2
controllerDLegerGroup=conveyor-check
controllerDLegerPeers=n0-$CONTROLLER
controllerDLegerSelfId=n0
controllerStorePath=$ST/controller
enableElectUncleanMaster=false
notifyBrokerRoleChanged=true
EOF2
  echo "listenPort=$nport" >"$ST/namesrv.conf"
  local n port
  for n in a0 a1 b0; do
    port=${!n}
    {
      echo "brokerClusterName=$CLUSTER"
      echo "brokerName=broker-${n:0:1}"
      echo "listenPort=$port"
      echo "brokerIP1=127.0.0.1"
      echo "namesrvAddr=$NAMESRV_ADDR"
      echo "storePathRootDir=$ST/$n"
      echo "storePathCommitLog=$ST/$n/commitlog"
      if [[ $n == a* ]]; then
        echo "brokerId=-1"
        echo "brokerRole=SLAVE"
        echo "enableControllerMode=true"
        echo "controllerAddr=$CONTROLLER"
        echo "allAckInSyncStateSet=true"
        echo "syncBrokerMetadataPeriod=1000"
        echo "checkSyncStateSetPeriod=1000"
      fi
    } >"$ST/$n.conf"
  done
  start_jvm "$ST" controller org.apache.rocketmq.controller.ControllerStartup &&
    wait_log "$ST/controller.log" 'boot success|ControllerManager.*start' &&
    start_jvm "$ST" namesrv org.apache.rocketmq.namesrv.NamesrvStartup && wait_boot "$ST" namesrv 1 &&
    start_jvm "$ST" a0 org.apache.rocketmq.broker.BrokerStartup && wait_boot "$ST" a0 1 &&
    await_view any 1 &&
    start_jvm "$ST" a1 org.apache.rocketmq.broker.BrokerStartup && wait_boot "$ST" a1 1 &&
    start_jvm "$ST" b0 org.apache.rocketmq.broker.BrokerStartup && wait_boot "$ST" b0 1 || {
    tail -n 30 "$ST"/*.log >&2
    exit 1
  }
}
# wait_log FILE REGEX: waits (90 s) until FILE has a line matching REGEX.
wait_log() {
  local deadline=$((SECONDS + 90))
  until grep -qE "$2" "$1" 2>/dev/null; do
    ((SECONDS >= deadline)) && { say "no line matching '$2' in $1"; return 1; }
    sleep 0.2
  done
}

PASSED=0
FAILED=0
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); }
mqadmin() { timeout -k 5 "${MQADMIN_TIMEOUT:-120}" "$HERE/mqadmin.sh" "$@" 2>&1; }
# shellcheck source=tests/compat/mqadmin_lib.sh
source "$HERE/mqadmin_lib.sh"
mqadmin_server_start "${MQADMIN_CLIENT:-rmq5}"
check() { # check NAME REGEX... -- ARGS...
  local name="$1"
  shift
  mqadmin_check "mqadmin/$name" "$@"
}
# The controller's view of broker-a as "MASTER MASTER_EPOCH SYNC_EPOCH IN_SYNC_COUNT ID=ADDR,..." (the in-sync
# replicas): from `conveyor admin replication` (Conveyor) or mqadmin getSyncStateSet (Apache; so its values are
# checked against themselves there).
controller_view() {
  if [[ $TARGET == apache ]]; then
    mqadmin getSyncStateSet -a "$CONTROLLER" -b broker-a | python3 -c '
import re, sys
out = sys.stdin.read()
field = lambda k: (re.search(r"^#" + k + r"\t(\S+)$", out, re.M) or [None, None])[1]
members = re.findall(r"brokerId=(\d+), brokerAddress=.([0-9.:]+)., alive=true", out)
if field("MasterBrokerId") is None:
    print("-1 0 0 0 -")
else:
    print(field("MasterBrokerId"), field("MasterEpoch"), field("SyncStateSetEpoch"), len(members),
          ",".join(i + "=" + a for i, a in members) or "-")'
  else
    "$BIN" admin replication --controller "$CONTROLLER" --group broker-a --output json 2>/dev/null |
      python3 -c '
import json, sys
d = json.load(sys.stdin)
members = [r for r in d["replicas"] if r["inSync"]]
print(d["master"] if d["master"] is not None else -1, d["masterEpoch"], d["syncStateSetEpoch"], len(members),
      ",".join("%d=%s" % (r["brokerId"], r["address"]) for r in members) or "-")' ||
      echo "-1 0 0 0 -"
  fi
}
await_view() { # MASTER IN_SYNC_COUNT: waits (60 s) until the controller says so (MASTER "any": any master)
  local deadline=$((SECONDS + 60)) m e s n
  while :; do
    read -r m e s n _ < <(controller_view)
    [[ ($m == "$1" || ($1 == any && $m != -1)) && $n == "$2" ]] && return 0
    ((SECONDS >= deadline)) && { say "controller view: master $m epoch $e set epoch $s in-sync $n"; return 1; }
    sleep 0.2
  done
}

export MQADMIN_CLIENT=rmq5
if [[ $TARGET == apache ]]; then start_apache; else start_conveyor; fi
await_view any 2 || { fail "mqadmin/setup" "broker-a never had a master with both replicas in sync"; exit 1; }
# Broker-a's master and slave: ids (the controller's) and addresses.
read -r M_ID _ _ _ members < <(controller_view)
declare -A ADDR
for m in ${members//,/ }; do ADDR[${m%%=*}]="${m#*=}"; done
for id in "${!ADDR[@]}"; do [[ $id != "$M_ID" ]] && S_ID=$id; done
M_ADDR="${ADDR[$M_ID]}"
S_ADDR="${ADDR[$S_ID]}"
say "$TARGET: controller $CONTROLLER, name server $NAMESRV_ADDR, broker-a master $M_ID $M_ADDR and slave $S_ID $S_ADDR, broker-b $B0"
# Some records, so the log, the epochs and the slave's acknowledgements are not empty.
check sendMsgStatus '^rt=[0-9]+ms, SendResult=SendResult \[sendStatus=SEND_OK' -- sendMsgStatus -b broker-a -c 5
read -r _ epoch set_epoch _ < <(controller_view)

check getControllerMetaData "^#ControllerLeaderAddress	$CONTROLLER\$" "^#Peer:	.+:$CONTROLLER\$" -- \
  getControllerMetaData -a "$CONTROLLER"
check getSyncStateSet '^#brokerName	broker-a$' "^#MasterBrokerId	$M_ID\$" "^#MasterAddr	$M_ADDR\$" "^#MasterEpoch	$epoch\$" \
  "^#SyncStateSetEpoch	$set_epoch\$" '^#SyncStateSetNums	2$' \
  "InSyncReplica:	ReplicaIdentity\\{brokerName='broker-a', brokerId=$S_ID, brokerAddress='$S_ADDR', alive=true\\}" -- \
  getSyncStateSet -a "$CONTROLLER" -b broker-a
# The master's view of its slave, caught up (diff 0, OK), and the slave's view of its stream.
check haStatus-master "^#MasterAddr	$M_ADDR\$" '^#SlaveNum	1$' '^#InSyncSlaveNum	1$' \
  '^[0-9.:]+ +([0-9]+) +0 +[0-9.]+ +OK +[0-9]+$' -- haStatus -b "$M_ADDR"
check haStatus-slave '^#CommitLogMaxOffset	[1-9][0-9]*$' '^#LastReadTime	' '^#MasterFlushOffset	[0-9]+$' -- \
  haStatus -b "$S_ADDR"
check haStatus-cluster "^#MasterAddr	$M_ADDR\$" "^#MasterAddr	$B0\$" -- haStatus -c "$CLUSTER"
check getBrokerEpoch '^#brokerName	broker-a$' '^#brokerId	0$' "^#brokerId	$S_ID\$" \
  "^#Epoch: EpochEntry\\{epoch=$epoch, startOffset=[0-9]+, endOffset=[1-9][0-9]*\\}\$" -- getBrokerEpoch -b broker-a

# A designated election of the slave: master in the next epoch; the old master follows it; sends go on.
check electMaster '^#BrokerName	broker-a$' "^#BrokerMasterAddr	$S_ADDR\$" "^#MasterEpoch	$((epoch + 1))\$" -- \
  electMaster -a "$CONTROLLER" -c "$CLUSTER" -bn broker-a -b "$S_ID"
if await_view "$S_ID" 2; then pass "mqadmin/electMaster-in-sync"; else fail "mqadmin/electMaster-in-sync" "broker $S_ID is not master with broker $M_ID back in sync"; fi
check sendMsgStatus-after-election '^rt=[0-9]+ms, SendResult=SendResult \[sendStatus=SEND_OK' -- \
  sendMsgStatus -b broker-a -c 5
check haStatus-new-master "^#MasterAddr	$S_ADDR\$" '^#InSyncSlaveNum	1$' -- haStatus -b "$S_ADDR"
out="$(mqadmin electMaster -a "$CONTROLLER" -c "$CLUSTER" -bn broker-a -b "$S_ID")"
if grep -q 'CODE: 2011 ' <<<"$out"; then
  pass "mqadmin/electMaster-alive-master-refused"
else
  head -n 20 <<<"$out" | sed 's/^/  # /'
  fail "mqadmin/electMaster-alive-master-refused" "no CONTROLLER_MASTER_STILL_EXIST (2011)"
fi

# Draining broker-a with wipeWritePerm while a producer sends and a consumer reads.
TOPIC="drain_$(date +%s)_$RANDOM"
check updateTopic 'success' -- updateTopic -c "$CLUSTER" -t "$TOPIC" -r 4 -w 4
mkdir -p "$WORK/drain"
java -Xms64m -Xmx512m -Drocketmq.client.logRoot="$LOG_DIR/java" -Drocketmq.log.root="$LOG_DIR/java" \
  -Duser.home="$LOG_DIR/java/home" -Dlogback.configurationFile="$HERE/mqadmin/conf/logback_tools.xml" \
  -cp "$(cat "$OUT/java-rmq5.classpath")" conveyor.compat.Drain "$WORK/drain" "$TOPIC" broker-a \
  >"$WORK/drain.out" 2>"$WORK/drain.log" &
drain_pid=$!
wait_for() { # file seconds
  local deadline=$((SECONDS + $2))
  until [[ -e "$1" ]]; do ((SECONDS >= deadline)) && return 1; sleep 0.2; done
}
if wait_for "$WORK/drain/sending" 120; then
  check wipeWritePerm 'wipe write perm of broker\[broker-a\] in name server\[.*\] OK, [1-9]' -- wipeWritePerm -b broker-a
  touch "$WORK/drain/wiped"
  if wait_for "$WORK/drain/moved" 120; then pass "mqadmin/drain-producer-moved"; else fail "mqadmin/drain-producer-moved" "the producer kept sending to broker-a"; fi
else
  fail "mqadmin/wipeWritePerm" "the Drain producer never sent to both groups"
  fail "mqadmin/drain-producer-moved" "not run"
fi
touch "$WORK/drain/stop"
wait "$drain_pid"
sed 's/^/  # /' "$WORK/drain.out" | grep -v '^  # PASS' | tail -n 20
if grep -q '^PASS ' "$WORK/drain.out"; then
  pass "mqadmin/drain-no-failed-send-backlog-consumed"
else
  fail "mqadmin/drain-no-failed-send-backlog-consumed" "$(grep '^FAIL ' "$WORK/drain.out" | head -1)"
fi
check addWritePerm 'add write perm of broker\[broker-a\] in name server\[.*\] OK, [1-9]' -- addWritePerm -b broker-a
check topicRoute-writable '"perm" *: *6' -- topicRoute -t "$TOPIC"
# The same drain with conveyor admin, on broker-b: read-only in the name server, then writable again.
drained="$("$BIN" admin drain --namesrv-addr "$NAMESRV_ADDR" --broker-name broker-b --output json 2>&1)"
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert not d["writable"] and d["nameServers"][0]["topics"] > 0' "$drained" 2>/dev/null &&
  grep -qE '"perm" *: *4' <<<"$(mqadmin topicRoute -t "$TOPIC")"; then
  pass "conveyor-admin/drain"
else
  echo "$drained" | sed 's/^/  # /'
  fail "conveyor-admin/drain" "broker-b's topics did not turn read-only"
fi
undone="$("$BIN" admin drain --namesrv-addr "$NAMESRV_ADDR" --broker-name broker-b --undo 2>&1)"
if grep -qE '^broker-b: [1-9][0-9]* topics writable again in name server ' <<<"$undone" &&
  ! grep -qE '"perm" *: *4' <<<"$(mqadmin topicRoute -t "$TOPIC")"; then
  pass "conveyor-admin/drain-undo"
else
  echo "$undone" | sed 's/^/  # /'
  fail "conveyor-admin/drain-undo" "broker-b's topics are not writable again"
fi

echo "mqadmin-replication: $PASSED passed, $FAILED failed" >&2
((FAILED == 0))
