#!/usr/bin/env bash
# The faults and the measurement of tests/compat/failover-gaps.sh against Apache RocketMQ 5.3.3 in
# controller mode: how long an unmodified Java producer (RocketMQ client 5.3.3, every setting at its
# default: route polled every 30 s, 3 s send timeout, 2 retries) cannot write when its group's
# master fails, with Apache's own automatic failover (RIP-44).
#
# Arrangement, as in failover-gaps.sh: two "hosts", network namespaces on a bridge; the name server
# with the controller embedded in it (enableControllerInNamesrv, one DLedger node: the layout of
# Apache's conf/controller/quick-start) on the bridge address; broker-a as two controller-mode
# brokers, one in each namespace (brokerId -1 and brokerRole SLAVE as Apache's quick start has them:
# the controller assigns ids and elects the master). Broker settings: enableControllerMode=true,
# controllerAddr, allAckInSyncStateSet=true, flushDiskType=SYNC_FLUSH, the addresses and store paths;
# every other setting at its default (controllerHeartBeatTimeoutMills 10 s, syncBrokerMetadataPeriod
# 5 s, haMaxTimeSlaveNotCatchup 15 s, ...). Controller: its group, peer, id and store path only.
# One JVM per process; heaps from APACHE_BROKER_HEAP (default -Xms256m -Xmx512m) and
# APACHE_NAMESRV_HEAP (default -Xms128m -Xmx256m), so all of it fits a 2-core machine.
#
# Three kinds of fault, GAP_FAULTS times each (default 3), each once both replicas are in the
# controller's SyncStateSet and alive; the master is found anew each time (roles swap), from
# `mqadmin getSyncStateSet -i 1` kept running against the controller:
#   kill:  the master is SIGKILLed and kept down GAP_DOWN_S (default 20) seconds, then restarted;
#   stop:  the master is frozen (SIGSTOP) for 30 s, then thawed;
#   cut:   every packet between the master's host and the others is dropped for GAP_DOWN_S s.
# Each fault's gap is the longest time between two SEND_OKs from 2 s before the fault (but not before
# the group was whole after the previous one: no gap counted twice) until the group is whole again
# (a master, both replicas in sync and alive, 20 more SEND_OKs). Afterwards a
# Java consumer reads everything from offset 0: every key the producer saw SEND_OK for must be there.
# Prints every gap and the median and maximum per kind. It measures, it does not judge the gaps
# (failover-gaps.sh's limit, 10 s, is printed for comparison); fails only when something
# acknowledged is lost or the group does not become whole again within GAP_WHOLE_S (default 180) s.
#
# What it shows (2 cores, GAP_FAULTS=5): the producer leaves the old master only when it next polls
# the route (every 30 s by default), so a gap is the detection (kill: at once, the controller sees the
# connection close; stop and cut: controllerHeartBeatTimeoutMills, 10 s) plus the wait for that poll,
# 13-41 s; meanwhile a demoted old master answers sends with SYSTEM_BUSY (a slave rejects them). A
# thawed master sometimes follows the new one only after 90 s (ReputMessageService's join timeout).
#
#   tests/bench/failover-apache.sh        (root: network namespaces and nftables)
#
# Needs java, mvn (Apache's classpath is resolved from Maven Central into ~/.cache/conveyor/m2 by
# tests/compat/apache_lib.sh; the client by tests/compat/fetch.sh), python3, ip, nft. No cargo.
# Environment: GAP_FAULTS, GAP_DOWN_S, GAP_KINDS (default "kill stop cut"), GAP_WHOLE_S,
# FAILOVER_CLIENT (rmq5 or rmq4, default rmq5), APACHE_BROKER_HEAP, APACHE_NAMESRV_HEAP,
# COMPAT_LOG_DIR (default ~/.cache/conveyor/compat/logs/failover-apache-<time>).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
COMPAT="$ROOT/tests/compat"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
FAULTS="${GAP_FAULTS:-3}"
DOWN="${GAP_DOWN_S:-20}"
KINDS="${GAP_KINDS:-kill stop cut}"
WHOLE_S="${GAP_WHOLE_S:-180}"
PROFILE="${FAILOVER_CLIENT:-rmq5}"
BROKER_HEAP="${APACHE_BROKER_HEAP:--Xms256m -Xmx512m}"
NAMESRV_HEAP="${APACHE_NAMESRV_HEAP:--Xms128m -Xmx256m}"
TOPIC=GapLedger
LIMIT_MS=10000

