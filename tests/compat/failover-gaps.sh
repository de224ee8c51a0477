#!/usr/bin/env bash
# How long an unmodified Java producer cannot write when its group's master fails (issue 26).
# A controller, a name server and two brokers in controller mode (SYNC flush; every setting at
# its default but the group address), each broker in a network namespace of its own behind a
# bridge, as on two hosts. The controller serves the group's endpoint, which the master
# registers as id 0, so clients keep their route across failovers. The Java producer runs with
# every client setting at its default (route polled every 30 s, 3 s send timeout, 2 retries).
# Three kinds of fault, GAP_FAULTS times each (default 5), each once both replicas are in sync:
#   kill:  the master is SIGKILLed and kept down GAP_DOWN_S (default 20) seconds;
#   stop:  the master is frozen (SIGSTOP) for 30 s, then thawed;
#   cut:   every packet between the master's host and the others is dropped for GAP_DOWN_S s.
# Each fault's gap is the longest time between two SEND_OKs from 2 s before the fault (never before
# the group was whole again after the previous one) until the
# group is whole again. Afterwards a Java consumer reads everything from offset 0: every key the
# producer saw SEND_OK for must be there. Passes when nothing acknowledged is lost and the median
# gap of each kind is 10 s or less; prints every gap.
#
#   tests/compat/failover-gaps.sh        (root: network namespaces and nftables)
#
# Environment: CONVEYOR_BIN (default: build the debug binary), GAP_FAULTS, GAP_DOWN_S,
# GAP_KINDS (default "kill stop cut"), FAILOVER_CLIENT (rmq5 or rmq4, default rmq5),
# COMPAT_LOG_DIR, GAP_MODE=before (the behaviour before issue 26, for docs/benchmarks.md: no
# group address, detection 10 s and heartbeats every second; gaps are reported, not judged).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
FAULTS="${GAP_FAULTS:-5}"
DOWN="${GAP_DOWN_S:-20}"
KINDS="${GAP_KINDS:-kill stop cut}"
PROFILE="${FAILOVER_CLIENT:-rmq5}"
TOPIC=GapLedger
LIMIT_MS=10000

"$HERE/fetch.sh" >&2
WORK="$(mktemp -d /tmp/conveyor-gaps.XXXXXX)"
LOGS="${COMPAT_LOG_DIR:-$OUT/logs/failover-gaps-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$LOGS"
say() { echo "failover-gaps: $*" >&2; }
# shellcheck source=tests/compat/processes.sh
source "$HERE/processes.sh"
BIN="$(conveyor_binary)"

