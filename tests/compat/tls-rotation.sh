#!/usr/bin/env bash
# TLS certificate rotation under load, with the unmodified Java RocketMQ client (issue 25). Starts `conveyor
# standalone` on free loopback ports with [tls] mode = "enforcing" and certificate A (PEM files laid out as a
# mounted Kubernetes Secret: tls.crt and tls.key are links into ..data, itself a link to a version directory),
# runs the Java producer of the failover ledger (tests/compat/java Ledger, `produce-defaults`: every client
# setting at its default, -Dtls.enable=true) sending keyed messages one after another, and rotates the
# certificate TLS_ROTATIONS times (default 5: A→B→C→A→B→C, one every TLS_ROTATION_PACE_SECS, default 2.5) while
# it sends. Two ways of rotating, alternately:
#   pair          the kubelet's way: the new certificate and key in a new version directory, ..data switched to it
#                 with one rename, so the server never sees a new certificate with the old key;
#   file by file  tls.crt replaced first (a new file renamed over it), tls.key only once the server looked at the
#                 mismatched pair: every TLS handshake meanwhile must still get the previous certificate (and the
#                 server log "TLS certificate not reloaded"), then the key is replaced the same way.
# The certificates are a test CA's leaves (openssl, EC P-256, made per run). Checks (one "ok NAME: detail" or
# "FAIL NAME: reason" line each):
#   initial-cert                  new TLS connections (openssl s_client, verified against the CA) to the name
#                                 server, broker and gRPC ports get A
#   rotation-N/served             after rotation N, every port serves the new certificate within
#                                 TLS_ROTATION_CERT_DEADLINE_SECS (default 10) of the swap (the time is reported)
#   rotation-N/mismatch-kept-previous   (file by file) handshakes between the two renames get the previous
#                                 certificate, and the server said it did not reload the mismatched pair
#   rotation-N/sends              the producer got TLS_ROTATION_PROGRESS (default 20) more SEND_OKs after the swap
#                                 (deadline 30 s)
#   producer/connections-kept     the producer's TLS connections to the name server and the broker open before
#                                 the first rotation are still open after the last (rotation does not touch them)
#   producer/exit                 the producer stopped cleanly and reported its figures
#   ledger/no-loss                a Java lite pull consumer over TLS (a new connection, the last certificate)
#                                 reads every queue from offset 0: every SEND_OK key is there, and no key that was
#                                 never sent; failed sends (never acknowledged, so allowed) and the longest gap
#                                 between SEND_OKs, overall and across each rotation, are reported, not asserted
#   plaintext/java-refused        the same Java producer without TLS (another topic): every send fails, none is
#                                 acknowledged
#   plaintext/raw-{namesrv,broker,grpc}   a plaintext request (a RocketMQ GET_ROUTEINFO frame, the HTTP/2
#                                 preface on the gRPC port) gets no byte back and the connection is closed, while
#                                 the same request over TLS is answered (name server, broker; h2 negotiated on gRPC)
#   broker/alive                  conveyor is still running at the end
#
#   tests/compat/tls-rotation.sh
#
# Environment (all optional): CONVEYOR_BIN (default: build the debug binary), TLS_ROTATION_CLIENT (rmq5 or rmq4,
# default rmq5), TLS_ROTATIONS (at least 3), TLS_ROTATION_PACE_SECS, TLS_ROTATION_CERT_DEADLINE_SECS,
# TLS_ROTATION_PROGRESS, COMPAT_LOG_DIR (logs go to a new tls-rotation-<time> directory under it; default
# ~/.cache/conveyor/compat/logs). Ends with "tls-rotation: N passed, M failed"; exits 1 if anything failed or did
# not report, 2 if the suite could not be set up. Tools that are missing are installed (never skipped).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
PROFILE="${TLS_ROTATION_CLIENT:-rmq5}"
ROTATIONS="${TLS_ROTATIONS:-5}"
PACE="${TLS_ROTATION_PACE_SECS:-2.5}"
CERT_DEADLINE="${TLS_ROTATION_CERT_DEADLINE_SECS:-10}"
PROGRESS="${TLS_ROTATION_PROGRESS:-20}"
TOPIC=TlsRotation
PLAIN_TOPIC=TlsRotationPlain
T0=$SECONDS

