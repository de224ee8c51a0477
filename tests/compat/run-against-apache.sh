#!/usr/bin/env bash
# Runs the real-client compatibility suite (run.sh) against Apache RocketMQ itself (name server + broker 5.3.3 from
# Maven Central), configured like run-against-standalone.sh configures Conveyor: short delay levels (level n = n
# seconds) and a short transaction timeout. This checks the checks: every scenario should pass here, so a failure
# against Conveyor that also happens here is a problem of the test, not of the broker.
#
#   tests/compat/run-against-apache.sh                  # everything (about 5 minutes)
#   COMPAT_SCENARIOS=gj tests/compat/run-against-apache.sh
#
# Needs java (17 works), mvn, python3. Not part of tests/all.sh. The broker is restarted between the phases of (f)
# (SIGTERM; the JVM's exit status is reported but not required to be 0). mqadmin 4.9.x is not run: its clusterList
# needs a field the 5.x broker no longer reports.
#
# Environment: COMPAT_CLIENTS, COMPAT_SCENARIOS, COMPAT_TIMEOUT_SECS, COMPAT_TEST_TIMEOUT (run.sh);
#   COMPAT_LOG_DIR (default ~/.cache/conveyor/compat/logs/<time>-apache; Apache's own logs go below it).
#
# Internal: `run-against-apache.sh restart STATE_DIR` is the RESTART_BROKER_CMD handed to run.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
DELAY_LEVELS="1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"
READY_SECS=90
STOP_SECS=60

say() { echo "apache: $*" >&2; }

# start_jvm STATE NAME MAIN: starts an Apache RocketMQ process in the background (config STATE/NAME.conf, output
# appended to STATE/NAME.log); a wrapper records its exit status in STATE/NAME.rc.
start_jvm() {
  local st="$1" name="$2" main="$3"
  rm -f "$st/$name.pid" "$st/$name.rc"
  echo "=== start $(date '+%F %T')" >>"$st/$name.log"
  (
    java -Xms256m -Xmx1g -Duser.home="$st/home" -Drocketmq.home.dir="$st/home" -cp "$(cat "$st/classpath")" \
      "$main" -c "$st/$name.conf" >>"$st/$name.log" 2>&1 </dev/null &
    echo $! >"$st/$name.pid"
    rc=0
    wait $! || rc=$?
    echo "$rc" >"$st/$name.rc"
  ) >/dev/null 2>&1 </dev/null &
  local deadline=$((SECONDS + 10))
  while [[ ! -s "$st/$name.pid" ]]; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

# wait_boot STATE NAME COUNT: waits until NAME.log shows COUNT "boot success" lines.
wait_boot() {
  local st="$1" name="$2" count="$3" deadline=$((SECONDS + READY_SECS))
  while (($(grep -c 'boot success' "$st/$name.log" || true) < count)); do
    if [[ -s "$st/$name.rc" ]]; then
      say "$name exited with status $(cat "$st/$name.rc") during start-up"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      say "$name did not boot within ${READY_SECS}s"
      return 1
    fi
    sleep 0.2
  done
}

stop_jvm() {
  local st="$1" name="$2" pid
  pid="$(cat "$st/$name.pid" 2>/dev/null || true)"
  [[ -n "$pid" && ! -s "$st/$name.rc" ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_SECS))
  while [[ ! -s "$st/$name.rc" ]] && ((SECONDS < deadline)); do sleep 0.1; done
  if [[ ! -s "$st/$name.rc" ]]; then
    say "$name (pid $pid) still running ${STOP_SECS}s after SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    return 1
  fi
  say "$name (pid $pid) exited with status $(cat "$st/$name.rc")"
}

if [[ "${1:-}" == "restart" ]]; then
  st="${2:?usage: $0 restart STATE_DIR}"
  stop_jvm "$st" broker || exit 1
  boots=$(($(grep -c 'boot success' "$st/broker.log" || true) + 1))
  start_jvm "$st" broker org.apache.rocketmq.broker.BrokerStartup && wait_boot "$st" broker "$boots" || {
    tail -n 40 "$st/broker.log" >&2
    exit 1
  }
  exit 0
fi

T0=$SECONDS
for tool in java mvn python3; do
  command -v "$tool" >/dev/null || { echo "run-against-apache.sh: $tool not found on PATH" >&2; exit 2; }
done
LOG_DIR="${COMPAT_LOG_DIR:-$CACHE/compat/logs/$(date +%Y%m%d-%H%M%S)-apache}"
mkdir -p "$LOG_DIR"
export COMPAT_LOG_DIR="$LOG_DIR"
ST="$LOG_DIR/apache"
mkdir -p "$ST/home" "$ST/store"

say "resolving Apache RocketMQ from Maven Central (cached in $CACHE/m2)"
mvn -B -q -ntp -f "$HERE/apache/pom.xml" -Dmaven.repo.local="$CACHE/m2" dependency:build-classpath \
  -Dmdep.outputFile="$ST/classpath" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d' >&2

# Free ports: the name server's, and a broker port P with P-2 (fast/VIP channel) and P+1 (HA) free too.
read -r NS_PORT BROKER_PORT < <(python3 -c '
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
s = socket.socket(); s.bind(("127.0.0.1", 0)); ns = s.getsockname()[1]; s.close()
while True:
    p = random.randint(20000, 60000)
    if p != ns and all(free(q) for q in (p - 2, p, p + 1)) and ns not in (p - 2, p + 1):
        print(ns, p); break
')
cat >"$ST/namesrv.conf" <<EOF
listenPort=$NS_PORT
EOF
cat >"$ST/broker.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
listenPort=$BROKER_PORT
brokerIP1=127.0.0.1
namesrvAddr=127.0.0.1:$NS_PORT
storePathRootDir=$ST/store
storePathCommitLog=$ST/store/commitlog
messageDelayLevel=$DELAY_LEVELS
transactionTimeOut=3000
transactionCheckInterval=5000
EOF

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_jvm "$ST" broker || true
  stop_jvm "$ST" namesrv || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "starting name server on 127.0.0.1:$NS_PORT and broker on 127.0.0.1:$BROKER_PORT (logs in $ST)"
if ! start_jvm "$ST" namesrv org.apache.rocketmq.namesrv.NamesrvStartup || ! wait_boot "$ST" namesrv 1 ||
  ! start_jvm "$ST" broker org.apache.rocketmq.broker.BrokerStartup || ! wait_boot "$ST" broker 1; then
  tail -n 40 "$ST/namesrv.log" "$ST/broker.log" >&2 || true
  exit 2
fi

export NAMESRV_ADDR="127.0.0.1:$NS_PORT"
export RESTART_BROKER_CMD="'$SELF' restart '$ST'"
export COMPAT_MQADMIN_CLIENTS="${COMPAT_MQADMIN_CLIENTS:-rmq5}"
export COMPAT_DELAY_LEVELS="$DELAY_LEVELS"
rc=0
"$HERE/run.sh" || rc=$?
say "total $((SECONDS - T0))s; logs in $LOG_DIR (exit $rc)"
exit "$rc"
