#!/usr/bin/env bash
# Kubernetes tests of conveyor-operator (issue 5):
#   1. static: helm lint --strict, helm template + crds/ validated with kubernetes-validate --strict
#      for Kubernetes 1.30–1.37, hadolint on the Dockerfile;
#   2. a real kube-apiserver + etcd (built from the Go module proxy by build-apiserver.sh and cached
#      in $CONVEYOR_CACHE/k8s): CRDs + example applied, the operator run against it, and the
#      acceptance points checked (owned objects with owner references, status/conditions, flushMode
#      roll-out, CEL rejection, scale-down refusal, pause, API-server restart, deletion).
# Exit code 0 = all ran and passed. Tools are installed first (install-tools.sh); a part whose tools are
# still missing is skipped with a message, and under CI=true a skipped check is a failed check (exit 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export CONVEYOR_CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
source tests/k8s/lib.sh

TOOLS=$(tests/k8s/install-tools.sh)
export PATH="$TOOLS:$PATH"
have() { [ -x "$TOOLS/$1" ] || command -v "$1" >/dev/null 2>&1; }

echo "== static checks"
if have helm; then
  check "helm lint --strict" quiet helm lint --strict charts/conveyor-operator
  helm template conveyor charts/conveyor-operator --namespace conveyor-system --include-crds > "$CONVEYOR_CACHE/rendered.yaml"
  helm template conveyor charts/conveyor-operator --namespace conveyor-system --set watchNamespace=mq \
    --set leaderElection.enabled=false > "$CONVEYOR_CACHE/rendered-ns.yaml"
  if have kubernetes-validate; then
    for v in 1.30.0 1.31.0 1.32.0 1.33.0 1.34.0 1.35.0 1.36.0 1.37.0; do
      check "kubernetes-validate --strict $v (chart, crds/)" \
        kubernetes-validate --quiet -k "$v" --strict "$CONVEYOR_CACHE/rendered.yaml" "$CONVEYOR_CACHE/rendered-ns.yaml" crds/*.yaml
    done
  else skip "kubernetes-validate missing"; fi
  # Monitoring (off by default): a PodMonitor for the Conveyor pods and one for the operator,
  # and the Grafana dashboard in a ConfigMap whose JSON parses. (PodMonitor is a Prometheus
  # Operator CRD that kubernetes-validate does not know, so it is checked here instead.)
  monitoring_renders() {
    helm template conveyor charts/conveyor-operator --namespace conveyor-system \
      --set metrics.podMonitor.enabled=true --set metrics.dashboard.enabled=true |
      "$CONVEYOR_CACHE/k8s-tools/venv/bin/python" -c '
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
monitors = [d for d in docs if d["kind"] == "PodMonitor"]
assert len(monitors) == 2, monitors
assert all(e["port"] == "http" for m in monitors for e in m["spec"]["podMetricsEndpoints"])
dash = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
assert dash and dash[0]["metadata"]["labels"]["grafana_dashboard"] == "1", dash
assert json.loads(dash[0]["data"]["conveyor-dashboard.json"])["panels"]
'
  }
  check "metrics.podMonitor/dashboard render two PodMonitors and the Grafana dashboard ConfigMap" monitoring_renders
  if grep -nE 'verbs:.*"\*"|resources:.*"\*"|pods/exec' "$CONVEYOR_CACHE/rendered.yaml"; then
    bad "RBAC has wildcards or pods/exec"
  else ok "RBAC: no wildcards, no pods/exec"; fi
  # Secrets (ACL): read, made and patched one by one, never listed, watched or deleted.
  if grep -A1 '"secrets"' "$CONVEYOR_CACHE/rendered.yaml" | grep -E 'verbs:' | grep -E '"(list|watch|delete|deletecollection)"'; then
    bad "RBAC lets the operator list, watch or delete secrets"
  else ok "RBAC: secrets only got, created and patched by name"; fi
else skip "helm missing (npm route failed?)"; fi
VPY="$CONVEYOR_CACHE/k8s-tools/venv/bin/python"
if [ -x "$VPY" ] && "$VPY" -c 'import jsonschema, yaml' 2>/dev/null; then
  check "examples/ valid against the CRD schema (strict)" quiet "$VPY" tests/k8s/validate_examples.py
else skip "python jsonschema/yaml missing: offline example validation skipped"; fi
if have hadolint; then check "hadolint Dockerfile" hadolint Dockerfile; else skip "hadolint missing"; fi
# Argo CD health checks (deploy/argocd/): every state the operator writes, with Lua 5.1, and the
# kustomize Component merging them into an argocd-cm.
check "Argo CD health checks give the expected health for each state (tests/k8s/argocd-health.sh)" \
  quiet bash tests/k8s/argocd-health.sh
# shellcheck source=tests/k8s/argocd-health.sh
source tests/k8s/argocd-health.sh
argocd_component() {
  local dir; dir=$(mktemp -d)
  cp -r deploy/argocd "$dir/component"
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\ndata:\n  url: https://argocd.example\n' > "$dir/argocd-cm.yaml"
  printf 'resources: [argocd-cm.yaml]\ncomponents: [component]\n' > "$dir/kustomization.yaml"
  local out; out=$(kubectl kustomize "$dir"); rm -rf "$dir"
  grep -q 'resource.customizations.health.conveyor.dev_MessageQueueCluster: |' <<<"$out" &&
    grep -q 'url: https://argocd.example' <<<"$out" && grep -q 'name: argocd-cm$' <<<"$out"
}
check "the Argo CD Component merges the four health checks into argocd-cm (kubectl kustomize)" argocd_component

echo "== real API server"
if ! command -v go >/dev/null && [ ! -x "$CONVEYOR_CACHE/k8s/${CONVEYOR_K8S_VERSION:-1.35.4}/bin/kube-apiserver" ]; then
  skip "no go toolchain and no cached kube-apiserver: API-server tests skipped"
  echo "== k8s: $PASS passed, $FAIL failed, $SKIP skipped"; [ "$FAIL" = 0 ]; exit
fi
if ! have kubectl; then skip "kubectl missing: API-server tests skipped"; echo "== k8s: $PASS passed, $FAIL failed, $SKIP skipped"; [ "$FAIL" = 0 ]; exit; fi
KBIN=$(WITH_CONTROLLER_MANAGER=1 tests/k8s/build-apiserver.sh)
cargo build -q -p conveyor-operator -p conveyor
OPERATOR="${CARGO_TARGET_DIR:-$ROOT/target}/debug/conveyor-operator"
# What the operator renders for the example (security on: NetworkPolicies, Secrets, non-root
# read-only pods), validated offline against every supported Kubernetes version.
"$OPERATOR" render examples/messagequeuecluster.yaml > "$CONVEYOR_CACHE/rendered-objects.yaml"
if have kubernetes-validate; then
  for v in 1.30.0 1.31.0 1.32.0 1.33.0 1.34.0 1.35.0 1.36.0 1.37.0; do
    check "kubernetes-validate --strict $v (objects the operator renders for examples/)" \
      kubernetes-validate --quiet -k "$v" --strict "$CONVEYOR_CACHE/rendered-objects.yaml"
  done
else skip "kubernetes-validate missing"; fi

D=$(mktemp -d)
PIDS=()
cleanup() {
  # A wait_for that timed out ends the script (set -e): say so instead of stopping silently.
  [ -n "${SUMMARY:-}" ] || echo "== k8s: stopped at the first unmet wait; $PASS passed, $FAIL failed, $SKIP skipped (logs: $D)"
  stop_processes
}
trap cleanup EXIT
AP=$(free_port)
start_etcd "$D" "$KBIN"
apiserver_credentials "$D"
start_apiserver "$D" "$KBIN" "$AP" 127.0.0.1 --authorization-mode=RBAC
export KUBECONFIG="$D/kubeconfig"
write_kubeconfig "$KUBECONFIG" "$D" "$AP" e2e
K() { kubectl --request-timeout=20s "$@"; }
if [ -x "$KBIN/kube-controller-manager" ]; then
  # Only the garbage collector: it deletes owned objects when their owner goes.
  "$KBIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" --controllers=garbagecollector \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port=0 --use-service-account-credentials=false \
    > "$D/kcm.log" 2>&1 &
  PIDS+=($!)
  HAVE_GC=1
else HAVE_GC=; fi


check "CRD applies" quiet K apply --server-side -f crds/
wait_for 30 "CRD established" K wait --for=condition=Established crd/messagequeueclusters.conveyor.dev --timeout=5s
wait_for 30 "MessageQueueUser CRD established" K wait --for=condition=Established crd/messagequeueusers.conveyor.dev --timeout=5s
check "example passes server-side dry-run" quiet K apply --dry-run=server -f examples/messagequeuecluster.yaml
check "example applies" quiet K apply -f examples/messagequeuecluster.yaml

# Install the chart (RBAC, ServiceAccount, Deployment; no pods run here) and run the operator
# locally with the chart's ServiceAccount token: every check below also proves the RBAC suffices.
OPNS=conveyor-system
check "helm install into the API server" quiet helm install conveyor-operator charts/conveyor-operator \
  --namespace "$OPNS" --create-namespace --kubeconfig "$KUBECONFIG"
SA_TOKEN=$(K create token conveyor-operator -n "$OPNS" --duration=3h)
sed -e "s/token: admin-token/token: $SA_TOKEN/" "$KUBECONFIG" > "$D/kubeconfig-sa"
check "ServiceAccount cannot list secrets or exec into pods" bash -c \
  "[ \"\$(kubectl --kubeconfig '$D/kubeconfig-sa' auth can-i list secrets -A)\" = no ] && [ \"\$(kubectl --kubeconfig '$D/kubeconfig-sa' auth can-i create pods/exec -A)\" = no ]"
# The operator's replication controller (failover) on a free loopback port, given to brokers as is;
# as leader it points the chart's controller Service at itself (a "pod IP" from TEST-NET-1: the API
# server refuses loopback addresses in EndpointSlices; nothing connects through it here).
CP=$(free_port)
CONTROLLER_FLAGS=(--controller-listen "127.0.0.1:$CP" --controller-advertise "127.0.0.1:$CP"
  --controller-service conveyor-operator-controller)
POD_IP=192.0.2.10 KUBECONFIG="$D/kubeconfig-sa" "$OPERATOR" run --lease-namespace "$OPNS" --identity e2e-operator "${CONTROLLER_FLAGS[@]}" > "$D/operator.log" 2>&1 &
OP_PID=$!; PIDS+=("$OP_PID")
check "the chart's controller Service has no selector (only the leader may serve brokers)" test \
  -z "$(K get svc conveyor-operator-controller -n "$OPNS" -o jsonpath='{.spec.selector}')"
leader_slice() {
  [ "$(K get endpointslice conveyor-operator-controller -n "$OPNS" -o jsonpath='{.endpoints[*].addresses[*]}:{.ports[0].name}/{.ports[0].port}|{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}|{.metadata.labels.kubernetes\.io/service-name}')" = \
    "192.0.2.10:controller/$CP|Service/$(K get svc conveyor-operator-controller -n "$OPNS" -o jsonpath='{.metadata.uid}')|conveyor-operator-controller" ]
}
wait_for 30 "the leader points the controller Service's EndpointSlice at itself (chart RBAC suffices; owned by the Service)" leader_slice

UID_MQC=$(K get mqc demo -o jsonpath='{.metadata.uid}')
owned_ok() { # kind name
  [ "$(K get "$1" "$2" -o jsonpath='{.metadata.ownerReferences[0].uid}/{.metadata.ownerReferences[0].controller}/{.metadata.ownerReferences[0].kind}')" = "$UID_MQC/true/MessageQueueCluster" ]
}
for obj in configmap/demo-broker-0-config configmap/demo-broker-1-config service/demo-namesrv \
           service/demo-namesrv-headless service/demo-broker-0 service/demo-broker-1 statefulset/demo-namesrv \
           statefulset/demo-broker-0 statefulset/demo-broker-1 poddisruptionbudget/demo-namesrv \
           poddisruptionbudget/demo-broker-0 poddisruptionbudget/demo-broker-1; do
  wait_for 60 "$obj exists with a controller owner reference" owned_ok "${obj%/*}" "${obj#*/}"