say() { echo "tls-rotation: $*" >&2; }
die() { say "$*"; exit 2; }
((ROTATIONS >= 3)) || die "TLS_ROTATIONS must be at least 3"
[[ "$PROFILE" == rmq4 || "$PROFILE" == rmq5 ]] || die "TLS_ROTATION_CLIENT must be rmq4 or rmq5"

PASSED=0
FAILED=0
declare -A REPORTED=()
ok() { # ok NAME DETAIL...
  local name=$1
  shift
  echo "ok $name: $*"
  PASSED=$((PASSED + 1))
  REPORTED["$name"]=1
}
fail() { # fail NAME REASON...
  local name=$1
  shift
  echo "FAIL $name: $*"
  FAILED=$((FAILED + 1))
  REPORTED["$name"]=1
}
# tally: counts the ok/FAIL lines a program printed (and passes every line on).
tally() {
  local line name
  while IFS= read -r line; do
    case "$line" in
      "ok "*) name="${line#ok }"; name="${name%%: *}"; echo "$line"; PASSED=$((PASSED + 1)); REPORTED["$name"]=1 ;;
      "FAIL "*) name="${line#FAIL }"; name="${name%%: *}"; echo "$line"; FAILED=$((FAILED + 1)); REPORTED["$name"]=1 ;;
      *) echo "$line" ;;
    esac
  done
}

# --- tools: installed when missing (never skipped: one that cannot be installed fails the suite) -------------------
# shellcheck source=tests/compat/host_tools.sh
source "$HERE/host_tools.sh"
compat_host_tools tls-rotation openssl:openssl || die "missing tools (above)"

# --- build: the Java ledger programs (fetch.sh) and conveyor ------------------------------------------------------
"$HERE/fetch.sh" >&2 || die "fetch.sh failed"
[[ -s "$OUT/java-$PROFILE.classpath" ]] || die "no $OUT/java-$PROFILE.classpath after fetch.sh"
JAVA_VERSION="$(cat "$OUT/java-$PROFILE.version")"
# shellcheck source=tests/compat/standalone.sh
source "$HERE/standalone.sh"
conveyor_bin "$ROOT" || die "no conveyor binary (cargo build failed?)"
T_BUILD=$((SECONDS - T0))

WORK="$(mktemp -d "${TMPDIR:-/tmp}/conveyor-tls-rotation.XXXXXX")"
LOGS="${COMPAT_LOG_DIR:-$OUT/logs}/tls-rotation-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$LOGS"
BROKER_PID=""
BG_PIDS=()

