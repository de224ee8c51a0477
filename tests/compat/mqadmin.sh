#!/usr/bin/env bash
# Runs Apache RocketMQ's mqadmin (org.apache.rocketmq.tools.command.MQAdminStartup) from the classpath that
# fetch.sh resolved from Maven Central, against the name server in NAMESRV_ADDR.
#
#   NAMESRV_ADDR=127.0.0.1:9876 tests/compat/mqadmin.sh clusterList
#   NAMESRV_ADDR=... tests/compat/mqadmin.sh updateTopic -c DefaultCluster -t T1 -r 4 -w 4
#   NAMESRV_ADDR=... tests/compat/mqadmin.sh topicList | topicRoute -t T1 | topicStatus -t T1
#   NAMESRV_ADDR=... tests/compat/mqadmin.sh consumerProgress -g G1
#
# MQADMIN_CLIENT=rmq5 (default, rocketmq-tools 5.x) or rmq4 (4.9.x) picks the tools version.
# Note: mqadmin exits 0 even when a command fails; check its output ("... command failed", exceptions).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/compat"
CLIENT="${MQADMIN_CLIENT:-rmq5}"
CP_FILE="$OUT/java-$CLIENT.classpath"

if [[ ! -s "$CP_FILE" ]]; then
  echo "mqadmin.sh: $CP_FILE missing; run $HERE/fetch.sh first" >&2
  exit 2
fi
if [[ -z "${NAMESRV_ADDR:-}" ]]; then
  echo "mqadmin.sh: NAMESRV_ADDR is not set" >&2
  exit 2
fi
if [[ $# -lt 1 ]]; then
  echo "usage: mqadmin.sh COMMAND [ARGS...]   (-n \$NAMESRV_ADDR is added)" >&2
  exit 2
fi

LOG_DIR="${COMPAT_LOG_DIR:-$OUT/logs}"
mkdir -p "$LOG_DIR"
cmd="$1"
shift
exec java -Xms32m -Xmx256m \
  -Drocketmq.home.dir="$HERE/mqadmin" \
  -Dcompat.logDir="$LOG_DIR" \
  -Drocketmq.client.logRoot="$LOG_DIR" -Drocketmq.log.root="$LOG_DIR" -Duser.home="$LOG_DIR/mqadmin-home" \
  -cp "$(cat "$CP_FILE")" \
  org.apache.rocketmq.tools.command.MQAdminStartup "$cmd" -n "$NAMESRV_ADDR" "$@"
