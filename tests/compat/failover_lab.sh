# shellcheck shell=bash
# What tests/compat/failover-gaps.sh (Conveyor) and tests/bench/failover-apache.sh (Apache
# RocketMQ) share, so that both measure the same thing: two "hosts" (network namespaces on a
# bridge, one broker in each; the sourcing script's other processes use the bridge address), the
# three faults, and the gap without SEND_OK read from the Java ledger's ok-at file.
# The sourcing script sets TAG (a short prefix unique to it), NET (a /24 prefix, e.g. 10.252.7)
# and WORK (with the ledger in WORK/ledger), and defines say, pid_of INDEX and start_broker INDEX.

GW="$NET.1"
HOST_IP=("$NET.2" "$NET.3")

lab_down() {
  for i in 0 1; do
    ip netns del "${TAG}h$i" 2>/dev/null || true
    ip link del "${TAG}v$i" 2>/dev/null || true
  done
  ip link del "${TAG}br" 2>/dev/null || true
}
lab_up() {
  lab_down
  ip link add "${TAG}br" type bridge
  ip addr add "$GW/24" dev "${TAG}br"
  ip link set "${TAG}br" up
  for i in 0 1; do
    ip netns add "${TAG}h$i"
    ip link add "${TAG}v$i" type veth peer name eth0 netns "${TAG}h$i"
    ip link set "${TAG}v$i" master "${TAG}br" up
    ip -n "${TAG}h$i" link set lo up
    ip -n "${TAG}h$i" addr add "${HOST_IP[$i]}/24" dev eth0
    ip -n "${TAG}h$i" link set eth0 up
  done
}

lines() { [[ -f "$1" ]] && wc -l <"$1" || echo 0; }
now_ms() { date +%s%3N; }

# fault KIND INDEX DOWN_S: one fault of broker INDEX, undone at its end:
#   kill: SIGKILL, kept down DOWN_S seconds, then started again (start_broker);
#   stop: SIGSTOP for 30 s, then SIGCONT;
#   cut:  every packet between its host and the others dropped for DOWN_S seconds (nftables).
fault() {
  local kind=$1 i=$2 down=$3 other
  case $kind in
    kill)
      kill -KILL "$(pid_of "$i")"
      sleep "$down"
      start_broker "$i"
      ;;
    stop)
      kill -STOP "$(pid_of "$i")"
      sleep 30
      kill -CONT "$(pid_of "$i")"
      ;;
    cut)
      other=${HOST_IP[$((1 - i))]}
      ip netns exec "${TAG}h$i" nft -f - <<NFT
table inet partition {
  chain in { type filter hook input priority 0; policy accept; ip saddr { $GW, $other } drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr { $GW, $other } drop; }
}
NFT
      sleep "$down"
      ip netns exec "${TAG}h$i" nft delete table inet partition
      ;;
    *) say "unknown fault $kind"; exit 2 ;;
  esac
}

# fault_window_start WHOLE_MS: where a fault's gap is measured from: 2 s before the fault, but
# never before the group was whole again after the last one (else a gap that ended within those
# 2 s would be counted twice).
fault_window_start() {
  local from=$(($(now_ms) - 2000))
  ((from > $1)) || from=$1
  echo "$from"
}

# longest_gap FROM_MS: the longest time between two SEND_OKs from FROM_MS on (ms).
longest_gap() {
  python3 - "$WORK/ledger/ok-at" "$1" <<'PY'
import sys
times = [int(l) for l in open(sys.argv[1]) if l.strip()]
start = int(sys.argv[2])
prev = max([t for t in times if t <= start], default=start)
gap = 0
for t in (t for t in times if t > start):
    gap = max(gap, t - prev)
    prev = t
print(gap)
PY
}

# gap_stats "G1 G2 …": "MEDIAN MAX".
gap_stats() {
  tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)], a[NR]}'
}

# lost_keys: acknowledged keys the drain did not read back.
lost_keys() {
  comm -23 <(sort -u "$WORK/ledger/ok") <(sort -u "$WORK/ledger/seen" 2>/dev/null)
}
