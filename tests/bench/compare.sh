#!/usr/bin/env bash
# Conveyor vs Apache RocketMQ 5.3.3 on this machine, with the same client (`conveyor bench`) and the same commands.
#
#   tests/bench/compare.sh                       # about 6-8 minutes (plus up to 2 minutes waiting for a quiet machine)
#
# The two brokers run one after the other, never at the same time, each on a fresh store in a temporary directory:
#   Conveyor: `conveyor standalone` (name server + broker in one process), release build, default settings
#             (ASYNC flush), then a second fresh instance with `--flush-mode sync`.
#   Apache:   name server + broker 5.3.3 from Maven Central (resolved like tests/compat/run-against-apache.sh),
#             java -Xms1g -Xmx1g (JVM defaults otherwise: G1 on this machine), broker defaults (ASYNC_FLUSH, delay
#             level 1 = 1 s) except the ports, the store path and brokerIP1=127.0.0.1; then a second fresh broker with
#             flushDiskType=SYNC_FLUSH.
# Per broker, ASYNC phase: create the topics (8 queues each), a 5 s warm-up produce to its own topic (not reported),
# then 1. produce singles, 2. produce batches of 16, memory snapshot, 3. catch-up consume of what 1+2 stored,
# 4. long-poll wake-up, 6. delay level 1 and transactions. SYNC phase: topic, warm-up, 5. produce singles, memory.
# The client runs on the same 2 cores as the broker, for both brokers alike.
#
# Prints a Markdown report (table, commands, machine info) on stdout and writes it to $BENCH_LOG_DIR/report.md.
# Needs java (17 works), mvn, python3, curl. Not part of tests/all.sh.
#
# Environment:
#   BENCH_LOG_DIR     logs, raw outputs and the report (default ~/.cache/conveyor/bench/<time>)
#   BENCH_DURATION    seconds per produce run (default 10)
#   BENCH_WARMUP      seconds of warm-up produce before the measured runs of each phase (default 5; 0 = none)
#   BENCH_SKIP_BUILD  1 = use target/release/conveyor as it is
#   BENCH_MAX_LOAD    load average (1 min) to wait for before measuring (default 1.5); BENCH_LOAD_WAIT (default 120 s)
#   BENCH_ONLY        "conveyor" or "apache" to measure only one of them
#   BENCH_SERVER_BIN  the `conveyor` binary that serves in the first column (default: the one built)
#   BENCH_BASELINE_BIN  a `conveyor` binary of another commit: measure it instead of Apache RocketMQ (same
#                     client, same commands), to check a change for regressions; the report's second column
#                     is then that binary
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
LOG_DIR="${BENCH_LOG_DIR:-$CACHE/bench/$(date +%Y%m%d-%H%M%S)}"
DURATION="${BENCH_DURATION:-10}"
WARMUP="${BENCH_WARMUP:-5}"
MAX_LOAD="${BENCH_MAX_LOAD:-1.5}"
LOAD_WAIT="${BENCH_LOAD_WAIT:-120}"
ONLY="${BENCH_ONLY:-}"
BASELINE_BIN="${BENCH_BASELINE_BIN:-}"
JVM_HEAP=(-Xms1g -Xmx1g)
READY_SECS=90
STOP_SECS=60
BENCH_TIMEOUT=300

say() { echo "compare: $*" >&2; }
# shellcheck source=tests/compat/apache_lib.sh
source "$ROOT/tests/compat/apache_lib.sh"

for tool in java mvn python3 curl; do
  command -v "$tool" >/dev/null || { echo "compare.sh: $tool not found on PATH" >&2; exit 2; }
done
mkdir -p "$LOG_DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-bench.XXXXXX")"

# Whatever is running when the script ends (normally, on error or on a signal) is stopped here.
CUR_KIND="" # conveyor | apache: the broker of the phase in progress
CUR_ST=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$CUR_ST" ]]; then
    case "$CUR_KIND" in
      conveyor) stop_process "$CUR_ST" conveyor || true ;;
      apache)
        stop_process "$CUR_ST" broker || true
        stop_process "$CUR_ST" namesrv || true
        ;;
    esac
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------------------------
# Processes: start_bg and stop_process come from tests/compat/apache_lib.sh.

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
    sleep 0.2
  done
}

booted() { grep -q 'boot success' "$1"; }

# Free loopback ports: NS, a broker port P with P-2 (Apache's fast channel) and P+1 (HA) free too, and HTTP.
free_ports() {
  local ns http
  ns="$(apache_free_port)"
  http="$(apache_free_port)"
  echo "$ns $(apache_broker_port "$ns" "$http") $http"
}

# mem_snapshot PID OUT: the process's memory lines from /proc/PID/status.
mem_snapshot() {
  grep -E '^(VmRSS|RssAnon|RssFile|RssShmem|VmHWM):' "/proc/$1/status" >"$2" 2>/dev/null || echo "unavailable" >"$2"
}