done
echo "-- security: TLS, ACL (MessageQueueUser), NetworkPolicy, pod settings"
for obj in secret/demo-ca secret/demo-tls secret/demo-cluster-secret secret/demo-acl-users networkpolicy/demo-network \
           networkpolicy/demo-broker-0-replication networkpolicy/demo-broker-1-replication; do
  wait_for 60 "$obj exists with a controller owner reference" owned_ok "${obj%/*}" "${obj#*/}"
done
cluster_secret() { K get secret "$1-cluster-secret" -o jsonpath='{.data.secret}' 2>/dev/null | base64 -d; }
check "the cluster's own secret: 48 characters, and none shared from the operator's namespace" bash -c \
  "[ \$(kubectl get secret demo-cluster-secret -o jsonpath='{.data.secret}' | base64 -d | wc -c) -eq 48 ] &&
   ! kubectl get secret conveyor-cluster-secret -n $OPNS >/dev/null 2>&1"
# A second cluster under ACL gets a secret of its own: its processes cannot sign as demo's.
sed "s/^  name: demo$/  name: other/" examples/messagequeuecluster.yaml | kubectl apply -f - >/dev/null
wait_for 60 "a second cluster gets its own cluster secret" bash -c "[ -n \"\$(kubectl get secret other-cluster-secret -o jsonpath='{.data.secret}' 2>/dev/null)\" ]"
check "the two clusters' secrets differ" test "$(cluster_secret other)" != "$(cluster_secret demo)"
kubectl delete mqc other --wait=false >/dev/null
tls_chain() {
  local dir; dir=$(mktemp -d)
  K get secret demo-tls -o jsonpath='{.data.tls\.crt}' | base64 -d > "$dir/tls.crt"
  K get secret demo-ca -o jsonpath='{.data.ca\.crt}' | base64 -d > "$dir/ca.crt"
  openssl verify -CAfile "$dir/ca.crt" "$dir/tls.crt" >/dev/null &&
    openssl x509 -in "$dir/tls.crt" -noout -ext subjectAltName | grep -q '\*.demo-broker-1.default.svc' &&
    [ -n "$(K get secret demo-tls -o jsonpath='{.metadata.annotations.conveyor\.dev/not-after}')" ]
}
check "the generated server certificate verifies under the cluster's CA and names every broker group" tls_chain
# The cluster CA's two-phase rotation, forced (conveyor.dev/force-renew): the new CA is
# published in every trust bundle first, signs 120 s later, and the old one stays trusted.
CA_DIR=$(mktemp -d -p "$D")
secret_file() { K get secret "$1" -o jsonpath="{.data.${2//./\\.}}" | base64 -d > "$3"; }
certs_in() { grep -c 'BEGIN CERTIFICATE' "$1"; }
public_bundle() { # the public Secret applications mount: ca.crt alone, never a key
  [ "$(K get secret demo-ca-cert -o go-template='{{range $k, $v := .data}}{{$k}} {{end}}')" = "ca.crt " ] &&
    secret_file demo-ca-cert ca.crt "$CA_DIR/bundle.crt" && ! grep -q 'PRIVATE KEY' "$CA_DIR/bundle.crt"
}
wait_for 60 "secret/demo-ca-cert exists with a controller owner reference" owned_ok secret demo-ca-cert
only_the_ca() { public_bundle && secret_file demo-ca ca.crt "$CA_DIR/ca.crt" && cmp -s "$CA_DIR/ca.crt" "$CA_DIR/bundle.crt"; }
check "demo-ca-cert holds only ca.crt, the cluster's CA (the bundle), no key" only_the_ca
secret_file demo-ca ca.crt "$CA_DIR/old.crt"
secret_file demo-tls tls.crt "$CA_DIR/tls-old.crt"
K annotate secret demo-ca conveyor.dev/force-renew=true >/dev/null
published() { public_bundle && [ "$(certs_in "$CA_DIR/bundle.crt")" = 2 ]; }
wait_for 60 "force-renew: demo-ca-cert's bundle holds two CAs (phase 1)" published
phase_1() {
  secret_file demo-tls tls.crt "$CA_DIR/tls.crt" && secret_file demo-tls ca.crt "$CA_DIR/tls-bundle.crt" &&
    secret_file demo-ca next.crt "$CA_DIR/next.crt" && cmp -s "$CA_DIR/tls-bundle.crt" "$CA_DIR/bundle.crt" &&
    openssl verify -CAfile "$CA_DIR/old.crt" "$CA_DIR/tls.crt" >/dev/null &&
    openssl verify -CAfile "$CA_DIR/bundle.crt" "$CA_DIR/old.crt" >/dev/null &&
    openssl verify -CAfile "$CA_DIR/bundle.crt" "$CA_DIR/next.crt" >/dev/null &&
    [ -z "$(K get secret demo-ca -o jsonpath='{.metadata.annotations.conveyor\.dev/force-renew}')" ]
}
check "phase 1: the server certificate still verifies under the old CA, demo-tls has the same bundle (old + next), force-renew removed" phase_1
switched() {
  secret_file demo-ca ca.crt "$CA_DIR/new.crt" && ! cmp -s "$CA_DIR/old.crt" "$CA_DIR/new.crt" &&
    secret_file demo-tls tls.crt "$CA_DIR/tls.crt" && openssl verify -CAfile "$CA_DIR/new.crt" "$CA_DIR/tls.crt"
}
wait_for 240 "phase 2 (the switch, 120 s after): the server certificate verifies under the new CA" switched
phase_2() {
  public_bundle && [ "$(certs_in "$CA_DIR/bundle.crt")" = 2 ] &&
    cmp -s "$CA_DIR/new.crt" "$CA_DIR/next.crt" &&
    openssl verify -CAfile "$CA_DIR/bundle.crt" "$CA_DIR/tls.crt" >/dev/null &&
    openssl verify -CAfile "$CA_DIR/bundle.crt" "$CA_DIR/old.crt" >/dev/null &&
    openssl verify -CAfile "$CA_DIR/bundle.crt" "$CA_DIR/tls-old.crt" >/dev/null &&
    ! openssl verify -CAfile "$CA_DIR/old.crt" "$CA_DIR/tls.crt" >/dev/null 2>&1 &&
    secret_file demo-tls ca.crt "$CA_DIR/tls-bundle.crt" && cmp -s "$CA_DIR/tls-bundle.crt" "$CA_DIR/bundle.crt" &&
    [ -z "$(K get secret demo-ca -o jsonpath='{.metadata.annotations.conveyor\.dev/force-renew}')" ]
}
check "phase 2: the server certificate verifies under the bundle, which still trusts the old CA (and what it signed); force-renew gone" phase_2
acl_flags() { # statefulset
  local t; t=$(K get sts "$1" -o jsonpath='{.spec.template.spec.containers[0].args}{.spec.template.spec.volumes}')
  grep -q -- '--acl-users-file' <<<"$t" && grep -q 'demo-acl-users' <<<"$t" && grep -q 'demo-cluster-secret' <<<"$t" &&
    grep -q 'demo-tls' <<<"$t" && grep -q -- '--tls-cert-file' <<<"$t"
}
check "name servers and brokers run with the ACL flags and mount the users file and cluster secret" \
  bash -c "$(declare -f acl_flags K); acl_flags demo-namesrv && acl_flags demo-broker-0"
