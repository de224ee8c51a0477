#!/usr/bin/env bash
# What TLS and ACL request signing cost on produce throughput: the same `conveyor bench produce` workload against four
# configurations of `conveyor standalone`, each on a fresh store in a temporary directory, on free loopback ports:
#
#   a  plaintext   --tls-mode off, ACL off; the client as usual (the reference)
#   b  tls         --tls-mode enforcing (self-signed certificate generated at start), ACL off; the client with --tls
#   c  acl         --tls-mode off, --acl-enabled true (a plain_acl.yml users file, a cluster secret); the client signs
#                  every request (--access-key/--secret-key of a non-admin user with PUB on the two topics)
#   d  tls+acl     both
#
#   tests/bench/security.sh                 # about 4-5 minutes on a quiet machine (plus the build, waiting for quiet)
#   BENCH_ROUNDS=5 tests/bench/security.sh  # about 6-7 minutes
#
# Per run: a fresh standalone; the topics (8 queues) created with `conveyor admin` (as the ACL admin user where ACL is
# on); a warm-up produce into its own topic (not reported); then the measured produce: 1 KiB bodies, 4 producers
# (one connection each) x 64 sends in flight, single messages (SEND_MESSAGE_V2), 10 s: the settings of compare.sh.
# The broker's CPU time over the measured run comes from /proc/PID/stat, the client's from /usr/bin/time. The CPU time
# of everything else on the machine over the same 10 s (/proc/stat's busy time minus those two; it includes interrupt
# time the kernel charges to no process) and the steal time (the hypervisor running others) are reported per run, so
# that a run disturbed by other work shows. After the measured run the script checks that the configuration was in
# force: against an enforcing server a plaintext client must fail, with ACL on an unsigned client must be refused (the
# script stops with an error otherwise, and when a measured run stored nothing).
# The runs are interleaved: BENCH_ROUNDS rounds (default 3) of all four configurations, the order rotated by one each
# round. The report gives each run and, per configuration, the median over the rounds and its ratio to the median of
# (a) from the same script run, and the median of the per-round ratios to (a). Nothing is asserted about the figures.
# Client and broker share the machine's cores, so CPU either side spends on encryption or signatures shows up as
# throughput lost; the CPU per message of each side is the steadier figure.
#
# Prints a Markdown report on stdout and writes it to $BENCH_LOG_DIR/report.md (with every run's raw output and
# broker log). Needs python3, curl, /usr/bin/time. Not part of tests/all.sh (it measures; tests never assert times).
#
# Environment:
#   BENCH_LOG_DIR     logs, raw outputs and the report (default ~/.cache/conveyor/bench/<time>-security)
#   BENCH_ROUNDS      rounds of the four configurations (default 3)
#   BENCH_CONFIGS     the configurations to run, a subset of "a b c d" (default all four; the ratios need a)
#   BENCH_DURATION    seconds of the measured produce (default 10)
#   BENCH_WARMUP      seconds of warm-up produce before it (default 5; 0 = none)
#   BENCH_PRODUCERS, BENCH_IN_FLIGHT, BENCH_SIZE, BENCH_BATCH: the client settings (4, 64, 1024, 1)
#   BENCH_SKIP_BUILD  1 = use target/release/conveyor as it is (default: `cargo build --release -q -p conveyor`
#                     first, under `flock /tmp/conveyor-cargo.lock`)
#   BENCH_DISK_FULL_RATIO  the broker's [store] disk-full-ratio (default: the broker's, 0.90), for a machine whose
#                     disk is fuller than that: the broker refuses writes there (each run writes 1-2 GB, deleted after)
#   BENCH_MAX_BUSY    before each round, wait (up to BENCH_LOAD_WAIT seconds, default 120) until the machine's CPUs are
#                     busy less than this many cores' worth, sampled over 3 s from /proc/stat while nothing of this
#                     script runs (default 0.3). Not the load average: this script's own runs (two processes keeping
#                     both cores busy) raise it to 2-3 for minutes afterwards.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
LOG_DIR="${BENCH_LOG_DIR:-$CACHE/bench/$(date +%Y%m%d-%H%M%S)-security}"
ROUNDS="${BENCH_ROUNDS:-3}"
CONFIGS="${BENCH_CONFIGS:-a b c d}"
DURATION="${BENCH_DURATION:-10}"
WARMUP="${BENCH_WARMUP:-5}"
PRODUCERS="${BENCH_PRODUCERS:-4}"
IN_FLIGHT="${BENCH_IN_FLIGHT:-64}"
SIZE="${BENCH_SIZE:-1024}"
BATCH="${BENCH_BATCH:-1}"
MAX_BUSY="${BENCH_MAX_BUSY:-0.3}"
LOAD_WAIT="${BENCH_LOAD_WAIT:-120}"
READY_SECS=60
STOP_SECS=30
BENCH_TIMEOUT=$((DURATION + 120))
TOPIC=BenchTopic WARM_TOPIC=BenchWarmup
# The ACL users (RocketMQ's plain_acl.yml): an admin creates the topics, a plain user with PUB on the two topics sends.
ADMIN_AK=bench-admin ADMIN_SK=bench-admin-secret-0123456789
USER_AK=bench-producer USER_SK=bench-producer-secret-0123456789
export RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0

