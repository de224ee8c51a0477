#!/usr/bin/env bash
# ConsumerAutoscaler (issue 12, scope 2) against real components: a kube-apiserver + etcd (no
# kubelet: the targets' replica counts are what is checked), two Conveyor broker groups (a
# `conveyor standalone` and a second `conveyor broker`, 4 read queues each of the topic) and a
# real Prometheus (Debian's package) scraping both brokers' /metrics every second. The operator
# runs locally with the token of the chart's ServiceAccount, so the chart's RBAC is what is
# tested. No consumer runs: the backlog is made with `conveyor bench produce` and removed with
# `conveyor admin reset-offset`, which is all the autoscaler reads.
#
#   tests/k8s/autoscaler-e2e.sh        # about 3 minutes once kube-apiserver is built
#
# Under CI=true a check it has to skip is a failed check.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export CONVEYOR_CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
source tests/k8s/lib.sh
summary() { echo "== autoscaler: $PASS passed, $FAIL failed, $SKIP skipped"; SUMMARY=1; [ "$FAIL" = 0 ]; }

TOOLS=$(tests/k8s/install-tools.sh)
export PATH="$TOOLS:$PATH"
have() { [ -x "$TOOLS/$1" ] || command -v "$1" >/dev/null 2>&1; }
for t in helm kubectl; do have "$t" || { skip "$t missing: autoscaler tests skipped"; summary; exit; }; done

# Prometheus from Debian's package, unpacked into the cache (not installed: the package would
# start a service on :9090).
PROM="$CONVEYOR_CACHE/prometheus/usr/bin/prometheus"
if [ ! -x "$PROM" ]; then
  W=$(mktemp -d)
  if (cd "$W" && apt-get download prometheus >/dev/null 2>&1) && dpkg-deb -x "$W"/prometheus_*.deb "$CONVEYOR_CACHE/prometheus"; then :; else
    { [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 && (cd "$W" && apt-get download prometheus >/dev/null 2>&1) \
      && dpkg-deb -x "$W"/prometheus_*.deb "$CONVEYOR_CACHE/prometheus"; } || true
  fi
  rm -rf "$W"
fi
[ -x "$PROM" ] || { skip "Prometheus (Debian package) could not be fetched"; summary; exit; }

if ! command -v go >/dev/null && [ ! -x "$CONVEYOR_CACHE/k8s/${CONVEYOR_K8S_VERSION:-1.35.4}/bin/kube-apiserver" ]; then
  skip "no go toolchain and no cached kube-apiserver"; summary; exit
fi
KBIN=$(tests/k8s/build-apiserver.sh)
cargo build -q -p conveyor-operator -p conveyor
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
BIN="$TARGET/conveyor"; OPERATOR="$TARGET/conveyor-operator"

D=$(mktemp -d)
PIDS=()
cleanup() {
  [ -n "${SUMMARY:-}" ] || echo "== autoscaler: stopped at the first unmet wait; $PASS passed, $FAIL failed (logs: $D)"
  stop_processes
}
trap cleanup EXIT

echo "== two broker groups and Prometheus"
read -r NSP H0 H1 L0 L1 R0 R1 PP <<<"$(free_ports 8)"
export CONVEYOR_NAMESRV_ADDR="127.0.0.1:$NSP"
# 16 MiB CommitLog segments: the test writes a few thousand messages, and two brokers with the
# default 1 GiB segments would take 2 GiB of the disk (near the brokers' 90 % full watermark,
# sends are refused and the scaling waits time out).
printf '[store]\nsegment-size = 16777216\n' > "$D/broker.toml"
"$BIN" standalone --config "$D/broker.toml" --data-dir "$D/b0" --namesrv-listen "127.0.0.1:$NSP" --listen "127.0.0.1:$L0" \
  --http-listen "127.0.0.1:$H0" --grpc-listen 127.0.0.1:0 --replication-listen "127.0.0.1:$R0" --cluster-name mq --broker-name mq-0 \
  > "$D/b0.log" 2>&1 &
PIDS+=($!)
"$BIN" broker --config "$D/broker.toml" --data-dir "$D/b1" --namesrv-addr "127.0.0.1:$NSP" --listen "127.0.0.1:$L1" \
  --http-listen "127.0.0.1:$H1" --grpc-listen 127.0.0.1:0 --replication-listen "127.0.0.1:$R1" --cluster-name mq --broker-name mq-1 \
  > "$D/b1.log" 2>&1 &
PIDS+=($!)
ready() { curl -fs "http://127.0.0.1:$1/readyz" >/dev/null; }
wait_for 60 "broker group mq-0 ready" ready "$H0"
wait_for 60 "broker group mq-1 ready" ready "$H1"
quiet "$BIN" admin create-topic --topic Orders --queues 4 --cluster mq
routed() { "$BIN" admin topics | grep -c '^Orders ' | grep -qx 8; }
wait_for 30 "topic Orders routed with 4 queues on each group (8 read queues)" routed
produce() { quiet "$BIN" bench produce --topic "${2:-Orders}" --size 64 --producers 1 --in-flight 16 --count "$1"; }

cat > "$D/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: conveyor
    static_configs: [{targets: ["127.0.0.1:$H0", "127.0.0.1:$H1"]}]
EOF
start_prometheus() {
  "$PROM" --config.file="$D/prometheus.yml" --storage.tsdb.path="$D/prometheus" \
    --web.listen-address="127.0.0.1:$PP" >> "$D/prometheus.log" 2>&1 &
  PROM_PID=$!; PIDS+=("$PROM_PID")
}
start_prometheus
wait_for 60 "Prometheus ready" curl -fs "http://127.0.0.1:$PP/-/ready"

echo "== API server, CRDs, chart RBAC, operator"
AP=$(free_port)
start_etcd "$D" "$KBIN"
apiserver_credentials "$D"
start_apiserver "$D" "$KBIN" "$AP" 127.0.0.1 --authorization-mode=RBAC
export KUBECONFIG="$D/kubeconfig"
write_kubeconfig "$KUBECONFIG" "$D" "$AP" autoscaler
K() { kubectl --request-timeout=20s "$@"; }
check "CRDs apply" quiet K apply --server-side -f crds/
wait_for 30 "ConsumerAutoscaler CRD established" K wait --for=condition=Established crd/consumerautoscalers.conveyor.dev --timeout=5s
# A custom resource with a /scale subresource, as a third kind of target.
K apply -f - >/dev/null <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: consumerpools.test.conveyor.dev}
spec:
  group: test.conveyor.dev
  scope: Namespaced
  names: {plural: consumerpools, singular: consumerpool, kind: ConsumerPool}
  versions:
    - name: v1
      served: true
      storage: true
      subresources:
        status: {}
        scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, properties: {replicas: {type: integer}}}
            status: {type: object, properties: {replicas: {type: integer}}}
