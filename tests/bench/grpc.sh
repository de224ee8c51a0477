#!/usr/bin/env bash
# gRPC (RocketMQ 5.x SDK) produce and SimpleConsumer receive/ack: Conveyor against Apache RocketMQ 5.3.3 + its proxy
# on this machine, with the same client (conveyor.grpc.Bench, rocketmq-client-java 5.2.0) and the same settings.
#
#   tests/bench/grpc.sh                          # about 4-5 minutes (plus up to 2 minutes waiting for a quiet machine)
#   BENCH_APACHE_PROXY=local tests/bench/grpc.sh # Apache's proxy inside the broker's JVM instead
#
# The two run one after the other, never at the same time, each on a fresh store in a temporary directory:
#   Conveyor: `conveyor standalone` (name server + broker + gRPC endpoint in one process), release build, default
#             settings (ASYNC flush) but the listen addresses.
#   Apache:   name server, broker and proxy 5.3.3 from Maven Central (tests/compat/apache-proxy/pom.xml, as
#             tests/compat/grpc-against-apache.sh resolves them), three JVMs with -Xms1g -Xmx1g (JVM defaults
#             otherwise); broker defaults (ASYNC_FLUSH) but ports, store path and brokerIP1=127.0.0.1; the proxy in
#             cluster mode (its own process, the deployment of grpc-against-apache.sh) with its defaults but
#             the ports and a 3 s gRPC shutdown grace (grpcShutdownTimeSeconds; it only shortens the stop).
# Per server: mqadmin (tests/compat/grpc-java/mqadmin/MqadminBatch.java) creates two NORMAL topics of 8 queues and
# two consumer groups, then one JVM runs conveyor.grpc.Bench (see its comment): a warm-up (10 s produce to the
# warm-up topic, then up to 10 s receive/ack of it; not reported: the JVMs compile their hot paths meanwhile),
# 1. produce for BENCH_DURATION seconds (2 Producer clients, 16 sendAsync in flight in all, 1 KiB bodies),
# 2. 4 SimpleConsumers receive (batch 32, invisible 30 s) and ack everything phase 1 stored; every message must be
# acked exactly once. The client JVM runs on the same 2 cores as the server, for both alike, and needs more CPU
# per message than either server: the report gives each side's CPU time per message.
#
# Prints a Markdown report (table with the ratio Conveyor / Apache, commands, machine) on stdout and writes it to
# $BENCH_LOG_DIR/report.md. Needs java (17 works), mvn, python3, curl. Not part of tests/all.sh.
#
# Environment:
#   BENCH_LOG_DIR     logs, raw outputs and the report (default ~/.cache/conveyor/bench/<time>-grpc)
#   BENCH_DURATION    seconds of the measured produce (default 12)
#   BENCH_WARMUP      seconds of warm-up produce (and at most as long receive/ack) before it (default 10; 0 = none)
#   BENCH_IN_FLIGHT, BENCH_PRODUCERS, BENCH_CONSUMERS, BENCH_BATCH, BENCH_BODY: the client settings (16, 2, 4, 32,
#                     1024)
#   BENCH_BUILD       1 = `cargo build --release -p conveyor` first (default: only when target/release/conveyor is
#                     missing); always under `flock /tmp/conveyor-cargo.lock`
#   BENCH_MAX_LOAD    load average (1 min) to wait for before measuring (default 1.5); BENCH_LOAD_WAIT (default 120 s)
#   BENCH_ONLY        "conveyor" or "apache" to measure only one of them
#   BENCH_APACHE_PROXY  "cluster" (default: name server, broker, proxy: three JVMs) or "local" (the proxy and the
#                     broker in one JVM, as `mqbroker --enable-proxy` runs them; the name server in its own)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
COMPAT="$ROOT/tests/compat"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
LOG_DIR="${BENCH_LOG_DIR:-$CACHE/bench/$(date +%Y%m%d-%H%M%S)-grpc}"
MAX_LOAD="${BENCH_MAX_LOAD:-1.5}"
LOAD_WAIT="${BENCH_LOAD_WAIT:-120}"
ONLY="${BENCH_ONLY:-}"
PROXY_MODE="${BENCH_APACHE_PROXY:-cluster}"
export BENCH_DURATION="${BENCH_DURATION:-12}"
export BENCH_WARMUP="${BENCH_WARMUP:-10}"
export BENCH_IN_FLIGHT="${BENCH_IN_FLIGHT:-16}" BENCH_PRODUCERS="${BENCH_PRODUCERS:-2}"
export BENCH_CONSUMERS="${BENCH_CONSUMERS:-4}" BENCH_BATCH="${BENCH_BATCH:-32}" BENCH_BODY="${BENCH_BODY:-1024}"
export BENCH_CLK_TCK="$(getconf CLK_TCK)"
JVM_HEAP=(-Xms1g -Xmx1g)
READY_SECS=90
STOP_SECS=60
BENCH_TIMEOUT=300
TOPIC=BenchGrpc WARM_TOPIC=BenchGrpcWarmup GROUP=BenchGrpcGroup WARM_GROUP=BenchGrpcWarmupGroup