say() { echo "security-bench: $*" >&2; }
# start_bg, stop_process and apache_free_port.
# shellcheck source=tests/compat/apache_lib.sh
source "$ROOT/tests/compat/apache_lib.sh"

for tool in python3 curl /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "security.sh: $tool not found" >&2; exit 2; }
done
for c in $CONFIGS; do
  [[ "$c" =~ ^[abcd]$ ]] || { echo "security.sh: unknown configuration '$c' in BENCH_CONFIGS (a b c d)" >&2; exit 2; }
done
mkdir -p "$LOG_DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-security-bench.XXXXXX")"

# Whatever is running when the script ends (normally, on error or on a signal) is stopped here; the stores go too.
CUR_ST=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [[ -z "$CUR_ST" ]] || stop_process "$CUR_ST" conveyor || true
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

label() {
  case "$1" in
    a) echo "plaintext, ACL off" ;;
    b) echo "TLS, ACL off" ;;
    c) echo "plaintext, ACL on (signed)" ;;
    d) echo "TLS + ACL (signed)" ;;
  esac
}
has_tls() { [[ "$1" == b || "$1" == d ]]; }
has_acl() { [[ "$1" == c || "$1" == d ]]; }

# client_flags CONFIG [admin]: the connection flags of `conveyor bench`/`admin` for CONFIG.
client_flags() {
  local f=()
  has_tls "$1" && f+=(--tls)
  if has_acl "$1"; then
    if [[ "${2:-}" == admin ]]; then f+=(--access-key "$ADMIN_AK" --secret-key "$ADMIN_SK")
    else f+=(--access-key "$USER_AK" --secret-key "$USER_SK"); fi
  fi
  echo "${f[@]}"
}

users_yaml() {
  # No globalWhiteRemoteAddresses and no whiteRemoteAddress: a whitelisted address (127.0.0.1 here) would skip the
  # signature check that is being measured.
  cat <<EOF
accounts:
  - accessKey: $ADMIN_AK
    secretKey: $ADMIN_SK
    admin: true
  - accessKey: $USER_AK
    secretKey: $USER_SK
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - $TOPIC=PUB
      - $WARM_TOPIC=PUB
EOF
}

# cpu_ticks PID: the process's user + system time in clock ticks (all threads).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# machine_ticks: the busy time of all CPUs (user, nice, system, irq, softirq) and the steal time, in clock ticks.
machine_ticks() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8, $9}' /proc/stat; }

# routes_ready NS FLAGS TOPIC...: every TOPIC has a route with queue 7 (8 queues).
routes_ready() {
  local ns="$1" flags="$2" list t
  shift 2
  # shellcheck disable=SC2086
  list="$("$BIN" admin topics --namesrv-addr "$ns" $flags 2>/dev/null)" || return 1
  for t in "$@"; do
    grep -Eq "^$t +[^ ]+ +7 " <<<"$list" || return 1
  done
}