EOF
wait_for 30 "test CRD with /scale established" K wait --for=condition=Established crd/consumerpools.test.conveyor.dev --timeout=5s
OPNS=conveyor-system
check "chart installs with the test kind among autoscaler.scaleTargets" quiet helm install conveyor-operator charts/conveyor-operator \
  --namespace "$OPNS" --create-namespace --kubeconfig "$KUBECONFIG" \
  --set-json 'autoscaler.scaleTargets=[{"apiGroup":"apps","resources":["deployments","statefulsets"]},{"apiGroup":"test.conveyor.dev","resources":["consumerpools"]}]'
SA_TOKEN=$(K create token conveyor-operator -n "$OPNS" --duration=3h)
sed -e "s/token: admin-token/token: $SA_TOKEN/" "$KUBECONFIG" > "$D/kubeconfig-sa"
can() { kubectl --kubeconfig "$D/kubeconfig-sa" auth can-i "$@" -n default 2>/dev/null || true; }
rbac_ok() {
  [ "$(can patch deployments --subresource=scale)/$(can patch consumerpools.test.conveyor.dev --subresource=scale)" = yes/yes ] \
    && [ "$(can patch deployments)/$(can patch replicasets --subresource=scale)/$(can patch consumerpools.test.conveyor.dev)" = no/no/no ]
}
check "RBAC: /scale of the listed kinds, nothing else of them" rbac_ok
KUBECONFIG="$D/kubeconfig-sa" "$OPERATOR" run --lease-namespace "$OPNS" --identity autoscaler-e2e \
  --controller-listen off --http-listen off > "$D/operator.log" 2>&1 &
PIDS+=($!)