# ours PID: the process is still one this script started (its command line names this run's work directory; a
# reaped PID may have been reused by anyone).
ours() {
  local cmd
  cmd="$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline")" || return 1
  [[ "$cmd" == *"$WORK"* ]]
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p deadline
  for p in "${BG_PIDS[@]}"; do ours "$p" && kill -TERM "$p" 2>/dev/null; done
  deadline=$((SECONDS + 10))
  for p in "${BG_PIDS[@]}"; do
    while ours "$p" && ((SECONDS < deadline)); do sleep 0.1; done
    ours "$p" && kill -KILL "$p" 2>/dev/null
  done
  if [[ -n "$BROKER_PID" ]] && ours "$BROKER_PID"; then
    kill -TERM "$BROKER_PID" 2>/dev/null
    deadline=$((SECONDS + 20))
    while ours "$BROKER_PID" && ((SECONDS < deadline)); do sleep 0.1; done
    ours "$BROKER_PID" && kill -KILL "$BROKER_PID" 2>/dev/null
  fi
  cp "$WORK"/*.log "$WORK"/*.out "$LOGS"/ 2>/dev/null
  cp -r "$WORK"/java "$WORK"/ledger "$WORK"/ledger-plain "$LOGS"/ 2>/dev/null
  cp "$WORK"/certs/*.crt "$LOGS"/ 2>/dev/null
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_ms() { date +%s%3N; }
lines() { [[ -f "$1" ]] && wc -l <"$1" || echo 0; }

# --- certificates: a CA and three leaves (A, B, C) for localhost and 127.0.0.1 ----------------------------------
CERTS="$WORK/certs"
mkdir -p "$CERTS"
declare -A FP=()
{
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=conveyor-tls-rotation-ca" \
    -keyout "$CERTS/ca.key" -out "$CERTS/ca.crt" &&
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' \
      >"$CERTS/leaf.ext" &&
    for c in A B C; do
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=conveyor-tls-rotation-$c" \
        -keyout "$CERTS/$c.key" -out "$CERTS/$c.csr" &&
        openssl x509 -req -in "$CERTS/$c.csr" -CA "$CERTS/ca.crt" -CAkey "$CERTS/ca.key" -CAcreateserial -days 2 \
          -extfile "$CERTS/leaf.ext" -out "$CERTS/$c.crt" || exit 1
    done
} >"$WORK/openssl.log" 2>&1 || { cat "$WORK/openssl.log" >&2; die "openssl could not make the test certificates"; }
fingerprint() { openssl x509 -noout -fingerprint -sha256 2>/dev/null | sed 's/.*=//; s/://g'; }
for c in A B C; do
  FP[$c]="$(fingerprint <"$CERTS/$c.crt")"
  [[ -n "${FP[$c]}" ]] || die "no fingerprint for certificate $c"
done
# Which certificate (A, B, C) a fingerprint is, "-" for none (no handshake), "?" for another one.
which_cert() {
  local c
  [[ -n "$1" ]] || { echo -; return; }
  for c in A B C; do [[ "${FP[$c]}" == "$1" ]] && { echo "$c"; return; }; done
  echo "?"
}

# The files the server reads, as the kubelet lays out a mounted Secret: TLS/tls.crt -> ..data/tls.crt,
# TLS/..data -> ..v<N> (each version a directory of its own, written before ..data is switched to it).
TLS="$WORK/tls"
VERSION=0
new_version() { # new_version CERT: a new version directory holding CERT's files, named in NEW_DIR
  VERSION=$((VERSION + 1))
  NEW_DIR="..v$VERSION"
  mkdir "$TLS/$NEW_DIR" &&
    cp "$CERTS/$1.crt" "$TLS/$NEW_DIR/tls.crt" &&
    cp "$CERTS/$1.key" "$TLS/$NEW_DIR/tls.key"
}
mkdir -p "$TLS"
new_version A || die "cannot write $TLS"
ln -s "$NEW_DIR" "$TLS/..data"
ln -s ..data/tls.crt "$TLS/tls.crt"
ln -s ..data/tls.key "$TLS/tls.key"

# --- the broker ----------------------------------------------------------------------------------------------
write_config() {
  cat >"$WORK/conveyor.toml" <<EOF
[namesrv]
listen = "127.0.0.1:$NS_PORT"
[broker]
listen = "127.0.0.1:$BROKER_PORT"
[grpc]
listen = "127.0.0.1:$GRPC_PORT"
[http]
listen = "127.0.0.1:$HTTP_PORT"
[store]
segment-size = 16777216
[tls]
mode = "enforcing"
cert-file = "$TLS/tls.crt"
key-file = "$TLS/tls.key"
EOF
}
standalone_start "$BIN" "$WORK" "$WORK/broker.log" write_config || die "conveyor standalone did not start"
NS="127.0.0.1:$NS_PORT"
PORTS=("$NS_PORT" "$BROKER_PORT" "$GRPC_PORT")
PORT_NAMES=(namesrv broker grpc)
say "conveyor (pid $BROKER_PID) ready, TLS enforcing: name server $NS, broker 127.0.0.1:$BROKER_PORT, gRPC" \
  "127.0.0.1:$GRPC_PORT; logs in $LOGS"
T_START=$((SECONDS - T0))

# served PORT: the fingerprint of the certificate a new TLS connection to PORT gets (verified against the test CA;
# empty when the handshake fails). The gRPC port is asked for h2, as gRPC clients do.
served() {
  local alpn=()
  [[ "$1" == "$GRPC_PORT" ]] && alpn=(-alpn h2)
  timeout 10 openssl s_client -connect "127.0.0.1:$1" -servername localhost -CAfile "$CERTS/ca.crt" \
    -verify_return_error "${alpn[@]}" </dev/null 2>>"$WORK/s_client.log" | fingerprint
}
# served_all: "namesrv=X broker=Y grpc=Z", X.. the certificate letters each port serves now.
served_all() {
  local i out=()
  for i in 0 1 2; do out+=("${PORT_NAMES[$i]}=$(which_cert "$(served "${PORTS[$i]}")")"); done
  echo "${out[*]}"
}
all_serve() { [[ "$(served_all)" == "namesrv=$1 broker=$1 grpc=$1" ]]; }
log_count() { grep -ac "$1" "$WORK/broker.log"; }

now="$(served_all)"
if [[ "$now" == "namesrv=A broker=A grpc=A" ]]; then
  ok initial-cert "every port serves A (CN conveyor-tls-rotation-A, verified against the test CA): $now"
else
  fail initial-cert "expected A on every port, got $now"
fi

# The topic, created over TLS (conveyor admin --tls); the broker's registration may lag its readiness.
deadline=$((SECONDS + 30))
until "$BIN" admin create-topic --tls --namesrv-addr "$NS" --topic "$TOPIC" --queues 4 >>"$WORK/admin.log" 2>&1; do
  ((SECONDS < deadline)) || die "conveyor admin create-topic --tls failed for 30 s (see $LOGS/admin.log)"
  sleep 0.5
done

# --- the Java producer, over TLS, sending while the certificate rotates ------------------------------------------
# java_start NAME TLS(true/false) ARGS...: a Ledger program in the background (stdout NAME.out, stderr NAME.log,
# client logs under java/NAME); its PID in JAVA_PID.
java_start() {
  local name=$1 tls=$2
  shift 2
  local logroot="$WORK/java/$name"
  mkdir -p "$logroot"
  java -Xms64m -Xmx512m -Dtls.enable="$tls" -Drocketmq.client.logRoot="$logroot" -Drocketmq.log.root="$logroot" \
    -Duser.home="$logroot/home" -Dlogback.configurationFile="$HERE/mqadmin/conf/logback_tools.xml" \
    -cp "$(cat "$OUT/java-$PROFILE.classpath")" conveyor.compat.Ledger "$@" >"$WORK/$name.out" 2>"$WORK/$name.log" &
  JAVA_PID=$!
  BG_PIDS+=("$JAVA_PID")
}
# wait_exit PID SECS: waits for a background program to exit; its status in EXIT_RC (124 if it had to be killed).
wait_exit() {
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    EXIT_RC=124
  else
    wait "$1"
    EXIT_RC=$?
  fi
}
# connections PID PORT: the local ports of PID's established TCP connections to PORT (sorted, space-separated).
connections() {
  python3 - "$1" "$2" <<'PY'
import os, sys
pid, port = sys.argv[1], int(sys.argv[2])
inodes = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:["):
        inodes.add(target[8:-1])
local = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table) as f:
        next(f)
        for row in f:
            col = row.split()
            if col[3] == "01" and int(col[2].split(":")[1], 16) == port and col[9] in inodes:
                local.append(int(col[1].split(":")[1], 16))
print(*sorted(local))
PY
}

LEDGER="$WORK/ledger"
mkdir -p "$LEDGER"
java_start producer true produce-defaults "$NS" "$TOPIC" "$LEDGER"
PRODUCER_PID=$JAVA_PID
# Under way: 50 SEND_OKs and the producer's connections to the name server and the broker open.
deadline=$((SECONDS + 60))
while :; do
  if (($(lines "$LEDGER/ok") >= 50)); then
    NS_CONNS_BEFORE="$(connections "$PRODUCER_PID" "$NS_PORT")"
    BROKER_CONNS_BEFORE="$(connections "$PRODUCER_PID" "$BROKER_PORT")"
    [[ -n "$NS_CONNS_BEFORE" && -n "$BROKER_CONNS_BEFORE" ]] && break
  fi
  if ! kill -0 "$PRODUCER_PID" 2>/dev/null || ((SECONDS >= deadline)); then
    tail -n 20 "$WORK/producer.log" >&2
    die "the Java producer did not get 50 SEND_OKs over TLS within 60 s ($(lines "$LEDGER/ok") SEND_OK)"
  fi
  sleep 0.1
done
say "the Java $JAVA_VERSION producer sends over TLS ($(lines "$LEDGER/ok") SEND_OK; its connections: name server" \
  "from port(s) $NS_CONNS_BEFORE, broker from $BROKER_CONNS_BEFORE); $ROTATIONS rotations, one every $PACE s"
T_LOAD=$((SECONDS - T0))

# rotate_pair CERT: the kubelet's atomic update: a new version directory, then ..data switched with one rename.
rotate_pair() {
  new_version "$1" || die "cannot write $TLS/$NEW_DIR"
  ln -s "$NEW_DIR" "$TLS/..data_tmp"
  mv -T "$TLS/..data_tmp" "$TLS/..data"
}
# replace FILE SOURCE: FILE (through the links) replaced by a copy of SOURCE, written aside and renamed over it.
replace() {
  cp "$2" "$1.tmp" && mv "$1.tmp" "$1" || die "cannot replace $1"
}

SEQUENCE=(B C A)
current=A
CERT_TIMES=()
: >"$WORK/rotations"
for r in $(seq 1 "$ROTATIONS"); do
  next="${SEQUENCE[$(((r - 1) % 3))]}"
  base=$(lines "$LEDGER/ok")
  started_ms=$(now_ms)
  if ((r % 2 == 1)); then
    style=pair
    rotate_pair "$next"
  else
    style="file by file"
    warned=$(log_count "TLS certificate not reloaded")
    replace "$TLS/..data/tls.crt" "$CERTS/$next.crt"
    # The server must keep serving the previous certificate until the key follows; it looks at the files at
    # most once a second, at handshakes, so handshakes go on until it said it kept the old pair.
    handshakes=0
    kept=1
    deadline=$((SECONDS + CERT_DEADLINE))
    while :; do
      now="$(served_all)"
      handshakes=$((handshakes + 3))
      if [[ "$now" != "namesrv=$current broker=$current grpc=$current" ]]; then
        kept=0
        break
      fi
      (($(log_count "TLS certificate not reloaded") > warned)) && break
      ((SECONDS < deadline)) || break
      sleep 0.2
    done
    if ((kept)) && (($(log_count "TLS certificate not reloaded") > warned)); then
      ok "rotation-$r/mismatch-kept-previous" "with $next's certificate and $current's key, $handshakes handshakes" \
"got $current; the server logged: $(grep -a "TLS certificate not reloaded" "$WORK/broker.log" | tail -n 1 |
        sed 's/\x1b\[[0-9;]*m//g; s/^[^ ]* *//' | cut -c1-160)"
    elif ((kept)); then
      fail "rotation-$r/mismatch-kept-previous" "the server did not log 'TLS certificate not reloaded' within" \