# start_server CONFIG ST: a fresh standalone for CONFIG in ST; sets NS and PID. A port taken between the pick and the
# bind makes conveyor exit: retried with new ports.
start_server() {
  local cfg="$1" st="$2" attempt ns broker http deadline
  for attempt in 1 2 3; do
    ns="$(apache_free_port)" broker="$(apache_free_port)" http="$(apache_free_port)"
    [[ "$ns" != "$broker" && "$ns" != "$http" && "$broker" != "$http" ]] || continue
    rm -rf "$st/data"
    local args=(standalone --data-dir "$st/data" --namesrv-listen "127.0.0.1:$ns" --listen "127.0.0.1:$broker"
      --http-listen "127.0.0.1:$http" --grpc-listen off)
    if has_tls "$cfg"; then args+=(--tls-mode enforcing); else args+=(--tls-mode off); fi
    if has_acl "$cfg"; then
      args+=(--acl-enabled true --acl-users-file "$st/plain_acl.yml" --acl-cluster-secret-file "$st/cluster-secret")
    fi
    if [[ -n "${BENCH_DISK_FULL_RATIO:-}" ]]; then
      printf '[store]\ndisk-full-ratio = %s\n' "$BENCH_DISK_FULL_RATIO" >"$st/conveyor.toml"
      args+=(--config "$st/conveyor.toml")
    fi
    echo "conveyor ${args[*]}" | sed "s|$st|<fresh temp dir>|g" >"$LOG_DIR/server-$cfg.txt"
    start_bg "$st" conveyor "$BIN" "${args[@]}"
    PID="$(cat "$st/conveyor.pid")"
    deadline=$((SECONDS + READY_SECS))
    until curl -sf -m 2 -o /dev/null "http://127.0.0.1:$http/readyz"; do
      [[ ! -s "$st/conveyor.rc" ]] || break
      if ((SECONDS >= deadline)); then
        tail -n 20 "$st/conveyor.log" >&2
        say "conveyor not ready after ${READY_SECS}s"
        return 1
      fi
      sleep 0.1
    done
    if [[ ! -s "$st/conveyor.rc" ]]; then
      NS="127.0.0.1:$ns"
      return 0
    fi
    grep -qi 'address already in use\|address in use' "$st/conveyor.log" || break
    say "a port was taken; retrying with new ports (attempt $attempt)"
  done
  tail -n 20 "$st/conveyor.log" >&2
  say "conveyor standalone did not start"
  return 1
}

# must_fail CONFIG RUN WHAT FLAGS: a one-message produce with FLAGS must fail (the configuration is in force).
must_fail() {
  local cfg="$1" run="$2" what="$3" flags="$4" rc=0
  # shellcheck disable=SC2086
  timeout 30 "$BIN" bench produce --namesrv-addr "$NS" $flags --topic "$TOPIC" --producers 1 --in-flight 1 --count 1 \
    >"$run.check-$what.out" 2>&1 || rc=$?
  if ((rc == 0)); then
    say "ERROR: configuration $cfg: a $what client was not refused; the figures would not measure $(label "$cfg")"
    return 1
  fi
  echo "$what client refused" >>"$run.checks"
}