# Targets: a Deployment, a StatefulSet (no pods run here) and a ConsumerPool.
K apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: orders-consumer}
spec:
  replicas: 1
  selector: {matchLabels: {app: orders-consumer}}
  template:
    metadata: {labels: {app: orders-consumer}}
    spec: {containers: [{name: c, image: consumer:test}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: audit-consumer}
spec:
  replicas: 1
  serviceName: audit-consumer
  selector: {matchLabels: {app: audit-consumer}}
  template:
    metadata: {labels: {app: audit-consumer}}
    spec: {containers: [{name: c, image: consumer:test}]}
---
apiVersion: test.conveyor.dev/v1
kind: ConsumerPool
metadata: {name: pool}
spec: {replicas: 1}
EOF
replicas() { K get "$1" -o jsonpath='{.spec.replicas}'; }
has_replicas() { [ "$(replicas "$1")" = "$2" ]; }
st() { K get cas "$1" -o jsonpath="{.status.$2}"; }
cond() { K get cas "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}/{.status.conditions[?(@.type==\"$2\")].reason}"; }
current() { [ "$(st "$1" observedGeneration)" = "$(K get cas "$1" -o jsonpath='{.metadata.generation}')" ]; }
# Fast windows for a test: scale up to any count at once, down by one replica per second after
# a 3 s window; polls every second.
BEHAVIOR='{"scaleUp":{"stabilizationWindowSeconds":0,"policies":[{"type":"Percent","value":10000,"periodSeconds":1}]},"scaleDown":{"stabilizationWindowSeconds":3,"policies":[{"type":"Pods","value":1,"periodSeconds":1}]}}'
autoscaler() { # NAME KIND TARGET GROUP EXTRA-SPEC-JSON
  K apply -f - >/dev/null <<EOF
apiVersion: conveyor.dev/v1alpha1
kind: ConsumerAutoscaler
metadata: {name: $1}
spec: $(python3 -c 'import json,sys; s={"scaleTargetRef":{"apiVersion":sys.argv[2],"kind":sys.argv[3],"name":sys.argv[4]},"consumerGroup":sys.argv[5],"topics":["Orders"],"nameServer":sys.argv[1],"pollingIntervalSeconds":1,"behavior":json.loads(sys.argv[6])}; s.update(json.loads(sys.argv[7])); print(json.dumps(s))' \
  "127.0.0.1:$NSP" "${2%%|*}" "${2##*|}" "$3" "$4" "$BEHAVIOR" "$5")
EOF
}

echo "-- brokers as the source, a Deployment as the target"
both_refused() {
  local out
  out=$(K apply --dry-run=server -f - 2>&1 <<'EOF' || true
apiVersion: conveyor.dev/v1alpha1
kind: ConsumerAutoscaler
metadata: {name: both}
spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: x}, consumerGroup: g, topics: [t], clusterRef: {name: mq}, nameServer: "a:1", targetBacklogPerReplica: 1}
EOF
)
  grep -q 'set exactly one of clusterRef and nameServer' <<<"$out" || { echo "    $out"; return 1; }
}
check "a spec with both clusterRef and nameServer is refused by the API server (CEL)" both_refused
autoscaler orders 'apps/v1|Deployment' orders-consumer orders-cg '{"targetBacklogPerReplica":100,"minReplicas":1,"maxReplicas":50}'
idle() { current orders && [ "$(st orders observedBacklog)/$(st orders queueCap)/$(cond orders MetricsAvailable)" = "0/8/True/BacklogRead" ]; }
wait_for 30 "status: backlog 0 read from the brokers, queue cap 8 (2 groups × 4 read queues)" idle
produce 550
wait_for 30 "550 messages, 100 per replica: 6 replicas" has_replicas deployment/orders-consumer 6
scaled_status() { [ "$(st orders desiredReplicas)/$(st orders observedBacklog)/$(cond orders Active)" = "6/550/True/BacklogAboveActivation" ]; }
wait_for 10 "status: desired 6, backlog 550, Active" scaled_status
# The HPA memory a new leader resumes from: the recommendations and the scale-up, kept in the status.
remembered() { [ -n "$(st orders 'history.recommendations[0].atMs')" ] && [ -n "$(st orders 'history.scaleUps[0].replicas')" ]; }
wait_for 10 "status.history keeps the recommendations and the scale-up (what a new leader resumes from)" remembered
# (The first poll may see part of the 550 messages, scaling 1 → 5 and then 5 → 6: the event
# checked is the first scale, whatever its size, with its reason.)
scaled_event() {
  grep -qE "Scaled: Deployment orders-consumer: 1 → [2-6] replicas \(backlog [0-9]+ for a target of 100 per replica" \
    <<<"$(K get events.events.k8s.io -o jsonpath='{range .items[*]}{.reason}: {.note}{"\n"}{end}')"
}
wait_for 20 "event: Scaled from 1 replica, with the backlog and the target in the reason" scaled_event

K patch cas orders --type merge -p '{"spec":{"targetBacklogPerReplica":95}}' >/dev/null
wait_for 20 "target 95: the status follows the new generation" current orders
check "within 10 % of the target (550 / (95 × 6) = 0.96): still 6" test "$(replicas deployment/orders-consumer)/$(st orders desiredReplicas)" = "6/6"

K patch cas orders --type merge -p '{"spec":{"targetBacklogPerReplica":10}}' >/dev/null
wait_for 30 "target 10 (55 wanted): capped at exactly 8, the read queues" has_replicas deployment/orders-consumer 8
capped() { [ "$(cond orders Capped)" = "True/QueueLimit" ]; }
wait_for 10 "condition Capped=True, reason QueueLimit" capped

quiet "$BIN" admin reset-offset --group orders-cg --topic Orders --to latest
wait_for 40 "backlog gone: down to minReplicas 1" has_replicas deployment/orders-consumer 1
down_steps_ok() { # every scale-down of the Deployment removed exactly one replica (policy: 1 pod per second)
  K get events.events.k8s.io -o jsonpath='{range .items[*]}{.note}{"\n"}{end}' | python3 -c '
import re, sys
steps = [tuple(map(int, m.groups())) for m in re.finditer(r"orders-consumer: (\d+) → (\d+) replicas", sys.stdin.read())]
downs = [(a, b) for a, b in steps if b < a]
assert downs and all(a - b == 1 for a, b in downs), steps
assert (2, 1) in downs, steps'
}
check "scale-down in steps of one replica, as the Pods policy allows" down_steps_ok

