#!/usr/bin/env bash
# The Argo CD health checks of deploy/argocd/, run with Lua 5.1 (Argo CD's gopher-lua is 5.1)
# against objects in each state the operator writes. Sourced by tests/k8s/e2e.sh, which also runs
# them on the live objects of its real API server; runnable alone.
#
#   bash tests/k8s/argocd-health.sh
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then set -euo pipefail; fi
ARGOCD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Lua 5.1 and lua-cjson from Debian, when missing.
if ! lua5.1 -e 'require("cjson")' >/dev/null 2>&1; then
  echo "argocd-health: installing lua5.1 lua-cjson" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.1 lua-cjson; } >/dev/null 2>&1 ||
    { echo "argocd-health: cannot install lua5.1 and lua-cjson" >&2; exit 1; }
fi

# argocd_health KIND JSON: "STATUS<TAB>MESSAGE" of the check for KIND (file name, lower case).
argocd_health() {
  local f
  f=$(mktemp)
  printf '%s' "$2" >"$f"
  lua5.1 "$ARGOCD_ROOT/tests/k8s/argocd-health.lua" "$ARGOCD_ROOT/deploy/argocd/$1.lua" "$f"
  rm -f "$f"
}

# Every check of a kind in deploy/argocd/ is wired in the kustomization, and the other way round.
argocd_wiring() {
  local kind n=0
  for f in "$ARGOCD_ROOT"/deploy/argocd/*.lua; do
    kind=$(basename "$f" .lua)
    grep -qi "health.conveyor.dev_${kind}=${kind}.lua" "$ARGOCD_ROOT/deploy/argocd/kustomization.yaml" || return 1
    n=$((n + 1))
  done
  [ "$n" = "$(grep -c 'resource.customizations.health.conveyor.dev_' "$ARGOCD_ROOT/deploy/argocd/kustomization.yaml")" ]
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  fails=0
  expect() { # KIND STATUS JSON
    local got
    got=$(argocd_health "$1" "$3" | cut -f1)
    if [ "$got" = "$2" ]; then echo "  ok   $1: $2"; else echo "  FAIL $1: expected $2, got $got for $3"; fails=$((fails + 1)); fi
  }
  meta='"metadata":{"name":"x","generation":2}'
  cond() { printf '{"type":"%s","status":"%s","reason":"%s","message":"%s"}' "$@"; }
  status() { printf '{%s,"status":{"observedGeneration":%s,"conditions":[%s]}}' "$meta" "$1" "$2"; }
  expect messagequeuecluster Progressing "{$meta}"
  expect messagequeuecluster Progressing "$(status 1 "$(cond Ready True AllReady ok)")"
  expect messagequeuecluster Healthy "$(status 2 "$(cond Ready True AllReady ok),$(cond Reconciling False Done '')")"
  expect messagequeuecluster Progressing "$(status 2 "$(cond Ready False GroupsNotReady x),$(cond Reconciling True Rolling x)")"
  expect messagequeuecluster Suspended "$(status 2 "$(cond Ready True AllReady ok),$(cond Paused True Annotation x)")"
  expect messagequeuecluster Degraded "$(status 2 "$(cond Stalled True ScaleDownRefused x),$(cond Ready False x x)")"
  expect messagequeuecluster Degraded "$(status 2 "$(cond Ready False x x),$(cond Degraded True NoInSyncReplica x)")"
  expect messagequeuetopic Healthy "$(status 2 "$(cond Ready True AsDeclared x)")"
  expect messagequeuetopic Progressing "$(status 2 "$(cond Ready False Draining x)")"
  expect messagequeuetopic Progressing "$(status 2 "$(cond Ready False Growing x)")"
  expect messagequeuetopic Suspended "$(status 2 "$(cond Ready False Paused x)")"
  expect messagequeuetopic Degraded "$(status 2 "$(cond Ready False ClusterUnreachable x)")"
  expect messagequeuetopic Progressing "$(status 1 "$(cond Ready True AsDeclared x)")"
  expect messagequeueuser Healthy "$(status 2 "$(cond Ready True Ready x)")"
  expect messagequeueuser Degraded "$(status 2 "$(cond Ready False ClusterNotFound x)")"
  expect messagequeueuser Progressing "{$meta}"
  expect consumerautoscaler Healthy "$(status 2 "$(cond Active False BacklogAtOrBelowActivation x),$(cond MetricsAvailable True BacklogRead '')")"
  expect consumerautoscaler Healthy "$(status 2 "$(cond Active True BacklogAboveActivation x),$(cond MetricsAvailable True BacklogRead '')")"
  expect consumerautoscaler Degraded "$(status 2 "$(cond MetricsAvailable False ReadFailed x)")"
  expect consumerautoscaler Suspended "$(status 2 "$(cond Paused True Annotation x)")"
  if argocd_wiring; then echo "  ok   every check is wired in deploy/argocd/kustomization.yaml"; else echo "  FAIL wiring"; fails=$((fails + 1)); fi
  [ "$fails" = 0 ]
fi
