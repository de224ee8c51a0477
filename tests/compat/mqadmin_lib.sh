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
