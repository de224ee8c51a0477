#!/usr/bin/env bash
# The real-pod tier of the operator tests (issue 11): a one-node Kubernetes cluster on this
# machine, every part real: etcd, kube-apiserver, kube-controller-manager with its default
# controllers (StatefulSets, PDBs, EndpointSlices, PV binding, garbage collection),
# kube-scheduler, a kubelet on containerd + runc with a bridge CNI, kube-proxy (nftables mode)
# for ClusterIP Services, and CoreDNS for the cluster's names. The Conveyor image built by
# tests/k8s/image.sh is imported into containerd; broker claims bind to static hostPath PVs. The
# operator runs on the host against the API server, as in tests/k8s/e2e.sh.
#
# Checks: a MessageQueueCluster of 1 name server and 1 group x 2 replicas gets every pod
# Running and Ready; a selectorless ClusterIP Service with a hand-written EndpointSlice answers
# from the host and from a pod, and a new connection follows the EndpointSlice to another pod
# (how long kube-proxy took is printed); a Java producer on the host (pod IPs are reachable on
# the test bridge) sends and a Java consumer receives; a broker container killed with SIGKILL is
# restarted by the kubelet and is Ready again; ... At the end kube-proxy's rules are removed and
# the host's nftables ruleset and conntrack sysctls are checked against what they were before.
# PODS_ONLY=proxy stops after the ClusterIP checks (30-60 s once binaries and image are built).
#
# Facts and recipe: ../shared/docs/real-pods.md. Pods use 198.18.0.0/24 (RFC 2544's
# benchmarking range) on a bridge this script creates and removes; ClusterIPs are 198.18.1.0/24
# (routed to the bridge while it exists); CoreDNS and the node are 198.18.0.1, the bridge's
# address. Prints its wall time. Needs root (network namespaces, mounts, cgroups, nftables);
# under CI=true anything it cannot run fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export CONVEYOR_CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
T0=$(date +%s)
source tests/k8s/lib.sh
fatal() { echo "  FAIL $*"; echo "== pods: $PASS passed, $((FAIL+1)) failed"; exit 1; }

if [ "$(id -u)" != 0 ]; then
  if [ "${CI:-}" = true ]; then fatal "the real-pod tier needs root"; fi
  echo "  SKIP real pods: not root (containers, network namespaces and cgroups need it)"; exit 0
fi

echo "== real pods: packages"
missing=()
for t in containerd runc busybox nft nsenter; do command -v "$t" >/dev/null || missing+=("$t"); done
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
if ((${#missing[@]})); then
  pk=()
  for t in "${missing[@]}"; do
    case $t in busybox) pk+=(busybox-static) ;; nft) pk+=(nftables) ;; nsenter) pk+=(util-linux) ;; *) pk+=("$t") ;; esac
  done
  echo "  installing ${pk[*]} (Debian packages)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pk[@]}"; } \
    >"$CONVEYOR_CACHE/apt-pods.log" 2>&1 || fatal "could not install ${pk[*]} (see $CONVEYOR_CACHE/apt-pods.log)"
fi

echo "== real pods: binaries and images"
TOOLS=$(tests/k8s/install-tools.sh)
export PATH="$TOOLS:$PATH"
KBIN=$(tests/k8s/build-node.sh)
cargo build -q -p conveyor-operator -p conveyor
CONVEYOR_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/conveyor"
OPERATOR="${CARGO_TARGET_DIR:-$ROOT/target}/debug/conveyor-operator"
IMAGE=localhost/conveyor:0.1.0
S=(--storage-driver vfs)
podman "${S[@]}" image exists "$IMAGE" || bash tests/k8s/image.sh >/dev/null || fatal "image build (tests/k8s/image.sh)"

D=$(mktemp -d /tmp/conveyor-pods.XXXXXX)
NET=198.18.0
BR=cvpods0
# ClusterIPs, beside the pods' range: kube-proxy takes every packet the host sends to this range,
# so it must not be a network anything else uses (the API server's default 10.0.0.0/24 may be).
SVC_CIDR=198.18.1.0/24
PIDS=()
PROXY_PID=
# kube-proxy leaves its rules in place when it stops: `kube-proxy --cleanup` removes them (its
# nftables tables ip/ip6 kube-proxy, and the iptables and IPVS rules of its other modes if any).
stop_proxy() {
  [ -n "$PROXY_PID" ] || return 0
  disown "$PROXY_PID" 2>/dev/null || true # (no job report; the shell still reaps it)
  kill "$PROXY_PID" 2>/dev/null || true
  for _ in $(seq 50); do [ -d "/proc/$PROXY_PID" ] || break; sleep 0.1; done
  kill -9 "$PROXY_PID" 2>/dev/null || true
  PROXY_PID=
  "$KBIN/kube-proxy" --cleanup >> "$D/kube-proxy.log" 2>&1 || echo "  kube-proxy --cleanup failed (see $D/kube-proxy.log)"
}
# What kube-proxy could change on the host: the nftables ruleset (iptables-nft's tables
# included) and the conntrack sysctls it sets unless told not to.
host_net_state() {
  nft -s list ruleset 2>/dev/null # (without iptables-nft's "do not touch" warnings)
  for s in net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established \
    net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal \
    net.netfilter.nf_conntrack_udp_timeout net.netfilter.nf_conntrack_udp_timeout_stream \
    net.ipv4.conf.all.route_localnet; do
    echo "$s = $(sysctl -n "$s" 2>&1)"
  done
}
cleanup() {
  set +e
  disown -a # no job reports for what is killed below
  stop_proxy # first: its rules go while the cluster is still there to explain them
  # Newest first: the operator and the kubelet (which would restart containers) go before
  # the control plane and containerd.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  # The Java clients (a producer left running would write into the next run's cluster, which
  # gets the same pod IPs).
  pkill -9 -f -- "-Drocketmq.client.logRoot=$D/" 2>/dev/null
  # The containers' processes (everything in the pods' cgroups), then their shims.
  find /sys/fs/cgroup/*/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null
  pkill -9 -f "containerd-shim-runc-v2 .*-address $D/" 2>/dev/null
  sleep 1
  grep " $D/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null
  for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-'); do ip netns del "$n" 2>/dev/null; done
  ip link del "$BR" 2>/dev/null
  for c in /sys/fs/cgroup/*/; do
    find "$c" -depth -type d \( -path '*kubepods*' -o -path '*k8s.io*' \) -exec rmdir {} \; 2>/dev/null
  done
  [ -n "${KEEP_PODS_DIR:-}" ] && echo "  kept $D" || rm -rf "$D"
}
trap cleanup EXIT

# The pause image (the sandbox's init) and the Conveyor image into containerd's CRI namespace.
cat > "$D/pause.c" <<'EOF'
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGINT, stop); signal(SIGTERM, stop); signal(SIGCHLD, reap);
  for (;;) pause();
}
EOF
mkdir -p "$D/pause-root"
gcc -O2 -static -o "$D/pause-root/pause" "$D/pause.c"
c=$(buildah "${S[@]}" from scratch)
buildah "${S[@]}" copy "$c" "$D/pause-root/pause" /pause >/dev/null
buildah "${S[@]}" config --entrypoint '["/pause"]' "$c"
buildah "${S[@]}" commit -q "$c" localhost/pause:pods >/dev/null
buildah "${S[@]}" rm "$c" >/dev/null
buildah "${S[@]}" push -q localhost/pause:pods "docker-archive:$D/pause.tar:localhost/pause:pods"
podman "${S[@]}" save -q --format docker-archive -o "$D/conveyor.tar" "$IMAGE"

echo "== real pods: cluster"
# Nothing on this host may route the pods' or the Services' range already (a bridge left by a
# killed run, a real network): the test would take its traffic, or lose its own to it.
for r in "$NET.0/24" "$SVC_CIDR"; do
  used=$({ ip -4 route show root "$r"; ip -4 route show match "$r"; } | grep -v '^default' || true)
  [ -z "$used" ] || fatal "$r is already routed on this host: $used"
done
ip link add "$BR" type bridge
ip addr add "$NET.1/24" dev "$BR"
ip link set "$BR" up
# ClusterIPs to the bridge (the route goes with it): kube-proxy rewrites what the host sends
# there to a pod; anything it does not rewrite stays on the bridge, never leaves the machine.
ip route add "$SVC_CIDR" dev "$BR"
mkdir -p "$D/containerd/root" "$D/containerd/state" "$D/cni/net.d" "$D/cni/ipam"
cat > "$D/containerd/config.toml" <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
[grpc]
  address = "$D/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:pods"
  # No CAP_SYS_RESOURCE here: negative oom_score_adj is refused (real-pods.md §2).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
