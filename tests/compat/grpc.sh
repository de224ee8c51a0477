#!/usr/bin/env bash
# Runs the RocketMQ 5.x gRPC checks of every official SDK found in tests/compat/grpc-<sdk>/ (Java: grpc-java/,
# rocketmq-client-java; the others beside it) against a running gRPC endpoint, whose topics and groups it first
# creates with mqadmin through the name server.
#
#   GRPC_ENDPOINT=127.0.0.1:8081 NAMESRV_ADDR=127.0.0.1:9876 tests/compat/grpc.sh
#   tests/compat/grpc-against-apache.sh        # the same against Apache RocketMQ 5.3.3's proxy (checks the checks)
#
# Environment:
#   GRPC_ENDPOINT        required, host:port of the gRPC endpoint (Apache's proxy: grpcServerPort, default 8081)
#   NAMESRV_ADDR         required, host:port of the name server, for mqadmin
#   GRPC_SDKS            space-separated SDKs to run (default: every tests/compat/grpc-*/sdk.sh; a named SDK without
#                        one fails)
#   GRPC_TLS             "true": the SDKs connect with TLS (any certificate accepted); "false" (default): plaintext;
#                        or the names of the SDKs that use TLS, the others plaintext (e.g. "java go python node": the
#                        Rust SDK cannot accept a self-signed certificate)
#   GRPC_CLUSTER         cluster for mqadmin's -c (default: the first cluster the name server knows)
#   GRPC_CHECKS          space-separated subset of the check names (default: all); only the programs that hold a
#                        selected check run
#   GRPC_RUN_ID          suffix of every topic and group name (default: new per run, from the clock); each SDK adds
#                        its own name to it, so the SDKs never share a topic
#   GRPC_PARALLEL        "1" (default): the SDKs run at the same time (each its programs in sequence); "0": one SDK
#                        after the other
#   GRPC_TIMEOUT_SCALE   factor on the programs' waits for things that should happen (default 1)
#   GRPC_TEST_TIMEOUT    hard limit per program in seconds (default 240)
#   GRPC_LOG_DIR         where program stderr and SDK logs go (default ~/.cache/conveyor/compat/logs/<time>-grpc)
#
# Each SDK's sdk.sh keeps one contract (see grpc-java/sdk.sh): fetch, version, programs, run PROGRAM.
# Setup (one check, mqadmin-VERSION/grpc-setup): conveyor.grpc.Resources (grpc-java/) prints the mqadmin commands
# for each SDK's run id (updateTopic with -a +message.type=NORMAL|FIFO|DELAY|TRANSACTION, updateSubGroup with -o true
# for the FIFO groups and -r 2 for the retry/DLQ group, the DLQ topic %DLQ%<group>, then topicRoute of each topic),
# run in one JVM by MqadminBatch (rocketmq-tools 5.3.3's MQAdminStartup, as mqadmin.sh runs it). Then each SDK runs
# its programs in sequence; inside a program the scenarios run concurrently, each with its own topic and groups.
#
# Prints one PASS/FAIL line per check (a failed check's own diagnostics follow indented with "#") and ends with
# "N passed, M failed". Exits non-zero if anything failed or if a selected check never reported.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/compat"
TEST_TIMEOUT="${GRPC_TEST_TIMEOUT:-240}"

for v in GRPC_ENDPOINT NAMESRV_ADDR; do
  if [[ -z "${!v:-}" ]]; then
    echo "grpc.sh: $v is not set" >&2
    exit 2
  fi
done
export GRPC_ENDPOINT NAMESRV_ADDR
export GRPC_TLS="${GRPC_TLS:-false}"

if [[ -n "${GRPC_SDKS:-}" ]]; then
  read -r -a SDKS <<<"$GRPC_SDKS"
else
  SDKS=()
  for f in "$HERE"/grpc-*/sdk.sh; do
    d="${f%/sdk.sh}"
    SDKS+=("${d##*/grpc-}")
  done
fi

T0=$SECONDS
LOG_DIR="${GRPC_LOG_DIR:-$OUT/logs/$(date +%Y%m%d-%H%M%S)-grpc}"
mkdir -p "$LOG_DIR"
BASE_RUN_ID="${GRPC_RUN_ID:-$(printf '%x%04x' "$(date +%s)" "$RANDOM")}"
echo "grpc.sh: endpoint $GRPC_ENDPOINT (tls $GRPC_TLS), name server $NAMESRV_ADDR, SDKs ${SDKS[*]}," \
  "run id $BASE_RUN_ID<sdk>, logs in $LOG_DIR" >&2

PASSED=0
FAILED=0
declare -A REPORTED=()
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); REPORTED["$1"]=1; }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); REPORTED["$1"]=1; }

