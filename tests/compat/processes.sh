# shellcheck shell=bash
# Helpers for the suites that run Conveyor's roles as real processes (failover.sh, mqadmin-replication.sh).
# The sourcing script defines WORK (where each process NAME logs to NAME.log) and say.

# wait_http PORT NAME: waits (60 s) until the process's /readyz answers; else shows its log and exits.
wait_http() {
  for _ in $(seq 600); do
    curl -fs "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  say "$2 not ready; its log:"
  tail -20 "$WORK/$2.log" >&2
  exit 1
}