"${CERT_DEADLINE} s of a mismatched pair ($handshakes handshakes, all got $current)"
    else
      fail "rotation-$r/mismatch-kept-previous" "with $next's certificate and $current's key a handshake got: $now"
    fi
    replace "$TLS/..data/tls.key" "$CERTS/$next.key"
  fi
  swapped_ms=$(now_ms)
  echo "$r $swapped_ms $current $next" >>"$WORK/rotations"
  # New connections get the new certificate within the deadline (the server re-reads the files at most once a
  # second, at a handshake).
  deadline=$((SECONDS + CERT_DEADLINE))
  until now="$(served_all)" && [[ "$now" == "namesrv=$next broker=$next grpc=$next" ]]; do
    ((SECONDS < deadline)) && sleep 0.1 || break
  done
  took_ms=$(($(now_ms) - swapped_ms))
  if [[ "$now" == "namesrv=$next broker=$next grpc=$next" ]]; then
    CERT_TIMES+=("$took_ms")
    ok "rotation-$r/served" "$current→$next ($style): every port serves $next (CN conveyor-tls-rotation-$next)" \
      "$took_ms ms after the swap"
  else
    fail "rotation-$r/served" "$current→$next ($style): $CERT_DEADLINE s after the swap the ports serve: $now"
  fi
  # The producer keeps getting SEND_OKs on its open connection.
  deadline=$((SECONDS + 30))
  while (($(lines "$LEDGER/ok") < base + PROGRESS)) && kill -0 "$PRODUCER_PID" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.05
  done
  got=$(($(lines "$LEDGER/ok") - base))
  if ((got >= PROGRESS)); then
    ok "rotation-$r/sends" "$got SEND_OKs since the rotation began ($(lines "$LEDGER/failed") failed sends so far)"
  else
    alive=no
    kill -0 "$PRODUCER_PID" 2>/dev/null && alive=yes
    fail "rotation-$r/sends" "only $got SEND_OKs in 30 s after the rotation began (producer alive: $alive;" \
      "$(lines "$LEDGER/failed") failed sends)"
  fi
  current=$next
  # Pacing (not synchronisation): the next rotation PACE seconds after this one began.
  rest=$(python3 -c "print(max(0, $PACE - ($(now_ms) - $started_ms) / 1000))")
  sleep "$rest"
