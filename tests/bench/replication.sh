#!/usr/bin/env bash
# What synchronous replication costs and how fast a fresh slave catches up (issue 10), in one
# run on this machine, release build, real disk:
#   1. produce 1 KiB for 15 s to a lone master (ASYNC_MASTER, no slave) — the reference;
#   2. the same against a SYNC_MASTER whose slave must hold every message before SEND_OK;
#   3. a fresh slave of that master (its data wiped) catching up: MB/s until its CommitLog end
#      equals the master's.
# Both flush modes are run (REPL_FLUSH=async|sync|both, default both). Prints each figure and
# the ratio sync/none. Then the same three measurements of Apache RocketMQ 5.3.3 from Maven
# Central (ASYNC_MASTER alone; SYNC_MASTER + SLAVE; a fresh SLAVE catching up), with the same
# client, one JVM per process (-Xms1g -Xmx1g), run after Conveyor's, never beside it
# (REPL_APACHE=0 skips it; REPL_ONLY=apache measures only Apache RocketMQ). Not part of tests/all.sh (it measures; tests never assert times).
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET="${CARGO_TARGET_DIR:-target}"
BIN="${REPL_BIN:-$TARGET/release/conveyor}"
[ -x "$BIN" ] || cargo build --release -p conveyor
SECS="${REPL_SECS:-15}"
ROOT="${REPL_DIR:-$(mktemp -d /var/tmp/conveyor-repl.XXXXXX)}"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # The stores are gigabytes: never leave them behind, also when interrupted.
  [ -n "${REPL_DIR:-}" ] || rm -rf "$ROOT"
}
trap cleanup EXIT

wait_ready() { # http port
  for _ in $(seq 600); do
    curl -fs "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "not ready on :$1" >&2
  exit 1
}
log_end() { # http port
  curl -fs "http://127.0.0.1:$1/metrics" | awk '/^conveyor_commitlog_max_offset /{print $2}'
}
produce() { # label
  "$BIN" bench produce --namesrv-addr 127.0.0.1:29876 --topic ReplBench --size 1024 \
    --producers 4 --in-flight 32 --duration "$SECS" 2>/dev/null | tee "$ROOT/$1.txt" | sed "s/^/$1: /"
}
rate() { grep -o '= [0-9]* msgs/s' "$ROOT/$1.txt" | grep -o '[0-9]*' | head -1; }
# catch_up LABEL TARGET STARTED NOTE END_CMD...: waits until END_CMD prints TARGET (a fresh
# slave's CommitLog end reaching the master's), then prints the rate since STARTED.
catch_up() {
  local label=$1 target=$2 started=$3 note=$4
  shift 4
  until [ "$("$@" 2>/dev/null || echo 0)" = "$target" ]; do sleep 0.05; done
  local took; took=$(echo "$(date +%s.%N) - $started" | bc)
  echo "$label-catchup: $target bytes in ${took} s = $(echo "$target / $took / 1000000" | bc -l | cut -c1-6) MB/s ($note)"
}
# ratio LABEL: replicated / lone-master throughput of LABEL-sync and LABEL-none.
ratio() {
  local none sync; none=$(rate "$1-none"); sync=$(rate "$1-sync")
  echo "$1: SYNC_MASTER + slave / lone master = $(echo "$sync / $none" | bc -l | cut -c1-5) ($sync vs $none msgs/s)"
}

run_mode() { # flush mode
  local flush=$1 dir="$ROOT/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  printf '[store]\nflush-mode = "%s"\n' "$flush" >"$dir/conveyor.toml"
  # 1. A lone master.
  "$BIN" standalone --config "$dir/conveyor.toml" --data-dir "$dir/alone" --namesrv-listen 127.0.0.1:29876 \
    --listen 127.0.0.1:30911 --replication-listen 127.0.0.1:30912 --http-listen 127.0.0.1:28080 --grpc-listen 127.0.0.1:0 \
    --broker-role ASYNC_MASTER >"$dir/alone.log" 2>&1 &
  PIDS+=($!); local alone=$!
  wait_ready 28080
  produce "$flush-none"
  kill "$alone"; wait "$alone" 2>/dev/null || true
  # 2. A SYNC_MASTER and its slave.
  "$BIN" standalone --config "$dir/conveyor.toml" --data-dir "$dir/master" --namesrv-listen 127.0.0.1:29876 \
    --listen 127.0.0.1:30911 --replication-listen 127.0.0.1:30912 --http-listen 127.0.0.1:28080 --grpc-listen 127.0.0.1:0 \
    --broker-role SYNC_MASTER >"$dir/master.log" 2>&1 &
  PIDS+=($!); local master=$!
  wait_ready 28080
  "$BIN" broker --config "$dir/conveyor.toml" --data-dir "$dir/slave" --namesrv-addr 127.0.0.1:29876 \
    --listen 127.0.0.1:31911 --replication-listen 127.0.0.1:31912 --http-listen 127.0.0.1:28081 --grpc-listen 127.0.0.1:0 \
    --broker-role SLAVE --broker-id 1 >"$dir/slave.log" 2>&1 &
  PIDS+=($!); local slave=$!
  wait_ready 28081
  produce "$flush-sync"
  # 3. A fresh slave of what the master now holds.
  kill "$slave"; wait "$slave" 2>/dev/null || true
  rm -rf "$dir/slave"
  local target; target=$(log_end 28080)
  local started; started=$(date +%s.%N)
  "$BIN" broker --config "$dir/conveyor.toml" --data-dir "$dir/slave" --namesrv-addr 127.0.0.1:29876 \
    --listen 127.0.0.1:31911 --replication-listen 127.0.0.1:31912 --http-listen 127.0.0.1:28081 --grpc-listen 127.0.0.1:0 \
    --broker-role SLAVE --broker-id 1 >>"$dir/slave.log" 2>&1 &
  PIDS+=($!); slave=$!
  catch_up "$flush" "$target" "$started" "includes the slave's start" log_end 28081
  ratio "$flush"
  kill "$slave" "$master"; wait "$slave" "$master" 2>/dev/null || true
}