say() { echo "grpc-bench: $*" >&2; }
# shellcheck source=tests/compat/apache_lib.sh
source "$COMPAT/apache_lib.sh"

for tool in java mvn python3 curl flock; do
  command -v "$tool" >/dev/null || { echo "grpc.sh: $tool not found on PATH" >&2; exit 2; }
done
mkdir -p "$LOG_DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-grpc-bench.XXXXXX")"

# Whatever is running when the script ends (normally, on error or on a signal) is stopped here.
CUR_ST=""
CUR_NAMES=() # the processes of the phase in progress, stopped in this order
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$CUR_ST" ]]; then
    local name
    for name in "${CUR_NAMES[@]}"; do stop_process "$CUR_ST" "$name" || true; done
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_until STATE NAME DESCRIPTION CMD...: polls CMD until it succeeds; fails when NAME exits or after READY_SECS.
wait_until() {
  local st="$1" name="$2" what="$3" deadline=$((SECONDS + READY_SECS))
  shift 3
  until "$@"; do
    if [[ -s "$st/$name.rc" ]]; then
      say "$name exited with status $(cat "$st/$name.rc") during start-up"
      tail -n 40 "$st/$name.log" >&2 || true
      return 1
    fi
    if ((SECONDS >= deadline)); then
      say "$name: $what not seen within ${READY_SECS}s"
      tail -n 40 "$st/$name.log" >&2 || true
      return 1
    fi
    sleep 0.3
  done
}

in_log() { grep -q "$2" "$1"; }

# Distinct free loopback ports: name server, broker P (P-2 and P+1 free too: Apache's fast channel and HA), HTTP,
# gRPC, proxy remoting.
free_ports() {
  local ns http grpc prem broker
  ns="$(apache_free_port)"
  http="$(apache_free_port)"
  grpc="$(apache_free_port)"
  prem="$(apache_free_port)"
  broker="$(apache_broker_port "$ns" "$http" "$grpc" "$prem")"
  if [[ "$(printf '%s\n' "$ns" "$http" "$grpc" "$prem" | sort -u | wc -l)" != 4 ]]; then
    free_ports
    return
  fi
  echo "$ns $broker $http $grpc $prem"
}

# mqadmin_java LOGDIR: sets MQJ to a JVM command with rocketmq-tools 5.3.3 (fetch.sh) on its classpath.
mqadmin_java() {
  MQJ=(java -Xms32m -Xmx256m -Drocketmq.home.dir="$COMPAT/mqadmin" -Dcompat.logDir="$1"
    -Drocketmq.client.logRoot="$1" -Drocketmq.log.root="$1" -Duser.home="$1/home"
    -cp "$(cat "$OUT/java-rmq5.classpath")")
}

# cluster_routed NS: the name server routes cluster DefaultCluster (Apache's proxy exits at start-up otherwise).
cluster_routed() {
  local MQJ routes
  mqadmin_java "$TMP/mqadmin-probe"
  routes="$("${MQJ[@]}" org.apache.rocketmq.tools.command.MQAdminStartup topicRoute -n "$1" -t DefaultCluster \
    2>/dev/null || true)"
  grep -q '"brokerAddrs"' <<<"$routes"
}