K patch cas orders --type merge -p '{"spec":{"minReplicas":0,"cooldownPeriodSeconds":3}}' >/dev/null
wait_for 30 "minReplicas 0: zero once the backlog stayed at 0 for the cooldown" has_replicas deployment/orders-consumer 0
inactive() { [ "$(cond orders Active)" = "False/BacklogAtOrBelowActivation" ]; }
wait_for 10 "condition Active=False" inactive
produce 5
wait_for 30 "backlog 5 above activation 0, no consumer online: one replica again" has_replicas deployment/orders-consumer 1

K annotate cas orders conveyor.dev/pause-reconciliation=true >/dev/null
paused() { [ "$(cond orders Paused)" = "True/PauseAnnotation" ]; }
wait_for 20 "pause annotation: condition Paused" paused
produce 200
check "paused: the backlog grew to 205, the count stays 1" test "$(replicas deployment/orders-consumer)" = 1
K annotate cas orders conveyor.dev/pause-reconciliation- >/dev/null
wait_for 30 "unpaused: 205 / 10 capped at 8" has_replicas deployment/orders-consumer 8

# One autoscaler per target (issue 27): a younger ConsumerAutoscaler on the same Deployment
# holds, and so does the first while a HorizontalPodAutoscaler scales its target.
autoscaler orders-2 'apps/v1|Deployment' orders-consumer orders-cg '{"targetBacklogPerReplica":1,"minReplicas":3,"maxReplicas":3}'
second_held() { [ "$(cond orders-2 Active)" = "False/ConflictingAutoscaler" ]; }
wait_for 30 "a second ConsumerAutoscaler on the same Deployment holds: Active=False ConflictingAutoscaler" second_held
conflict_msg() { K get cas orders-2 -o jsonpath='{.status.conditions[?(@.type=="Active")].message}' | grep -q 'ConsumerAutoscaler orders already scales Deployment orders-consumer'; }
check "its message names the autoscaler that has the target" conflict_msg
check "the target keeps the first one's count (8, not the second's 3)" test "$(replicas deployment/orders-consumer)" = 8
check "the first one is not held" test "$(cond orders Active)" != "False/ConflictingAutoscaler"
K delete cas orders-2 >/dev/null
K apply -f - >/dev/null <<'EOF2'
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: orders-hpa}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: orders-consumer}
  minReplicas: 1
  maxReplicas: 100
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
EOF2
hpa_held() { [ "$(cond orders Active)" = "False/ConflictingAutoscaler" ] && K get cas orders -o jsonpath='{.status.conditions[?(@.type=="Active")].message}' | grep -q 'HorizontalPodAutoscaler orders-hpa'; }
wait_for 30 "an HPA on its target: the ConsumerAutoscaler holds (ConflictingAutoscaler, naming the HPA)" hpa_held
K delete hpa orders-hpa >/dev/null
hpa_gone() { [ "$(cond orders Active | cut -d/ -f2)" != ConflictingAutoscaler ]; }
wait_for 30 "the HPA deleted: the ConsumerAutoscaler scales again" hpa_gone
K delete cas orders >/dev/null
gone() { ! K get cas orders >/dev/null 2>&1; }
wait_for 20 "autoscaler deleted" gone
check "deleting the autoscaler leaves the replicas as they were" test "$(replicas deployment/orders-consumer)" = 8

echo "-- a custom resource with /scale"
autoscaler pool 'test.conveyor.dev/v1|ConsumerPool' pool orders-cg '{"targetBacklogPerReplica":50,"minReplicas":1,"maxReplicas":50}'
wait_for 30 "ConsumerPool scaled through /scale: 205 / 50 = 5" has_replicas consumerpool/pool 5
K delete cas pool >/dev/null
wait_for 20 "autoscaler pool deleted" bash -c "! kubectl get cas pool"