# Apache RocketMQ 5.3.3: the same three measurements.
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
apache_cp() {
  [ -n "${APACHE_CP:-}" ] && return 0
  # shellcheck source=tests/compat/apache_lib.sh
  source tests/compat/apache_lib.sh
  apache_classpath "$ROOT/apache" || exit 2
  APACHE_CP="$(cat "$ROOT/apache/classpath")"
}
jvm() { # dir main-class args... (background; pid in $!)
  local d=$1; shift
  java -Xms1g -Xmx1g -Duser.home="$d/home" -Drocketmq.home.dir="$d/home" -cp "$APACHE_CP" "$@" &
}
wait_log() { # file pattern
  for _ in $(seq 900); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "'$2' not in $1" >&2; tail -n 30 "$1" >&2; exit 1
}
apache_end() { # broker port
  "$BIN" admin broker-status --broker-addr "127.0.0.1:$1" 2>/dev/null | awk '$1 == "commitLogMaxOffset" {print $3}'
}
apache_broker() { # dir name port role id flush (background; pid in $!)
  local d=$1 name=$2 port=$3 role=$4 id=$5 flush=$6
  mkdir -p "$d/$name/home"
  cat >"$d/$name.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=$id
brokerRole=$role
flushDiskType=$flush
listenPort=$port
brokerIP1=127.0.0.1
namesrvAddr=127.0.0.1:29876
storePathRootDir=$d/$name/store
storePathCommitLog=$d/$name/store/commitlog
EOF
  jvm "$d/$name" org.apache.rocketmq.broker.BrokerStartup -c "$d/$name.conf" >"$d/$name.log" 2>&1
}
apache_topic() { # dir
  java -Xms32m -Xmx256m -Duser.home="$1/home" -cp "$APACHE_CP" org.apache.rocketmq.tools.command.MQAdminStartup \
    updateTopic -n 127.0.0.1:29876 -c DefaultCluster -t ReplBench -r 8 -w 8 >"$1/topic.log" 2>&1
  local topics
  for _ in $(seq 300); do
    # Captured first: grep -q closing the pipe early would fail the pipeline.
    topics="$("$BIN" admin topics --namesrv-addr 127.0.0.1:29876 2>/dev/null || true)"
    grep -Eq '^ReplBench +[^ ]+ +7 ' <<<"$topics" && return 0
    sleep 0.2
  done
  echo "no route for ReplBench" >&2; exit 1
}
apache_mode() { # flush mode
  local flush=$1 dir="$ROOT/apache-$1" disk
  disk=$([ "$1" = sync ] && echo SYNC_FLUSH || echo ASYNC_FLUSH)
  rm -rf "$dir" && mkdir -p "$dir/ns/home"
  echo "listenPort=29876" >"$dir/ns.conf"
  jvm "$dir/ns" org.apache.rocketmq.namesrv.NamesrvStartup -c "$dir/ns.conf" >"$dir/ns.log" 2>&1
  PIDS+=($!); local ns=$!
  wait_log "$dir/ns.log" "boot success"
  # 1. A lone master.
  apache_broker "$dir" alone 30911 ASYNC_MASTER 0 "$disk"
  PIDS+=($!); local alone=$!
  wait_log "$dir/alone.log" "boot success"
  apache_topic "$dir"
  produce "apache-$flush-none"
  kill "$alone"; wait "$alone" 2>/dev/null || true
  # 2. A SYNC_MASTER and its slave, on fresh stores.
  apache_broker "$dir" master 30911 SYNC_MASTER 0 "$disk"
  PIDS+=($!); local master=$!
  apache_broker "$dir" slave 31911 SLAVE 1 "$disk"
  PIDS+=($!); local slave=$!
  wait_log "$dir/master.log" "boot success"
  wait_log "$dir/slave.log" "boot success"
  apache_topic "$dir"
  produce "apache-$flush-sync"
  # 3. A fresh slave of what the master now holds.
  kill "$slave"; wait "$slave" 2>/dev/null || true
  rm -rf "$dir/slave"
  local target; target=$(apache_end 30911)
  local started; started=$(date +%s.%N)
  apache_broker "$dir" slave 31911 SLAVE 1 "$disk"
  PIDS+=($!); slave=$!
  catch_up "apache-$flush" "$target" "$started" "includes the slave's JVM start" apache_end 31911
  ratio "apache-$flush"
  kill "$slave" "$master" "$ns"; wait "$slave" "$master" "$ns" 2>/dev/null || true
}

case "${REPL_FLUSH:-both}" in
  both) modes=(async sync) ;;
  *) modes=("$REPL_FLUSH") ;;
esac
if [ "${REPL_ONLY:-}" != apache ]; then
  for m in "${modes[@]}"; do run_mode "$m"; done
fi
if [ "${REPL_APACHE:-1}" = 1 ]; then
  apache_cp
  for m in "${modes[@]}"; do apache_mode "$m"; done
fi
rm -rf "$ROOT"