EOF
cat > "$D/cni/net.d/10-pods.conflist" <<EOF
{"cniVersion":"0.4.0","name":"conveyor-pods","plugins":[
 {"type":"bridge","bridge":"$BR","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"$NET.0/24","rangeStart":"$NET.10"}]],
          "routes":[{"dst":"0.0.0.0/0"}],"dataDir":"$D/cni/ipam"}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
EOF
containerd --config "$D/containerd/config.toml" > "$D/containerd.log" 2>&1 &
PIDS+=($!)
SOCK="$D/containerd/containerd.sock"
for _ in $(seq 100); do [ -S "$SOCK" ] && ctr -a "$SOCK" version >/dev/null 2>&1 && break; sleep 0.1; done
ctr -a "$SOCK" -n k8s.io images import "$D/pause.tar" >/dev/null
ctr -a "$SOCK" -n k8s.io images import "$D/conveyor.tar" >/dev/null
ok "containerd up, pause and Conveyor images imported"

AP=$(free_port)
start_etcd "$D" "$KBIN"
apiserver_credentials "$D"
SERVICE_CIDR=$SVC_CIDR start_apiserver "$D" "$KBIN" "$AP" "$NET.1" --authorization-mode=Node,RBAC || fatal "apiserver not ready"
export KUBECONFIG="$D/kubeconfig"
write_kubeconfig "$KUBECONFIG" "$D" "$AP" pods
K() { kubectl --request-timeout=20s "$@"; }
"$KBIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" --controllers='*' --leader-elect=false \
  --bind-address=127.0.0.1 --secure-port=0 --use-service-account-credentials=false \
  --service-account-private-key-file="$D/sa.key" --root-ca-file="$D/certs/apiserver.crt" \
  > "$D/kcm.log" 2>&1 &
PIDS+=($!)
"$KBIN/kube-scheduler" --kubeconfig="$KUBECONFIG" --leader-elect=false --bind-address=127.0.0.1 --secure-port=0 \
  > "$D/scheduler.log" 2>&1 &
PIDS+=($!)
cat > "$D/Corefile" <<EOF
.:53 {
    bind $NET.1
    errors
    kubernetes cluster.local {
        kubeconfig $KUBECONFIG pods
    }
}
EOF
"$KBIN/coredns" -conf "$D/Corefile" > "$D/coredns.log" 2>&1 &
PIDS+=($!)
mkdir -p "$D/kubelet"
cat > "$D/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$SOCK
address: $NET.1
port: $(free_port)
healthzBindAddress: 127.0.0.1
healthzPort: $(free_port)
readOnlyPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
clusterDNS: [$NET.1]
clusterDomain: cluster.local
oomScoreAdj: 0
failSwapOn: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
EOF
"$KBIN/kubelet" --config="$D/kubelet.yaml" --kubeconfig="$KUBECONFIG" --root-dir="$D/kubelet" \
  --node-ip="$NET.1" --hostname-override=pods-node-0 > "$D/kubelet.log" 2>&1 &
PIDS+=($!)

node_ready() { [ "$(K get node pods-node-0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
wait_for 120 "node pods-node-0 Ready (kubelet on containerd)" node_ready || {
  tail -30 "$D/kubelet.log"; fatal "no Ready node"; }
# The node's zone, which the operator records in each broker it runs (same-zone reads).
K label node pods-node-0 topology.kubernetes.io/zone=zone-a --overwrite >/dev/null

# kube-proxy for the ClusterIP data path, nftables mode: its own tables (ip/ip6 kube-proxy),
# nothing added to the host's iptables chains, no INVALID-drop rule in FORWARD, no
# route_localnet. It changes no sysctl: conntrack size and timeouts 0 = left as they are.
# NodePorts (none yet) only on the node's bridge address. Default sync periods (min 1 s).
KP_HEALTH=$(free_port)
cat > "$D/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: $KUBECONFIG}
hostnameOverride: pods-node-0
clusterCIDR: $NET.0/24
detectLocalMode: ClusterCIDR
nodePortAddresses: [$NET.1/32]
healthzBindAddress: 127.0.0.1:$KP_HEALTH
metricsBindAddress: 127.0.0.1:$(free_port)
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, udpTimeout: 0s, udpStreamTimeout: 0s}
EOF
host_net_state > "$D/host-net-before.txt"
"$KBIN/kube-proxy" --config="$D/kube-proxy.yaml" --v=2 > "$D/kube-proxy.log" 2>&1 &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
proxy_up() { curl -sf "http://127.0.0.1:$KP_HEALTH/healthz" >/dev/null && nft list table ip kube-proxy >/dev/null; }
wait_for 60 "kube-proxy (nftables mode) up, its rules written" proxy_up || {
  tail -20 "$D/kube-proxy.log"; fatal "no kube-proxy"; }

# Static PVs for the broker claims (one per replica), owned by the image's user.
for i in 0 1 2 3; do
  mkdir -p "$D/pv/$i" && chown 10001:10001 "$D/pv/$i"
  cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pods-pv-$i}
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: ""
  hostPath: {path: $D/pv/$i, type: Directory}
EOF
done > "$D/pvs.yaml"
K apply -f "$D/pvs.yaml" >/dev/null && ok "static hostPath PVs created"

echo "== real pods: the operator and a cluster"
K apply --server-side -f crds/ >/dev/null
K wait --for=condition=Established crd/messagequeueclusters.conveyor.dev crd/messagequeueusers.conveyor.dev --timeout=30s >/dev/null
# The operator runs on the host, as the chart deploys it but for the pod: brokers reach its
# replication controller through the selectorless controller Service by its DNS name, and the
# leading replica points the Service's EndpointSlice at itself (its "pod IP" is the bridge's
# gateway address; it listens on every address: the bridge may not exist yet). Replica a runs
# throughout; replica b joins as a standby for the leader-kill checks. Short leases there
# (6 s, renewed every 2 s) keep ten leader changes within two minutes.
K apply -f - >/dev/null <<'EOF2'
apiVersion: v1
kind: Service
metadata: {name: conveyor-operator-controller, namespace: default}
spec:
  ports: [{name: controller, port: 9878, protocol: TCP}]
EOF2
declare -A CTRL_PORT OP_PIDS
CTRL_PORT[a]=$(free_port)
CTRL_PORT[b]=$(free_port)
start_operator() { # [a|b]
  local r=${1:-a} http=(); [ "$r" = a ] || http=(--http-listen off)
  POD_IP="$NET.1" "$OPERATOR" run --lease-namespace default --identity "pods-operator-$r" \
    --lease-duration-secs 6 --lease-renew-secs 2 "${http[@]}" \
    --controller-listen "0.0.0.0:${CTRL_PORT[$r]}" --controller-service conveyor-operator-controller \
    --controller-advertise conveyor-operator-controller.default.svc:9878 >> "$D/operator.log" 2>&1 &
  OP_PIDS[$r]=$!
  PIDS+=("$!")
  if [ "$r" = a ]; then OP_PID=$!; fi
}
start_operator a
# The brokers' logs outlive their pods (the kubelet removes a deleted pod's logs): copied every
# second, so a failed check can show what the brokers did meanwhile.
mkdir -p "$D/broker-logs"
(while sleep 1; do
  for f in /var/log/pods/default_pods-broker-*/broker/*.log; do
    [ -f "$f" ] && cp -u "$f" "$D/broker-logs/$(basename "$(dirname "$(dirname "$f")")")-$(basename "$f")"
  done
done) &
PIDS+=($!)
cat > "$D/mqc.yaml" <<EOF
apiVersion: conveyor.dev/v1alpha1
kind: MessageQueueCluster
metadata: {name: pods, namespace: default}
spec:
  image: $IMAGE
  imagePullPolicy: IfNotPresent
  nameServer:
    replicas: 1
    resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {memory: 256Mi}}
  broker:
    groups: 1
    replicasPerGroup: 2
    flushMode: Async
    replicationMode: Sync
    storage: {size: 1Gi}
    resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {memory: 1Gi}}
    config:
      store.segment-size: "67108864"
  security:
    acl: {enabled: true}
---
apiVersion: conveyor.dev/v1alpha1
kind: MessageQueueUser
metadata: {name: pods-admin, namespace: default}
spec: {clusterRef: {name: pods}, admin: true}
---
apiVersion: conveyor.dev/v1alpha1
kind: MessageQueueUser
metadata: {name: pods-client, namespace: default}
spec: {clusterRef: {name: pods}, defaultTopicPermission: PubSub, defaultGroupPermission: Sub}
EOF
K apply -f "$D/mqc.yaml" >/dev/null
pods_ready() {
  local want=3 n
  n=$(K get pods -l app.kubernetes.io/instance=pods -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)
  [ "$n" = "$want" ]
}
if ! wait_for 300 "3 pods Running and Ready (name server, master, slave)" pods_ready; then
  K get pods -o wide || true
  K describe pods | tail -40 || true
  tail -20 "$D/kubelet.log"
fi
K get pods -o wide | sed 's/^/    /'

echo "== real pods: ClusterIP Services through kube-proxy"
cat > "$D/svc-probe.py" <<'EOF'
# A connection through a ClusterIP, and which pod kube-proxy sent it to: the connection's
# conntrack entry (/proc/net/nf_conntrack), whose reply direction comes from the endpoint.
#   get IP PORT [PATH]                 one new connection: prints "ENDPOINT STATUS" (STATUS "-"
#                                      without PATH; an HTTP GET of PATH with it)
#   until IP PORT PATH WANT SEC        a new connection every 20 ms (0.5 s timeout) until one
#                                      reaches WANT and answers 200: prints "AT OTHER FAILED
#                                      LAST_OTHER" (epoch ms of that one; how many reached
#                                      another endpoint, the last of them at LAST_OTHER, 0 for
#                                      none; how many failed), or "timeout ..." after SEC s
#   hold IP PORT PATH STOPFILE         one connection kept open (HTTP keep-alive), a GET on it
#                                      every 100 ms until STOPFILE exists: prints "first ENDPOINT"
#                                      once it is up, then what became of it
import http.client, os, sys, time

def endpoint(sock, ip, port):
    lport = str(sock.getsockname()[1])
    with open('/proc/net/nf_conntrack') as f:
        for line in f:
            kv = {}
            for tok in line.split():
                if '=' in tok:
                    k, v = tok.split('=', 1)
                    kv.setdefault(k, []).append(v)
            if len(kv.get('src', [])) < 2 or len(kv.get('sport', [])) < 1:
                continue
            if kv['dst'][0] == ip and kv['sport'][0] == lport and kv['dport'][0] == str(port):
                return kv['src'][1]
    return '?'

def connect(ip, port, timeout=2):
    c = http.client.HTTPConnection(ip, port, timeout=timeout)
    c.connect()
    return c

def get(c, path):
    c.request('GET', path)
    r = c.getresponse()
    r.read()
    return r.status

def main(argv):
    mode, ip, port = argv[0], argv[1], int(argv[2])
    if mode == 'get':
        c = connect(ip, port)
        ep = endpoint(c.sock, ip, port)
        status = get(c, argv[3]) if len(argv) > 3 else '-'
        c.close()
        print(ep, status)
        return 0
    if mode == 'until':
        path, want, limit = argv[3], argv[4], time.time() + float(argv[5])
        other = failed = last_other = 0
        while time.time() < limit:
            try:
                c = connect(ip, port, 0.5)
                at = int(time.time() * 1000)
                ep = endpoint(c.sock, ip, port)
                status = get(c, path)
                c.close()
                if ep == want and status == 200:
                    print(at, other, failed, last_other)
                    return 0
                other, last_other = other + 1, at
            except (OSError, http.client.HTTPException):
                failed += 1
            time.sleep(0.02)
        print('timeout', other, failed, last_other)
        return 1
    if mode == 'hold':
        path, stop = argv[3], argv[4]
        c = connect(ip, port)
        first = endpoint(c.sock, ip, port)
        get(c, path)
        print('first', first, flush=True)
        t0, n, errors, last_error = time.time(), 0, 0, ''
        while not os.path.exists(stop):
            time.sleep(0.1)
            try:
                n += 1
                if get(c, path) != 200:
                    errors += 1
            except (OSError, http.client.HTTPException) as e:
                errors += 1
                last_error = repr(e)
                break
        ep = endpoint(c.sock, ip, port)
        print(f'{n} GETs on it over {time.time() - t0:.1f} s, {errors} failed{" (" + last_error + ")" if last_error else ""};'
              f' endpoint at the start {first}, at the end {ep}')
        return 0
    return 2

sys.exit(main(sys.argv[1:]))
EOF
probe() { python3 "$D/svc-probe.py" "$@"; }
[ -r /proc/net/nf_conntrack ] || bad "no /proc/net/nf_conntrack: the probes cannot tell which pod a connection reached"
task_pid() {
  local id; id=$(K get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's#.*//##')
  ctr -a "$SOCK" -n k8s.io task ls | awk -v id="$id" '$1 == id {print $2}'
}
# A selectorless Service and an EndpointSlice written by hand, as the operator will write a
# group's master Service: the slice carries kubernetes.io/service-name, and a managed-by that is
# not the kcm's (endpointslice-controller.k8s.io). It points at one broker's HTTP port, then at
# the other's.
B0_IP=$(K get pod pods-broker-0-0 -o jsonpath='{.status.podIP}')
B1_IP=$(K get pod pods-broker-0-1 -o jsonpath='{.status.podIP}')
svc_to() {
  cat <<EOF
apiVersion: v1
kind: Service
metadata: {name: pods-proxy-check, namespace: default}
spec:
  ports: [{name: http, port: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: pods-proxy-check-0
  namespace: default
  labels:
    kubernetes.io/service-name: pods-proxy-check
    endpointslice.kubernetes.io/managed-by: pods-e2e.conveyor.dev
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: ["$2"]
  conditions: {ready: true}
  nodeName: pods-node-0
  targetRef: {kind: Pod, namespace: default, name: $1}
EOF
}
SVC_T0=$(date +%s%3N)
svc_to pods-broker-0-0 "$B0_IP" | K apply -f - >/dev/null
SVC_IP=$(K get svc pods-proxy-check -o jsonpath='{.spec.clusterIP}')
read -r at other failed _ < <(probe until "$SVC_IP" 8080 /healthz "$B0_IP" 30)
if [[ "${at:-}" =~ ^[0-9]+$ ]]; then
  ok "the host reaches the selectorless Service $SVC_IP:8080 at its EndpointSlice's pod (pods-broker-0-0, $B0_IP)"
  echo "    first answer $((at - SVC_T0)) ms after kubectl began to write the Service and its EndpointSlice ($failed connections failed before)"
else
  bad "the host does not reach the selectorless Service $SVC_IP:8080 within 30 s (${other:-?} connections reached another pod, ${failed:-?} failed)"
fi
NS_PID=$(task_pid pods-namesrv-0)
from_pod() { nsenter -t "$NS_PID" -n python3 "$D/svc-probe.py" get "$SVC_IP" 8080 /healthz | grep -q ' 200$'; }
check "a pod reaches it too (from the name server pod's network namespace)" from_pod
# The EndpointSlice moved to the other broker: new connections (one every 20 ms, from before
# the move) must reach it within 5 s. A connection opened before the move is kept open
# meanwhile (HTTP keep-alive, a GET every 100 ms): kube-proxy leaves TCP conntrack entries
# alone, so it stays on the old pod.
# move_to POD IP: one PATCH of the EndpointSlice (curl: no kubectl start-up in the measured
# time) while new connections are probed; sets AT (ms from the PATCH's return to the first new
# connection on POD, or "timeout"), RTT (the PATCH's round trip), LAST_OTHER (ms from its return
# to the last new connection elsewhere) and FAILED (new connections that failed).
move_to() {
  local t0 t1 at other last_other
  probe until "$SVC_IP" 8080 /healthz "$2" 15 > "$D/until.out" &
  local until_pid=$!
  sleep 0.3 # (new connections on the old pod first)
  t0=$(date +%s%3N)
  curl -sf --cacert "$D/certs/apiserver.crt" -H "Authorization: Bearer admin-token" -X PATCH \
    -H 'Content-Type: application/merge-patch+json' -o /dev/null \
    -d "{\"endpoints\":[{\"addresses\":[\"$2\"],\"conditions\":{\"ready\":true},\"nodeName\":\"pods-node-0\",\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"default\",\"name\":\"$1\"}}]}" \
    "https://127.0.0.1:$AP/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/pods-proxy-check-0" ||
    bad "PATCH of the EndpointSlice pods-proxy-check-0 (to $1)"
  t1=$(date +%s%3N)
  wait "$until_pid" || true
  read -r at other FAILED last_other < "$D/until.out" || true
  RTT=$((t1 - t0))
  if [[ "${at:-}" =~ ^[0-9]+$ ]]; then AT=$((at - t1)); LAST_OTHER=$((last_other - t1)); else AT=timeout; fi
}
rm -f "$D/hold-stop"
probe hold "$SVC_IP" 8080 /healthz "$D/hold-stop" > "$D/hold.out" 2>&1 &
HOLD=$!
held() { grep -q '^first ' "$D/hold.out"; }
wait_for 10 "a connection through the Service held open" held
sleep 1.5 # (kube-proxy's last sync over a second ago, as in a quiet cluster)
move_to pods-broker-0-1 "$B1_IP"
if [ "$AT" != timeout ] && [ "$AT" -le 5000 ]; then
  ok "after the EndpointSlice moved to pods-broker-0-1 ($B1_IP), new connections reach it (within 5 s)"
  echo "    kube-proxy took $AT ms: the first new connection on the new pod, after the PATCH returned" \
    "($RTT ms round trip); the last on the old pod $LAST_OTHER ms after; $FAILED failed"
else
  bad "after the EndpointSlice moved to pods-broker-0-1 ($B1_IP), no new connection reached it within 5 s ($(cat "$D/until.out"))"
fi
sleep 1
touch "$D/hold-stop"; wait "$HOLD" || true
echo "    the connection opened before the move: $(tail -n 1 "$D/hold.out")"
# At once back: kube-proxy syncs at most once per minSyncPeriod (1 s), so a change right after
# another waits for the rest of that second.
move_to pods-broker-0-0 "$B0_IP"
echo "    moved straight back to pods-broker-0-0: $AT ms after the PATCH returned (kube-proxy's minSyncPeriod, 1 s); $FAILED failed"
K delete svc pods-proxy-check --wait=false >/dev/null
K delete endpointslice pods-proxy-check-0 --wait=false >/dev/null
# The name servers' client Service: a selector, so the kcm writes its EndpointSlice.
NSVC_IP=$(K get svc pods-namesrv -o jsonpath='{.spec.clusterIP}')
NS_POD_IP=$(K get pod pods-namesrv-0 -o jsonpath='{.status.podIP}')
ns_via_svc() { [ "$(probe get "$NSVC_IP" 9876)" = "$NS_POD_IP -" ]; }
check "the name servers' client Service (pods-namesrv, $NSVC_IP:9876, the kcm's EndpointSlice) reaches the name server pod" ns_via_svc

# The end: kube-proxy stopped and its rules removed, the host as before, the tally.
finish() {
  stop_proxy
  host_net_state > "$D/host-net-after.txt"
  if diff -u "$D/host-net-before.txt" "$D/host-net-after.txt" > "$D/host-net.diff"; then
    ok "kube-proxy stopped and cleaned up (kube-proxy --cleanup): the host's nftables ruleset and conntrack sysctls are as before it started"
  else
    bad "the host's nftables ruleset or conntrack sysctls differ from before kube-proxy started"
    head -40 "$D/host-net.diff" | sed 's/^/    /'
  fi
  echo "== pods: $PASS passed, $FAIL failed; wall time $(( $(date +%s) - T0 )) s (logs in $D, kept with KEEP_PODS_DIR=1)"
  [ "$FAIL" = 0 ]
}
if [ "${PODS_ONLY:-}" = proxy ]; then finish; exit; fi

mqc_ready() { [ "$(K get mqc pods -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
wait_for 120 "MessageQueueCluster Ready=True" mqc_ready
group_status() { K get mqc pods -o jsonpath='{.status.groups[0].master}/{.status.groups[0].epoch}/{.status.groups[0].inSyncReplicas}'; }
both_in_sync() { [[ "$(group_status)" == pods-broker-0-*/*/*pods-broker-0-0*pods-broker-0-1* ]]; }
wait_for 120 "the operator's controller elected a master and both replicas are in sync" both_in_sync
echo "    group: $(group_status)"

# ACL is on: every client signs. The users' credentials come from the Secrets the operator
# wrote for their MessageQueueUsers; `conveyor admin` signs as the admin user from here on.
secret_val() { K get secret "$1" -o jsonpath="{.data.$2}" | base64 -d; }
user_secret() { [ "$(secret_val "$1" accessKey 2>/dev/null)" = "$1" ] && [ -n "$(secret_val "$1" secretKey 2>/dev/null)" ]; }
both_users() { user_secret pods-admin && user_secret pods-client; }
wait_for 60 "MessageQueueUsers pods-admin and pods-client got their credentials Secrets" both_users
export CONVEYOR_ACCESS_KEY=pods-admin CONVEYOR_SECRET_KEY="$(secret_val pods-admin secretKey)"
CLIENT_SK=$(secret_val pods-client secretKey)

echo "== real pods: a Java client on the host"
"$ROOT/tests/compat/fetch.sh" >/dev/null 2>&1 || true
NS_IP=$(K get pod pods-namesrv-0 -o jsonpath='{.status.podIP}')
# Zones: the operator copies the node's zone label onto each broker pod; the broker reads it
# through the downward API and registers it (the group's zoneName in the routes).
pod_zone() { K get pod "$1" -o jsonpath='{.metadata.annotations.conveyor\.dev/zone}'; }
zone_recorded() { [ "$(pod_zone pods-broker-0-0)" = zone-a ] && [ "$(pod_zone pods-broker-0-1)" = zone-a ]; }
wait_for 60 "the operator recorded the node's zone on both broker pods (conveyor.dev/zone)" zone_recorded
group_zone() {
  local out # (captured first: grep -q closing the pipe early would fail the pipeline)
  out=$("$CONVEYOR_BIN" admin cluster --namesrv-addr "$NS_IP:9876" 2>/dev/null) || return 1
  awk '$2 == "pods-broker-0" { print $3 }' <<<"$out" | grep -qx zone-a
}
wait_for 180 "the brokers read it and registered it: the group's zoneName is zone-a" group_zone
CP="$(cat "$CONVEYOR_CACHE/compat/java-rmq5.classpath" 2>/dev/null || true)"
if [ -n "$CP" ] && [ -n "$NS_IP" ]; then
  mkdir -p "$D/ledger" "$D/java"
  # The ledger programs sign as pods-client (AclClientRPCHook), or as LEDGER_USER with LEDGER_SK.
  java_run() {
    LEDGER_ACCESS_KEY="${LEDGER_USER:-pods-client}" LEDGER_SECRET_KEY="${LEDGER_SK:-$CLIENT_SK}" \
    java -Xms64m -Xmx512m -Drocketmq.client.logRoot="$D/java" -Duser.home="$D/java" \
      -cp "$CP" conveyor.compat.Ledger "$@"
  }
  (java_run produce-defaults "$NS_IP:9876" PodsTopic "$D/ledger" > "$D/producer.out" 2>"$D/producer.log") &
  PRODUCER=$!
  acked() { [ "$(wc -l < "$D/ledger/ok" 2>/dev/null || echo 0)" -ge 200 ]; }
  wait_for 120 "the Java producer got 200 SEND_OK from the broker pods" acked
  # The master's container killed with SIGKILL: the operator promotes the in-sync slave, the
  # kubelet restarts the container, and the old master rejoins as a slave.
  MASTER_POD=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
  EPOCH0=$(K get mqc pods -o jsonpath='{.status.groups[0].epoch}')
  case "$MASTER_POD" in pods-broker-0-0) OTHER=pods-broker-0-1 ;; *) OTHER=pods-broker-0-0 ;; esac
  master=$(K get pod "$MASTER_POD" -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's#.*//##')
  restarts0=$(K get pod "$MASTER_POD" -o jsonpath='{.status.containerStatuses[0].restartCount}')
  pid=$(ctr -a "$SOCK" -n k8s.io task ls | awk -v id="$master" '$1 == id {print $2}')
  if [ -n "$pid" ]; then
    KILLED_AT=$(date +%s%3N)
    kill -9 "$pid"
    promoted() { [ "$(K get mqc pods -o jsonpath='{.status.groups[0].master}/{.status.groups[0].epoch}')" = "$OTHER/$((EPOCH0 + 1))" ]; }
    wait_for 60 "the operator promoted $OTHER in epoch $((EPOCH0 + 1)) (status)" promoted
    echo "    promotion reported $(( $(date +%s%3N) - KILLED_AT )) ms after the kill; $(group_status)"
    promoted_event() { K get events.events.k8s.io -o jsonpath='{range .items[*]}{.reason}: {.note}{"\n"}{end}' | grep -q "MasterPromoted: pods-broker-0: $OTHER is master in epoch $((EPOCH0 + 1))"; }
    wait_for 30 "a MasterPromoted event names the new master and epoch" promoted_event
    restarted() {
      [ "$(K get pod "$MASTER_POD" -o jsonpath='{.status.containerStatuses[0].restartCount}')" -gt "$restarts0" ] &&
        [ "$(K get pod "$MASTER_POD" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
    }
    wait_for 180 "the killed broker container is restarted by the kubelet and Ready again" restarted
    # Unwritable time from the producer's side: the longest time between two SEND_OKs from
    # just before the kill until the producer has written for 5 s again.
    resumed() { [ "$(awk -v k="$((KILLED_AT + 5000))" '$1 >= k' "$D/ledger/ok-at" | wc -l)" -gt 0 ]; }
    wait_for 120 "the producer (client defaults) writes again after the kill" resumed
    gap=$(awk -v a="$((KILLED_AT - 1000))" '$1 >= a {if (p && $1 - p > g) g = $1 - p; p = $1} END {print g + 0}' "$D/ledger/ok-at")
    echo "    unwritable after the SIGKILL (longest time between two SEND_OKs, Java client defaults): $gap ms"
    wait_for 120 "the restarted former master rejoined as a slave and is in sync again (master still $OTHER)" \
      bash -c "[[ \"\$(kubectl get mqc pods -o jsonpath='{.status.groups[0].master}/{.status.groups[0].inSyncReplicas}')\" == $OTHER/*pods-broker-0-0*pods-broker-0-1* ]]"
    degraded=$(K get mqc pods -o jsonpath='{.status.conditions[?(@.type=="Degraded")].status}')
    check "not Degraded after the failover" test "$degraded" = False

    # The master's pod deleted (a new pod, a new IP) while the operator is killed, so the
    # promotion it would start never runs there; the operator comes back on the same state.
    M1=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
    E1=$(K get mqc pods -o jsonpath='{.status.groups[0].epoch}')
    kill -9 "$OP_PID"; wait "$OP_PID" 2>/dev/null || true
    UID1=$(K get pod "$M1" -o jsonpath='{.metadata.uid}')
    K delete pod "$M1" --wait=false >/dev/null
    recreated() {
      local uid; uid=$(K get pod "$M1" -o jsonpath='{.metadata.uid}' 2>/dev/null)
      [ -n "$uid" ] && [ "$uid" != "$UID1" ] && [ "$(K get pod "$M1" -o jsonpath='{.status.phase}')" = Running ]
    }
    wait_for 120 "the deleted master pod $M1 is recreated by its StatefulSet (operator down)" recreated
    start_operator
    wait_for 120 "with the operator back: one master, both replicas in sync" both_in_sync
    echo "    group: $(group_status) (before: master $M1 in epoch $E1)"
    # What each broker says of itself (/metrics: role 1 master, 2 slave, 0 fenced), against the
    # status: exactly one master, the one the status names, in the status' epoch.
    broker_roles() {
      local p ip metrics
      roles=""
      for p in pods-broker-0-0 pods-broker-0-1; do
        ip=$(K get pod "$p" -o jsonpath='{.status.podIP}')
        metrics=$(curl -sf --max-time 5 "http://$ip:8080/metrics")
        roles+="$p role=$(awk '$1 == "conveyor_replication_role" {print $2}' <<<"$metrics")"
        roles+=" epoch=$(awk '$1 == "conveyor_replication_epoch" {print $2}' <<<"$metrics"); "
      done
    }
    one_master() {
      broker_roles
      status_master=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
      status_epoch=$(K get mqc pods -o jsonpath='{.status.groups[0].epoch}')
      [ "$(grep -o 'role=1 ' <<<"$roles" | wc -l)" = 1 ] &&
        grep -q "$status_master role=1 epoch=$status_epoch;" <<<"$roles" && [ "$status_epoch" -ge "$E1" ]
    }
    wait_for 60 "exactly one broker says it is master: the one the status names, in the status' epoch" one_master
    broker_roles
    echo "    brokers: $roles(status: $(group_status))"
  else bad "no task for the master container $master"; fi

  # The master's container frozen (SIGSTOP) for 30 s, as a hung process or node leaves it
  # (issue 26): the operator's controller replaces it after the detection time and points the
  # group's master Service, whose address the route names, at the new master; the producer
  # (client defaults: no route change for 30 s) writes again within 10 s. Thawed, the former
  # master finds itself deposed and rejoins as a slave.
  echo "== real pods: the master container frozen for 30 s"
  wait_for 120 "both replicas in sync before the freeze" both_in_sync
  F_MASTER=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
  case "$F_MASTER" in pods-broker-0-0) F_OTHER=pods-broker-0-1 ;; *) F_OTHER=pods-broker-0-0 ;; esac
  fcid=$(K get pod "$F_MASTER" -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's#.*//##')
  fpid=$(ctr -a "$SOCK" -n k8s.io task ls | awk -v id="$fcid" '$1 == id {print $2}')
  if [ -n "$fpid" ]; then
    FROZEN_AT=$(date +%s%3N)
    kill -STOP "$fpid"
    f_promoted() { [ "$(K get mqc pods -o jsonpath='{.status.groups[0].master}')" = "$F_OTHER" ]; }
    wait_for 30 "the frozen master $F_MASTER is replaced by $F_OTHER" f_promoted
    slice_moved() {
      [ "$(K get endpointslice pods-broker-0-master -o jsonpath='{.endpoints[0].addresses[0]}')" = \
        "$(K get pod "$F_OTHER" -o jsonpath='{.status.podIP}')" ]
    }
    wait_for 30 "the group's master Service leads to $F_OTHER" slice_moved
    # The fault lasts 30 s, whatever happened meanwhile.
    left=$((FROZEN_AT + 30000 - $(date +%s%3N)))
    if [ "$left" -gt 0 ]; then sleep "$(awk -v l="$left" 'BEGIN {print l / 1000}')"; fi
    kill -CONT "$fpid"
    f_resumed() { [ "$(awk -v k="$((FROZEN_AT + 35000))" '$1 >= k' "$D/ledger/ok-at" | wc -l)" -gt 0 ]; }
    wait_for 60 "the producer (client defaults) still writes after the thaw" f_resumed
    fgap=$(awk -v a="$((FROZEN_AT - 1000))" -v b="$((FROZEN_AT + 35000))" \
      '$1 >= a && $1 <= b {if (p && $1 - p > g) g = $1 - p; p = $1} END {print g + 0}' "$D/ledger/ok-at")
    echo "    unwritable while the master was frozen (longest time between two SEND_OKs, Java client defaults): $fgap ms"
    check "the producer wrote again within 10 s of the freeze ($fgap ms without SEND_OK)" test "$fgap" -le 10000
    wait_for 120 "the thawed former master rejoined as a slave and both are in sync" both_in_sync
    check "the master is still $F_OTHER after the thaw" test "$(K get mqc pods -o jsonpath='{.status.groups[0].master}')" = "$F_OTHER"
  else bad "no task for the master container $fcid"; fi

  # A flushMode change under load: the operator rolls the group itself (StatefulSet strategy
  # OnDelete): the slave first, then a switchover to it once it is back in sync, then, after
  # the clients' route poll, the former master. The producer (client defaults) must see no
  # failed send: while its route still names the former master, that one relays to the new.
  echo "== real pods: a flushMode change rolls the group under load"
  both_in_sync_now() { [[ "$(group_status)" == pods-broker-0-*/*/*pods-broker-0-0*pods-broker-0-1* ]]; }
  wait_for 120 "both replicas in sync before the roll" both_in_sync_now
  ROLL_MASTER=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
  case "$ROLL_MASTER" in pods-broker-0-0) ROLL_SLAVE=pods-broker-0-1 ;; *) ROLL_SLAVE=pods-broker-0-0 ;; esac
  check "broker StatefulSet uses OnDelete (the operator rolls it)" test \
    "$(K get sts pods-broker-0 -o jsonpath='{.spec.updateStrategy.type}')" = OnDelete
  uid_m=$(K get pod "$ROLL_MASTER" -o jsonpath='{.metadata.uid}')
  uid_s=$(K get pod "$ROLL_SLAVE" -o jsonpath='{.metadata.uid}')
  # The previous scenarios left the producer retrying an address that is gone until its next
  # route poll: the roll starts once it has written without a failure for 5 s.
  steady() {
    local now last; now=$(date +%s%3N)
    last=$(tail -n 1 "$D/ledger/failed" | awk '{printf "%.0f", $2 + $3}')
    [ $(( now - ${last:-0} )) -gt 5000 ] && [ "$(awk -v t="$((now - 1000))" '$1 >= t' "$D/ledger/ok-at" | wc -l)" -gt 0 ]
  }
  wait_for 120 "the producer writes steadily again (no failed send for 5 s)" steady
  ROLL_LOG=$(wc -l < "$D/operator.log")
  ROLL_T0=$(date +%s%3N)
  # Asynchronous replication from here on: the drain of the master's node below is about it.
  K patch mqc pods --type merge -p '{"spec":{"broker":{"flushMode":"Sync","replicationMode":"Async"}}}' >/dev/null
  rolled() {
    [ "$(K get pod "$ROLL_MASTER" -o jsonpath='{.metadata.uid}')" != "$uid_m" ] &&
      [ "$(K get pod "$ROLL_SLAVE" -o jsonpath='{.metadata.uid}')" != "$uid_s" ] &&
      [ "$(K get sts pods-broker-0 -o jsonpath='{.status.updatedReplicas}/{.status.readyReplicas}')" = 2/2 ] &&
      [ -z "$(K get mqc pods -o jsonpath='{.status.groups[0].rollout}')" ] && both_in_sync_now
  }
  wait_for 420 "both broker pods replaced at the new revision, Ready and in sync again" rolled
  ROLL_T1=$(date +%s%3N)
  # The order, from the operator's log (the event recorder folds repeated reasons into one
  # event series, so events show that each kind happened, not their order).
  steps=$(sed 's/\x1b\[[0-9;]*m//g' "$D/operator.log" | tail -n +"$((ROLL_LOG + 1))" | sed -nE \
    -e 's/.*rolling restart: deleting the pod.* pod="([^"]*)".*/restart \1/p' \
    -e 's/.*rolling restart: switchover.* from="([^"]*)" to="([^"]*)".*/switchover \1 -> \2/p')
  echo "$steps" | sed 's/^/    /'
  expected="restart $ROLL_SLAVE
switchover $ROLL_MASTER -> $ROLL_SLAVE
restart $ROLL_MASTER"
  check "the slave restarted first, then a switchover, then the former master" test "$steps" = "$expected"
  roll_events() {
    K get events.events.k8s.io -o jsonpath='{range .items[*]}{.reason}{"\n"}{end}' | sort -u | grep -c '^RollingRestart$\|^Switchover$' | grep -q 2
  }
  check "RollingRestart and Switchover events" roll_events
  check "the master is now $ROLL_SLAVE" test "$(K get mqc pods -o jsonpath='{.status.groups[0].master}')" = "$ROLL_SLAVE"
  flush_sync() {
    local cfg; cfg=$(K get cm pods-broker-0-config -o jsonpath='{.data.pods-broker-0-0\.toml}')
    grep -q '^flush-mode = "sync"' <<<"$cfg" && grep -q '^synchronous = false' <<<"$cfg"
  }
  check "the restarted brokers' configuration has the new flush and replication modes" flush_sync
  # Sends begun during the roll (a send that began before it and failed after is not its).
  failed=$(awk -v a="$ROLL_T0" -v b="$ROLL_T1" '$2 >= a && $2 <= b' "$D/ledger/failed" | wc -l)
  check "no failed send during the roll (the Java client's defaults)" test "$failed" = 0
  if [ "$failed" != 0 ]; then
    # When each failed send began, and what the operator and the brokers did around it.
    awk -v a="$ROLL_T0" -v b="$ROLL_T1" '$2 >= a && $2 <= b {printf "    failed send %s began %d ms into the roll, took %d ms: %s\n", $1, $2 - a, $3, $4}' "$D/ledger/failed"
    echo "    the roll began at $(date -u -d "@$((ROLL_T0 / 1000))" +%T).$((ROLL_T0 % 1000))"
    sed 's/\x1b\[[0-9;]*m//g' "$D/operator.log" | tail -n +"$((ROLL_LOG + 1))" | grep -E 'rolling|switchover|elected' | cut -c1-220 | sed 's/^/    operator: /'
    for f in "$D"/broker-logs/*.log; do
      sed 's/\x1b\[[0-9;]*m//g' "$f" | grep -E 'switchover|in-sync|of its group|replication|relayed|shut|stopp' | cut -c1-260 | tail -n 40 | sed "s|^|    $(basename "$f"): |"
    done
  fi
  worst=$(awk -v a="$ROLL_T0" -v b="$ROLL_T1" '$2 >= a && $2 <= b && $3 > w {w = $3} END {print w + 0}' "$D/ledger/slow")
  echo "    roll took $(( (ROLL_T1 - ROLL_T0) / 1000 )) s; worst send latency during it: ${worst} ms (0: every send under 500 ms); failed sends: $failed"

  # No in-sync replica: the slave frozen (SIGSTOP) until the master drops it from the in-sync
  # set, then the master frozen too. Nobody may be promoted: the slave lacks acknowledged
  # messages. The group stays without master, Degraded, until the master returns.
  echo "== real pods: no in-sync replica, no promotion"
  NM=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
  case "$NM" in pods-broker-0-0) NS_=pods-broker-0-1 ;; *) NS_=pods-broker-0-0 ;; esac
  spid=$(task_pid "$NS_"); mpid=$(task_pid "$NM")
  if [ -n "$spid" ] && [ -n "$mpid" ]; then
    kill -STOP "$spid"
    alone() { [ "$(K get mqc pods -o jsonpath='{.status.groups[0].inSyncReplicas}')" = "[\"$NM\"]" ]; }
    wait_for 60 "the frozen slave $NS_ left the in-sync set" alone
    E2=$(K get mqc pods -o jsonpath='{.status.groups[0].epoch}')
    kill -STOP "$mpid"
    degraded_now() {
      [ "$(K get mqc pods -o jsonpath='{.status.conditions[?(@.type=="Degraded")].status}/{.status.conditions[?(@.type=="Degraded")].reason}')" = True/NoInSyncReplica ] &&
        [ -z "$(K get mqc pods -o jsonpath='{.status.groups[0].master}')" ]
    }
    wait_for 60 "master frozen: no master, Degraded=True NoInSyncReplica" degraded_now
    check "nobody was promoted (epoch still $E2)" test "$(K get mqc pods -o jsonpath='{.status.groups[0].epoch}')" = "$E2"
    kill -CONT "$mpid" "$spid"
    back() {
      [ "$(K get mqc pods -o jsonpath='{.status.groups[0].master}')" = "$NM" ] && both_in_sync_now &&
        [ "$(K get mqc pods -o jsonpath='{.status.conditions[?(@.type=="Degraded")].status}')" = False ]
    }
    wait_for 120 "the master returns: $NM master again, the slave back in sync, not Degraded" back
  else bad "no task for the broker containers ($NS_: '$spid', $NM: '$mpid')"; fi

  # The operator's leader killed (SIGKILL) 10 times under the producer (issue 27): a standby
  # takes the Lease, points the controller Service at itself, and the brokers, which reach the
  # controller only through that Service, find it before it would replace their master. No
  # failover (master and epoch unchanged), no failed send. The killed replica comes back as
  # the standby each time.
  echo "== real pods: the operator's leader killed 10 times under load"
  start_operator b
  holder() { K get lease conveyor-operator-leader -o jsonpath='{.spec.holderIdentity}'; }
  slice_port() { K get endpointslice conveyor-operator-controller -o jsonpath='{.endpoints[0].addresses[0]}:{.ports[0].port}'; }
  # until_true SEC CMD...: CMD polled every 0.2 s for SEC s, quietly (a round is one check).
  until_true() {
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt "$deadline" ] || return 1; sleep 0.2; done
  }
  LK_MASTER=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
  LK_EPOCH=$(K get mqc pods -o jsonpath='{.status.groups[0].epoch}')
  wait_for 30 "the controller Service's EndpointSlice leads to the leader (pods-operator-a, $NET.1:${CTRL_PORT[a]})" \
    bash -c "[ \"\$(kubectl get endpointslice conveyor-operator-controller -o jsonpath='{.endpoints[0].addresses[0]}:{.ports[0].port}')\" = $NET.1:${CTRL_PORT[a]} ]"
  LK_T0=$(date +%s%3N)
  takeovers=0
  for round in $(seq 1 10); do
    lead=$(holder); lead=${lead#pods-operator-}
    case "$lead" in a) next=b ;; b) next=a ;; *) bad "round $round: unexpected Lease holder '$lead'"; break ;; esac
    kill -9 "${OP_PIDS[$lead]}"; wait "${OP_PIDS[$lead]}" 2>/dev/null || true
    killed_at=$(date +%s%3N)
    took_over() { [ "$(holder)" = "pods-operator-$next" ] && [ "$(slice_port)" = "$NET.1:${CTRL_PORT[$next]}" ]; }
    until_true 60 took_over || { bad "round $round: pods-operator-$next did not take the Lease and the controller Service within 60 s"; break; }
    took=$(( $(date +%s%3N) - killed_at ))
    start_operator "$lead"
    # The brokers found the new leader: the producer goes on (20 more SEND_OK), and the new
    # leader's status names the same master in the same epoch, both in sync.
    base=$(wc -l < "$D/ledger/ok")
    settled() {
      [ "$(wc -l < "$D/ledger/ok")" -ge $((base + 20)) ] && both_in_sync_now &&
        [ "$(K get mqc pods -o jsonpath='{.status.groups[0].master}/{.status.groups[0].epoch}')" = "$LK_MASTER/$LK_EPOCH" ]
    }
    until_true 60 settled || { bad "round $round: the group did not serve on under pods-operator-$next within 60 s ($(group_status))"; break; }
    echo "    round $round: pods-operator-$lead killed, pods-operator-$next leads and serves the brokers $took ms later"
    takeovers=$((takeovers + 1))
  done
  LK_T1=$(date +%s%3N)
  check "10 leader changes, each taken over by the standby" test "$takeovers" = 10
  check "no broker failover through them (master $LK_MASTER, epoch $LK_EPOCH)" test \
    "$(K get mqc pods -o jsonpath='{.status.groups[0].master}/{.status.groups[0].epoch}')" = "$LK_MASTER/$LK_EPOCH"
  lk_failed=$(awk -v a="$LK_T0" -v b="$LK_T1" '$2 >= a && $2 <= b' "$D/ledger/failed" | wc -l)
  check "no failed send through the leader changes" test "$lk_failed" = 0
  # Back to one replica (a) for the rest: the drain below reads its log.
  if [ "$(holder)" = pods-operator-b ]; then
    kill -9 "${OP_PIDS[b]}"; wait "${OP_PIDS[b]}" 2>/dev/null || true
    a_leads() { [ "$(holder)" = pods-operator-a ] && [ "$(slice_port)" = "$NET.1:${CTRL_PORT[a]}" ]; }
    wait_for 60 "pods-operator-a leads again" a_leads
  else
    kill "${OP_PIDS[b]}"; wait "${OP_PIDS[b]}" 2>/dev/null || true
  fi

  # Scale-out 1 -> 2 groups, the topic given queues on the new group (existing topics gain
  # queues on a new group only when asked), a push consumer running; then scale-in 2 -> 1:
  # the operator drains group 1 (read-only, clients' route poll, consumers done) and only then
  # removes it. No send fails, and every SEND_OK is consumed, whichever group held it.
  echo "== real pods: scale-out 1 -> 2 groups and a drained scale-in 2 -> 1"
  K patch mqc pods --type merge -p '{"spec":{"broker":{"groups":2}}}' >/dev/null
  group1_ready() {
    [ "$(K get sts pods-broker-1 -o jsonpath='{.status.readyReplicas}' 2>/dev/null)" = 2 ] &&
      [[ "$(K get mqc pods -o jsonpath='{.status.groups[1].inSyncReplicas}')" == *pods-broker-1-0*pods-broker-1-1* ]]
  }
  wait_for 240 "group 1 (pods-broker-1) Running, Ready, a master and both replicas in sync" group1_ready
  check "PodsTopic gets queues on both groups (conveyor admin create-topic --cluster pods)" quiet \
    "$CONVEYOR_BIN" admin create-topic --namesrv-addr "$NS_IP:9876" --cluster pods --topic PodsTopic --queues 4
  (java_run drain-push "$NS_IP:9876" PodsTopic "$D/ledger" > "$D/push.out" 2>"$D/push.log") &
  PUSH=$!
  # Let the producer (client defaults: a route poll every 30 s) spread over both groups.
  on_both() { [ "$(curl -sf "http://$(K get pod pods-broker-1-0 -o jsonpath='{.status.podIP}'):8080/metrics" "http://$(K get pod pods-broker-1-1 -o jsonpath='{.status.podIP}'):8080/metrics" | awk '$1 ~ /^conveyor_messages_in_total/ {n += $2} END {print n + 0}')" -gt 0 ]; }
  wait_for 90 "the producer writes to group 1 as well" on_both
  SCALE_T0=$(date +%s%3N)
  K patch mqc pods --type merge -p '{"spec":{"broker":{"groups":1}}}' >/dev/null
  draining_now() { K get mqc pods -o jsonpath='{.status.groups[*].drain}' | grep -q .; }
  wait_for 60 "group 1 is draining (status.groups[].drain)" draining_now
  K get mqc pods -o jsonpath='{range .status.groups[*]}{.name}: {.drain}{"\n"}{end}' | sed 's/^/    /'
  removed() { ! K get sts pods-broker-1 >/dev/null 2>&1 && [ -z "$(K get mqc pods -o jsonpath='{.status.groups[*].drain}')" ]; }
  wait_for 300 "group 1 drained and removed (StatefulSet gone, status without drain)" removed
  SCALE_T1=$(date +%s%3N)
  sed 's/\x1b\[[0-9;]*m//g' "$D/operator.log" | grep -a "drained: removing" | sed 's/^/    /' | cut -c1-160
  failed=$(awk -v a="$SCALE_T0" -v b="$SCALE_T1" '$2 >= a && $2 <= b' "$D/ledger/failed" | wc -l)
  check "no failed send during the drained scale-in" test "$failed" = 0
  echo "    scale-in took $(( (SCALE_T1 - SCALE_T0) / 1000 )) s; failed sends: $failed"
  check "group 1's claims are kept (retention policy Retain)" quiet K get pvc data-pods-broker-1-0 data-pods-broker-1-1
  base=$(wc -l < "$D/ledger/ok")
  more() { [ "$(wc -l < "$D/ledger/ok")" -ge $((base + 200)) ]; }
  wait_for 120 "the producer goes on after the restart (200 more SEND_OK)" more
  touch "$D/ledger/stop"; wait "$PRODUCER" || true
  echo "    $(cat "$D/producer.out")"
  wait "$PUSH" || true   # ends 10 s after the last message
  echo "    $(cat "$D/push.out")"
  java_run drain "$NS_IP:9876" PodsTopic "$D/ledger" > "$D/drain.out" 2>"$D/drain.log" || true
  # What group 1 held was consumed by the push consumer before the group went.
  missing=$(comm -23 <(sort -u "$D/ledger/ok") <(sort -u "$D/ledger/seen" "$D/ledger/seen-push" 2>/dev/null) | wc -l)
  if [ "$missing" = 0 ]; then ok "a Java consumer received every SEND_OK message ($(wc -l < "$D/ledger/ok"))"
  else bad "$missing SEND_OK messages not received"; fi
  JAVA_DONE=1
else bad "no Java client classpath or name-server pod IP"; fi

echo "== real pods: ACL"
unsigned() { env -u CONVEYOR_ACCESS_KEY -u CONVEYOR_SECRET_KEY "$CONVEYOR_BIN" admin cluster --namesrv-addr "$NS_IP:9876" 2>&1; }
refused_unsigned() { local out; out=$(unsigned) && return 1; grep -q 'NO_PERMISSION' <<<"$out"; }
check "a client without credentials is refused (NO_PERMISSION)" refused_unsigned
as_client() { CONVEYOR_ACCESS_KEY=pods-client CONVEYOR_SECRET_KEY="$CLIENT_SK" "$CONVEYOR_BIN" admin cluster --namesrv-addr "$NS_IP:9876" 2>&1; }
check "pods-client's credentials from its Secret work" quiet as_client
not_admin() {
  ! CONVEYOR_ACCESS_KEY=pods-client CONVEYOR_SECRET_KEY="$CLIENT_SK" "$CONVEYOR_BIN" admin create-topic \
    --namesrv-addr "$NS_IP:9876" --cluster pods --topic NotByClient --queues 1 >/dev/null 2>&1
}
check "pods-client is not an admin: creating a topic is refused" not_admin
USER_GONE_T0=$(date +%s)
K delete mqu pods-client --wait=true --timeout=60s >/dev/null
refused() { local out; out=$(as_client) && return 1; grep -q "no user with AccessKey pods-client" <<<"$out"; }
# The kubelet refreshes a mounted Secret within its sync period (about a minute), then the
# servers re-read the users file within their reload interval (5 s).
wait_for 180 "a deleted MessageQueueUser loses access (kubelet sync + reload interval)" refused
echo "    refused $(( $(date +%s) - USER_GONE_T0 )) s after the MessageQueueUser was deleted"
gone_secret() { ! K get secret pods-client >/dev/null 2>&1; }
wait_for 60 "its credentials Secret is deleted with it" gone_secret

# A bad image rolled out, then reverted in the manifest (issue 27). The operator rolls the
# slave onto it first, where it cannot start (ErrImagePull), and the roll waits there: the
# master keeps the good image. Reverting makes that pod an outdated one that cannot start,
# which the operator restarts before anything else: the group heals with no pod deleted by
# hand. (The name server, a StatefulSet with the default rolling update and Parallel pod
# management, is replaced by the StatefulSet controller itself.) Last, as it moves the name
# server's pod IP the clients above were given.
echo "== real pods: a bad image, then reverted"
wait_for 120 "both replicas in sync before the bad image" both_in_sync
BI_MASTER=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
case "$BI_MASTER" in pods-broker-0-0) BI_SLAVE=pods-broker-0-1 ;; *) BI_SLAVE=pods-broker-0-0 ;; esac
revision_of() { K get pod "$1" -o jsonpath='{.metadata.labels.controller-revision-hash}'; }
GOOD_REV=$(revision_of "$BI_MASTER")
K patch mqc pods --type merge -p '{"spec":{"image":"conveyor.invalid/conveyor:no-such-tag"}}' >/dev/null
waiting_reason() { K get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}' 2>/dev/null; }
bad_slave() { [[ "$(waiting_reason "$BI_SLAVE")" =~ ^(ErrImagePull|ImagePullBackOff)$ ]]; }
wait_for 180 "the roll restarted the slave $BI_SLAVE onto the bad image, where it cannot start" bad_slave
check "the master $BI_MASTER still runs the good revision (the roll waits for the unready slave)" \
  test "$(revision_of "$BI_MASTER")" = "$GOOD_REV"
K patch mqc pods --type merge -p "{\"spec\":{\"image\":\"$IMAGE\"}}" >/dev/null
healed() {
  local rev; rev=$(K get sts pods-broker-0 -o jsonpath='{.status.updateRevision}')
  [ "$(revision_of "$BI_SLAVE")" = "$rev" ] && [ "$(revision_of "$BI_MASTER")" = "$rev" ] &&
    [ "$(K get pod "$BI_SLAVE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] && both_in_sync
}
wait_for 240 "reverted: the operator restarted the stuck slave, both replicas run the good image and are in sync" healed
check "the master was not restarted ($BI_MASTER, same revision)" test "$(revision_of "$BI_MASTER")" = "$GOOD_REV"
ns_ready() { [ "$(K get pod pods-namesrv-0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
wait_for 180 "the name server pod is Ready again on the good image" ns_ready
grep -a "rolling restart: deleting the pod" "$D/operator.log" | sed 's/\x1b\[[0-9;]*m//g' | tail -n 2 | cut -c1-200 | sed 's/^/    /'

# A ledger of a scenario below: a Java producer (client defaults) writing $D/ledger-NAME, signed
# as the admin user (pods-client was deleted in the ACL section).
acked_at_least() { [ "$(wc -l < "$1/ok" 2>/dev/null || echo 0)" -ge "$2" ]; }
ledger_start() { # NAME COUNT: starts the producer ($PRODUCER), waits for COUNT SEND_OK
  mkdir -p "$D/ledger-$1"
  (LEDGER_USER=pods-admin LEDGER_SK="$CONVEYOR_SECRET_KEY" java_run produce-defaults "$NS_IP:9876" PodsTopic \
    "$D/ledger-$1" > "$D/producer-$1.out" 2>"$D/producer-$1.log") &
  PRODUCER=$!
  wait_for 120 "a Java producer got $2 SEND_OK" acked_at_least "$D/ledger-$1" "$2"
}
ledger_finish() { # NAME WHAT: 200 more SEND_OK, the producer stopped, every SEND_OK read back
  local base missing
  base=$(wc -l < "$D/ledger-$1/ok")
  wait_for 180 "the producer goes on (200 more SEND_OK)" acked_at_least "$D/ledger-$1" $((base + 200))
  touch "$D/ledger-$1/stop"; wait "$PRODUCER" || true
  echo "    $(cat "$D/producer-$1.out")"
  LEDGER_USER=pods-admin LEDGER_SK="$CONVEYOR_SECRET_KEY" java_run drain "$NS_IP:9876" PodsTopic "$D/ledger-$1" \
    > "$D/drain-$1.out" 2>"$D/drain-$1.log" || true
  missing=$(comm -23 <(sort -u "$D/ledger-$1/ok") <(sort -u "$D/ledger-$1/seen" 2>/dev/null) | wc -l)
  if [ "$missing" = 0 ]; then ok "a Java consumer received every SEND_OK message of $2 ($(wc -l < "$D/ledger-$1/ok"))"
  else bad "$missing SEND_OK messages of $2 were not received"; fi
}

# `kubectl drain` of the master's node under a Java producer on Async replication (issue 27).
# The tier has one node: the drain is limited to the master's pod (--pod-selector), evicted
# through the Eviction API as drain does every pod, the node cordoned meanwhile. On SIGTERM the
# master hands the group over to its in-sync slave before it stops, so nothing it acknowledged
# is missing from the new master, although under Async the slave lags the acknowledgements.
echo "== real pods: kubectl drain of the master's node under load, Async replication"
if [ -n "$CP" ]; then
  NS_IP=$(K get pod pods-namesrv-0 -o jsonpath='{.status.podIP}')
  wait_for 120 "both replicas in sync before the drain" both_in_sync
  check "the group replicates asynchronously (since the roll above)" \
    test "$(K get mqc pods -o jsonpath='{.spec.broker.replicationMode}')" = Async
  ledger_start drain 500
  DR_MASTER=$(K get mqc pods -o jsonpath='{.status.groups[0].master}')
  DR_EPOCH=$(K get mqc pods -o jsonpath='{.status.groups[0].epoch}')
  case "$DR_MASTER" in pods-broker-0-0) DR_OTHER=pods-broker-0-1 ;; *) DR_OTHER=pods-broker-0-0 ;; esac
  DR_LOG=$(wc -l < "$D/operator.log")
  DR_T0=$(date +%s%3N)
  if K drain pods-node-0 --pod-selector="statefulset.kubernetes.io/pod-name=$DR_MASTER" \
      --ignore-daemonsets --delete-emptydir-data --timeout=180s > "$D/drain.out" 2>&1; then
    ok "kubectl drain pods-node-0 evicted the master $DR_MASTER ($(( $(date +%s%3N) - DR_T0 )) ms)"
  else
    bad "kubectl drain of the master's pod failed"; sed 's/^/    /' "$D/drain.out" | tail -n 5
  fi
  # The controller (in the operator) saw the master ask for the switchover and report ready,
  # with no roll of the operator's asking for one; the master's own log says the same.
  since_drain() { sed 's/\x1b\[[0-9;]*m//g' "$D/operator.log" | tail -n +"$((DR_LOG + 1))"; }
  asked_by_master() {
    local log; log=$(since_drain) # (captured first: grep -q closing a pipe early fails it)
    grep -aq "switchover: the master holds writes and the target has its log" <<<"$log" &&
      ! grep -aq "rolling restart: switchover" <<<"$log"
  }
  check "the master handed the group over on SIGTERM (the controller's switchover, asked by no roll)" asked_by_master
  # For the reader only (the copy of the master's log may miss its last second): never fails.
  { since_drain | grep -a "switchover:" | cut -c1-200 | sed 's/^/    /'; } || true
  { sed 's/\x1b\[[0-9;]*m//g' "$D/broker-logs/default_${DR_MASTER}_"*.log 2>/dev/null | grep -a "stopping:" |
    tail -n 2 | cut -c1-220 | sed 's/^/    /'; } || true
  handed() { [ "$(K get mqc pods -o jsonpath='{.status.groups[0].master}/{.status.groups[0].epoch}')" = "$DR_OTHER/$((DR_EPOCH + 1))" ]; }
  wait_for 30 "$DR_OTHER is master in epoch $((DR_EPOCH + 1)) (status)" handed
  K uncordon pods-node-0 >/dev/null
  back_in_sync() { [[ "$(group_status)" == $DR_OTHER/*/*pods-broker-0-0*pods-broker-0-1* ]]; }
  wait_for 240 "uncordoned: the evicted pod is recreated and rejoins as an in-sync slave" back_in_sync
  DR_T1=$(date +%s%3N)
  ledger_finish drain "the drain"
  failed=$(awk -v a="$DR_T0" -v b="$DR_T1" '$2 >= a && $2 <= b' "$D/ledger-drain/failed" | wc -l)
  gap=$(awk -v a="$((DR_T0 - 1000))" -v b="$DR_T1" '$1 >= a && $1 <= b {if (p && $1 - p > g) g = $1 - p; p = $1} END {print g + 0}' "$D/ledger-drain/ok-at")
  echo "    during the drain: $failed failed sends, longest time between two SEND_OKs $gap ms"
else bad "no Java client classpath for the drain"; fi

# replicasPerGroup 2 -> 1 under a Java producer (issue 27). The StatefulSet removes the highest
# ordinal, pods-broker-0-1, made master first (its peer's container killed). The operator must
# hand the master role to pods-broker-0-0 (in sync) before it lowers the count, and wait until
# clients can have learnt the new master; every SEND_OK is read back afterwards.
echo "== real pods: replicasPerGroup 2 -> 1 under load, the master on the removed ordinal"
if [ -n "$CP" ]; then
  NS_IP=$(K get pod pods-namesrv-0 -o jsonpath='{.status.podIP}')
  wait_for 120 "both replicas in sync before the scale-in" both_in_sync
  if [ "$(K get mqc pods -o jsonpath='{.status.groups[0].master}')" != pods-broker-0-1 ]; then
    cid=$(K get pod pods-broker-0-0 -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's#.*//##')
    pid=$(ctr -a "$SOCK" -n k8s.io task ls | awk -v id="$cid" '$1 == id {print $2}')
    [ -n "$pid" ] && kill -9 "$pid"
    master_is_1() { [[ "$(group_status)" == pods-broker-0-1/*/*pods-broker-0-0*pods-broker-0-1* ]]; }
    wait_for 180 "pods-broker-0-1 is master (pods-broker-0-0's container killed) and both are in sync" master_is_1
  fi
  ledger_start shrink 200
  # One replica cannot replicate synchronously (the CRD refuses Sync with 1): Async with it.
  K patch mqc pods --type merge -p '{"spec":{"broker":{"replicasPerGroup":1,"replicationMode":"Async"}}}' >/dev/null
  handed_over() { [ "$(K get mqc pods -o jsonpath='{.status.groups[0].master}')" = pods-broker-0-0 ]; }
  wait_for 120 "the operator made pods-broker-0-0 master" handed_over
  check "... while the StatefulSet still had 2 replicas (pods-broker-0-1 not removed as master)" \
    test "$(K get sts pods-broker-0 -o jsonpath='{.spec.replicas}')" = 2
  one_replica() {
    [ "$(K get sts pods-broker-0 -o jsonpath='{.spec.replicas}')" = 1 ] && ! K get pod pods-broker-0-1 >/dev/null 2>&1 &&
      [ "$(K get pod pods-broker-0-0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
  }
  wait_for 300 "then the StatefulSet went to 1 replica: pods-broker-0-1 gone, pods-broker-0-0 Ready" one_replica
  sed 's/\x1b\[[0-9;]*m//g' "$D/operator.log" | grep -a "replicasPerGroup kept\|rolling restart: switchover" | tail -n 2 | cut -c1-200 | sed 's/^/    /'
  ledger_finish shrink "the scale-in"
else bad "no Java client classpath for the scale-in"; fi

# A check that ends the Java section early (an expansion error aborts the whole compound
# command) must not pass for a run of every check.
[ "${JAVA_DONE:-}" = 1 ] || bad "the Java client section did not run to its end"
finish
