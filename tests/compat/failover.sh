#!/usr/bin/env bash
# The failover ledger with the real Java client (issue 10): a controller, a name server and two
# brokers in controller mode (SYNC flush, synchronous replication), as real processes. The Java
# producer (rocketmq-client from Maven Central, default retry settings) sends keyed messages
# continuously; the master is killed with SIGKILL FAILOVER_CYCLES times (default 20; the long
# mode is 100), each time once both replicas are in sync; the controller promotes the slave and
# the killed broker comes back as its slave. Afterwards a Java consumer reads everything from
# offset 0: every key the producer saw SEND_OK for must be there, and no key it never sent.
# Every fourth cycle the slave is killed first and restarted after the master's kill: it is
# promoted only if still in the in-sync set (else the old master comes back first), and
# nothing acknowledged may be lost either way. Last, with the controller stopped (so
# nobody is promoted) and the master killed, a Java push consumer of a new group reads every
# acknowledged key from the slave (`slave-read-enable`, RocketMQ's reads from slaves). Before
# that, same-zone reads: each broker runs in its own zone (`--zone`), and a Java push consumer
# started with ROCKETMQ_ZONE set to the slave's zone reads every acknowledged key, most of them
# served by the slave (its `conveyor_messages_out_total`).
# Prints the unavailability (kill → next SEND_OK) median and max.
#
#   tests/compat/failover.sh
#
# Environment: CONVEYOR_BIN (default: build the debug binary), FAILOVER_CYCLES, FAILOVER_CLIENT
# (rmq5 or rmq4, default rmq5), COMPAT_LOG_DIR, FAILOVER_KEEP (keep the data directories).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
CYCLES="${FAILOVER_CYCLES:-20}"
PROFILE="${FAILOVER_CLIENT:-rmq5}"
TOPIC=FailoverLedger

"$HERE/fetch.sh" >&2
WORK="$(mktemp -d /tmp/conveyor-failover.XXXXXX)"
LOGS="${COMPAT_LOG_DIR:-$OUT/logs/failover-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$LOGS"
say() { echo "failover: $*" >&2; }
# shellcheck source=tests/compat/processes.sh
source "$HERE/processes.sh"
BIN="$(conveyor_binary)"

