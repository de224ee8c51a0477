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

say() { echo "apache: $*" >&2; }

# shellcheck source=tests/compat/apache_lib.sh
source "$HERE/apache_lib.sh"

if [[ "${1:-}" == "restart" ]]; then
  st="${2:?usage: $0 restart STATE_DIR}"
  stop_process "$st" broker || exit 1
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
apache_classpath "$ST" || exit 2

# Free ports: the name server's, and a broker port P with P-2 (fast/VIP channel) and P+1 (HA) free too.
NS_PORT="$(apache_free_port)"
BROKER_PORT="$(apache_broker_port "$NS_PORT")"
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
  stop_process "$ST" broker || true
  stop_process "$ST" namesrv || true
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
export COMPAT_TARGET=apache
rc=0
"$HERE/run.sh" || rc=$?
say "total $((SECONDS - T0))s; logs in $LOG_DIR (exit $rc)"
exit "$rc"