# Two "hosts": network namespaces on a bridge; the test's own processes use the bridge address.
TAG="cg$(($$ % 100000))"
NET="10.252.$(($$ % 250))"
# shellcheck source=tests/compat/failover_lab.sh
source "$HERE/failover_lab.sh"
cleanup() {
  for f in "$WORK"/*.pid; do
    [[ -f "$f" ]] || continue
    kill -CONT "$(cat "$f")" 2>/dev/null || true
    kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  cp "$WORK"/*.log "$WORK"/*.out "$LOGS"/ 2>/dev/null || true
  lab_down
  rm -rf "$WORK"
}
trap cleanup EXIT
lab_up

declare -A PORT
for p in controller namesrv endpoint controller_http namesrv_http; do PORT[$p]="$(free_port)"; done
CONTROLLER="$GW:${PORT[controller]}"
NAMESRV="$GW:${PORT[namesrv]}"
GROUP_ADDR="$GW:${PORT[endpoint]}"

MODE="${GAP_MODE:-after}"
if [[ $MODE == before ]]; then
  CONTROLLER_KEYS="detection-ms = 10000"
  REPLICATION_KEYS="controller-heartbeat-ms = 1000"
else
  CONTROLLER_KEYS="group-endpoints = [\"broker-a=$GROUP_ADDR\"]"
  REPLICATION_KEYS="group-address = \"$GROUP_ADDR\""
fi
printf '[controller]\n%s\n' "$CONTROLLER_KEYS" >"$WORK/controller.toml"
printf '[store]\nflush-mode = "sync"\nsegment-size = 16777216\n[replication]\n%s\n' "$REPLICATION_KEYS" >"$WORK/broker.toml"

# The controller's and name server's HTTP ports on the bridge, like everything else here.
HTTP_HOST="$GW"
start_broker() { # id: in its own namespace, at its host's address
  local id=$1 ip=${HOST_IP[$1]}
  (ip netns exec "${TAG}h$id" "$BIN" broker --config "$WORK/broker.toml" --data-dir "$WORK/b$id" \
    --namesrv-addr "$NAMESRV" --controller-addr "$CONTROLLER" --broker-id "$id" \
    --listen "$ip:10911" --replication-listen "$ip:10912" --advertised-addr "$ip:10911" \
    --http-listen "$ip:8080" --grpc-listen off >>"$WORK/b$id.log" 2>&1 &
  echo $! >"$WORK/b$id.pid")
  wait_http "$ip:8080" "b$id"
}
pid_of() { cat "$WORK/b$1.pid"; }



# Waits (120 s) until both replicas are in sync and the producer acknowledged 20 more; sets MASTER
# and WHOLE_MS (when).
whole_again() { # what
  local base deadline master in_sync
  base=$(lines "$WORK/ledger/ok")
  deadline=$((SECONDS + 120))
  while :; do
    read -r master in_sync < <(replication)
    if [[ $master -ge 0 && $in_sync -eq 2 && $(lines "$WORK/ledger/ok") -ge $((base + 20)) ]]; then
      MASTER=$master
      WHOLE_MS=$(now_ms)
      return 0
    fi
    if ((SECONDS > deadline)); then
      say "$1: no in-sync group with progress (master $master, in-sync $in_sync)"
      exit 1
    fi
    sleep 0.1
  done
}
start_controller
start_namesrv
start_broker 0
start_broker 1
mkdir -p "$WORK/ledger"
java_run producer produce-defaults "$NAMESRV" "$TOPIC" "$WORK/ledger" &
echo $! >"$WORK/producer.pid"
say "cluster up ($MODE: $CONTROLLER_KEYS; $REPLICATION_KEYS); faults: $KINDS, $FAULTS each, with the $(cat "$OUT/java-$PROFILE.version") Java producer at its defaults"

declare -A GAPS
fail=0
whole_again "start"
for kind in $KINDS; do
  for n in $(seq 1 "$FAULTS"); do
    m=$MASTER
    from=$(fault_window_start "$WHOLE_MS")
    fault "$kind" "$m" "$DOWN"
    whole_again "$kind $n"
    gap=$(longest_gap "$from")
    GAPS[$kind]+="$gap "
    say "$kind $n (master was b$m, now b$MASTER): longest gap without SEND_OK ${gap} ms"
  done
done
touch "$WORK/ledger/stop"
wait "$(cat "$WORK/producer.pid")" || true
rm -f "$WORK/producer.pid"
cat "$WORK/producer.out" >&2

# Every acknowledged key must be readable.
java_run drain drain "$NAMESRV" "$TOPIC" "$WORK/ledger"
acked=$(lines "$WORK/ledger/ok")
lost=$(lost_keys | wc -l)
say "$acked acknowledged, $(sort -u "$WORK/ledger/seen" | wc -l) read back, $lost lost"
if ((lost > 0)); then
  say "FAIL: $lost acknowledged messages lost, e.g. $(lost_keys | head -3 | tr '\n' ' ')"
  fail=1
fi
for kind in $KINDS; do
  read -r median max < <(gap_stats "${GAPS[$kind]}")
  if [[ $MODE == before ]]; then
    say "$kind (before): median gap ${median} ms, max ${max} ms (gaps: ${GAPS[$kind]})"
  elif ((median <= LIMIT_MS)); then
    say "PASS $kind: median gap ${median} ms, max ${max} ms (gaps: ${GAPS[$kind]})"
  else
    say "FAIL $kind: median gap ${median} ms > ${LIMIT_MS} ms (gaps: ${GAPS[$kind]})"
    fail=1
  fi
done
exit $fail