echo "-- MessageQueueTopic: declared, grown when its consumers are capped, shrunk after a drain"
# declare_topic NAME: 2 queues per broker group, autoscaled 2..4 in steps of 2, short windows.
declare_topic() {
  K apply -f - >/dev/null <<EOF
apiVersion: conveyor.dev/v1alpha1
kind: MessageQueueTopic
metadata: {name: $1}
spec:
  nameServer: "127.0.0.1:$NSP"
  clusterName: mq
  queues: 2
  syncIntervalSeconds: 1
  queueAutoscaling: {enabled: true, minQueues: 2, maxQueues: 4, step: 2, growAfterSeconds: 2, shrinkAfterSeconds: 3}
EOF
}
# topic_is NAME READ WRITE PHASE: the topic's status says so.
topic_is() {
  [ "$(K get mqt "$1" -o jsonpath='{.status.readQueues}/{.status.writeQueues}/{.status.phase}')" = "$2/$3/$4" ]
}
declare_topic payments
queues_are() { topic_is payments "$@"; }
wait_for 30 "topic payments created on both groups: 2 read and write queues each" queues_are 2 2 Stable
routed_payments() { "$BIN" admin topics | grep -c '^payments ' | grep -qx "$1"; }
wait_for 30 "its route lists 4 read queues" routed_payments 4
quiet "$BIN" admin reset-offset --group pay-a --topic payments --to earliest
quiet "$BIN" admin reset-offset --group pay-b --topic payments --to earliest
K create deployment payments-consumer --image=consumer:test --replicas=1 >/dev/null
autoscaler pay 'apps/v1|Deployment' payments-consumer pay-a '{"topics":["payments"],"targetBacklogPerReplica":10,"minReplicas":1,"maxReplicas":50}'
produce 300 payments
wait_for 30 "300 messages for 10 per replica: capped at the 4 read queues" has_replicas deployment/payments-consumer 4
wait_for 40 "capped for the grow window: read raised, then write (4 per group)" queues_are 4 4 Stable
wait_for 30 "the autoscaler's cap rose with the queues: 8 replicas" has_replicas deployment/payments-consumer 8
# More messages, now on all 4 queues of each group; then pay-a catches up, pay-b does not.
produce 100 payments
quiet "$BIN" admin reset-offset --group pay-a --topic payments --to latest
wait_for 60 "pay-a needs fewer: write lowered to 2, read held at 4 while pay-b has not consumed queues 2-3" \
  bash -c "[ \"\$(kubectl get mqt payments -o jsonpath='{.status.readQueues}/{.status.writeQueues}/{.status.phase}/{.status.waitingFor}')\" = '4/2/Draining/[\"pay-b\"]' ]"
check "still draining a moment later (read 4): the shrink waits for every group" queues_are 4 2 Draining
quiet "$BIN" admin reset-offset --group pay-b --topic payments --to latest
wait_for 30 "pay-b consumed them: read lowered to 2" queues_are 2 2 Stable
# history_is TOPIC: its applied configurations in order (the QueuesChanged events): created
# 2/2, read then write up to 4, write then (after the drain) read down to 2; write never above
# read.
history_is() {
  K get events.events.k8s.io --sort-by=.eventTime -o jsonpath='{range .items[?(@.reason=="QueuesChanged")]}{.regarding.name} {.note}{"\n"}{end}' | grep "^$1 " | python3 -c '
import re, sys
steps = [tuple(map(int, m.groups())) for m in re.finditer(r"→ read (\d+) write (\d+)", sys.stdin.read())]
assert steps == [(2, 2), (4, 2), (4, 4), (4, 2), (2, 2)], steps'
}
check "topic history: created 2/2, read 4 then write 4, write 2 then (after the drain) read 2" history_is payments
K delete cas pay >/dev/null
# Permissions are kept too: read-only refuses sends, read-write takes them again.
K patch mqt payments --type merge -p '{"spec":{"perm":4}}' >/dev/null
# Refused by the broker (NO_PERMISSION: errors 1), or by the producer itself once the route
# says the topic is read-only (no writable queue).
# (The output is read whole: a `grep -q` that stops early would end the producer with SIGPIPE
# while it prints its error, and pipefail would count that as a failure.)
send_one() { "$BIN" bench produce --topic payments --size 64 --producers 1 --in-flight 1 --count 1 2>&1 || true; }
refused() { grep -qE 'errors 1|no usable route for topic payments' <<<"$(send_one)"; }
wait_for 30 "perm 4 applied on the brokers: a send to payments is refused" refused
K patch mqt payments --type merge -p '{"spec":{"perm":6}}' >/dev/null
accepted() { grep -q 'errors 0$' <<<"$(send_one)"; }
wait_for 30 "perm 6 again: sends accepted" accepted
# An ordered topic is not autoscaled unless allowForOrdered.
K apply -f - >/dev/null <<EOF
apiVersion: conveyor.dev/v1alpha1
kind: MessageQueueTopic
metadata: {name: ledger}
spec:
  nameServer: "127.0.0.1:$NSP"
  clusterName: mq
  queues: 2
  ordered: true
  syncIntervalSeconds: 1
  queueAutoscaling: {enabled: true, minQueues: 2, maxQueues: 4, step: 2}
EOF
refused_ordered() {
  [ "$(K get mqt ledger -o jsonpath='{.status.conditions[?(@.type=="Autoscaling")].status}/{.status.conditions[?(@.type=="Autoscaling")].reason}/{.status.phase}')" = False/RefusedForOrderedTopic/Stable ]
}
wait_for 30 "ordered topic created, its autoscaling refused (condition Autoscaling, RefusedForOrderedTopic)" refused_ordered

