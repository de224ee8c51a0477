# shellcheck shell=bash
# Helpers for the suites that run Conveyor's roles as real processes (failover.sh, failover-gaps.sh,
# mqadmin-replication.sh).
# The sourcing script defines WORK (where each process NAME logs to NAME.log), say, HERE and ROOT.

# wait_http [HOST:]PORT NAME: waits (60 s) until the process's /readyz answers (host 127.0.0.1
# unless given); else shows its log and exits.
wait_http() {
  local at=$1
  [[ $at == *:* ]] || at="127.0.0.1:$at"
  for _ in $(seq 600); do
    curl -fs "http://$at/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  say "$2 not ready; its log:"
  tail -20 "$WORK/$2.log" >&2
  exit 1
}

# conveyor_binary: $CONVEYOR_BIN, or the debug build (built here when needed).
conveyor_binary() {
  if [[ -n "${CONVEYOR_BIN:-}" ]]; then
    echo "$CONVEYOR_BIN"
  else
    (cd "$ROOT" && cargo build -q -p conveyor) >&2 || return 1
    echo "${CARGO_TARGET_DIR:-$ROOT/target}/debug/conveyor"
  fi
}

# start_controller, start_namesrv: `conveyor controller` (configured by $WORK/controller.toml,
# listening at $CONTROLLER) and `conveyor namesrv` (at $NAMESRV), their HTTP ports
# ${PORT[controller_http]} and ${PORT[namesrv_http]} on $HTTP_HOST (default 127.0.0.1); logs and
# pid files in $WORK. Started from a subshell, so that the shell does not report the processes
# it kills. Each returns once its /readyz answers.
start_controller() {
  local at="${HTTP_HOST:-127.0.0.1}:${PORT[controller_http]}"
  ("$BIN" controller --config "$WORK/controller.toml" --data-dir "$WORK/controller" \
    --listen "$CONTROLLER" --http-listen "$at" >>"$WORK/controller.log" 2>&1 &
  echo $! >"$WORK/controller.pid")
  wait_http "$at" controller
}
start_namesrv() {
  local at="${HTTP_HOST:-127.0.0.1}:${PORT[namesrv_http]}"
  ("$BIN" namesrv --listen "$NAMESRV" --http-listen "$at" >>"$WORK/namesrv.log" 2>&1 &
  echo $! >"$WORK/namesrv.pid")
  wait_http "$at" namesrv
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# replication: the controller's view of broker-a, "MASTER IN_SYNC_COUNT" (MASTER -1 when none);
# needs BIN and CONTROLLER.
replication() {
  "$BIN" admin replication --controller "$CONTROLLER" --group broker-a --output json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["master"] if d["master"] is not None else -1, len(d["syncStateSet"]))' ||
    echo "-1 0"
}

# java_run LOGNAME ARGS...: the Java ledger program (conveyor.compat.Ledger) with the client
# PROFILE's classpath (from OUT), its output in WORK/LOGNAME.out and .log.
java_run() {
  local logroot="$WORK/java"
  mkdir -p "$logroot"
  local name=$1
  shift
  java -Xms64m -Xmx512m -Drocketmq.client.logRoot="$logroot" -Drocketmq.log.root="$logroot" \
    -Duser.home="$logroot/home" -Dlogback.configurationFile="$HERE/mqadmin/conf/logback_tools.xml" \
    -cp "$(cat "$OUT/java-$PROFILE.classpath")" conveyor.compat.Ledger "$@" >"$WORK/$name.out" 2>>"$WORK/$name.log"
}