# create_resources OUT NS: the topics (NORMAL, 8 queues) and groups, with mqadmin in one JVM; waits for the routes.
create_resources() {
  local out="$1" ns="$2" t g
  {
    for t in "$TOPIC" "$WARM_TOPIC"; do
      printf 'success\tupdateTopic -c DefaultCluster -t %s -r 8 -w 8 -a +message.type=NORMAL\n' "$t"
    done
    for g in "$GROUP" "$WARM_GROUP"; do
      printf 'success\tupdateSubGroup -c DefaultCluster -g %s\n' "$g"
    done
    echo
    for t in "$TOPIC" "$WARM_TOPIC"; do
      printf '"brokerAddrs"\ttopicRoute -t %s\n' "$t"
    done
  } >"$out/mqadmin-commands.txt"
  local t0=$SECONDS MQJ
  mqadmin_java "$out/mqadmin"
  if ! timeout -k 5 120 "${MQJ[@]}" "$COMPAT/grpc-java/mqadmin/MqadminBatch.java" "$ns" \
    "$out/mqadmin-commands.txt" >"$out/mqadmin.log" 2>&1; then
    say "mqadmin could not create the topics and groups:"
    grep -v '^ok ' "$out/mqadmin.log" | head -n 30 >&2
    return 1
  fi
  say "  topics and groups created in $((SECONDS - t0)) s"
}

# run_client OUT ENDPOINT PIDS: conveyor.grpc.Bench against ENDPOINT; PIDS are the server processes (CPU time).
run_client() {
  local out="$1" endpoint="$2" pids="$3" rc=0
  local cmd=(java "${JVM_HEAP[@]}" -Drocketmq.log.root="$out/sdk" -Dmq.consoleAppender.enabled=false
    -Duser.home="$out/client-home" -cp "$CLIENT_CP" conveyor.grpc.Bench)
  echo "GRPC_ENDPOINT=<endpoint> BENCH_DURATION=$BENCH_DURATION BENCH_WARMUP=$BENCH_WARMUP" \
    "BENCH_PRODUCERS=$BENCH_PRODUCERS BENCH_IN_FLIGHT=$BENCH_IN_FLIGHT BENCH_BODY=$BENCH_BODY" \
    "BENCH_CONSUMERS=$BENCH_CONSUMERS BENCH_BATCH=$BENCH_BATCH java ${JVM_HEAP[*]} -cp <grpc-java.classpath>" \
    "conveyor.grpc.Bench" >"$out/client-command.txt"
  say "  client: conveyor.grpc.Bench against $endpoint (server pids $pids)"
  GRPC_ENDPOINT="$endpoint" GRPC_TLS=false BENCH_SERVER_PIDS="$pids" BENCH_TOPIC="$TOPIC" \
    BENCH_WARMUP_TOPIC="$WARM_TOPIC" BENCH_GROUP="$GROUP" BENCH_WARMUP_GROUP="$WARM_GROUP" \
    timeout -k 10 "$BENCH_TIMEOUT" "${cmd[@]}" >"$out/bench.out" 2>"$out/bench.err" || rc=$?
  echo "exit=$rc" >>"$out/bench.out"
  sed 's/^/      /' "$out/bench.out" >&2
  ((rc == 0)) || tail -n 20 "$out/bench.err" >&2
}

# rss_mb PID...: the processes' resident memory together, in MB.
rss_mb() {
  local p sum=0 kb
  for p in "$@"; do
    kb="$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)"
    sum=$((sum + ${kb:-0}))
  done
  echo $((sum / 1024))
}