echo "-- the same with consumers running: a replica driver runs one group member per replica"
# drive DEPLOYMENT GROUP TOPIC DELAY_MS: keeps as many `conveyor bench member` processes (real
# clustering consumers of the Rust client, ids of what they handle appended to $D/ledger-GROUP)
# running as the Deployment's spec.replicas, checked every second, and writes the count to
# its status as the Deployment controller would.
drive() {
  local dep=$1 group=$2 topic=$3 delay=$4 pids=() want
  trap 'kill "${pids[@]}" 2>/dev/null; wait; exit 0' TERM
  while true; do
    want=$(kubectl get deployment "$dep" -o jsonpath='{.spec.replicas}' 2>/dev/null) || { sleep 1; continue; }
    # A member that exited is replaced, as a pod's container would be restarted.
    local alive=() p
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    pids=("${alive[@]}")
    while [ "${#pids[@]}" -lt "${want:-0}" ]; do
      "$BIN" bench member --group "$group" --topic "$topic" --rebalance-ms 500 --delay-ms "$delay" \
        --ledger "$D/ledger-$group" >>"$D/member-$group.log" 2>&1 &
      pids+=($!)
    done
    while [ "${#pids[@]}" -gt "${want:-0}" ]; do
      kill -TERM "${pids[-1]}" 2>/dev/null; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'
    done
    kubectl patch deployment "$dep" --subresource=status --type merge \
      -p "{\"status\":{\"replicas\":$want,\"readyReplicas\":$want}}" >/dev/null 2>&1 || true
    sleep 1 & wait $!
  done
}
declare_topic refunds
wait_for 30 "topic refunds created: 2 queues per group" topic_is refunds 2 2 Stable
K create deployment refunds-a --image=consumer:test --replicas=1 >/dev/null
K create deployment refunds-b --image=consumer:test --replicas=1 >/dev/null
drive refunds-a ref-a refunds 20 & PIDS+=($!)
drive refunds-b ref-b refunds 5 & PIDS+=($!)
autoscaler refunds 'apps/v1|Deployment' refunds-a ref-a '{"topics":["refunds"],"targetBacklogPerReplica":20,"minReplicas":1,"maxReplicas":50}'
sent() { "$BIN" bench produce --topic refunds --size 64 --producers 1 --in-flight 16 --count "$1" | tail -1; }
FIRST=$(sent 1200)
wait_for 60 "slow members of ref-a fall behind: capped, the topic grows to 4 queues per group" \
  bash -c "kubectl get mqt refunds -o jsonpath='{.status.writeQueues}' | grep -qx 4"
SECOND=$(sent 600)
check "1,800 messages sent, none failed" bash -c "grep -q '1200 msgs.*errors 0\$' <<<'$FIRST' && grep -q '600 msgs.*errors 0\$' <<<'$SECOND'"
wait_for 30 "ref-a scaled past the old cap of 4 (the cap is 8 now)" bash -c "[ \"\$(kubectl get deployment refunds-a -o jsonpath='{.spec.replicas}')\" -gt 4 ]"
ledger() { sort -u "$D/ledger-$1" 2>/dev/null | wc -l; }
all_consumed() { [ "$(ledger ref-a)" -ge 1800 ] && [ "$(ledger ref-b)" -ge 1800 ]; }
wait_for 120 "both groups consumed all 1,800 messages (at least once, distinct ids)" all_consumed
check "nothing else in the ledgers: exactly 1,800 distinct ids each" test "$(ledger ref-a)/$(ledger ref-b)" = 1800/1800
wait_for 90 "backlog gone: the topic shrinks back to 2 queues per group after both groups drained" \
  topic_is refunds 2 2 Stable
check "refunds history with consumers running: created, read then write up, write then read down" history_is refunds
K delete cas refunds >/dev/null