# ---------------------------------------------------------------------------------------------------------------
# The client side: the same commands against either broker. run_bench OUT_DIR NAME ARGS...: runs `conveyor bench
# ARGS` (with a timeout), saves its output as OUT_DIR/NAME.out and the command as a line of OUT_DIR/commands.txt.
run_bench() {
  local out="$1" name="$2"
  shift 2
  echo "conveyor $*" >>"$out/commands.txt"
  say "  $name: conveyor $*"
  local rc=0
  RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 timeout "$BENCH_TIMEOUT" "$BIN" "$@" >"$out/$name.out" 2>"$out/$name.err" ||
    rc=$?
  if ((rc != 0)); then
    echo "FAILED (exit $rc): $(grep -v '^ *$' "$out/$name.err" | tail -n 4 | tr '\n' ' ')" >>"$out/$name.out"
  fi
  sed 's/^/      /' "$out/$name.out" >&2
  # Let the broker finish background work (flush, dispatch) before the next measurement.
  if [[ "$1" == bench ]]; then sleep 2; fi
}

# registered NS BROKER_PORT: the name server has the broker's routes (Apache logs "boot success" before it
# registers). Checked through the TBW102 route, because `conveyor admin cluster` cannot read Apache 5.3.3's cluster
# info (its JSON has integer map keys), or through the cluster list.
registered() {
  local topics cluster # (captured first: grep -q closing the pipe early would fail the pipeline)
  topics="$(RUST_BACKTRACE=0 "$BIN" admin topics --namesrv-addr "$1" 2>/dev/null || true)"
  cluster="$(RUST_BACKTRACE=0 "$BIN" admin cluster --namesrv-addr "$1" 2>/dev/null || true)"
  grep -q '^TBW102 ' <<<"$topics" || grep -q ":$2\$" <<<"$cluster"
}

# routes_ready NS TOPIC...: every TOPIC has a route with queue 7 (8 queues), so no send falls back to TBW102.
routes_ready() {
  local ns="$1" list t
  shift
  list="$(RUST_BACKTRACE=0 "$BIN" admin topics --namesrv-addr "$ns" 2>/dev/null)" || return 1
  for t in "$@"; do
    grep -Eq "^$t +[^ ]+ +7 " <<<"$list" || return 1
  done
}

# create_topics OUT NS TOPIC...: creates the topics with 8 queues and waits for their routes.
create_topics() {
  local out="$1" ns="$2" t deadline=$((SECONDS + 30))
  shift 2
  for t in "$@"; do
    run_bench "$out" "create-$t" admin create-topic --namesrv-addr "$ns" --topic "$t" --queues 8
    if grep -q FAILED "$out/create-$t.out" && [[ "$CUR_KIND" == apache ]]; then
      # `conveyor admin create-topic` needs the cluster info, which it cannot parse from Apache 5.3.3: use Apache's
      # own mqadmin (rocketmq-tools, on the broker's classpath) for the same topic settings.
      say "  create-$t: falling back to Apache's mqadmin updateTopic"
      echo "$t|$(grep FAILED "$out/create-$t.out" | sed 's/^FAILED (exit [0-9]*): //' | cut -c1-160)" \
        >>"$out/create-fallback.txt"
      java -Xms32m -Xmx256m -Duser.home="$CUR_ST/home" -Drocketmq.home.dir="$CUR_ST/home" -cp "$CLASSPATH" \
        org.apache.rocketmq.tools.command.MQAdminStartup updateTopic -n "$ns" -c DefaultCluster -t "$t" -r 8 -w 8 \
        >>"$out/create-$t.out" 2>&1 || true
    fi
  done
  until routes_ready "$ns" "$@"; do
    ((SECONDS < deadline)) || { say "topic routes not complete after 30s"; return 1; }
    sleep 0.5
  done
}

load1() { cut -d' ' -f1 /proc/loadavg; }