# one_run ROUND CONFIG: a fresh server, topics, warm-up, the measured produce, the checks; appends a line to runs.tsv.
one_run() {
  local round="$1" cfg="$2" st="$TMP/run" run="$LOG_DIR/runs/r$1-$2"
  rm -rf "$st" && mkdir -p "$st" "$LOG_DIR/runs"
  if has_acl "$cfg"; then
    users_yaml >"$st/plain_acl.yml"
    echo "bench-cluster-secret-$RANDOM$RANDOM$RANDOM" >"$st/cluster-secret"
  fi
  CUR_ST="$st"
  local load_start
  load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
  start_server "$cfg" "$st"
  local admin_flags flags
  admin_flags="$(client_flags "$cfg" admin)"
  flags="$(client_flags "$cfg")"
  local t
  for t in "$TOPIC" "$WARM_TOPIC"; do
    # shellcheck disable=SC2086
    "$BIN" admin create-topic --namesrv-addr "$NS" $admin_flags --topic "$t" --queues 8 >>"$run.setup" 2>&1
  done
  local deadline=$((SECONDS + 30))
  until routes_ready "$NS" "$admin_flags" "$TOPIC" "$WARM_TOPIC"; do
    ((SECONDS < deadline)) || { say "topic routes not complete after 30s"; return 1; }
    sleep 0.3
  done
  local common=(--size "$SIZE" --producers "$PRODUCERS" --in-flight "$IN_FLIGHT" --batch "$BATCH")
  if ((WARMUP > 0)); then
    # shellcheck disable=SC2086
    timeout "$BENCH_TIMEOUT" "$BIN" bench produce --namesrv-addr "$NS" $flags --topic "$WARM_TOPIC" "${common[@]}" \
      --duration "$WARMUP" >"$run.warmup" 2>&1 || say "warm-up failed: $(tail -n 1 "$run.warmup")"
  fi
  sleep 2 # the broker's background work (flush, dispatch) after the warm-up
  # shellcheck disable=SC2086
  echo "conveyor bench produce --namesrv-addr NS $flags --topic $TOPIC ${common[*]} --duration $DURATION" |
    sed -e "s/$USER_SK/<secret>/" >"$LOG_DIR/client-$cfg.txt"
  local cpu0 cpu1 busy0 busy1 steal0 steal1 rc=0
  cpu0="$(cpu_ticks "$PID")"
  read -r busy0 steal0 < <(machine_ticks)
  # shellcheck disable=SC2086
  /usr/bin/time -f '%U %S' -o "$run.client-cpu" timeout "$BENCH_TIMEOUT" "$BIN" bench produce --namesrv-addr "$NS" \
    $flags --topic "$TOPIC" "${common[@]}" --duration "$DURATION" >"$run.out" 2>"$run.err" || rc=$?
  cpu1="$(cpu_ticks "$PID")"
  read -r busy1 steal1 < <(machine_ticks)
  ((rc == 0)) || echo "FAILED (exit $rc): $(grep -v '^ *$' "$run.err" | tail -n 2 | tr '\n' ' ')" >>"$run.out"
  : >"$run.checks"
  if has_tls "$cfg"; then
    local plain_flags=""
    has_acl "$cfg" && plain_flags="--access-key $USER_AK --secret-key $USER_SK"
    must_fail "$cfg" "$run" plaintext "$plain_flags"
  fi
  if has_acl "$cfg"; then
    local unsigned_flags=""
    has_tls "$cfg" && unsigned_flags="--tls"
    must_fail "$cfg" "$run" unsigned "$unsigned_flags"
  fi
  local load_end
  load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
  stop_process "$st" conveyor >/dev/null 2>&1 || true
  cp "$st/conveyor.log" "$run.broker.log"
  CUR_ST=""
  rm -rf "$st"
  local line
  line="$(grep -m1 '^produce: ' "$run.out" || grep -m1 FAILED "$run.out" || echo "no result")"
  if [[ "$line" != "produce: "[1-9]* ]]; then
    # Nothing was stored (a full disk, a refused client): no figure to report; the cause is in the line.
    say "ERROR: round $round, configuration $cfg: no message was sent: $line"
    return 1
  fi
  local machine=$((busy1 - busy0)) steal=$((steal1 - steal0))
  say "round $round, $cfg ($(label "$cfg")): $line; broker CPU $(((cpu1 - cpu0) * 1000 / CLK_TCK)) ms," \
    "client CPU $(tr ' ' '+' <"$run.client-cpu" | tail -n 1) s, all CPUs busy $((machine * 1000 / CLK_TCK)) ms," \
    "steal $((steal * 1000 / CLK_TCK)) ms; load $load_start"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$cfg" "$line" "$((cpu1 - cpu0))" \
    "$(tail -n 1 "$run.client-cpu")" "$load_start" "$load_end" "$(paste -sd';' "$run.checks")" "$machine" "$steal" \
    >>"$LOG_DIR/runs.tsv"
}

# busy_cores: how many cores' worth of CPU the machine is busy over 3 s (nothing of this script runs meanwhile).
busy_cores() {
  local b0 b1 s
  read -r b0 s < <(machine_ticks)
  sleep 3
  read -r b1 s < <(machine_ticks)
  awk -v d=$((b1 - b0)) -v t="$CLK_TCK" 'BEGIN {printf "%.2f", d / t / 3}'
}
above() { awk -v b="$1" -v m="$MAX_BUSY" 'BEGIN {exit !(b > m)}'; }
WAITED=0
QUIET_LOG=()
wait_quiet() {
  local busy
  busy="$(busy_cores)"
  if above "$busy"; then
    say "WARNING: other processes keep $busy cores busy (more than $MAX_BUSY): they would skew the results; waiting" \
      "up to ${LOAD_WAIT}s for them to finish"
    local deadline=$((SECONDS + LOAD_WAIT))
    while above "$busy" && ((SECONDS < deadline)); do
      sleep 2
      busy="$(busy_cores)"
    done
    WAITED=$((WAITED + 1))
    say "now $busy cores busy; $(uptime)"
  fi
  QUIET_LOG+=("round $1: $busy cores busy before it")
}