cleanup() {
  for f in "$WORK"/*.pid; do
    [[ -f "$f" ]] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  cp "$WORK"/*.log "$LOGS"/ 2>/dev/null || true
  if [[ -n "${FAILOVER_KEEP:-}" ]]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

declare -A PORT
for p in controller namesrv controller_http namesrv_http b0 b0_ha b0_http b1 b1_ha b1_http; do
  PORT[$p]="$(free_port)"
done
CONTROLLER="127.0.0.1:${PORT[controller]}"
NAMESRV="127.0.0.1:${PORT[namesrv]}"

cat >"$WORK/controller.toml" <<'EOF'
[controller]
detection-ms = 2000
EOF
cat >"$WORK/broker.toml" <<'EOF'
[broker]
slave-read-enable = true
[store]
flush-mode = "sync"
segment-size = 16777216
max-message-size = 65536
[replication]
slave-timeout-ms = 1000
heartbeat-interval-ms = 200
housekeeping-interval-ms = 2000
metadata-sync-interval-ms = 200
controller-heartbeat-ms = 200
max-time-not-caught-up-ms = 4000
EOF


start_broker() { # id
  local id=$1
  ("$BIN" broker --config "$WORK/broker.toml" --data-dir "$WORK/b$id" --namesrv-addr "$NAMESRV" \
    --controller-addr "$CONTROLLER" --broker-id "$id" --zone "zone-$id" --listen "127.0.0.1:${PORT[b$id]}" \
    --replication-listen "127.0.0.1:${PORT[b${id}_ha]}" --http-listen "127.0.0.1:${PORT[b${id}_http]}" --grpc-listen 127.0.0.1:0 \
    >>"$WORK/b$id.log" 2>&1 &
  echo $! >"$WORK/b$id.pid")
  wait_http "${PORT[b${id}_http]}" "b$id"
}

# Whether broker $1 is in the controller's in-sync set.
in_sync_has() {
  "$BIN" admin replication --controller "$CONTROLLER" --group broker-a --output json 2>/dev/null |
    python3 -c 'import json,sys; sys.exit(0 if int(sys.argv[1]) in json.load(sys.stdin)["syncStateSet"] else 1)' "$1"
}
lines() { [[ -f "$1" ]] && wc -l <"$1" || echo 0; }
# The number of the newest acknowledged key (keys are k-<sequence>, sent in order).
last_ok() { [[ -s "$1" ]] && tail -n 1 "$1" | sed 's/^k-0*//; s/^$/0/' || echo -1; }
now() { date +%s.%N; }


start_controller
start_namesrv
start_broker 0
start_broker 1
mkdir -p "$WORK/ledger"
java_run producer produce "$NAMESRV" "$TOPIC" "$WORK/ledger" &
echo $! >"$WORK/producer.pid"
say "cluster up (controller $CONTROLLER, name server $NAMESRV); $CYCLES kills with the $(cat "$OUT/java-$PROFILE.version") Java producer"

UNAVAILABLE=()
for cycle in $(seq 1 "$CYCLES"); do
  # Both replicas in sync and the producer acknowledged again (20 more SEND_OK).
  base=$(lines "$WORK/ledger/ok")
  deadline=$((SECONDS + 90))
  while :; do
    read -r master in_sync < <(replication)
    if [[ $master -ge 0 && $in_sync -eq 2 && $(lines "$WORK/ledger/ok") -ge $((base + 20)) ]]; then break; fi
    if ((SECONDS > deadline)); then
      say "cycle $cycle: no in-sync master with progress (master $master, in-sync $in_sync)"
      exit 1
    fi
    sleep 0.1
  done
  restarted=
  if ((cycle % 4 == 0)); then
    # The slave dies first, then the master after two more sends. The master drops the slave
    # from the in-sync set as soon as its stream closes, and acknowledges alone only once the
    # controller confirmed that. So either the slave left the set, lacks acknowledged
    # messages, and must not be promoted (the group waits for the old master), or it is still
    # in the set, nothing was acknowledged without it, and it is promoted. A wrong
    # acknowledgement or promotion shows as a lost message below.
    slave=$((1 - master))
    kill -9 "$(cat "$WORK/b$slave.pid")"
    sent=$(lines "$WORK/ledger/attempted")
    until (($(lines "$WORK/ledger/attempted") >= sent + 2)); do sleep 0.01; done
    kill -9 "$(cat "$WORK/b$master.pid")"
    start_broker "$slave"
    if ! in_sync_has "$slave"; then
      start_broker "$master"
      restarted=1
    fi
  else
    kill -9 "$(cat "$WORK/b$master.pid")"
  fi
  killed=$(now)
  # The first acknowledgement of a message sent after the kill.
  first_after=$(lines "$WORK/ledger/attempted")
  deadline=$((SECONDS + 90))
  until (($(last_ok "$WORK/ledger/ok") >= first_after)); do
    if ((SECONDS > deadline)); then
      say "cycle $cycle: no SEND_OK after killing broker $master"
      exit 1
    fi
    sleep 0.05
  done
  UNAVAILABLE+=("$(echo "$(now) - $killed" | bc)")
  [[ -n $restarted ]] || start_broker "$master"
done
touch "$WORK/ledger/stop"
wait "$(cat "$WORK/producer.pid")" || true
rm -f "$WORK/producer.pid"
cat "$WORK/producer.out" >&2

# Drain from the final master once both replicas agree.
deadline=$((SECONDS + 90))
until read -r master in_sync < <(replication) && [[ $in_sync -eq 2 ]]; do
  ((SECONDS < deadline)) || { say "the replicas never got in sync at the end"; exit 1; }
  sleep 0.1
done
java_run drain drain "$NAMESRV" "$TOPIC" "$WORK/ledger"
cat "$WORK/drain.out" >&2

python3 - "$WORK/ledger" "${UNAVAILABLE[@]}" <<'PY'
import statistics, sys
d = sys.argv[1]
read = lambda n: set(open(f"{d}/{n}").read().split())
attempted, ok, seen = read("attempted"), read("ok"), read("seen")
lost = sorted(ok - seen)
unexpected = sorted(seen - attempted)
times = sorted(float(t) for t in sys.argv[2:])
print(f"failover (Java client): {len(times)} kills, {len(attempted)} sent, {len(ok)} SEND_OK, "
      f"{len(seen)} consumed, lost {len(lost)}, unexpected {len(unexpected)}; unavailable "
      f"median {statistics.median(times):.2f} s, max {max(times):.2f} s")
if lost or unexpected:
    print(f"FAIL failover-ledger: lost {lost[:20]}, unexpected {unexpected[:20]}")
    sys.exit(1)
print("PASS failover-ledger")
PY

# Same-zone reads: a consumer in the slave's zone is sent to the slave by the master's pull
# answers (suggestWhichBrokerId), and the slave keeps it.
messages_out() {
  curl -fs "http://127.0.0.1:${PORT[b$1_http]}/metrics" | awk '$1 == "conveyor_messages_out_total" { printf "%.0f\n", $2 }'
}
slave=$((1 - master))
before=$(messages_out "$slave")
ROCKETMQ_ZONE="zone-$slave" java_run drain-zone drain-push "$NAMESRV" "$TOPIC" "$WORK/ledger" seen-zone
cat "$WORK/drain-zone.out" >&2
served=$(( $(messages_out "$slave") - before ))
python3 - "$WORK/ledger" "$served" "$slave" <<'PY'
import sys
d, served, slave = sys.argv[1], int(sys.argv[2]), sys.argv[3]
read = lambda n: set(open(f"{d}/{n}").read().split())
ok, seen = read("ok"), read("seen-zone")
missing = sorted(ok - seen)
print(f"same-zone read (Java push consumer, ROCKETMQ_ZONE=zone-{slave}): {len(seen)} keys read, "
      f"{len(missing)} acknowledged keys missing, {served} messages served by the slave b{slave}")
if missing or served < len(ok) // 2:
    print(f"FAIL same-zone-read: missing {missing[:20]}, the slave served {served} of {len(ok)}")
    sys.exit(1)
print("PASS same-zone-read")
PY

# Reading from a slave while the group has no master: stop the controller (no promotion), kill
# the master, and read everything from the slave with a new Java push consumer.
kill -9 "$(cat "$WORK/controller.pid")"
kill -9 "$(cat "$WORK/b$master.pid")"
say "controller and master (b$master) killed; reading from the slave b$((1 - master))"
java_run drain-push drain-push "$NAMESRV" "$TOPIC" "$WORK/ledger"
cat "$WORK/drain-push.out" >&2
python3 - "$WORK/ledger" "$WORK/b0/commitlog" "$WORK/b1/commitlog" <<'PY'
import os, sys
d = sys.argv[1]
read = lambda n: set(open(f"{d}/{n}").read().split())
def log(path):
    data = b"".join(open(os.path.join(path, f), "rb").read() for f in sorted(os.listdir(path)))
    return data.rstrip(b"\0")
a, b = log(sys.argv[2]), log(sys.argv[3])
shorter = min(len(a), len(b))
print(f"commit logs: {len(a)} and {len(b)} bytes, identical up to the shorter end: {a[:shorter] == b[:shorter]}")
if a[:shorter] != b[:shorter]:
    print("FAIL failover-ledger: the replicas' commit logs differ below the shorter end")
    sys.exit(1)
ok, seen = read("ok"), read("seen-push")
missing = sorted(ok - seen)
print(f"slave read (Java push consumer, no master): {len(seen)} keys read, "
      f"{len(missing)} acknowledged keys missing")
if missing:
    print(f"FAIL slave-read: missing {missing[:20]}")
    sys.exit(1)
print("PASS slave-read")
PY