# "true" when SDK connects with TLS (GRPC_TLS is true, or a list naming it).
tls_of() { # tls_of SDK
  case " $GRPC_TLS " in
    " true ") echo true ;;
    " false ") echo false ;;
    *" $1 "*) echo true ;;
    *) echo false ;;
  esac
}

selected() {
  [[ -z "${GRPC_CHECKS:-}" ]] && return 0
  [[ " $GRPC_CHECKS " == *" $1 "* ]]
}

# mqadmin (fetch.sh) and the Java checks (their Resources program names every topic) come first, whichever SDKs run.
"$HERE/fetch.sh" >&2 || { echo "grpc.sh: fetch.sh failed" >&2; exit 2; }
"$HERE/grpc-java/sdk.sh" fetch >&2 || { echo "grpc.sh: the Java checks could not be built" >&2; exit 2; }
SETUP="mqadmin-$(cat "$OUT/java-rmq5.version")/grpc-setup"
EXPECTED=("$SETUP")
declare -A PREFIX=() FETCHED=()
for sdk in "${SDKS[@]}"; do
  script="$HERE/grpc-$sdk/sdk.sh"
  if [[ ! -f "$script" ]]; then
    fail "grpc-$sdk" "no $script"
    continue
  fi
  if ! bash "$script" fetch >"$LOG_DIR/fetch-$sdk.log" 2>&1; then
    tail -n 20 "$LOG_DIR/fetch-$sdk.log" | sed 's/^/  # /'
    fail "grpc-$sdk" "the $sdk SDK or its checks could not be installed (see $LOG_DIR/fetch-$sdk.log)"
    continue
  fi
  FETCHED[$sdk]=1
  PREFIX[$sdk]="grpc-$sdk-$(bash "$script" version)"
  while IFS= read -r entry; do
    for c in ${entry#*:}; do
      selected "$c" && EXPECTED+=("${PREFIX[$sdk]}/$c")
    done
  done < <(bash "$script" programs)
done
echo "grpc.sh: ${#EXPECTED[@]} checks expected" >&2

# --- setup: topics and groups with mqadmin, for every SDK's run id ---
setup_ok=0
cluster="${GRPC_CLUSTER:-}"
if [[ -z "$cluster" ]]; then
  cluster="$(java -Xms32m -Xmx256m -Drocketmq.client.logRoot="$LOG_DIR/mqadmin" -Drocketmq.log.root="$LOG_DIR/mqadmin" \
    -Duser.home="$LOG_DIR/mqadmin/home" -Dlogback.configurationFile="$HERE/mqadmin/conf/logback_tools.xml" \
    -Dcompat.logDir="$LOG_DIR/mqadmin" -cp "$(cat "$OUT/java-rmq5.classpath")" conveyor.compat.Tool cluster-name \
    2>"$LOG_DIR/cluster-name.stderr")" || cluster=""
fi
if [[ -z "$cluster" ]]; then
  sed 's/^/  # /' "$LOG_DIR/cluster-name.stderr" | tail -n 10
  fail "$SETUP" "could not read the cluster name from the name server $NAMESRV_ADDR"
else
  : >"$LOG_DIR/mqadmin-commands.txt"
  for sdk in "${!FETCHED[@]}"; do
    GRPC_RUN_ID="$BASE_RUN_ID$sdk" java -Xms32m -Xmx256m -cp "$(cat "$OUT/grpc-java.classpath")" \
      conveyor.grpc.Resources "$cluster" >>"$LOG_DIR/mqadmin-commands.txt" 2>>"$LOG_DIR/resources.stderr"
  done
  t=$SECONDS
  if timeout -k 5 180 java -Xms32m -Xmx256m -Drocketmq.home.dir="$HERE/mqadmin" -Dcompat.logDir="$LOG_DIR/mqadmin" \
    -Drocketmq.client.logRoot="$LOG_DIR/mqadmin" -Drocketmq.log.root="$LOG_DIR/mqadmin" \
    -Duser.home="$LOG_DIR/mqadmin/home" -cp "$(cat "$OUT/java-rmq5.classpath")" \
    "$HERE/grpc-java/mqadmin/MqadminBatch.java" "$NAMESRV_ADDR" "$LOG_DIR/mqadmin-commands.txt" \
    >"$LOG_DIR/mqadmin.log" 2>&1; then
    echo "grpc.sh: $(grep -c '^ok ' "$LOG_DIR/mqadmin.log") mqadmin commands in $((SECONDS - t)) s (cluster $cluster)" >&2
    pass "$SETUP"
    setup_ok=1
  else
    grep -v '^ok ' "$LOG_DIR/mqadmin.log" | head -n 40 | sed 's/^/  # /'
    fail "$SETUP" "mqadmin could not create the topics and groups (see $LOG_DIR/mqadmin.log)"
  fi
fi

# Runs one SDK's programs in sequence; prints its PASS/FAIL lines (with each failed check's diagnostics) and one
# "NOTREPORTED name" line per selected check its programs never reported.
run_sdk() { # run_sdk SDK
  local sdk="$1" script="$HERE/grpc-$1/sdk.sh" prefix="${PREFIX[$1]}" dir="$LOG_DIR/$1"
  mkdir -p "$dir"
  local -A seen=()
  local entry program c checks out rc err t line name
  while IFS= read -r entry; do
    program="${entry%%:*}"
    checks=()
    for c in ${entry#*:}; do
      selected "$c" && checks+=("$c")
    done
    ((${#checks[@]} > 0)) || continue
    if ((setup_ok == 0)); then
      for c in "${checks[@]}"; do echo "FAIL $prefix/$c: not run: the mqadmin setup failed"; done
      continue
    fi
    err="$dir/$program.stderr"
    t=$SECONDS
    out="$(GRPC_CHECKS="${checks[*]}" GRPC_RUN_ID="$BASE_RUN_ID$sdk" GRPC_LOG_DIR="$dir" GRPC_TLS="$(tls_of "$sdk")" \
      timeout -k 10 "$TEST_TIMEOUT" bash "$script" run "$program" 2>"$err")"
    rc=$?
    echo "grpc.sh: $sdk $program took $((SECONDS - t)) s (exit $rc)" >&2
    while IFS= read -r line; do
      case "$line" in
        "PASS $prefix/"*)
          echo "$line"
          seen["${line#PASS }"]=1
          ;;
        "FAIL $prefix/"*)
          name="${line#FAIL }"
          name="${name%%: *}"
          echo "$line"
          # The check's own diagnostics (its stderr lines are tagged [check]).
          grep -F "[${name#"$prefix/"}] " "$err" | tail -n 15 | sed 's/^/  # /'
          seen["$name"]=1
          ;;
        "") ;;
        *) echo "  # $sdk $program: $line" ;;
      esac
    done <<<"$out"
    for c in "${checks[@]}"; do
      if [[ -z "${seen[$prefix/$c]:-}" ]]; then
        tail -n 15 "$err" | sed 's/^/  # stderr: /'
        if [[ $rc -eq 124 || $rc -eq 137 ]]; then
          echo "FAIL $prefix/$c: $program killed after ${TEST_TIMEOUT}s before reporting"
        else
          echo "FAIL $prefix/$c: $program exited with status $rc without reporting this check"
        fi
      fi
    done
  done < <(bash "$script" programs)
}

# --- the SDKs: each its programs in sequence, the SDKs side by side unless GRPC_PARALLEL=0 ---
pids=()
for sdk in "${!FETCHED[@]}"; do
  if [[ "${GRPC_PARALLEL:-1}" == "0" ]]; then
    run_sdk "$sdk" >"$LOG_DIR/$sdk.report"
  else
    run_sdk "$sdk" >"$LOG_DIR/$sdk.report" &
    pids+=($!)
  fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
for sdk in "${SDKS[@]}"; do
  [[ -n "${FETCHED[$sdk]:-}" ]] || continue
  while IFS= read -r line; do
    echo "$line"
    case "$line" in
      "PASS "*) PASSED=$((PASSED + 1)); REPORTED["${line#PASS }"]=1 ;;
      "FAIL "*) name="${line#FAIL }"; FAILED=$((FAILED + 1)); REPORTED["${name%%: *}"]=1 ;;
    esac
  done <"$LOG_DIR/$sdk.report"
done

MISSING=()
for name in "${EXPECTED[@]}"; do
  [[ -n "${REPORTED[$name]:-}" ]] || MISSING+=("$name")
done
if ((${#EXPECTED[@]} <= 1)); then
  fail "grpc.sh" "no checks selected (GRPC_CHECKS='${GRPC_CHECKS:-}')"
fi
if ((${#MISSING[@]} > 0)) || ((PASSED + FAILED < ${#EXPECTED[@]})); then
  for name in "${MISSING[@]}"; do echo "  # never reported: $name"; done
  fail "grpc.sh" "$((PASSED + FAILED)) checks reported, ${#EXPECTED[@]} expected (${#MISSING[@]} never ran)"
fi
echo "grpc.sh: total $((SECONDS - T0)) s; logs in $LOG_DIR" >&2
echo "$PASSED passed, $FAILED failed (${#EXPECTED[@]} expected)"
[[ $FAILED -eq 0 ]]