# ---------------------------------------------------------------------------------------------------------------
conveyor_phase() {
  local out="$1" ns broker http grpc prem
  read -r ns broker http grpc prem < <(free_ports)
  local st="$TMP/conveyor"
  mkdir -p "$st/data"
  CUR_ST="$st" CUR_NAMES=(conveyor)
  local args=(standalone --data-dir "$st/data" --namesrv-listen "127.0.0.1:$ns" --listen "127.0.0.1:$broker"
    --http-listen "127.0.0.1:$http" --grpc-listen "127.0.0.1:$grpc")
  echo "conveyor ${args[*]}" | sed "s|$st|<fresh temp dir>|g" >"$out/server.txt"
  echo "$(uptime)" >"$out/load.txt"
  say "conveyor: ns 127.0.0.1:$ns, broker 127.0.0.1:$broker, gRPC 127.0.0.1:$grpc"
  start_bg "$st" conveyor "$BIN" "${args[@]}"
  wait_until "$st" conveyor "/readyz" curl -sf -m 2 -o /dev/null "http://127.0.0.1:$http/readyz"
  local pid
  pid="$(cat "$st/conveyor.pid")"
  create_resources "$out" "127.0.0.1:$ns"
  run_client "$out" "127.0.0.1:$grpc" "$pid"
  echo "$(rss_mb "$pid")" >"$out/rss-mb.txt"
  du -sm "$st/data" | cut -f1 >"$out/store-mb.txt"
  stop_process "$st" conveyor || true
  cp "$st/conveyor.log" "$out/conveyor.log"
  CUR_ST="" CUR_NAMES=()
  rm -rf "$st"
}

apache_phase() {
  local out="$1" ns broker http grpc prem
  read -r ns broker http grpc prem < <(free_ports)
  local st="$TMP/apache"
  mkdir -p "$st/home" "$st/store"
  CUR_ST="$st" CUR_NAMES=(proxy broker namesrv) # (stop_process skips what was not started)
  echo "listenPort=$ns" >"$st/namesrv.conf"
  cat >"$st/broker.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
listenPort=$broker
brokerIP1=127.0.0.1
namesrvAddr=127.0.0.1:$ns
storePathRootDir=$st/store
storePathCommitLog=$st/store/commitlog
EOF
  cat >"$st/rmq-proxy.json" <<EOF
{
  "rocketMQClusterName": "DefaultCluster",
  "namesrvAddr": "127.0.0.1:$ns",
  "proxyMode": "$PROXY_MODE",
  "grpcServerPort": $grpc,
  "remotingListenPort": $prem,
  "grpcShutdownTimeSeconds": 3
}
EOF
  {
    echo "java ${JVM_HEAP[*]} -Duser.home=<dir> -Drocketmq.home.dir=<dir> -cp <classpath> org.apache.rocketmq.namesrv.NamesrvStartup -c namesrv.conf"
    if [[ "$PROXY_MODE" == cluster ]]; then
      echo "java ${JVM_HEAP[*]} -Duser.home=<dir> -Drocketmq.home.dir=<dir> -cp <classpath> org.apache.rocketmq.broker.BrokerStartup -c broker.conf"
      echo "java ${JVM_HEAP[*]} -Duser.home=<dir> -Drocketmq.home.dir=<dir> -cp <classpath> org.apache.rocketmq.proxy.ProxyStartup -pc rmq-proxy.json -pm cluster"
    else
      echo "java ${JVM_HEAP[*]} -Duser.home=<dir> -Drocketmq.home.dir=<dir> -cp <classpath> org.apache.rocketmq.proxy.ProxyStartup -pc rmq-proxy.json -pm local -bc broker.conf"
    fi
    echo "broker.conf:"
    sed -e "s|$st|<fresh temp dir>|g" -e 's/^/    /' "$st/broker.conf"
    echo "rmq-proxy.json:"
    sed -e 's/^/    /' "$st/rmq-proxy.json"
  } >"$out/server.txt"
  echo "$(uptime)" >"$out/load.txt"
  say "apache (proxy $PROXY_MODE mode): ns 127.0.0.1:$ns, broker 127.0.0.1:$broker, proxy gRPC 127.0.0.1:$grpc"
  local java=(java "${JVM_HEAP[@]}" -Duser.home="$st/home" -Drocketmq.home.dir="$st/home" -cp "$CLASSPATH")
  start_bg "$st" namesrv "${java[@]}" org.apache.rocketmq.namesrv.NamesrvStartup -c "$st/namesrv.conf"
  wait_until "$st" namesrv "boot success" in_log "$st/namesrv.log" 'boot success'
  local pids names
  if [[ "$PROXY_MODE" == cluster ]]; then
    start_bg "$st" broker "${java[@]}" org.apache.rocketmq.broker.BrokerStartup -c "$st/broker.conf"
    wait_until "$st" broker "boot success" in_log "$st/broker.log" 'boot success'
    wait_until "$st" broker "the cluster's route" cluster_routed "127.0.0.1:$ns"
    start_bg "$st" proxy "${java[@]}" org.apache.rocketmq.proxy.ProxyStartup -pc "$st/rmq-proxy.json" -pm cluster
    wait_until "$st" proxy "startup" in_log "$st/proxy.log" 'rocketmq-proxy startup successfully'
    pids="$(cat "$st/namesrv.pid") $(cat "$st/broker.pid") $(cat "$st/proxy.pid")"
    names=(proxy broker namesrv)
  else
    # The broker inside the proxy's JVM (what `mqbroker --enable-proxy` starts).
    : >"$st/broker.log"
    start_bg "$st" proxy "${java[@]}" org.apache.rocketmq.proxy.ProxyStartup -pc "$st/rmq-proxy.json" -pm local \
      -bc "$st/broker.conf"
    wait_until "$st" proxy "startup" in_log "$st/proxy.log" 'rocketmq-proxy startup successfully'
    wait_until "$st" proxy "the cluster's route" cluster_routed "127.0.0.1:$ns"
    pids="$(cat "$st/namesrv.pid") $(cat "$st/proxy.pid")"
    names=(proxy namesrv)
  fi
  create_resources "$out" "127.0.0.1:$ns"
  run_client "$out" "127.0.0.1:$grpc" "$pids"
  # shellcheck disable=SC2086
  echo "$(rss_mb $pids)" >"$out/rss-mb.txt"
  du -sm "$st/store" | cut -f1 >"$out/store-mb.txt"
  local name
  for name in "${names[@]}"; do stop_process "$st" "$name" & done
  wait
  for name in "${names[@]}"; do cp "$st/$name.log" "$out/$name.log"; done
  mkdir -p "$out/rocketmqlogs"
  cp -r "$st/home/logs/." "$out/rocketmqlogs/" 2>/dev/null || true
  CUR_ST="" CUR_NAMES=()
  rm -rf "$st"
}