# ---------------------------------------------------------------------------------------------------------------
T0=$SECONDS
CLK_TCK="$(getconf CLK_TCK)"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/conveyor"
[[ "$BIN" == /* ]] || BIN="$ROOT/$BIN"
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  say "flock /tmp/conveyor-cargo.lock cargo build --release -q -p conveyor"
  (cd "$ROOT" && flock /tmp/conveyor-cargo.lock cargo build --release -q -p conveyor >&2)
fi
[[ -x "$BIN" ]] || { echo "security.sh: $BIN missing" >&2; exit 2; }

START_UPTIME="$(uptime)"
say "machine load before starting: $START_UPTIME; logs in $LOG_DIR"
{
  echo "start: $START_UPTIME"
  echo "max_busy: $MAX_BUSY cores"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "cpu_flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'aes|vaes|pclmulqdq|avx2|avx512f|sha_ni' | paste -sd' ')"
  echo "mem: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "kernel: $(uname -r)"
  echo "date: $(date -u '+%F %T UTC')"
  echo "commit: $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- broker || echo ' (broker/ modified)')"
  echo "workload: $PRODUCERS producers x $IN_FLIGHT in flight, $SIZE B bodies, batch $BATCH, ${DURATION} s measured after ${WARMUP} s warm-up"
  echo "rounds: $ROUNDS"
} >"$LOG_DIR/machine.txt"
: >"$LOG_DIR/runs.tsv"

read -r -a ORDER <<<"$CONFIGS"
for round in $(seq "$ROUNDS"); do
  wait_quiet "$round"
  # Rotated by one each round, so that no configuration always runs first (or right after another).
  n=${#ORDER[@]}
  for i in $(seq 0 $((n - 1))); do
    one_run "$round" "${ORDER[$(((i + round - 1) % n))]}"
  done
done
{
  echo "waited_for_quiet: $WAITED rounds"
  printf '%s\n' "${QUIET_LOG[@]}"
  echo "end: $(uptime)"
  echo "total_secs: $((SECONDS - T0))"
} >>"$LOG_DIR/machine.txt"

python3 - "$LOG_DIR" "$CLK_TCK" >"$LOG_DIR/report.md" <<'PY'
import os, re, statistics, sys

d, clk = sys.argv[1], int(sys.argv[2])
LABELS = {"a": "a. plaintext, ACL off (reference)", "b": "b. TLS (enforcing), ACL off",
          "c": "c. plaintext, ACL on, signed requests", "d": "d. TLS + ACL, signed requests"}
NUM = r"([0-9.]+)"
STATS = re.compile(rf"produce: (\d+) msgs in {NUM} s = {NUM} msgs/s, {NUM} MB/s; "
                   rf"latency p50 {NUM} ms, p99 {NUM} ms, p999 {NUM} ms; errors (\d+)")

runs = {}
order = []
with open(os.path.join(d, "runs.tsv")) as f:
    for line in f:
        rnd, cfg, out, srv_ticks, cli_cpu, load0, load1, checks, busy, steal = line.rstrip("\n").split("\t")
        m = STATS.match(out)
        r = {"round": int(rnd), "out": out, "load": load0.split()[0], "checks": checks, "steal": int(steal) / clk}
        if m:
            msgs = int(m.group(1))
            u, s = (float(x) for x in cli_cpu.split())
            r.update(msgs=msgs, rate=float(m.group(3)), mbps=float(m.group(4)), p50=float(m.group(5)),
                     p99=float(m.group(6)), p999=float(m.group(7)), errors=int(m.group(8)),
                     srv_us=int(srv_ticks) / clk / msgs * 1e6 if msgs else None,
                     cli_us=(u + s) / msgs * 1e6 if msgs else None,
                     other=max(0.0, (int(busy) - int(srv_ticks)) / clk - (u + s)),
                     secs=float(m.group(2)))
        runs.setdefault(cfg, []).append(r)
        if cfg not in order:
            order.append(cfg)
order.sort()

def med(cfg, key):
    vals = [r[key] for r in runs.get(cfg, []) if r.get(key) is not None]
    return statistics.median(vals) if vals else None

def fmt(v, digits=0):
    return "n/a" if v is None else f"{v:,.{digits}f}"

def ratio(cfg, key):
    a, v = med("a", key), med(cfg, key)
    return "n/a" if not a or v is None else f"{v / a:.2f}"

print("Medians over the rounds; in brackets the ratio to the median of a from the same run of the script (throughput:"
      " below 1 = slower; latency and CPU: above 1 = more). \"Per-round ratio\" is the median over the rounds of"
      " msgs/s divided by a's msgs/s of the same round (the runs of one round follow each other within about two"
      " minutes, so it is less exposed to other load on the machine changing between rounds).")
print()
print("| configuration | msgs/s (each round) | msgs/s, median | per-round ratio | p50 ms | p99 ms |"
      " broker CPU µs/msg | client CPU µs/msg | failed sends |")
print("|---|---|---|---|---|---|---|---|---|")

def cell(cfg, key, digits):
    v = med(cfg, key)
    return fmt(v, digits) if cfg == "a" or v is None else f"{fmt(v, digits)} ({ratio(cfg, key)})"

def per_round(cfg):
    a = {r["round"]: r["rate"] for r in runs.get("a", []) if "rate" in r}
    rs = [r["rate"] / a[r["round"]] for r in runs[cfg] if "rate" in r and a.get(r["round"])]
    return f"{statistics.median(rs):.2f}" if rs else "n/a"

for cfg in order:
    rs = runs[cfg]
    each = " / ".join(fmt(r.get("rate")) for r in sorted(rs, key=lambda r: r["round"]))
    errs = sum(r.get("errors", 0) for r in rs)
    failed = sum(1 for r in rs if "rate" not in r)
    print(f"| {LABELS[cfg]} | {each} | {cell(cfg, 'rate', 0)} | {per_round(cfg)} | {cell(cfg, 'p50', 2)} |"
          f" {cell(cfg, 'p99', 2)} | {cell(cfg, 'srv_us', 1)} | {cell(cfg, 'cli_us', 1)} |"
          f" {errs}{f' ({failed} runs without a result)' if failed else ''} |")
print()
print("Every run (in the order they ran):")
print()
print("| round | configuration | msgs/s | p50 / p99 / p999 ms | broker / client CPU µs/msg | other processes' CPU, s |"
      " steal, s | load (1 min) at start | configuration checked |")
print("|---|---|---|---|---|---|---|---|---|")
with open(os.path.join(d, "runs.tsv")) as f:
    seq = [tuple(l.split("\t")[:2]) for l in f]
for rnd, cfg in seq:
    r = next(x for x in runs[cfg] if x["round"] == int(rnd))
    if "rate" in r:
        print(f"| {rnd} | {cfg} | {fmt(r['rate'])} | {r['p50']:.2f} / {r['p99']:.2f} / {r['p999']:.2f} |"
              f" {fmt(r['srv_us'], 1)} / {fmt(r['cli_us'], 1)} | {r['other']:.1f} | {r['steal']:.1f} | {r['load']} |"
              f" {r['checks'] or '-'} |")
    else:
        print(f"| {rnd} | {cfg} | {r['out'][:80]} | | | | {r['steal']:.1f} | {r['load']} | {r['checks'] or '-'} |")
print()
print("Other processes' CPU: the machine's busy CPU time (user, system, irq, softirq) during the measured run"
      f" (about {max((r.get('secs', 0) for rs in runs.values() for r in rs), default=0):.0f} s on"
      f" {os.cpu_count()} cores) minus the broker's and the client's; it includes interrupt time the kernel charges"
      " to no process (part of the loopback traffic's network processing: 0.6-0.7 s in the quietest runs on the"
      " development machine). Steal: time the hypervisor gave to others.")
print()
print("Machine:")
print()
with open(os.path.join(d, "machine.txt")) as f:
    for line in f:
        print(f"- {line.strip()}")
print()
print("Servers (a fresh one per run; ports and directory differ):")
print()
print("```")
for cfg in order:
    p = os.path.join(d, f"server-{cfg}.txt")
    if os.path.exists(p):
        print(f"{cfg}: " + open(p).read().strip())
print("```")
print()
print("Measured client command per configuration (a warm-up of the same command to BenchWarmup runs first):")
print()
print("```")
for cfg in order:
    p = os.path.join(d, f"client-{cfg}.txt")
    if os.path.exists(p):
        print(f"{cfg}: " + open(p).read().strip())
print("```")
PY
cat "$LOG_DIR/report.md"
say "total $((SECONDS - T0))s; logs and raw outputs in $LOG_DIR"