check "broker pods: non-root, read-only root filesystem, no service-account token" test \
  "$(K get sts demo-broker-0 -o jsonpath='{.spec.template.spec.securityContext.runAsNonRoot}/{.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem}/{.spec.template.spec.automountServiceAccountToken}')" = "true/true/false"
check "the replication port is open only to the group's pods" test \
  "$(K get networkpolicy demo-broker-1-replication -o jsonpath='{.spec.podSelector.matchLabels.conveyor\.dev/broker-group}/{.spec.ingress[0].from[0].podSelector.matchLabels.conveyor\.dev/broker-group}/{.spec.ingress[0].ports[0].port}')" = "1/1/10912"
check "example user passes server-side dry-run" quiet K apply --dry-run=server -f examples/messagequeueuser.yaml
cat > "$D/short-user.yaml" <<'EOF'
apiVersion: conveyor.dev/v1alpha1
kind: MessageQueueUser
metadata: {name: short6, namespace: default}
spec: {clusterRef: {name: demo}}
EOF
check "a user whose name (access key) has 6 characters is refused (CEL)" bash -c \
  "! kubectl apply --dry-run=server -f '$D/short-user.yaml' >/dev/null 2>&1"
check "example user applies" quiet K apply -f examples/messagequeueuser.yaml
b64d() { base64 -d 2>/dev/null; }
user_key() { K get secret orders-app -o jsonpath='{.data.secretKey}' | b64d; }
user_secret_ok() {
  [ "$(K get secret orders-app -o jsonpath='{.data.accessKey}' | b64d)" = orders-app ] && [ "$(user_key | wc -c)" -ge 16 ]
}
wait_for 60 "MessageQueueUser orders-app gets Secret orders-app (accessKey, a generated secretKey)" user_secret_ok
users_file() { K get secret demo-acl-users -o jsonpath='{.data.plain_acl\.yml}' | b64d; }
listed() { users_file | grep -q "accessKey: orders-app"; }
wait_for 60 "the cluster's users file lists orders-app" listed
check "the users file carries its secret key and permissions" bash -c \
  "f=\$(kubectl get secret demo-acl-users -o jsonpath='{.data.plain_acl\.yml}' | base64 -d); grep -q \"secretKey: \$(kubectl get secret orders-app -o jsonpath='{.data.secretKey}' | base64 -d)\" <<<\"\$f\" && grep -q 'Orders=PUB|SUB' <<<\"\$f\" && grep -q 'order-workers=SUB' <<<\"\$f\""