# ---------------------------------------------------------------------------------------------------------------
T0=$SECONDS
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/conveyor"
if [[ "$ONLY" != apache ]] && [[ "${BENCH_BUILD:-0}" == 1 || ! -x "$BIN" ]]; then
  say "flock /tmp/conveyor-cargo.lock cargo build --release -p conveyor"
  (cd "$ROOT" && flock /tmp/conveyor-cargo.lock cargo build --release -p conveyor >&2)
fi
if [[ "$ONLY" != apache ]]; then
  [[ -x "$BIN" ]] || { echo "grpc.sh: $BIN missing" >&2; exit 2; }
fi
# mqadmin (rocketmq-tools 5.3.3) and the Java SDK programs, built into $CACHE/compat (idempotent).
"$COMPAT/fetch.sh" >&2 || exit 2
"$COMPAT/grpc-fetch.sh" >&2 || exit 2
# The client is compiled once more into this run's own directory from this tree's sources: the shared build in
# $OUT (grpc-java-build) is rebuilt, removed first, whenever a run from other sources fetches it.
DEPS="$(tr ':' '\n' <"$OUT/grpc-java.classpath" | grep -vxF "$OUT/grpc-java-build/classes" | paste -sd: -)"
mkdir -p "$TMP/client-classes"
javac -nowarn -d "$TMP/client-classes" -cp "$DEPS" "$COMPAT/grpc-java/src/main/java/conveyor/grpc/Bench.java" \
  "$COMPAT/grpc-java/src/main/java/conveyor/grpc/G.java" >&2 || exit 2