echo "-- Prometheus as the source, a StatefulSet as the target"
# The lag series exists only for groups with offsets: commit this group's at the start.
quiet "$BIN" admin reset-offset --group audit-cg --topic Orders --to earliest
prom() { curl -fsG "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else "none")'; }
admin_backlog() { "$BIN" admin group --group audit-cg --topic Orders | sed -n 's/^total backlog of .*: //p'; }
lag_matches() { [ "$(prom 'sum(rocketmq_consumer_lag_messages{consumer_group="audit-cg",topic="Orders"})')" = "$(admin_backlog)" ] && [ "$(admin_backlog)" = 755 ]; }
wait_for 30 "Prometheus: sum of rocketmq_consumer_lag_messages = the admin API's backlog (755)" lag_matches
PROM_SPEC="{\"targetBacklogPerReplica\":200,\"minReplicas\":0,\"maxReplicas\":20,\"cooldownPeriodSeconds\":2,\"fallback\":{\"failureThreshold\":2,\"replicas\":3},\"prometheus\":{\"serverAddress\":\"http://127.0.0.1:$PP\"}}"
autoscaler audit 'apps/v1|StatefulSet' audit-consumer audit-cg "$PROM_SPEC"
wait_for 30 "backlog 755 from Prometheus, 200 per replica: 4" has_replicas statefulset/audit-consumer 4
quiet "$BIN" admin reset-offset --group audit-cg --topic Orders --to latest
wait_for 40 "backlog 0 in Prometheus: zero after the cooldown" has_replicas statefulset/audit-consumer 0
kill "$PROM_PID"; wait "$PROM_PID" 2>/dev/null || true
fallback() { [ "$(cond audit FallbackActive)/$(cond audit MetricsAvailable)" = "True/FailureThresholdReached/False/ReadFailed" ]; }
wait_for 30 "Prometheus stopped: FallbackActive after 2 failed reads, MetricsAvailable=False" fallback
check "the fallback count (3), not zero" test "$(replicas statefulset/audit-consumer)" = 3
start_prometheus
wait_for 60 "Prometheus back" curl -fs "http://127.0.0.1:$PP/-/ready"
recovered() { [ "$(cond audit MetricsAvailable)" = "True/BacklogRead" ]; }
wait_for 60 "metrics available again" recovered

echo "-- Prometheus behind TLS and credentials"
# An https proxy in front of the Prometheus above that wants a bearer token or basic auth, its
# certificate (for 127.0.0.1) issued by a CA of this test's own, which the autoscaler gets
# from the Secret (key ca) with the credentials (KEDA's keys).
C="$D/prom-tls"; mkdir -p "$C"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$C/ca.key" -out "$C/ca.crt" \
  -subj /CN=autoscaler-test-ca -days 1 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$C/tls.key" -out "$C/tls.csr" \
  -subj /CN=prometheus 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$C/ext"
openssl x509 -req -in "$C/tls.csr" -CA "$C/ca.crt" -CAkey "$C/ca.key" -CAcreateserial -out "$C/tls.crt" \
  -days 1 -extfile "$C/ext" 2>/dev/null
read -r TLSP <<<"$(free_ports 1)"
python3 "$ROOT/tests/k8s/auth-proxy.py" "$TLSP" "http://127.0.0.1:$PP" "$C/tls.crt" "$C/tls.key" \
  prom-token prom-user prom-password > "$D/auth-proxy.log" 2>&1 &
PIDS+=($!)
proxied() { curl -fs --cacert "$C/ca.crt" -H "Authorization: Bearer prom-token" "https://127.0.0.1:$TLSP/-/ready" >/dev/null; }
wait_for 30 "the authenticating https proxy answers" proxied
check "... and refuses a request without credentials (401)" test \
  "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$C/ca.crt" "https://127.0.0.1:$TLSP/-/ready")" = 401
K create secret generic prom-bearer --from-literal=bearerToken=prom-token --from-file=ca="$C/ca.crt" >/dev/null
K create secret generic prom-basic --from-literal=username=prom-user --from-literal=password=prom-password \
  --from-file=ca="$C/ca.crt" >/dev/null
K create secret generic prom-wrong --from-literal=bearerToken=not-the-token --from-file=ca="$C/ca.crt" >/dev/null
K create secret generic prom-no-ca --from-literal=bearerToken=prom-token >/dev/null
via_proxy() { # SECRET MODE
  K patch cas audit --type merge -p "{\"spec\":{\"prometheus\":{\"serverAddress\":\"https://127.0.0.1:$TLSP\",\"authentication\":{\"secretName\":\"$1\",\"mode\":\"$2\"}}}}" >/dev/null
}
metrics_msg() { K get cas audit -o jsonpath='{.status.conditions[?(@.type=="MetricsAvailable")].message}'; }
via_proxy prom-wrong Bearer
refused_token() { [ "$(cond audit MetricsAvailable)" = "False/ReadFailed" ] && metrics_msg | grep -q "refused the credentials (HTTP 401)"; }
wait_for 30 "a wrong bearer token: MetricsAvailable=False, the message says the credentials were refused" refused_token
via_proxy prom-no-ca Bearer
untrusted() { [ "$(cond audit MetricsAvailable)" = "False/ReadFailed" ] && metrics_msg | grep -qi "TLS.*certificate"; }
wait_for 30 "no CA in the Secret: the proxy's certificate is not trusted (the system's roots), and the message says so" untrusted
quiet "$BIN" admin reset-offset --group audit-cg --topic Orders --to earliest
via_proxy prom-bearer Bearer
bearer_ok() { [ "$(cond audit MetricsAvailable)" = "True/BacklogRead" ] && [ "$(st audit observedBacklog)" = 755 ]; }
wait_for 30 "https, the CA from the Secret, a bearer token: backlog 755 read" bearer_ok
wait_for 30 "... and acted on: 4 replicas" has_replicas statefulset/audit-consumer 4
K patch secret prom-bearer --type merge -p '{"stringData":{"bearerToken":"rotated-away"}}' >/dev/null
wait_for 30 "the token in the Secret changed: read at the next poll, refused" refused_token
via_proxy prom-basic Basic
basic_ok() { [ "$(cond audit MetricsAvailable)" = "True/BacklogRead" ] && [ "$(st audit observedBacklog)" = 755 ]; }
wait_for 30 "basic auth from the Secret: backlog read again" basic_ok
quiet "$BIN" admin reset-offset --group audit-cg --topic Orders --to latest