say() { echo "failover-apache: $*" >&2; }
for tool in java mvn python3 ip nft; do
  command -v "$tool" >/dev/null || { say "$tool not found on PATH"; exit 2; }
done
((EUID == 0)) || { say "needs root (network namespaces, nftables)"; exit 2; }

# shellcheck source=tests/compat/apache_lib.sh
source "$COMPAT/apache_lib.sh"
"$COMPAT/fetch.sh" >&2
WORK="$(mktemp -d /tmp/conveyor-apache-gaps.XXXXXX)"
LOGS="${COMPAT_LOG_DIR:-$OUT/logs/failover-apache-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$LOGS" "$WORK/ledger"

# Two "hosts": network namespaces on a bridge; the name server, the controller, the producer and
# the tools use the bridge address. Names and subnet differ from failover-gaps.sh's (cg…, 10.252.x)
# so both can run on one machine.
TAG="ag$(($$ % 100000))"
NET="10.253.$(($$ % 250))"
# shellcheck source=tests/compat/failover_lab.sh
source "$COMPAT/failover_lab.sh"
# Every process this script started (start_bg's NAME.pid files), thawed and killed; gone before the
# directories are removed.
cleanup() {
  local rc=$? f pid pids=()
  trap - EXIT INT TERM
  for f in "$WORK"/*.pid; do
    [[ -f "$f" ]] || continue
    pid="$(cat "$f")"
    [[ -s "${f%.pid}.rc" ]] && continue
    pids+=("$pid")
    kill -CONT "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  done
  for _ in $(seq 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  cp "$WORK"/*.log "$WORK"/*.conf "$LOGS"/ 2>/dev/null || true
  cp "$WORK"/ledger/{ok-at,failed,slow} "$LOGS"/ 2>/dev/null || true
  # The client's log, without its INFO lines and stack traces (hundreds of MB otherwise).
  grep -hE ' (WARN|ERROR) |Exception' "$WORK"/java/home/logs/rocketmqlogs/*.log 2>/dev/null | grep -vE '^\s+at ' \
    >"$LOGS/client-warnings.log" || true
  for f in "$WORK"/*/logs/rocketmqlogs; do
    [[ -d "$f" ]] || continue
    mkdir -p "$LOGS/$(basename "$(dirname "$(dirname "$f")")")"
    cp -r "$f" "$LOGS/$(basename "$(dirname "$(dirname "$f")")")/" 2>/dev/null || true
  done
  lab_down
  rm -rf "$WORK"
  say "logs in $LOGS"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
lab_up

say "resolving Apache RocketMQ 5.3.3 (cached in $CACHE/m2)"
apache_classpath "$WORK" || { say "could not resolve Apache RocketMQ's classpath"; exit 2; }

NS_PORT="$(apache_free_port)"
CTRL_PORT="$(apache_free_port)"
NAMESRV="$GW:$NS_PORT"
CONTROLLER="$GW:$CTRL_PORT"
cat >"$WORK/namesrv.conf" <<EOF
listenPort=$NS_PORT
enableControllerInNamesrv=true
controllerDLegerGroup=broker-a-controller
controllerDLegerPeers=n0-$CONTROLLER
controllerDLegerSelfId=n0
controllerStorePath=$WORK/namesrv/controller
EOF
for i in 0 1; do
  cat >"$WORK/b$i.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=-1
brokerRole=SLAVE
brokerIP1=${HOST_IP[$i]}
namesrvAddr=$NAMESRV
enableControllerMode=true
controllerAddr=$CONTROLLER
allAckInSyncStateSet=true
flushDiskType=SYNC_FLUSH
storePathRootDir=$WORK/b$i/store
storePathCommitLog=$WORK/b$i/store/commitlog
EOF
done

# jvm NAME HEAP MAIN [NETNS]: an Apache RocketMQ process (configuration WORK/NAME.conf, user.home
# and so its logs in WORK/NAME), in network namespace NETNS when given (ip netns exec execs, so the
# recorded pid is the JVM's).
jvm() {
  local name=$1 heap=$2 main=$3 ns=${4:-} pre=()
  [[ -n "$ns" ]] && pre=(ip netns exec "$ns")
  mkdir -p "$WORK/$name"
  # shellcheck disable=SC2086
  start_bg "$WORK" "$name" "${pre[@]}" java $heap -Duser.home="$WORK/$name" -Drocketmq.home.dir="$WORK/$name" \
    -cp "$(cat "$WORK/classpath")" "$main" -c "$WORK/$name.conf"
}
boots() { grep -c 'boot success' "$WORK/$1.log" 2>/dev/null || true; }
start_broker() { # index
  local n
  n=$(($(boots "b$1") + 1))
  jvm "b$1" "$BROKER_HEAP" org.apache.rocketmq.broker.BrokerStartup "${TAG}h$1"
  wait_boot "$WORK" "b$1" "$n" || { tail -n 30 "$WORK/b$1.log" >&2; exit 1; }
}
pid_of() { cat "$WORK/b$1.pid"; }

# The controller's view, from mqadmin getSyncStateSet -i 1 (one JVM polling every second):
# "MASTER IN_SYNC_ALIVE EPOCH" with MASTER the index of the master's host (-1: none, or the view is
# older than 5 s), IN_SYNC_ALIVE the members of the SyncStateSet the controller holds alive.
start_view() {
  MQADMIN_CLIENT=$PROFILE NAMESRV_ADDR="$NAMESRV" COMPAT_LOG_DIR="$WORK/mqadmin" \
    start_bg "$WORK" view "$COMPAT/mqadmin.sh" getSyncStateSet -a "$CONTROLLER" -b broker-a -i 1
}
view() {
  # The poll ends on the first failed request: start it again.
  if [[ -s "$WORK/view.rc" ]]; then
    mv "$WORK/view.log" "$WORK/view-$(date +%s%N).log"
    start_view
  fi
  python3 - "$WORK/view.log" "${HOST_IP[0]}" "${HOST_IP[1]}" <<'PY'
import os, re, sys, time
path, hosts = sys.argv[1], sys.argv[2:]
try:
    age = time.time() - os.path.getmtime(path)
    text = open(path, errors="replace").read()
except OSError:
    print("-1 0 0"); sys.exit()
best = None
for block in text.split("#brokerName")[1:]:
    nums = re.search(r"^#SyncStateSetNums\t(\d+)$", block, re.M)
    members = re.findall(r"^InSyncReplica:\t.*brokerAddress='([0-9.]+):\d+', alive=(\w+)\}", block, re.M)
    if nums and len(members) == int(nums.group(1)):
        best = (block, members)
if best is None or age > 5:
    print("-1 0 0"); sys.exit()
block, members = best
addr = re.search(r"^#MasterAddr\t([0-9.]+):\d+$", block, re.M)
epoch = re.search(r"^#MasterEpoch\t(\d+)$", block, re.M)
master = hosts.index(addr.group(1)) if addr and addr.group(1) in hosts else -1
print(master, sum(1 for _, alive in members if alive == "true"), epoch.group(1) if epoch else 0)
PY
}

# Waits (WHOLE_S) until a master holds both replicas, alive, in its SyncStateSet and the producer
# acknowledged 20 more; sets MASTER, EPOCH and WHOLE_MS (when).
whole_again() { # what
  local base deadline master in_sync epoch
  base=$(lines "$WORK/ledger/ok")
  deadline=$((SECONDS + WHOLE_S))
  while :; do
    read -r master in_sync epoch < <(view)
    if [[ $master -ge 0 && $in_sync -eq 2 && $(lines "$WORK/ledger/ok") -ge $((base + 20)) ]]; then
      MASTER=$master
      EPOCH=$epoch
      WHOLE_MS=$(now_ms)
      return 0
    fi
    if ((SECONDS > deadline)); then
      say "$1: no in-sync group with progress within ${WHOLE_S}s (master b$master, in-sync alive $in_sync," \
        "$(($(lines "$WORK/ledger/ok") - base)) SEND_OK since); the controller's last view:"
      tail -n 12 "$WORK/view.log" >&2
      exit 1
    fi
    sleep 0.5
  done
}
# java_run ARGS...: the compat suite's Ledger with the client's classpath; it execs (so start_bg
# records the JVM's pid): run it in a subshell.
java_run() {
  local logroot="$WORK/java"
  mkdir -p "$logroot"
  exec java -Xms64m -Xmx512m -Drocketmq.client.logRoot="$logroot" -Drocketmq.log.root="$logroot" \
    -Duser.home="$logroot/home" -Dlogback.configurationFile="$COMPAT/mqadmin/conf/logback_tools.xml" \
    -cp "$(cat "$OUT/java-$PROFILE.classpath")" conveyor.compat.Ledger "$@"
}

say "name server + controller at $NAMESRV / $CONTROLLER; broker-a on ${HOST_IP[*]} (namespaces ${TAG}h0, ${TAG}h1)"
jvm namesrv "$NAMESRV_HEAP" org.apache.rocketmq.namesrv.NamesrvStartup
# Two lines: the name server's and the embedded ControllerManager's.
wait_boot "$WORK" namesrv 2 || { tail -n 30 "$WORK/namesrv.log" >&2; exit 1; }
start_view
# b0 first, so that it is the first master; then b1 joins as its slave.
start_broker 0
deadline=$((SECONDS + 90))
until read -r m _ _ < <(view) && ((m == 0)); do
  ((SECONDS < deadline)) || { say "b0 never became master"; tail -n 12 "$WORK/view.log" >&2; exit 1; }
  sleep 0.5
done
start_broker 1
start_bg "$WORK" producer java_run produce-defaults "$NAMESRV" "$TOPIC" "$WORK/ledger"
say "faults: $KINDS, $FAULTS each (down ${DOWN}s, stop 30s), with the $(cat "$OUT/java-$PROFILE.version") Java producer at its defaults"

declare -A GAPS
fail=0
whole_again "start"
say "group whole: master b$MASTER (epoch $EPOCH), both replicas in sync"
for kind in $KINDS; do
  for n in $(seq 1 "$FAULTS"); do
    m=$MASTER
    e=$EPOCH
    from=$(fault_window_start "$WHOLE_MS")
    at=$(date -u +%T)
    fault "$kind" "$m" "$DOWN"
    ended=$(now_ms)
    whole_again "$kind $n"
    gap=$(longest_gap "$from")
    GAPS[$kind]+="$gap "
    say "$kind $n at $at UTC (master was b$m epoch $e, now b$MASTER epoch $EPOCH): longest gap without SEND_OK ${gap} ms; whole again $(((WHOLE_MS - ended) / 1000)) s after the fault ended"
  done
done
touch "$WORK/ledger/stop"
deadline=$((SECONDS + 60))
until [[ -s "$WORK/producer.rc" ]] || ((SECONDS > deadline)); do sleep 0.2; done
grep -E '^(PASS|FAIL)' "$WORK/producer.log" >&2 || true

# Every acknowledged key must be readable.
(java_run drain "$NAMESRV" "$TOPIC" "$WORK/ledger") >>"$WORK/drain.log" 2>&1 || say "the drain failed (see drain.log)"
acked=$(lines "$WORK/ledger/ok")
lost=$(lost_keys | wc -l)
say "$acked acknowledged, $(sort -u "$WORK/ledger/seen" 2>/dev/null | wc -l) read back, $lost lost; $(lines "$WORK/ledger/failed") failed sends"
if ((lost > 0)); then
  say "FAIL: $lost acknowledged messages lost, e.g. $(lost_keys | head -3 | tr '\n' ' ')"
  fail=1
fi
for kind in $KINDS; do
  read -r median max < <(gap_stats "${GAPS[$kind]}")
  cmp=$( ((median <= LIMIT_MS)) && echo "within" || echo "above")
  say "Apache $kind: median gap ${median} ms, max ${max} ms (gaps: ${GAPS[$kind]% }; $cmp failover-gaps.sh's ${LIMIT_MS} ms)"
done
exit $fail