# phase_async OUT NS PID: runs 1-4 and 6 against the broker whose name server is NS and whose process is PID.
phase_async() {
  local out="$1" ns="$2" pid="$3"
  echo "$(uptime)" >"$out/load-async.txt"
  create_topics "$out" "$ns" BenchTopic BenchWarmup BenchLongPoll BenchDelay BenchTx
  if ((WARMUP > 0)); then
    run_bench "$out" warmup bench produce --namesrv-addr "$ns" --topic BenchWarmup --size 1024 --producers 4 \
      --in-flight 64 --duration "$WARMUP"
  fi
  run_bench "$out" produce-single bench produce --namesrv-addr "$ns" --topic BenchTopic --size 1024 --producers 4 \
    --in-flight 64 --duration "$DURATION"
  run_bench "$out" produce-batch bench produce --namesrv-addr "$ns" --topic BenchTopic --size 1024 --producers 4 \
    --in-flight 64 --duration "$DURATION" --batch 16
  mem_snapshot "$pid" "$out/mem-after-produce.txt"
  run_bench "$out" consume bench consume --namesrv-addr "$ns" --topic BenchTopic --consumers 4
  run_bench "$out" long-poll bench long-poll --namesrv-addr "$ns" --trials 20
  run_bench "$out" delay bench delay --namesrv-addr "$ns" --count 100000 --level 1
  run_bench "$out" transaction bench transaction --namesrv-addr "$ns" --count 20000
  mem_snapshot "$pid" "$out/mem-end-async.txt"
  RUST_BACKTRACE=0 "$BIN" admin topics --namesrv-addr "$ns" >"$out/topics-async.txt" 2>&1 || true
}

# phase_sync OUT NS PID: run 5 against a broker that flushes synchronously.
phase_sync() {
  local out="$1" ns="$2" pid="$3"
  echo "$(uptime)" >"$out/load-sync.txt"
  create_topics "$out" "$ns" BenchSync BenchWarmup
  if ((WARMUP > 0)); then
    run_bench "$out" warmup-sync bench produce --namesrv-addr "$ns" --topic BenchWarmup --size 1024 --producers 4 \
      --in-flight 64 --duration "$WARMUP"
  fi
  run_bench "$out" produce-sync bench produce --namesrv-addr "$ns" --topic BenchSync --size 1024 --producers 4 \
    --in-flight 64 --duration "$DURATION"
  mem_snapshot "$pid" "$out/mem-after-sync.txt"
  RUST_BACKTRACE=0 "$BIN" admin topics --namesrv-addr "$ns" >"$out/topics-sync.txt" 2>&1 || true
}

# ---------------------------------------------------------------------------------------------------------------
# Conveyor. conveyor_phase OUT MODE (async|sync)
conveyor_phase() {
  local out="$1" mode="$2" ns broker http
  read -r ns broker http < <(free_ports)
  local st="$TMP/conveyor-$mode"
  mkdir -p "$st/data"
  CUR_KIND=conveyor CUR_ST="$st"
  local args=(standalone --data-dir "$st/data" --namesrv-listen "127.0.0.1:$ns" --listen "127.0.0.1:$broker"
    --http-listen "127.0.0.1:$http" --grpc-listen 127.0.0.1:0)
  [[ "$mode" == sync ]] && args+=(--flush-mode sync)
  echo "conveyor ${args[*]}" | sed "s|$st|<fresh temp dir>|g" >"$out/server-$mode.txt"
  say "conveyor ($mode flush): ns 127.0.0.1:$ns, broker 127.0.0.1:$broker"
  start_bg "$st" conveyor "${SERVER_BIN:-${BENCH_SERVER_BIN:-$BIN}}" "${args[@]}"
  wait_until "$st" conveyor "/readyz" curl -sf -m 2 -o /dev/null "http://127.0.0.1:$http/readyz"
  wait_until "$st" conveyor "registration" registered "127.0.0.1:$ns" "$broker"
  local pid
  pid="$(cat "$st/conveyor.pid")"
  "phase_$mode" "$out" "127.0.0.1:$ns" "$pid"
  du -sm "$st/data" | cut -f1 >"$out/store-mb-$mode.txt"
  stop_process "$st" conveyor || true
  cp "$st/conveyor.log" "$out/conveyor-$mode.log"
  CUR_KIND="" CUR_ST=""
  rm -rf "$st"
}