autoscaler ghost 'test.conveyor.dev/v1|ConsumerPool' pool ghost-cg "$PROM_SPEC"
no_series() { [ "$(cond ghost MetricsAvailable)" = "False/ReadFailed" ] && K get cas ghost -o jsonpath='{.status.conditions[?(@.type=="MetricsAvailable")].message}' | grep -q 'no series'; }
wait_for 30 "a group with no series: the empty result is a failed read, not a backlog of 0" no_series
check "and the ConsumerPool keeps its 5 replicas: absent data never lowers the count" test "$(replicas consumerpool/pool)" = 5
echo "-- mode Keda: a ScaledObject checked by the API server against KEDA's own CRD"
# KEDA's CRD from its Go module (the Go module proxy is a registry this machine reaches).
KEDA_DIR=$(cd "$D" && GOMODCACHE="${GOMODCACHE:-$CONVEYOR_CACHE/go/mod}" go mod download -json "github.com/kedacore/keda/v2@${KEDA_VERSION:-v2.21.0}" 2>/dev/null \
  | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
if [ -n "$KEDA_DIR" ] && [ -f "$KEDA_DIR/config/crd/bases/keda.sh_scaledobjects.yaml" ]; then
  check "KEDA's ScaledObject CRD applies" quiet K apply --server-side -f "$KEDA_DIR/config/crd/bases/keda.sh_scaledobjects.yaml"
  wait_for 30 "ScaledObject CRD established" K wait --for=condition=Established crd/scaledobjects.keda.sh --timeout=5s
  check "KEDA's TriggerAuthentication CRD applies" quiet K apply --server-side -f "$KEDA_DIR/config/crd/bases/keda.sh_triggerauthentications.yaml"
  wait_for 30 "TriggerAuthentication CRD established" K wait --for=condition=Established crd/triggerauthentications.keda.sh --timeout=5s
  # The Prometheus behind TLS and basic auth above: KEDA gets the same Secret's keys.
  autoscaler keda 'apps/v1|Deployment' orders-consumer orders-cg \
    "{\"mode\":\"Keda\",\"targetBacklogPerReplica\":10,\"maxReplicas\":50,\"fallback\":{\"failureThreshold\":2,\"replicas\":3},\"prometheus\":{\"serverAddress\":\"https://127.0.0.1:$TLSP\",\"authentication\":{\"secretName\":\"prom-basic\",\"mode\":\"Basic\"}}}"
  so() { K get scaledobject keda -o jsonpath="$1"; }
  so_ok() { [ "$(so '{.spec.maxReplicaCount}/{.spec.triggers[0].type}/{.spec.triggers[0].metadata.ignoreNullValues}/{.spec.fallback.behavior}/{.metadata.ownerReferences[0].kind}')" = "8/prometheus/false/currentReplicasIfHigher/ConsumerAutoscaler" ]; }
  wait_for 30 "ScaledObject written: maxReplicaCount = the 8 read queues, Prometheus trigger, no silent zero, owned" so_ok
  check "mode Keda leaves the Deployment to KEDA (still 8)" test "$(replicas deployment/orders-consumer)" = 8
  ta_ok() {
    [ "$(so '{.spec.triggers[0].authenticationRef.name}/{.spec.triggers[0].metadata.authModes}')" = keda/basic ] &&
      [ "$(K get triggerauthentication keda -o jsonpath='{range .spec.secretTargetRef[*]}{.parameter}={.name}/{.key} {end}{.metadata.ownerReferences[0].kind}')" = \
        "username=prom-basic/username password=prom-basic/password ca=prom-basic/ca ConsumerAutoscaler" ]
  }
  wait_for 30 "credentials: a TriggerAuthentication with the Secret's keys (username, password, ca), named by the trigger (authModes basic)" ta_ok
  check "mode Keda without prometheus is refused (CEL)" bash -c "! kubectl patch cas keda --type json -p '[{\"op\":\"remove\",\"path\":\"/spec/prometheus\"}]' 2>/dev/null"
  # Back to Native: the ScaledObject goes (KEDA would otherwise go on scaling the same target).
  K patch cas keda --type merge -p '{"spec":{"mode":"Native"}}' >/dev/null
  so_gone() { ! K get scaledobject keda >/dev/null 2>&1; }
  wait_for 30 "mode Keda -> Native: the ScaledObject is deleted" so_gone
  ta_gone() { ! K get triggerauthentication keda >/dev/null 2>&1; }
  wait_for 30 "... and its TriggerAuthentication" ta_gone
  so_event() { K get events.events.k8s.io -o jsonpath='{range .items[*]}{.reason}{"\n"}{end}' | grep -qx ScaledObjectRemoved; }
  wait_for 30 "a ScaledObjectRemoved event" so_event
else
  skip "KEDA's module (github.com/kedacore/keda/v2) could not be downloaded: mode Keda not checked"
fi

check "kubectl get cas shows the printer columns" bash -c "kubectl get cas | head -1 | grep -q 'TARGET.*GROUP.*BACKLOG.*DESIRED.*CURRENT.*ACTIVE'"
summary
