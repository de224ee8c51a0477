# Shared by the Kubernetes test scripts (sourced): the pass/fail tally, free ports, etcd, the
# API server with its credentials, a kubeconfig for the admin token, and condition waits. Each
# start appends the process's pid to the caller's PIDS array.

# The tally: `ok`, `bad`, `check DESCRIPTION COMMAND...`; `skip` is a failure under CI=true (a
# fresh machine must run every check, never pass by skipping one).
PASS=0; FAIL=0; SKIP=0
ok()   { echo "  ok   $*"; PASS=$((PASS+1)); }
bad()  { echo "  FAIL $*"; FAIL=$((FAIL+1)); }
if [ "${CI:-}" = "true" ]; then
  skip() { echo "  FAIL (skipped, and CI=true) $*"; FAIL=$((FAIL+1)); SKIP=$((SKIP+1)); }
else
  skip() { echo "  SKIP $*"; SKIP=$((SKIP+1)); }
fi
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
quiet() { "$@" >/dev/null; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# stop_processes: what a script's EXIT trap does with the PIDS it started: SIGTERM, up to 30 s,
# then SIGKILL (a kube-apiserver restarted by a test has been seen to ignore SIGTERM for
# minutes, which hung the script after its summary); the temp dir D goes unless KEEP_E2E_DIR.
stop_processes() {
  local p t0
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  t0=$(date +%s)
  while [ -n "$(jobs -pr)" ] && [ $(( $(date +%s) - t0 )) -lt 30 ]; do sleep 0.5; done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP_E2E_DIR:-}" ] || rm -rf "$D"
}

# free_ports N: N distinct free loopback ports on one line (all held open while chosen, so no
# two are the same, as two free_port calls in a row can be).
free_ports() {
  python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# start_etcd DIR KBIN: etcd on two free loopback ports, data in DIR/etcd; sets ETCD_PORT.
start_etcd() {
  local d=$1 kbin=$2 peer
  ETCD_PORT=$(free_port); peer=$(free_port)
  "$kbin/etcd" --data-dir "$d/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "default=http://127.0.0.1:$peer" \
    > "$d/etcd.log" 2>&1 &
  PIDS+=($!)
}

# apiserver_credentials DIR: a service-account key pair and the static token "admin-token"
# (system:masters).
apiserver_credentials() {
  openssl genrsa -out "$1/sa.key" 2048 2>/dev/null && openssl rsa -in "$1/sa.key" -pubout -out "$1/sa.pub" 2>/dev/null
  echo "admin-token,admin,admin,system:masters" > "$1/tokens.csv"
}

# start_apiserver DIR KBIN PORT ADVERTISE [FLAGS...]: kube-apiserver on 127.0.0.1:PORT over the
# etcd of start_etcd, waits (120 s at most) until /readyz answers; sets APISERVER_PID. ClusterIPs
# come from SERVICE_CIDR (default 10.0.0.0/24; nothing routes them unless a tier runs kube-proxy).
start_apiserver() {
  local d=$1 kbin=$2 port=$3 advertise=$4
  shift 4
  "$kbin/kube-apiserver" --advertise-address="$advertise" --bind-address=127.0.0.1 --secure-port="$port" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --cert-dir="$d/certs" --token-auth-file="$d/tokens.csv" \
    --service-cluster-ip-range="${SERVICE_CIDR:-10.0.0.0/24}" --allow-privileged=true \
    --service-account-issuer="https://127.0.0.1:$port" --service-account-key-file="$d/sa.pub" \
    --service-account-signing-key-file="$d/sa.key" --disable-admission-plugins=ServiceAccount "$@" \
    >> "$d/apiserver.log" 2>&1 &
  APISERVER_PID=$!
  PIDS+=("$APISERVER_PID")
  local t0; t0=$(date +%s)
  until curl -skf -H "Authorization: Bearer admin-token" "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    sleep 0.5
    if [ $(( $(date +%s) - t0 )) -gt 120 ]; then echo "apiserver not ready; log tail:"; tail -20 "$d/apiserver.log"; return 1; fi
  done
  echo "  apiserver ready in $(( $(date +%s) - t0 )) s"
}

# write_kubeconfig FILE DIR PORT NAME: the admin token's kubeconfig, context NAME.
write_kubeconfig() {
  cat > "$1" <<KCFG
apiVersion: v1
kind: Config
clusters: [{name: $4, cluster: {server: "https://127.0.0.1:$3", certificate-authority: "$2/certs/apiserver.crt"}}]
users: [{name: admin, user: {token: admin-token}}]
contexts: [{name: $4, context: {cluster: $4, user: admin}}]
current-context: $4
KCFG
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every second until it succeeds (ok,
# with the time it took) or SECONDS pass (bad).
wait_for() {
  local t=$1 what=$2; shift 2
  local t0; t0=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    if [ $(( $(date +%s) - t0 )) -ge "$t" ]; then bad "$what (timed out after ${t}s)"; return 1; fi
    sleep 1
  done
  ok "$what ($(( $(date +%s) - t0 )) s)"
}