CLIENT_CP="$TMP/client-classes:$DEPS"
if [[ "$ONLY" != conveyor ]]; then
  say "resolving Apache RocketMQ 5.3.3 (name server, broker, proxy) from Maven Central (cached in $CACHE/m2)"
  mvn -B -q -ntp -f "$COMPAT/apache-proxy/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
    dependency:build-classpath -Dmdep.outputFile="$TMP/classpath" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d' >&2
  [[ -s "$TMP/classpath" ]] || { say "could not resolve apache-proxy/pom.xml"; exit 2; }
  CLASSPATH="$(cat "$TMP/classpath")"
fi

# Machine load: other processes on this shared 2-core machine skew every number below. Waited for (up to LOAD_WAIT
# seconds) before each of the two servers.
load1() { cut -d' ' -f1 /proc/loadavg; }
above() { python3 -c "import sys; sys.exit(0 if float('$(load1)') > float('$MAX_LOAD') else 1)"; }
WAITED=0
wait_quiet() {
  above || return 0
  say "WARNING: 1-minute load average $(load1) is above $MAX_LOAD: other processes are using the CPUs and will skew" \
    "the results; waiting up to ${LOAD_WAIT}s for it to drop"
  local deadline=$((SECONDS + LOAD_WAIT))
  while above && ((SECONDS < deadline)); do sleep 5; done
  WAITED=$((WAITED + 1))
  say "load now: $(uptime)"
}
START_UPTIME="$(uptime)"
say "machine load before starting: $START_UPTIME"
{
  echo "start: $START_UPTIME"
  echo "max_load: $MAX_LOAD"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "mem: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "kernel: $(uname -r)"
  echo "date: $(date -u '+%F %T UTC')"
  echo "java: $(java -version 2>&1 | head -n 1)"
  echo "client: rocketmq-client-java $(cat "$OUT/grpc-java.version")"
  echo "apache_proxy_mode: $PROXY_MODE"
  echo "commit: $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- broker || echo ' (broker/ modified)')"
} >"$LOG_DIR/machine.txt"

for kind in conveyor apache; do
  [[ -z "$ONLY" || "$ONLY" == "$kind" ]] || continue
  mkdir -p "$LOG_DIR/$kind"
  wait_quiet
  "${kind}_phase" "$LOG_DIR/$kind"
  echo "$(uptime)" >>"$LOG_DIR/$kind/load.txt"
done
echo "waited_for_load: $WAITED" >>"$LOG_DIR/machine.txt"
echo "end: $(uptime)" >>"$LOG_DIR/machine.txt"
echo "total_secs: $((SECONDS - T0))" >>"$LOG_DIR/machine.txt"

python3 - "$LOG_DIR" >"$LOG_DIR/report.md" <<'PY'
import os, sys

d = sys.argv[1]

def read(kind, name):
    try:
        with open(os.path.join(d, kind, name)) as f:
            return f.read().strip()
    except OSError:
        return None

def figures(kind):
    out = read(kind, "bench.out")
    if out is None:
        return None
    r = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 2 and p[0] == "BENCH":
            r[p[1]] = dict(kv.split("=", 1) for kv in p[2:] if "=" in kv)
        elif line.startswith("exit="):
            r["exit"] = line[5:]
    r["rss"] = read(kind, "rss-mb.txt")
    r["store"] = read(kind, "store-mb.txt")
    r["load"] = read(kind, "load.txt")
    return r

c, a = figures("conveyor"), figures("apache")
mode = "cluster"
with open(os.path.join(d, "machine.txt")) as f:
    for line in f:
        if line.startswith("apache_proxy_mode:"):
            mode = line.split(":", 1)[1].strip()

def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None

def get(r, phase, key):
    return None if r is None else r.get(phase, {}).get(key)

def per_msg_us(r, phase, key, count_key):
    cpu, n = num(get(r, phase, key)), num(get(r, phase, count_key))
    return None if cpu is None or not n else cpu / n * 1e6

def fmt(v, digits):
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}"