mqu_ready() { [ "$(K get mqu orders-app -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}/{.status.secretName}')" = "True/orders-app" ]; }
wait_for 60 "MessageQueueUser Ready=True, status.secretName" mqu_ready
check "Argo CD health of the live MessageQueueUser: Healthy" \
  test "$(argocd_health messagequeueuser "$(K get mqu orders-app -o json)" | cut -f1)" = Healthy
KEY1=$(user_key)
K annotate mqu orders-app conveyor.dev/touched=1 --overwrite >/dev/null
K patch mqu orders-app --type merge -p '{"spec":{"groups":[{"name":"order-workers","permission":"Sub"},{"name":"billing","permission":"Sub"}]}}' >/dev/null
wait_for 60 "a permission change reaches the users file" bash -c "$(declare -f users_file b64d K); users_file | grep -q 'billing=SUB'"
check "the secret key survives the change" test "$(user_key)" = "$KEY1"
check "the user cannot be deleted past its finalizer before the file drops it" test \
  "$(K get mqu orders-app -o jsonpath='{.metadata.finalizers[0]}')" = conveyor.dev/users-file
K delete mqu orders-app --wait=true --timeout=60s >/dev/null
check "a deleted user is gone from the users file (the servers refuse it at their next reload)" bash -c \
  "$(declare -f users_file b64d K); ! users_file | grep -q 'accessKey: orders-app'"
if [ -n "$HAVE_GC" ]; then
  wait_for 60 "its credentials Secret goes with it (garbage collector)" bash -c "! kubectl get secret orders-app >/dev/null 2>&1"
fi

check "broker StatefulSets have a PVC template of 10Gi" test \
  "$(K get sts demo-broker-0 -o jsonpath='{.spec.volumeClaimTemplates[0].spec.resources.requests.storage}')" = 10Gi
