#!/usr/bin/env bash
# A producer's latency while 32 consumers catch up from offset 0 on data that is not in memory,
# against the same run on data that is (issue 9, defect 12: cold reads must not stall the
# runtime workers that serve producers). Prints both p99s and their ratio.
#
#   tests/bench/cold_reads.sh          # about 2 minutes; needs root (drop_caches)
#
# One `conveyor standalone` (release build) on a fresh store on the real disk. 6 GiB of 4 KiB
# messages go to a 32-queue topic; then twice, with the page cache warm and then cold (broker
# restarted so that it maps nothing, `echo 3 > /proc/sys/vm/drop_caches`; the broker is restarted
# before the warm phase too, so that only the page cache differs): 32 consumers drain the
# topic from offset 0 while one producer with one send in flight measures its latency on another
# topic. Not part of tests/all.sh (it measures; tests never assert times).
#
# Environment: COLD_BIN (default target/release/conveyor, built if missing), COLD_GIB (default 6),
# COLD_DIR (default a temp dir under /var/tmp), COLD_ROUNDS (default 3). Each probe runs 3 s, while
# the consumers still read.
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET="${CARGO_TARGET_DIR:-target}"
BIN="${COLD_BIN:-$TARGET/release/conveyor}"
[ -x "$BIN" ] || cargo build --release -p conveyor
GIB="${COLD_GIB:-6}"
DIR="${COLD_DIR:-$(mktemp -d /var/tmp/conveyor-cold.XXXXXX)}"
NS=127.0.0.1:29876
LOG="$DIR/broker.log"
export CONVEYOR_NAMESRV_ADDR=$NS

start() {
  "$BIN" standalone --data-dir "$DIR/data" --namesrv-listen $NS --listen 127.0.0.1:30911 \
    --http-listen 127.0.0.1:28080 --grpc-listen 127.0.0.1:0 >>"$LOG" 2>&1 &
  PID=$!
  for _ in $(seq 600); do
    curl -fs http://127.0.0.1:28080/readyz >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "broker not ready; see $LOG" >&2
  exit 1
}
stop() { kill "$PID"; wait "$PID" || true; }
trap 'kill $PID 2>/dev/null || true' EXIT

start
"$BIN" admin create-topic --topic Cold --queues 32 >/dev/null
"$BIN" admin create-topic --topic Probe --queues 4 >/dev/null
count=$((GIB * 1024 * 1024 / 4 / 16))
echo "filling $GIB GiB ($((count * 16)) messages of 4 KiB)"
"$BIN" bench produce --topic Cold --size 4096 --batch 16 --count "$count" --producers 4 --in-flight 8 | tail -1

run() { # run LABEL: the probe runs 3 s, inside the consumers' catch-up
  "$BIN" bench consume --topic Cold --consumers 32 --batch 64 >"$DIR/consume-$1.txt" 2>&1 &
  local consume=$!
  "$BIN" bench produce --topic Probe --size 1024 --producers 1 --in-flight 1 --duration 3 \
    >"$DIR/probe-$1.txt"
  wait $consume || true
  echo "$1: probe $(tail -1 "$DIR/probe-$1.txt" | grep -o 'p50.*p999 [0-9.]* ms')"
  echo "$1: $(tail -1 "$DIR/consume-$1.txt" | sed 's/; latency.*//')"
}
p99() { grep -o 'p99 [0-9.]*' "$DIR/probe-$1.txt" | awk '{print $2}'; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

# Rounds of (warm, cold): one 3 s probe's p99 moves by a factor of 2 between runs on this
# shared machine, so the medians over the rounds are compared.
ROUNDS="${COLD_ROUNDS:-3}"
for r in $(seq "$ROUNDS"); do
  # Both phases run on a broker just restarted (connections, routes and its own files fresh), so
  # that only the page cache differs between them.
  echo "== round $r warm: broker restarted, the data in memory"
  stop
  start
  "$BIN" bench consume --topic Cold --consumers 32 --batch 64 >/dev/null 2>&1 # touch it all once
  run "warm$r"
  echo "== round $r cold: broker restarted, page cache dropped"
  stop
  sync
  echo 3 >/proc/sys/vm/drop_caches
  start
  run "cold$r"
done
stop
warm=$(for r in $(seq "$ROUNDS"); do p99 "warm$r"; done | median)
cold=$(for r in $(seq "$ROUNDS"); do p99 "cold$r"; done | median)
echo "producer p99, median of $ROUNDS rounds: warm ${warm} ms, cold ${cold} ms, ratio $(awk -v c="$cold" -v w="$warm" 'BEGIN{printf "%.2f", c / w}')"
rm -rf "$DIR/data"
