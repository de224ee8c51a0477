# shellcheck shell=bash
# Running mqadmin in checks, shared by run.sh (with mqadmin_ops.sh) and mqadmin-replication.sh. The sourcing script
# defines HERE (tests/compat), pass NAME and fail NAME REASON; MQADMIN_CLIENT picks the tools version.

# mqadmin_check NAME EXPECTED_REGEX... -- ARGS... : runs mqadmin until its output matches every regex
# and shows no failure (mqadmin exits 0 on most failures), retrying for up to 30 s.
mqadmin_check() {
  local name="$1"
  shift
  local patterns=()
  while [[ "$1" != "--" ]]; do
    patterns+=("$1")
    shift
  done
  shift
  local deadline=$((SECONDS + 30)) out ok p
  while true; do
    out="$(timeout -k 5 "${MQADMIN_TIMEOUT:-120}" "$HERE/mqadmin.sh" "$@" 2>&1)"
    ok=1
    # MQADMIN_TRACKS_EXCEPTIONS=1: the output may quote exceptions it recovered from (queryMsgByUniqueKey's
    # message tracks of groups without routes); only a failed command counts.
    local failed='command failed|Exception(:|$)|Usage:|usage:'
    [[ -n "${MQADMIN_TRACKS_EXCEPTIONS:-}" ]] && failed='command failed|Usage:|usage:'
    if grep -qE "$failed" <<<"$out"; then
      ok=0
    fi
    for p in "${patterns[@]}"; do
      grep -qE -- "$p" <<<"$out" || ok=0
    done
    if [[ $ok -eq 1 ]]; then
      pass "$name"
      return 0
    fi
    if ((SECONDS >= deadline)); then
      echo "  # mqadmin $*"
      head -n 40 <<<"$out" | sed 's/^/  # /'
      fail "$name" "output did not match: ${patterns[*]}"
      return 1
    fi
    sleep 2
  done
}

# mqadmin_check_absent NAME EXPECTED_REGEX -- ARGS... : a command that must fail, with EXPECTED_REGEX in its output.
mqadmin_check_absent() {
  local name="$1" pattern="$2"
  shift 3
  local out
  out="$(timeout -k 5 120 "$HERE/mqadmin.sh" "$@" 2>&1)"
  if grep -qE -- "$pattern" <<<"$out"; then
    pass "$name"
  else
    echo "  # mqadmin $*"
    head -n 20 <<<"$out" | sed 's/^/  # /'
    fail "$name" "output did not show: $pattern"
  fi
}

# mqadmin_server_start CLIENT: starts one mqadmin for CLIENT's tools (rmq4 or rmq5) that every later mqadmin.sh
# command of this script runs in (mqadmin/MqadminServer.java: 20-400 ms a command instead of a JVM's 4-7 s). It
# ends with this script. If it cannot start, commands run in their own JVMs as before, slower.
mqadmin_server_start() {
  local client="$1" dir pid deadline
  dir="$(mktemp -d "${TMPDIR:-/tmp}/mqadmin-server.XXXXXX")"
  MQADMIN_CLIENT="$client" "$HERE/mqadmin.sh" --serve "$dir/port" "$$" \
    >"${COMPAT_LOG_DIR:-$dir}/mqadmin-server-$client.log" 2>&1 &
  pid=$!
  deadline=$((SECONDS + 60))
  until [[ -s "$dir/port" ]]; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
      echo "  # the mqadmin server for $client did not start (log: ${COMPAT_LOG_DIR:-$dir}/mqadmin-server-$client.log); one JVM per command" >&2
      kill "$pid" 2>/dev/null || true
      return 0
    fi
    sleep 0.2
  done
  export "MQADMIN_SERVER_PORT_$client=$(cat "$dir/port")"
  rm -rf "$dir"
  MQADMIN_SERVER_PIDS+=("$pid")
}

# mqadmin_servers_stop: ends the servers mqadmin_server_start started.
mqadmin_servers_stop() {
  local pid
  for pid in "${MQADMIN_SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  MQADMIN_SERVER_PIDS=()
  unset MQADMIN_SERVER_PORT_rmq4 MQADMIN_SERVER_PORT_rmq5
}
MQADMIN_SERVER_PIDS=()
