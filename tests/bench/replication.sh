#!/usr/bin/env bash
# What synchronous replication costs and how fast a fresh slave catches up (issue 10), in one
# run on this machine, release build, real disk:
#   1. produce 1 KiB for 15 s to a lone master (ASYNC_MASTER, no slave) — the reference;
#   2. the same against a SYNC_MASTER whose slave must hold every message before SEND_OK;
#   3. a fresh slave of that master (its data wiped) catching up: MB/s until its CommitLog end
#      equals the master's.
# Both flush modes are run (REPL_FLUSH=async|sync|both, default both). Prints each figure and
# the ratio sync/none. Not part of tests/all.sh (it measures; tests never assert times).
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET="${CARGO_TARGET_DIR:-target}"
BIN="${REPL_BIN:-$TARGET/release/conveyor}"
[ -x "$BIN" ] || cargo build --release -p conveyor
SECS="${REPL_SECS:-15}"
ROOT="${REPL_DIR:-$(mktemp -d /var/tmp/conveyor-repl.XXXXXX)}"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
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

run_mode() { # flush mode
  local flush=$1 dir="$ROOT/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  printf '[store]\nflush-mode = "%s"\n' "$flush" >"$dir/conveyor.toml"
  # 1. A lone master.
  "$BIN" standalone --config "$dir/conveyor.toml" --data-dir "$dir/alone" --namesrv-listen 127.0.0.1:29876 \
    --listen 127.0.0.1:30911 --replication-listen 127.0.0.1:30912 --http-listen 127.0.0.1:28080 \
    --broker-role ASYNC_MASTER >"$dir/alone.log" 2>&1 &
  PIDS+=($!); local alone=$!
  wait_ready 28080
  produce "$flush-none"
  kill "$alone"; wait "$alone" 2>/dev/null || true
  # 2. A SYNC_MASTER and its slave.
  "$BIN" standalone --config "$dir/conveyor.toml" --data-dir "$dir/master" --namesrv-listen 127.0.0.1:29876 \
    --listen 127.0.0.1:30911 --replication-listen 127.0.0.1:30912 --http-listen 127.0.0.1:28080 \
    --broker-role SYNC_MASTER >"$dir/master.log" 2>&1 &
  PIDS+=($!); local master=$!
  wait_ready 28080
  "$BIN" broker --config "$dir/conveyor.toml" --data-dir "$dir/slave" --namesrv-addr 127.0.0.1:29876 \
    --listen 127.0.0.1:31911 --replication-listen 127.0.0.1:31912 --http-listen 127.0.0.1:28081 \
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
    --listen 127.0.0.1:31911 --replication-listen 127.0.0.1:31912 --http-listen 127.0.0.1:28081 \
    --broker-role SLAVE --broker-id 1 >>"$dir/slave.log" 2>&1 &
  PIDS+=($!); slave=$!
  until [ "$(log_end 28081 2>/dev/null || echo 0)" = "$target" ]; do sleep 0.05; done
  local took; took=$(echo "$(date +%s.%N) - $started" | bc)
  echo "$flush-catchup: $target bytes in ${took} s = $(echo "$target / $took / 1000000" | bc -l | cut -c1-6) MB/s (includes the slave's start)"
  local none sync; none=$(rate "$flush-none"); sync=$(rate "$flush-sync")
  echo "$flush: SYNC_MASTER + slave / lone master = $(echo "$sync / $none" | bc -l | cut -c1-5) ($sync vs $none msgs/s)"
  kill "$slave" "$master"; wait "$slave" "$master" 2>/dev/null || true
}

case "${REPL_FLUSH:-both}" in
  both) run_mode async; run_mode sync ;;
  *) run_mode "$REPL_FLUSH" ;;
esac
rm -rf "$ROOT"
