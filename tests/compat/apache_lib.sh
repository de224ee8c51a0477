#!/usr/bin/env bash
# Apache RocketMQ processes for the checks of the checks (run-against-apache.sh, mqadmin-replication.sh with
# COMPAT_TARGET=apache): start a JVM from a classpath resolved from Maven Central, wait for its "boot success" line,
# stop it. Sourced; the caller defines say().
#
# A state directory ST holds: ST/classpath (the resolved classpath), ST/NAME.conf (the process's configuration),
# ST/NAME.log (its output), ST/NAME.pid, ST/NAME.rc (its exit status once it ended), ST/home (its user.home).

READY_SECS="${READY_SECS:-90}"
STOP_SECS="${STOP_SECS:-60}"

# apache_classpath ST: resolves Apache RocketMQ 5.3.3 (name server, controller, broker) into ST/classpath.
apache_classpath() {
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  mkdir -p "$1/home"
  mvn -B -q -ntp -f "$here/apache/pom.xml" -Dmaven.repo.local="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/m2" \
    dependency:build-classpath -Dmdep.outputFile="$1/classpath" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d' >&2
  [[ -s "$1/classpath" ]]
}

# apache_free_port: a free TCP port on 127.0.0.1.
apache_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# apache_broker_port TAKEN...: a broker port P, not among TAKEN, with P-2 (the fast/VIP channel) and P+1 (HA) free
# too and not among TAKEN either. Below Linux's ephemeral range (ip_local_port_range, 32768 up by default): a broker
# restarted on its port must not find it taken by some client connection's local end meanwhile.
apache_broker_port() {
  python3 - "$@" <<'PY'
import random, socket, sys
taken = {int(p) for p in sys.argv[1:]}
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    p = random.randint(20000, 32000)
    if not {p - 2, p, p + 1} & taken and all(free(q) for q in (p - 2, p, p + 1)):
        print(p); break
PY
}

# start_bg STATE NAME CMD...: runs CMD in the background (output appended to STATE/NAME.log); a wrapper records its
# pid in STATE/NAME.pid and, once it ended, its exit status in STATE/NAME.rc (each written whole: a reader never
# sees half a number).
start_bg() {
  local st="$1" name="$2"
  shift 2
  rm -f "$st/$name.pid" "$st/$name.rc"
  echo "=== start $(date '+%F %T'): $*" >>"$st/$name.log"
  (
    "$@" >>"$st/$name.log" 2>&1 </dev/null &
    echo $! >"$st/$name.pid.tmp"
    mv "$st/$name.pid.tmp" "$st/$name.pid"
    rc=0
    wait $! || rc=$?
    echo "$rc" >"$st/$name.rc.tmp"
    mv "$st/$name.rc.tmp" "$st/$name.rc"
  ) >/dev/null 2>&1 </dev/null &
  local deadline=$((SECONDS + 10))
  while [[ ! -s "$st/$name.pid" ]]; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

# start_jvm STATE NAME MAIN: starts an Apache RocketMQ process (main class MAIN, configuration STATE/NAME.conf) with
# start_bg.
start_jvm() {
  local st="$1" name="$2" main="$3"
  start_bg "$st" "$name" java -Xms256m -Xmx1g -Duser.home="$st/home" -Drocketmq.home.dir="$st/home" \
    -cp "$(cat "$st/classpath")" "$main" -c "$st/$name.conf"
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

# stop_process STATE NAME: SIGTERM to a process started with its NAME.pid and NAME.rc in STATE (start_jvm, or
# compare.sh's start_bg), waits for its exit, SIGKILL (then a wait) after STOP_SECS; fails when it had to kill.
stop_process() {
  local st="$1" name="$2" pid
  pid="$(cat "$st/$name.pid" 2>/dev/null || true)"
  [[ -n "$pid" && ! -s "$st/$name.rc" ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_SECS))
  while [[ ! -s "$st/$name.rc" ]] && ((SECONDS < deadline)); do sleep 0.1; done
  if [[ ! -s "$st/$name.rc" ]]; then
    say "$name (pid $pid) still running ${STOP_SECS}s after SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while [[ ! -s "$st/$name.rc" ]] && ((SECONDS < deadline)); do sleep 0.1; done
    return 1
  fi
  say "$name (pid $pid) exited with status $(cat "$st/$name.rc")"
}