# Apache. apache_phase OUT MODE (async|sync): a fresh name server and broker; the JVMs write their own logs below
# $st/home, copied to OUT afterwards.
apache_phase() {
  local out="$1" mode="$2" ns broker http
  read -r ns broker http < <(free_ports)
  local st="$TMP/apache-$mode"
  mkdir -p "$st/home" "$st/store"
  CUR_KIND=apache CUR_ST="$st"
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
  [[ "$mode" == sync ]] && echo "flushDiskType=SYNC_FLUSH" >>"$st/broker.conf"
  {
    echo "java ${JVM_HEAP[*]} -Duser.home=<dir> -Drocketmq.home.dir=<dir> -cp <classpath> org.apache.rocketmq.namesrv.NamesrvStartup -c namesrv.conf"
    echo "java ${JVM_HEAP[*]} -Duser.home=<dir> -Drocketmq.home.dir=<dir> -cp <classpath> org.apache.rocketmq.broker.BrokerStartup -c broker.conf"
    echo "broker.conf:"
    sed -e "s|$st|<fresh temp dir>|g" -e 's/^/    /' "$st/broker.conf"
  } >"$out/server-$mode.txt"
  say "apache ($mode flush): ns 127.0.0.1:$ns, broker 127.0.0.1:$broker"
  local java=(java "${JVM_HEAP[@]}" -Duser.home="$st/home" -Drocketmq.home.dir="$st/home" -cp "$CLASSPATH")
  start_bg "$st" namesrv "${java[@]}" org.apache.rocketmq.namesrv.NamesrvStartup -c "$st/namesrv.conf"
  wait_until "$st" namesrv "boot success" booted "$st/namesrv.log"
  start_bg "$st" broker "${java[@]}" org.apache.rocketmq.broker.BrokerStartup -c "$st/broker.conf"
  wait_until "$st" broker "boot success" booted "$st/broker.log"
  wait_until "$st" broker "registration" registered "127.0.0.1:$ns" "$broker"
  local pid
  pid="$(cat "$st/broker.pid")"
  "phase_$mode" "$out" "127.0.0.1:$ns" "$pid"
  mem_snapshot "$(cat "$st/namesrv.pid")" "$out/mem-namesrv-$mode.txt"
  du -sm "$st/store" | cut -f1 >"$out/store-mb-$mode.txt"
  stop_process "$st" broker || true
  stop_process "$st" namesrv || true
  cp "$st/broker.log" "$out/broker-$mode.log"
  cp "$st/namesrv.log" "$out/namesrv-$mode.log"
  mkdir -p "$out/rocketmqlogs-$mode"
  cp -r "$st/home/logs/." "$out/rocketmqlogs-$mode/" 2>/dev/null || true
  CUR_KIND="" CUR_ST=""
  rm -rf "$st"
}

# ---------------------------------------------------------------------------------------------------------------
T0=$SECONDS
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/conveyor"
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  say "cargo build --release -p conveyor"
  (cd "$ROOT" && cargo build --release -p conveyor >&2)
fi
[[ -x "$BIN" ]] || { echo "compare.sh: $BIN missing" >&2; exit 2; }
if [[ "$ONLY" != conveyor && -z "$BASELINE_BIN" ]]; then
  say "resolving Apache RocketMQ 5.3.3 from Maven Central (cached in $CACHE/m2)"
  apache_classpath "$TMP" || exit 2
  CLASSPATH="$(cat "$TMP/classpath")"
fi

# Machine load: other processes on this shared 2-core machine skew every number below.
START_UPTIME="$(uptime)"
say "machine load before starting: $START_UPTIME"
WAITED=0
if python3 -c "import sys; sys.exit(0 if float('$(load1)') > float('$MAX_LOAD') else 1)"; then
  say "WARNING: 1-minute load average $(load1) is above $MAX_LOAD: other processes are using the CPUs and will skew" \
    "the results; waiting up to ${LOAD_WAIT}s for it to drop"
  deadline=$((SECONDS + LOAD_WAIT))
  while python3 -c "import sys; sys.exit(0 if float('$(load1)') > float('$MAX_LOAD') else 1)" && ((SECONDS < deadline)); do
    sleep 5
  done
  WAITED=1
  say "load now: $(uptime)"
fi
{
  echo "start: $START_UPTIME"
  echo "measuring from: $(uptime)"
  echo "waited_for_load: $WAITED"
  echo "max_load: $MAX_LOAD"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "mem: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "kernel: $(uname -r)"
  echo "date: $(date -u '+%F %T UTC')"
  echo "java: $(java -version 2>&1 | head -n 1)"
  echo "commit: $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- broker || echo ' (broker/ modified)')"
  echo "duration: $DURATION"
  echo "warmup: $WARMUP"
} >"$LOG_DIR/machine.txt"

for kind in conveyor apache; do
  [[ -z "$ONLY" || "$ONLY" == "$kind" ]] || continue
  mkdir -p "$LOG_DIR/$kind"
  : >"$LOG_DIR/$kind/commands.txt"
  if [[ "$kind" == apache && -n "$BASELINE_BIN" ]]; then
    # The baseline binary serves in the second column; the client is still this commit's.
    SERVER_BIN="$BASELINE_BIN" conveyor_phase "$LOG_DIR/$kind" async
    SERVER_BIN="$BASELINE_BIN" conveyor_phase "$LOG_DIR/$kind" sync
    continue
  fi
  "${kind}_phase" "$LOG_DIR/$kind" async
  "${kind}_phase" "$LOG_DIR/$kind" sync
done
echo "end: $(uptime)" >>"$LOG_DIR/machine.txt"

BENCH_SECOND_LABEL="${BASELINE_BIN:+baseline ($BASELINE_BIN)}" python3 "$HERE/report.py" "$LOG_DIR" >"$LOG_DIR/report.md"
cat "$LOG_DIR/report.md"
say "total $((SECONDS - T0))s; logs and raw outputs in $LOG_DIR"
