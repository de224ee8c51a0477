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
# With MQADMIN_SERVER_PORT_<client> set (mqadmin_server_start in mqadmin_lib.sh), the command runs in that
# already running mqadmin (mqadmin/MqadminServer.java) instead of a new JVM: the same MQAdminStartup, 20-400 ms
# a command instead of 4-7 s.
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
LOG_DIR="${COMPAT_LOG_DIR:-$OUT/logs}"
mkdir -p "$LOG_DIR"
# Some commands write into the working directory (consumerStatus dumps each client's state to
# ./<time>/<client id>): the JVM runs in the log directory, never in the checkout.
LOG_DIR="$(cd "$LOG_DIR" && pwd)"
cd "$LOG_DIR"
JVM=(java -Xms32m -Xmx256m
  -Drocketmq.home.dir="$HERE/mqadmin"
  -Dcompat.logDir="$LOG_DIR"
  -Drocketmq.client.logRoot="$LOG_DIR" -Drocketmq.log.root="$LOG_DIR" -Duser.home="$LOG_DIR/mqadmin-home"
  -cp "$(cat "$CP_FILE")")
# mqadmin.sh --serve PORT_FILE OWNER_PID: the mqadmin server (see above), until OWNER_PID ends.
if [[ "${1:-}" == --serve ]]; then
  exec "${JVM[@]}" -Djava.security.manager=allow "$HERE/mqadmin/MqadminServer.java" "$2" "$3"
fi
if [[ -z "${NAMESRV_ADDR:-}" ]]; then
  echo "mqadmin.sh: NAMESRV_ADDR is not set" >&2
  exit 2
fi
if [[ $# -lt 1 ]]; then
  echo "usage: mqadmin.sh COMMAND [ARGS...]   (-n \$NAMESRV_ADDR is added)" >&2
  exit 2
fi

cmd="$1"
shift

port_var="MQADMIN_SERVER_PORT_$CLIENT"
# clusterRT sends until it is killed: it gets a JVM of its own, which `timeout` can end.
[[ "$cmd" == clusterRT ]] && port_var=MQADMIN_NO_SERVER
if [[ -n "${!port_var:-}" ]] && { exec 3<>"/dev/tcp/127.0.0.1/${!port_var}"; } 2>/dev/null; then
  printf '%s\0' "$cmd" -n "$NAMESRV_ADDR" "$@" >&3
  printf '\0' >&3
  out="$(cat <&3)"
  exec 3<&-
  done_line='@@mqadmin-server: done@@'
  if [[ "$out" == *"$done_line" ]]; then
    printf '%s\n' "${out%"$done_line"}"
    exit 0
  fi
  # The server went away in the middle of the command: say so, and run it the usual way.
  echo "mqadmin.sh: the mqadmin server on port ${!port_var} did not finish $cmd; running it in a new JVM" >&2
fi
exec "${JVM[@]}" org.apache.rocketmq.tools.command.MQAdminStartup "$cmd" -n "$NAMESRV_ADDR" "$@"