check "headless name-server Service" test "$(K get svc demo-namesrv-headless -o jsonpath='{.spec.clusterIP}')" = None
check "broker probes on /readyz and /healthz" test \
  "$(K get sts demo-broker-0 -o jsonpath='{.spec.template.spec.containers[0].readinessProbe.httpGet.path}{.spec.template.spec.containers[0].livenessProbe.httpGet.path}')" = "/readyz/healthz"
check "ordinal 1 has broker-id 1 and no fixed role: the operator's controller decides (failover)" bash -c \
  "t=\$(kubectl get cm demo-broker-0-config -o jsonpath='{.data.demo-broker-0-1\.toml}'); grep -q 'broker-id = 1' <<<\"\$t\" && ! grep -q 'broker-role' <<<\"\$t\" && grep -q 'controller-addrs = \[\"127.0.0.1:$CP\"\]' <<<\"\$t\" && grep -q 'controller-scope = \"default/demo\"' <<<\"\$t\""

status_current() {
  [ "$(K get mqc demo -o jsonpath='{.status.observedGeneration}')" = "$(K get mqc demo -o jsonpath='{.metadata.generation}')" ]
}
cond() { K get mqc demo -o jsonpath="{.status.conditions[?(@.type==\"$1\")].status}"; }
cond_reason() { K get mqc demo -o jsonpath="{.status.conditions[?(@.type==\"$1\")].reason}"; }
wait_for 60 "status.observedGeneration = metadata.generation" status_current
check "conditions Ready/Reconciling/Stalled present" test "$(cond Ready)/$(cond Reconciling)/$(cond Stalled)" = "False/True/False"
echo "    (no kubelet here: pods never run, so Ready stays False with reason $(cond_reason Ready))"
check "status lists the name-server addresses" bash -c "kubectl get mqc demo -o jsonpath='{.status.nameServerAddresses}' | grep -q 'demo-namesrv-1.demo-namesrv-headless.default.svc:9876'"
check "leader Lease held by the operator" test "$(K get lease -n "$OPNS" conveyor-operator-leader -o jsonpath='{.spec.holderIdentity}')" = e2e-operator
check "kubectl get mqc shows printer columns" bash -c "kubectl get mqc demo | head -1 | grep -q 'READY.*GROUPS.*REPLICAS.*FLUSH.*AGE'"

echo "-- flushMode Async -> Sync"
HASH0=$(K get sts demo-broker-0 -o jsonpath='{.spec.template.metadata.annotations.conveyor\.dev/config-hash}')
K patch mqc demo --type merge -p '{"spec":{"broker":{"flushMode":"Sync"}}}' >/dev/null
cm_has() { K get cm demo-broker-0-config -o jsonpath='{.data.demo-broker-0-0\.toml}' | grep -q "flush-mode = \"$1\""; }
wait_for 60 "ConfigMap renders flush-mode = sync" cm_has sync
hash_changed() { [ "$(K get sts demo-broker-0 -o jsonpath='{.spec.template.metadata.annotations.conveyor\.dev/config-hash}')" != "$HASH0" ]; }
wait_for 30 "pod-template config hash changed" hash_changed
wait_for 30 "status follows generation 2" status_current

echo "-- Ready once the StatefulSets report ready pods (status written as the StatefulSet controller would)"
mark_ready() {
  local gen n
  for sts in demo-namesrv demo-broker-0 demo-broker-1 "$@"; do
    gen=$(K get sts "$sts" -o jsonpath='{.metadata.generation}'); n=$(K get sts "$sts" -o jsonpath='{.spec.replicas}')
    K patch sts "$sts" --subresource=status --type merge -p \
      "{\"status\":{\"observedGeneration\":$gen,\"replicas\":$n,\"readyReplicas\":$n,\"updatedReplicas\":$n,\"currentReplicas\":$n,\"availableReplicas\":$n}}" >/dev/null
  done
}
mark_ready
is_ready() { [ "$(cond Ready)/$(cond Reconciling)/$(cond Stalled)" = "True/False/False" ]; }
wait_for 60 "Ready=True, Reconciling=False, Stalled=False" is_ready
check "Argo CD health of the live MessageQueueCluster: Healthy" \
  test "$(argocd_health messagequeuecluster "$(K get mqc demo -o json)" | cut -f1)" = Healthy
check "status: group pods and ready count" test \
  "$(K get mqc demo -o jsonpath='{.status.groups[1].pods[1]}/{.status.groups[1].readyReplicas}')" = "demo-broker-1-1/2"
check "no broker registered with the controller yet: no master, not Degraded" test \
  "$(K get mqc demo -o jsonpath='{.status.groups[1].master}')/$(cond Degraded)" = "/False"
ready_event() { K get events.events.k8s.io -o jsonpath='{range .items[*]}{.type}/{.reason}{"\n"}{end}' | grep -q "Normal/Ready"; }
wait_for 30 "Normal event Ready" ready_event

echo "-- scale groups up 2 -> 3"
K patch mqc demo --type merge -p '{"spec":{"broker":{"groups":3}}}' >/dev/null
wait_for 60 "group 2 created (StatefulSet, ConfigMap, Service, PDB)" bash -c \
  "kubectl get sts demo-broker-2 && kubectl get cm demo-broker-2-config && kubectl get svc demo-broker-2 && kubectl get pdb demo-broker-2"
not_ready() { [ "$(cond Ready)/$(cond Reconciling)" = "False/True" ]; }
wait_for 30 "new group not ready yet: Ready=False, Reconciling=True" not_ready
mark_ready demo-broker-2
wait_for 60 "Ready again after group 2 is ready" is_ready

