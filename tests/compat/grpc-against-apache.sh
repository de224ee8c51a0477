#!/usr/bin/env bash
# Runs the gRPC checks (grpc.sh) against Apache RocketMQ itself: name server + broker + proxy 5.3.3 from Maven
# Central (apache-proxy/pom.xml), the proxy in cluster mode against the name server, all on free loopback ports.
# The broker is configured like run-against-apache.sh's (short delay levels, transaction timeout 3 s, check
# interval 5 s). This checks the checks: every one should pass here, so a failure against Conveyor that also
# happens here is a problem of the test, not of the broker.
#
#   tests/compat/grpc-against-apache.sh                       # everything (about 3 minutes)
#   GRPC_TLS=true tests/compat/grpc-against-apache.sh         # the SDK over TLS (the proxy accepts both)
#   GRPC_CHECKS="push-dlq push-failure-redelivery" tests/compat/grpc-against-apache.sh
#
# Needs java (17 works), mvn, python3 (and what fetch.sh needs: go). Not part of tests/all.sh.
#
# The proxy's configuration (rmq-proxy.json): rocketMQClusterName, namesrvAddr, proxyMode "cluster",
# grpcServerPort and remotingListenPort (free ports), and, to keep the suite short, a long-polling window of
# 1-3 s instead of 5-20 s (grpcClientConsumerMinLongPollingTimeoutMillis / ...MaxLongPollingTimeoutMillis: the
# proxy does not wake a waiting receive when a message becomes visible again, so redeliveries and FIFO hand-overs
# wait out the poll) and a transaction heartbeat every 2 s instead of 20 s (transactionHeartbeatPeriodSecond: the
# broker's check-back reaches a gRPC producer only after the proxy registered its group with a heartbeat), and a
# 3 s gRPC shutdown grace (grpcShutdownTimeSeconds, default 30) so that stopping the proxy is quick. TLS is
# the proxy's default (permissive mode, self-signed test certificate): plaintext and TLS clients both work.
#
# Environment: GRPC_TLS, GRPC_CHECKS, GRPC_TIMEOUT_SCALE, GRPC_TEST_TIMEOUT (grpc.sh);
#   GRPC_LOG_DIR (default ~/.cache/conveyor/compat/logs/<time>-grpc-apache; Apache's own logs go below it).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
DELAY_LEVELS="1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"

say() { echo "apache: $*" >&2; }

# shellcheck source=tests/compat/apache_lib.sh
source "$HERE/apache_lib.sh"

T0=$SECONDS
for tool in java mvn python3; do
  command -v "$tool" >/dev/null || { echo "grpc-against-apache.sh: $tool not found on PATH" >&2; exit 2; }
done
LOG_DIR="${GRPC_LOG_DIR:-$CACHE/compat/logs/$(date +%Y%m%d-%H%M%S)-grpc-apache}"
mkdir -p "$LOG_DIR"
export GRPC_LOG_DIR="$LOG_DIR"
ST="$LOG_DIR/apache"
mkdir -p "$ST/home" "$ST/store"

# Builds before the processes start (grpc.sh runs them again; warm they return at once).
"$HERE/fetch.sh" >&2 || exit 2
"$HERE/grpc-fetch.sh" >&2 || exit 2

say "resolving Apache RocketMQ (name server, broker, proxy) from Maven Central (cached in $CACHE/m2)"
mvn -B -q -ntp -f "$HERE/apache-proxy/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
  dependency:build-classpath -Dmdep.outputFile="$ST/classpath" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d' >&2
[[ -s "$ST/classpath" ]] || { say "could not resolve apache-proxy/pom.xml"; exit 2; }

# Free ports: the name server's, a broker port P with P-2 (fast/VIP channel) and P+1 (HA) free too, and the
# proxy's gRPC and remoting ports, all distinct.
NS_PORT="$(apache_free_port)"
BROKER_PORT="$(apache_broker_port "$NS_PORT")"
taken=" $NS_PORT $((BROKER_PORT - 2)) $BROKER_PORT $((BROKER_PORT + 1)) "
pick_port() {
  local p
  while true; do
    p="$(apache_free_port)"
    [[ "$taken" == *" $p "* ]] || break
  done
  taken+="$p "
  echo "$p"
}
GRPC_PORT="$(pick_port)"
PROXY_REMOTING_PORT="$(pick_port)"

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
cat >"$ST/rmq-proxy.json" <<EOF
{
  "rocketMQClusterName": "DefaultCluster",
  "namesrvAddr": "127.0.0.1:$NS_PORT",
  "proxyMode": "cluster",
  "grpcServerPort": $GRPC_PORT,
  "remotingListenPort": $PROXY_REMOTING_PORT,
  "grpcClientConsumerMinLongPollingTimeoutMillis": 1000,
  "grpcClientConsumerMaxLongPollingTimeoutMillis": 3000,
  "transactionHeartbeatPeriodSecond": 2,
  "grpcShutdownTimeSeconds": 3
}
EOF

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # All three at once (the broker alone takes 10-20 s to shut down); nothing is checked any more.
  local name t=$SECONDS
  for name in proxy broker namesrv; do
    stop_process "$ST" "$name" &
  done
  wait
  say "stopped in $((SECONDS - t))s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

show_logs() { tail -n 40 "$ST/namesrv.log" "$ST/broker.log" "$ST/proxy.log" >&2 2>/dev/null || true; }

say "starting name server on 127.0.0.1:$NS_PORT and broker on 127.0.0.1:$BROKER_PORT (logs in $ST)"
if ! start_jvm "$ST" namesrv org.apache.rocketmq.namesrv.NamesrvStartup || ! wait_boot "$ST" namesrv 1 ||
  ! start_jvm "$ST" broker org.apache.rocketmq.broker.BrokerStartup || ! wait_boot "$ST" broker 1; then
  show_logs
  exit 2
fi

# The proxy creates its heartbeat-sync topic on the brokers of the cluster at start-up and exits if the name server
# does not route the cluster yet: wait until it does.
export NAMESRV_ADDR="127.0.0.1:$NS_PORT"
deadline=$((SECONDS + READY_SECS))
until "$HERE/mqadmin.sh" topicRoute -t DefaultCluster 2>/dev/null | grep -q '"brokerAddrs"'; do
  if ((SECONDS >= deadline)); then
    say "the name server did not route cluster DefaultCluster within ${READY_SECS}s"
    show_logs
    exit 2
  fi
  sleep 1
done

say "starting the proxy (cluster mode): gRPC 127.0.0.1:$GRPC_PORT, remoting 127.0.0.1:$PROXY_REMOTING_PORT"
start_bg "$ST" proxy java -Xms256m -Xmx1g -Duser.home="$ST/home" -Drocketmq.home.dir="$ST/home" \
  -cp "$(cat "$ST/classpath")" org.apache.rocketmq.proxy.ProxyStartup -pc "$ST/rmq-proxy.json" -pm cluster
deadline=$((SECONDS + READY_SECS))
until grep -q 'rocketmq-proxy startup successfully' "$ST/proxy.log"; do
  if [[ -s "$ST/proxy.rc" ]] || ((SECONDS >= deadline)); then
    say "the proxy did not start (exit status $(cat "$ST/proxy.rc" 2>/dev/null || echo none))"
    show_logs
    exit 2
  fi
  sleep 0.2
done

export GRPC_ENDPOINT="127.0.0.1:$GRPC_PORT"
rc=0
"$HERE/grpc.sh" || rc=$?
say "total $((SECONDS - T0))s; logs in $LOG_DIR (exit $rc)"
exit "$rc"