rows = [
    ("produce, msgs/s", lambda r: num(get(r, "produce", "rate")), 0),
    ("produce, MB/s", lambda r: num(get(r, "produce", "mb_per_s")), 1),
    ("produce latency p50, ms (lower is better)", lambda r: num(get(r, "produce", "p50_ms")), 2),
    ("produce latency p99, ms (lower is better)", lambda r: num(get(r, "produce", "p99_ms")), 2),
    ("receive + ack, msgs/s", lambda r: num(get(r, "consume", "rate")), 0),
    ("receive + ack, MB/s", lambda r: num(get(r, "consume", "mb_per_s")), 1),
    ("server CPU per produced message, µs (lower is better)",
     lambda r: per_msg_us(r, "produce", "server_cpu_s", "sends"), 1),
    ("server CPU per received + acked message, µs (lower is better)",
     lambda r: per_msg_us(r, "consume", "server_cpu_s", "acked"), 1),
    ("client CPU per produced message, µs", lambda r: per_msg_us(r, "produce", "client_cpu_s", "sends"), 1),
    ("client CPU per received + acked message, µs", lambda r: per_msg_us(r, "consume", "client_cpu_s", "acked"), 1),
    ("server resident memory at the end, MB", lambda r: num(r.get("rss")) if r else None, 0),
]
print(f"| figure | Conveyor | Apache 5.3.3 + proxy ({mode} mode) | Conveyor / Apache |")
print("|---|---|---|---|")
for name, f, digits in rows:
    cv, av = f(c), f(a)
    ratio = f"{cv / av:.2f}" if cv is not None and av else "n/a"
    print(f"| {name} | {fmt(cv, digits)} | {fmt(av, digits)} | {ratio} |")

def exact(r):
    if r is None or "consume" not in r:
        return "n/a"
    x = r["consume"]
    s = "yes" if x.get("exact") == "true" else "**no**"
    return (f"{s}: {int(x['acked']):,} of {int(x['expected']):,} acked, {x['duplicates']} duplicates, "
            f"{x['unknown']} unknown")
print(f"| all consumed exactly once | {exact(c)} | {exact(a)} | |")
def errors(r):
    if r is None or "produce" not in r:
        return "n/a"
    return (f"send {r['produce'].get('errors')}, receive {get(r, 'consume', 'receive_errors')}, "
            f"ack {get(r, 'consume', 'ack_errors')}")
print(f"| client errors | {errors(c)} | {errors(a)} | |")
def calls(r):
    if r is None or "consume" not in r:
        return "n/a"
    x = r["consume"]
    n, calls, empty = int(x["received"]), int(x["receive_calls"]), int(x["empty_receives"])
    return f"{calls:,} ({empty} empty), {n / max(1, calls - empty):.1f} msgs per non-empty receive"
print(f"| receive calls | {calls(c)} | {calls(a)} | |")
print()
for kind, r in (("conveyor", c), ("apache", a)):
    if r is None:
        continue
    print(f"- {kind}: produce {get(r, 'produce', 'secs')} s, receive/ack {get(r, 'consume', 'secs')} s, "
          f"p99.9 {get(r, 'produce', 'p999_ms')} ms, max {get(r, 'produce', 'max_ms')} ms; store {r.get('store')} MB;"
          f" client exit {r.get('exit')}; load at its start and end: "
          + ", ".join(f"`{l.strip()}`" for l in (r.get('load') or '').splitlines()))
print()
with open(os.path.join(d, "machine.txt")) as f:
    print("Machine:")
    print()
    for line in f:
        print(f"- {line.strip()}")
for kind in ("conveyor", "apache"):
    s = read(kind, "server.txt")
    if s:
        print(f"\n{kind} server:\n\n```\n{s}\n```")
cmd = read("conveyor", "client-command.txt") or read("apache", "client-command.txt")
if cmd:
    print(f"\nClient (the same for both):\n\n```\n{cmd}\n```")
PY
cat "$LOG_DIR/report.md"
say "total $((SECONDS - T0))s; logs and raw outputs in $LOG_DIR"