echo "-- the rendered broker config is accepted by the real broker"
CONVEYOR_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/conveyor"
if [ -x "$CONVEYOR_BIN" ]; then
  K get cm demo-broker-0-config -o jsonpath='{.data.demo-broker-0-1\.toml}' > "$D/broker.toml"
  NP=$(free_port); BP=$(free_port); HP=$(free_port)
  "$CONVEYOR_BIN" namesrv --listen "127.0.0.1:$NP" --http-listen off > "$D/namesrv.log" 2>&1 &
  PIDS+=($!)
  # The cluster has ACL on: the broker signs with the cluster's secret, as its pods do (the
  # operator's controller refuses anything else for this cluster).
  cluster_secret demo > "$D/cluster-secret"
  K get secret demo-acl-users -o jsonpath='{.data.plain_acl\.yml}' | base64 -d > "$D/plain_acl.yml"
  # It advertises the host's address (an EndpointSlice refuses loopback addresses).
  ADV_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1); exit}')
  ADV_IP=${ADV_IP:-$(hostname -I | awk '{print $1}')}
  # Flags override the file's listen/data/address settings (precedence: flags, env, file).
  "$CONVEYOR_BIN" broker --config "$D/broker.toml" --data-dir "$D/broker-data" --listen "127.0.0.1:$BP" \
    --http-listen "127.0.0.1:$HP" --grpc-listen 127.0.0.1:0 --advertised-addr "$ADV_IP:$BP" --namesrv-addr "127.0.0.1:$NP" \
    --acl-enabled true --acl-users-file "$D/plain_acl.yml" --acl-cluster-secret-file "$D/cluster-secret" > "$D/broker.log" 2>&1 &
  PIDS+=($!)
  # The rendered file names the operator's controller: the broker registers there, in the
  # cluster's scope, and is its group's first replica, so the controller makes it master.
  wait_for 30 "conveyor broker starts from the rendered config and is ready" curl -sf "http://127.0.0.1:$HP/readyz"
  master_is_1() { [ "$(K get mqc demo -o jsonpath='{.status.groups[0].master}/{.status.groups[0].epoch}/{.status.groups[0].inSyncReplicas[0]}')" = "demo-broker-0-1/1/demo-broker-0-1" ]; }
  wait_for 60 "status: the controller made the registered broker master of epoch 1" master_is_1
  saved_state() { K get cm demo-controller -o jsonpath='{.data.state\.json}' | grep -q '"masterEpoch":1'; }
  check "controller state saved in ConfigMap demo-controller" saved_state
  # Its group's master Service: a cluster IP the brokers register as the group's address,
  # whose EndpointSlice the operator points at the master it elected.
  group_address() {
    local ip; ip=$(K get svc demo-broker-0-master -o jsonpath='{.spec.clusterIP}')
    [ -n "$ip" ] && grep -q "group-address = \"$ip:10911\"" "$D/broker.toml"
  }
  check "the group's master Service has a cluster IP, which the rendered config names as the group's address" group_address
  slice_points_at_master() { [ "$(K get endpointslice demo-broker-0-master -o jsonpath='{.endpoints[0].addresses[0]}')" = "$ADV_IP" ]; }
  wait_for 30 "the master Service's EndpointSlice leads to the elected master ($ADV_IP)" slice_points_at_master
  check "controller state ConfigMap owned by the cluster" owned_ok configmap demo-controller
else
  skip "no $CONVEYOR_BIN although cargo build -p conveyor ran: rendered-config check skipped"
fi

echo "-- invalid manifests are rejected by the API server"
reject() { # name yaml-fragment expected-message
  local out
  if out=$(sed "s/^  name: demo$/  name: $1/" examples/messagequeuecluster.yaml | "$PY" -c "
import sys, yaml, json
d = yaml.safe_load(sys.stdin); patch = json.loads(sys.argv[1])
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict): merge(a[k], v)
        else: a[k] = v
merge(d, patch); print(json.dumps(d))" "$2" | kubectl apply -f - 2>&1); then
    bad "$1 was accepted: $out"
  elif grep -q "$3" <<<"$out"; then ok "$1 rejected: $3"
  else bad "$1 rejected with an unexpected message: $out"; fi
}
# PyYAML: the tools' venv has it (kubernetes-validate needs it); the system python3 may not.
PY=python3
if [ -x "$VPY" ] && "$VPY" -c 'import yaml' 2>/dev/null; then PY="$VPY"; fi
if "$PY" -c 'import yaml' 2>/dev/null; then
  reject bad-sync '{"spec":{"broker":{"replicationMode":"Sync","replicasPerGroup":1}}}' "replicationMode Sync needs broker.replicasPerGroup >= 2"
  # The schema's minimum or the CEL rule, not just "groups" (which the object's own name contains).
  reject bad-groups '{"spec":{"broker":{"groups":0}}}' "spec.broker.groups.*greater than or equal to 1\|broker.groups must be at least 1"
  reject bad-size '{"spec":{"broker":{"storage":{"size":"ten gigs"}}}}' "storage.size must be a positive quantity"
  reject bad-config '{"spec":{"broker":{"config":{"broker.broker-id":"3"}}}}' "must not override keys the operator manages"
  reject bad-flush '{"spec":{"broker":{"flushMode":"Sometimes"}}}' "Unsupported value"
else skip "python3 yaml module missing: CEL rejection checks skipped"; fi

echo "-- group scale-in drains instead of removing (no broker pod runs here: the drain waits)"
K patch mqc demo --type merge -p '{"spec":{"broker":{"groups":1}}}' >/dev/null   # from 3
draining() {
  [ "$(cond Stalled)" = False ] &&
    [ "$(K get mqc demo -o jsonpath='{.status.groups[*].drain}' | grep -o 'stopping writes' | wc -l)" = 2 ]
}
wait_for 60 "groups 1 and 2 draining (status.groups[].drain: stopping writes), not Stalled" draining
check "groups 1 and 2 still exist (nothing is removed before it is drained)" quiet K get sts demo-broker-1 demo-broker-2
check "Reconciling says what the drain waits for" bash -c \
  "kubectl get mqc demo -o jsonpath='{.status.conditions[?(@.type==\"Reconciling\")].message}' | grep -q 'draining demo-broker-2'"
K patch mqc demo --type merge -p '{"spec":{"broker":{"groups":3}}}' >/dev/null
undrained() { [ -z "$(K get mqc demo -o jsonpath='{.status.groups[*].drain}')" ] && [ "$(cond Stalled)" = False ] && status_current; }
wait_for 60 "restoring groups ends the drain" undrained
unstalled() { [ "$(cond Stalled)" = False ] && status_current; }
check "operator did not hot-loop (log lines < 400)" test "$(wc -l < "$D/operator.log")" -lt 400