done
T_ROTATED=$((SECONDS - T0))

NS_CONNS_AFTER="$(connections "$PRODUCER_PID" "$NS_PORT" 2>/dev/null)"
BROKER_CONNS_AFTER="$(connections "$PRODUCER_PID" "$BROKER_PORT" 2>/dev/null)"
kept_all=1
for p in $NS_CONNS_BEFORE $BROKER_CONNS_BEFORE; do
  [[ " $NS_CONNS_AFTER $BROKER_CONNS_AFTER " == *" $p "* ]] || kept_all=0
done
if ((kept_all)); then
  ok producer/connections-kept "the producer's connections from local ports $NS_CONNS_BEFORE (name server) and" \
"$BROKER_CONNS_BEFORE (broker), open before the first rotation, are open after the last (now: $NS_CONNS_AFTER;" \
"$BROKER_CONNS_AFTER)"
else
  fail producer/connections-kept "before the rotations: name server $NS_CONNS_BEFORE, broker $BROKER_CONNS_BEFORE;" \
    "after: name server ${NS_CONNS_AFTER:-none}, broker ${BROKER_CONNS_AFTER:-none}"
fi

touch "$LEDGER/stop"
wait_exit "$PRODUCER_PID" 60
PRODUCER_LINE="$(grep -a '^PASS ledger-producer' "$WORK/producer.out")"
if ((EXIT_RC == 0)) && [[ -n "$PRODUCER_LINE" ]]; then
  ok producer/exit "${PRODUCER_LINE#PASS }"