echo "-- unsatisfiable config override (passes validation)"
K patch mqc demo --type merge -p '{"spec":{"broker":{"config":{"broker.delay-levels":"1s 5s"}}}}' >/dev/null
stalled_cfg() { [ "$(cond Stalled)/$(cond_reason Stalled)" = "True/InvalidConfig" ]; }
wait_for 60 "Stalled=True InvalidConfig with a message" stalled_cfg
K patch mqc demo --type json -p '[{"op":"remove","path":"/spec/broker/config/broker.delay-levels"}]' >/dev/null
wait_for 60 "fixing the override clears Stalled" unstalled

echo "-- pause annotation"
K annotate mqc demo conveyor.dev/pause-reconciliation=true >/dev/null
paused() { [ "$(cond Paused)" = True ]; }
wait_for 30 "Paused=True" paused
check "Argo CD health of the paused MessageQueueCluster: Suspended" \
  test "$(argocd_health messagequeuecluster "$(K get mqc demo -o json)" | cut -f1)" = Suspended
K patch mqc demo --type merge -p '{"spec":{"broker":{"flushMode":"Async"}}}' >/dev/null
sleep 4
check "paused: ConfigMap unchanged" cm_has sync
K annotate mqc demo conveyor.dev/pause-reconciliation- >/dev/null
wait_for 60 "unpaused: change applied" cm_has async

echo "-- API-server restart"
DOWN0=$(date +%s)
kill "$APISERVER_PID"; wait "$APISERVER_PID" 2>/dev/null || true   # graceful stop; can take a minute
sleep 2
start_apiserver "$D" "$KBIN" "$AP" 127.0.0.1 --authorization-mode=RBAC
echo "    API server was unavailable for $(( $(date +%s) - DOWN0 )) s (lease duration 15 s)"
K patch mqc demo --type merge -p '{"spec":{"broker":{"flushMode":"Sync"}}}' >/dev/null
wait_for 120 "operator reconciles after the restart" cm_has sync
check "operator process still running" kill -0 "$OP_PID"

echo "-- second operator replica stays follower"
POD_IP=192.0.2.11 KUBECONFIG="$D/kubeconfig-sa" "$OPERATOR" run --lease-namespace "$OPNS" --identity e2e-operator-2 "${CONTROLLER_FLAGS[@]}" > "$D/operator2.log" 2>&1 &
OP2=$!; PIDS+=("$OP2"); sleep 6
check "lease still held by the first replica" test "$(K get lease -n "$OPNS" conveyor-operator-leader -o jsonpath='{.spec.holderIdentity}')" = e2e-operator
kill "$OP_PID"; wait "$OP_PID" 2>/dev/null || true
takeover() { [ "$(K get lease -n "$OPNS" conveyor-operator-leader -o jsonpath='{.spec.holderIdentity}')" = e2e-operator-2 ]; }
wait_for 40 "second replica takes over after the first stops" takeover
slice_moved() { [ "$(K get endpointslice conveyor-operator-controller -n "$OPNS" -o jsonpath='{.endpoints[*].addresses[*]}')" = 192.0.2.11 ]; }
wait_for 30 "the controller Service's EndpointSlice now leads to the new leader only (192.0.2.11)" slice_moved
K patch mqc demo --type merge -p '{"spec":{"broker":{"flushMode":"Async"}}}' >/dev/null
wait_for 60 "new leader reconciles" cm_has async
if [ -x "$CONVEYOR_BIN" ]; then
  still_master() { [ "$(K get mqc demo -o jsonpath='{.status.groups[0].master}/{.status.groups[0].epoch}')" = "demo-broker-0-1/1" ]; }
  wait_for 60 "the new leader's controller resumes from the saved state (same master, same epoch)" still_master
  check "the broker is still ready (registered with the new leader)" quiet curl -sf "http://127.0.0.1:$HP/readyz"
fi

echo "-- pod template: labels, annotations, PriorityClass and grace period on every pod"
K patch mqc demo --type merge -p '{"spec":{"podTemplate":{"labels":{"team":"payments","app.kubernetes.io/name":"not-conveyor"},"annotations":{"policy.example.com/tier":"gold"},"priorityClassName":"system-cluster-critical","terminationGracePeriodSeconds":120}}}' >/dev/null
templated() {
  [ "$(K get sts demo-broker-0 -o jsonpath='{.spec.template.metadata.labels.team}/{.spec.template.metadata.labels.app\.kubernetes\.io/name}/{.spec.template.metadata.annotations.policy\.example\.com/tier}/{.spec.template.spec.priorityClassName}/{.spec.template.spec.terminationGracePeriodSeconds}')" = \
    "payments/conveyor/gold/system-cluster-critical/120" ] &&
    [ "$(K get sts demo-namesrv -o jsonpath='{.spec.template.metadata.labels.team}/{.spec.template.spec.terminationGracePeriodSeconds}')" = payments/120 ]
}
wait_for 60 "spec.podTemplate reaches the broker and name-server pod templates (the operator's labels win), accepted by the API server" templated

echo "-- probe timings and deleteClaim"
K patch mqc demo --type merge -p '{"spec":{"broker":{"storage":{"deleteClaim":true},"livenessProbe":{"failureThreshold":60},"readinessProbe":{"periodSeconds":2}},"nameServer":{"livenessProbe":{"initialDelaySeconds":90}}}}' >/dev/null
probed() {
  [ "$(K get sts demo-broker-0 -o jsonpath='{.spec.persistentVolumeClaimRetentionPolicy.whenDeleted}/{.spec.template.spec.containers[0].livenessProbe.failureThreshold}/{.spec.template.spec.containers[0].livenessProbe.periodSeconds}/{.spec.template.spec.containers[0].readinessProbe.periodSeconds}')" = Delete/60/10/2 ] &&
    [ "$(K get sts demo-namesrv -o jsonpath='{.spec.template.spec.containers[0].livenessProbe.initialDelaySeconds}')" = 90 ]
}
wait_for 60 "probe settings and deleteClaim reach the StatefulSets (unset timings keep their defaults), accepted by the API server" probed
refused_probe() { ! K patch mqc demo --type merge -p '{"spec":{"broker":{"livenessProbe":{"periodSeconds":0}}}}' >/dev/null 2>&1; }
check "a probe period of 0 is refused by the CRD schema" refused_probe

echo "-- volume expansion"
# No StatefulSet controller or provisioner runs here: the claims the StatefulSet controller
# would make are created by hand and marked Bound through their status (what the PV
# controller does), which is what the API server's resize admission looks at.
K apply -f - >/dev/null <<'EOF2'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: conveyor-expandable}
provisioner: example.com/no-provisioner
allowVolumeExpansion: true
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: conveyor-fixed}
provisioner: example.com/no-provisioner
allowVolumeExpansion: false
EOF2
claim() { # claim NAME CLASS: a bound 10Gi claim of the demo-broker-0 StatefulSet
  K apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $1, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: $2
  resources: {requests: {storage: 10Gi}}
EOF2
  K patch pvc "$1" --subresource=status --type merge -p '{"status":{"phase":"Bound","capacity":{"storage":"10Gi"}}}' >/dev/null
}
EX_REPLICAS=$(K get sts demo-broker-0 -o jsonpath='{.spec.replicas}')
claim data-demo-broker-0-0 conveyor-fixed
STS_UID=$(K get sts demo-broker-0 -o jsonpath='{.metadata.uid}')
K patch mqc demo --type merge -p '{"spec":{"broker":{"storage":{"size":"20Gi"}}}}' >/dev/null
refused_class() { [ "$(cond Stalled)/$(cond_reason Stalled)" = "True/StorageExpansionRefused" ] && K get mqc demo -o jsonpath='{.status.conditions[?(@.type=="Stalled")].message}' | grep -q "conveyor-fixed"; }
wait_for 60 "a claim whose StorageClass does not allow expansion: Stalled=True StorageExpansionRefused, naming the class" refused_class
check "... and nothing changed: the claim still asks 10Gi, the StatefulSet is the same one" test \
  "$(K get pvc data-demo-broker-0-0 -o jsonpath='{.spec.resources.requests.storage}')/$(K get sts demo-broker-0 -o jsonpath='{.metadata.uid}')" = "10Gi/$STS_UID"
K delete pvc data-demo-broker-0-0 --wait=true --timeout=30s >/dev/null 2>&1 || K patch pvc data-demo-broker-0-0 --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null
gone_claim() { ! K get pvc data-demo-broker-0-0 >/dev/null 2>&1; }
wait_for 30 "the fixed-class claim is gone" gone_claim
for i in $(seq 0 $((EX_REPLICAS - 1))); do claim "data-demo-broker-0-$i" conveyor-expandable; done
K annotate mqc demo conveyor.dev/nudge="$(date +%s)" --overwrite >/dev/null
expanded() {
  local i
  for i in $(seq 0 $((EX_REPLICAS - 1))); do
    [ "$(K get pvc "data-demo-broker-0-$i" -o jsonpath='{.spec.resources.requests.storage}')" = 20Gi ] || return 1
  done
  [ "$(K get sts demo-broker-0 -o jsonpath='{.spec.volumeClaimTemplates[0].spec.resources.requests.storage}')" = 20Gi ] &&
    [ "$(K get sts demo-broker-0 -o jsonpath='{.metadata.uid}')" != "$STS_UID" ] && [ "$(cond Stalled)" = False ]
}
wait_for 90 "StorageClass allows it: each of the $EX_REPLICAS claims asks 20Gi, the StatefulSet recreated with a 20Gi claim template, not Stalled" expanded
# (The recorder folds events of one reason into a series: the first group's note stands.)
expansion_event() {
  local events; events=$(K get events.events.k8s.io -o jsonpath='{range .items[*]}{.reason}: {.note}{"\n"}{end}')
  grep -q "^VolumeExpansion: demo-broker-[0-9]: claims .* grown to 20Gi" <<<"$events"
}
wait_for 30 "a VolumeExpansion event" expansion_event
K patch mqc demo --type merge -p '{"spec":{"broker":{"storage":{"size":"10Gi"}}}}' >/dev/null
refused_shrink() { [ "$(cond Stalled)/$(cond_reason Stalled)" = "True/StorageChangeRefused" ] && K get mqc demo -o jsonpath='{.status.conditions[?(@.type=="Stalled")].message}' | grep -q "cannot shrink"; }
wait_for 60 "a smaller size: Stalled=True StorageChangeRefused (volumes cannot shrink)" refused_shrink
K patch mqc demo --type merge -p '{"spec":{"broker":{"storage":{"size":"20Gi"}}}}' >/dev/null
wait_for 60 "back to 20Gi: not Stalled" unstalled
for i in $(seq 0 $((EX_REPLICAS - 1))); do K delete pvc "data-demo-broker-0-$i" --wait=false >/dev/null; done
K delete storageclass conveyor-expandable conveyor-fixed --wait=false >/dev/null

echo "-- the controller state is compare-and-set (two controllers on one ConfigMap)"
check "cargo test controller_state against the API server" quiet \
  cargo test -q -p conveyor-operator --test controller_state -- --ignored

echo "-- deletion"
K delete mqc demo --wait=true --timeout=30s >/dev/null
if [ -n "$HAVE_GC" ]; then
  gone() { ! K get sts demo-broker-0 && ! K get cm demo-broker-0-config && ! K get svc demo-namesrv && ! K get pdb demo-namesrv; }
  wait_for 90 "deleting the cluster removes what it owned (garbage collector)" gone
else
  skip "no kube-controller-manager: garbage collection does not run; owner references were verified above"
fi

SUMMARY=1
echo "== k8s: $PASS passed, $FAIL failed, $SKIP skipped (logs: $D, kept with KEEP_E2E_DIR=1)"
[ "$FAIL" = 0 ]