else
  fail producer/exit "the producer exited with status $EXIT_RC without its figures"
  tail -n 15 "$WORK/producer.log" | sed 's/^/  # producer: /'
fi

# --- reading back over TLS, and plaintext refused ------------------------------------------------------------------
java_start drain true drain "$NS" "$TOPIC" "$LEDGER"
DRAIN_PID=$JAVA_PID
LEDGER_PLAIN="$WORK/ledger-plain"
mkdir -p "$LEDGER_PLAIN"
java_start plain false produce-defaults "$NS" "$PLAIN_TOPIC" "$LEDGER_PLAIN"
PLAIN_PID=$JAVA_PID

# Raw plaintext requests on each port: no answer, the connection closed; the same over TLS is answered.
python3 - "$NS_PORT" "$BROKER_PORT" "$GRPC_PORT" >"$WORK/raw.out" 2>&1 <<'PY'
import json, socket, ssl, struct, sys
ns, broker, grpc = (int(p) for p in sys.argv[1:4])

def frame():
    # A RocketMQ remoting request (JSON header): GET_ROUTEINFO_BY_TOPIC (105).
    h = json.dumps({"code": 105, "language": "JAVA", "version": 453, "opaque": 1, "flag": 0,
                    "extFields": {"topic": "TlsRotation"}}).encode()
    return struct.pack(">II", 4 + len(h), len(h)) + h

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")

def plaintext(port, payload):
    """What a plaintext client gets: 'closed' (EOF or reset, nothing read), or what it read / 'open'."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(payload)
        got = s.recv(64)
        return "closed" if got == b"" else f"answered {got[:16]!r}"
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except socket.timeout:
        return "still open after 5 s, no answer"
    finally:
        s.close()

def over_tls(port, payload=None, alpn=None):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            if payload is None:
                return f"TLS, ALPN {s.selected_alpn_protocol()}"
            s.sendall(payload)
            head = b""
            while len(head) < 8:
                chunk = s.recv(8 - len(head))
                if not chunk:
                    return "closed"
                head += chunk
            length, hlen = struct.unpack(">II", head)
            body = b""
            while len(body) < length - 4:
                chunk = s.recv(length - 4 - len(body))
                if not chunk:
                    break
                body += chunk
            header = json.loads(body[: hlen & 0xFFFFFF])
            return f"answered code {header.get('code')} ({header.get('remark') or ''})"[:120]

for name, port, payload, tls in (("namesrv", ns, frame(), lambda: over_tls(ns, frame())),
                                 ("broker", broker, frame(), lambda: over_tls(broker, frame())),
                                 ("grpc", grpc, H2_PREFACE, lambda: over_tls(grpc, None, ["h2"]))):
    try:
        plain = plaintext(port, payload)
    except OSError as e:
        plain = f"error {e}"
    try:
        secure = tls()
    except (OSError, ValueError) as e:
        secure = f"error {e}"
    good_tls = secure.startswith("answered") or secure == "TLS, ALPN h2"
    if plain == "closed" and good_tls:
        print(f"ok plaintext/raw-{name}: plaintext request on port {port}: closed with no answer; over TLS: {secure}")
    else:
        print(f"FAIL plaintext/raw-{name}: plaintext request on port {port}: {plain}; over TLS: {secure}")
PY
tally <"$WORK/raw.out"

# The Java producer without TLS: every send must fail (it cannot even get a route: the name server closes the
# connection; the 5.x client throws IllegalStateException wrapping RemotingSendRequestException); three failures are
# enough, one SEND_OK is a failure.
deadline=$((SECONDS + 60))
while (($(lines "$LEDGER_PLAIN/failed") < 3 && $(lines "$LEDGER_PLAIN/ok") == 0)) && kill -0 "$PLAIN_PID" 2>/dev/null &&
  ((SECONDS < deadline)); do
  sleep 0.1
done
touch "$LEDGER_PLAIN/stop"
wait_exit "$PLAIN_PID" 30
plain_failed=$(lines "$LEDGER_PLAIN/failed")
plain_ok=$(lines "$LEDGER_PLAIN/ok")
plain_why="$(awk '{print $4}' "$LEDGER_PLAIN/failed" 2>/dev/null | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')"
# What the client saw underneath (its own log): the name server closing the plaintext connection.
plain_resets=$(find "$WORK/java/plain" -name '*.log' -exec cat {} + 2>/dev/null |
  grep -c "Connection reset\|RemotingSendRequestException\|RemotingConnectException")
if ((plain_ok == 0 && plain_failed >= 3)); then
  ok plaintext/java-refused "the Java $JAVA_VERSION producer without TLS: $plain_failed sends, all failed ($plain_why)," \
    "0 SEND_OK; its log has $plain_resets connection reset / send request failures"
else
  fail plaintext/java-refused "the Java producer without TLS: $plain_ok SEND_OK, $plain_failed failed (exit $EXIT_RC)"
  tail -n 10 "$WORK/plain.log" | sed 's/^/  # plain: /'
fi

wait_exit "$DRAIN_PID" 120
DRAIN_RC=$EXIT_RC
T_DRAINED=$((SECONDS - T0))
if ((DRAIN_RC != 0)) || ! grep -q '^PASS ledger-drain' "$WORK/drain.out"; then
  fail ledger/no-loss "the Java consumer exited with status $DRAIN_RC without reading back"
  tail -n 15 "$WORK/drain.log" | sed 's/^/  # drain: /'
else
  python3 - "$LEDGER" "$WORK/rotations" "$JAVA_VERSION" >"$WORK/ledger.out" 2>&1 <<'PY'
import sys
d, rotations_file, version = sys.argv[1], sys.argv[2], sys.argv[3]
def read(name):
    try:
        return open(f"{d}/{name}").read().split()
    except FileNotFoundError:
        return []
attempted, ok, seen = set(read("attempted")), read("ok"), set(read("seen"))
ok_set = set(ok)
failed_lines = [l.split() for l in open(f"{d}/failed").read().splitlines() if l.strip()] if read("failed") else []
failed_keys = {l[0] for l in failed_lines}
ok_at = [int(t) for t in read("ok-at")]
lost = sorted(ok_set - seen)
unexpected = sorted(seen - attempted)
failed_stored = sorted(failed_keys & seen)
gaps = [b - a for a, b in zip(ok_at, ok_at[1:])]
longest = max(gaps, default=0)
# Across each rotation: from the last SEND_OK before its swap to the first after.
across = []
for line in open(rotations_file):
    r, at, frm, to = line.split()
    at = int(at)
    before = [t for t in ok_at if t <= at]
    after = [t for t in ok_at if t > at]
    if before and after:
        across.append(f"{frm}→{to} {after[0] - before[-1]} ms")
reasons = {}
for l in failed_lines:
    reasons[l[3]] = reasons.get(l[3], 0) + 1
print(f"# ledger (Java {version} over TLS): {len(attempted)} sent, {len(ok_set)} SEND_OK, {len(failed_keys)} failed "
      f"({', '.join(f'{k} x{v}' for k, v in sorted(reasons.items())) or 'none'}; {len(failed_stored)} of them stored "
      f"anyway), {len(seen)} read back; longest gap between SEND_OKs {longest} ms; across the rotations: "
      f"{', '.join(across)}")
if lost or unexpected:
    print(f"FAIL ledger/no-loss: {len(lost)} acknowledged keys missing {lost[:20]}, {len(unexpected)} keys never "
          f"sent {unexpected[:20]}")
elif not ok_set:
    print("FAIL ledger/no-loss: no SEND_OK at all")
else:
    print(f"ok ledger/no-loss: all {len(ok_set)} SEND_OK keys read back over TLS, 0 lost, 0 unexpected; "
          f"{len(failed_keys)} failed sends (none acknowledged), longest gap between SEND_OKs {longest} ms")
PY
  tally <"$WORK/ledger.out"
fi

if kill -0 "$BROKER_PID" 2>/dev/null; then
  ok broker/alive "conveyor still running; it logged 'TLS certificate reloaded' $(log_count "TLS certificate reloaded")" \
    "times and 'TLS certificate not reloaded' $(log_count "TLS certificate not reloaded") times"
else
  fail broker/alive "conveyor exited during the run"
fi

# Every check must have reported.
expected=(initial-cert producer/connections-kept producer/exit ledger/no-loss plaintext/java-refused
  plaintext/raw-namesrv plaintext/raw-broker plaintext/raw-grpc broker/alive)
for r in $(seq 1 "$ROTATIONS"); do
  expected+=("rotation-$r/served" "rotation-$r/sends")
  ((r % 2 == 0)) && expected+=("rotation-$r/mismatch-kept-previous")
done
for name in "${expected[@]}"; do
  [[ -n "${REPORTED["$name"]:-}" ]] || fail "$name" "no result"
done
if ((FAILED > 0)); then
  say "last broker log lines:"
  tail -n 30 "$WORK/broker.log" | sed 's/\x1b\[[0-9;]*m//g; s/^/  # broker: /' >&2
fi
max_cert=0
for t in "${CERT_TIMES[@]}"; do ((t > max_cert)) && max_cert=$t; done
say "build ${T_BUILD}s, broker ready at ${T_START}s, producer under load at ${T_LOAD}s, $ROTATIONS rotations done at" \
  "${T_ROTATED}s (new certificate served within ${max_cert} ms at worst), drained at ${T_DRAINED}s; logs in $LOGS"
echo "tls-rotation: $PASSED passed, $FAILED failed"
((FAILED == 0))
