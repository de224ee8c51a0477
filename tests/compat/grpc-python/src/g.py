"""Shared plumbing of the gRPC checks for the official Python SDK (PyPI rocketmq-python-client, package rocketmq):
environment, resource names, client construction, deadline-based waiting, a background SimpleConsumer receive loop,
message content comparison and the PASS/FAIL output contract. A port of grpc-java's G.java; the names and the
semantics of the checks are the same.

Output contract: every check prints exactly one line on stdout, "PASS grpc-python-VERSION/CHECK" or
"FAIL grpc-python-VERSION/CHECK: reason". Everything else goes to stderr, each line prefixed with "[CHECK] " (or
"[SCENARIO] ") so grpc.sh can show a failed check's own diagnostics.
"""
import logging
import math
import os
import queue
import sys
import threading
import time
import traceback

# The SDK configures its file logger (~/logs/rocketmq_python/rocketmq_client.log) when it is imported; sdk.sh
# points HOME below GRPC_LOG_DIR so that the log lands there.
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,  # noqa: E402
                      SimpleConsumer)
from rocketmq.v5.util.version import SDK_VERSION  # noqa: E402

if os.environ.get("GRPC_PYTHON_SDK_DEBUG", "") not in ("", "0", "false"):
    logging.getLogger("rocketmq-python-client").setLevel(logging.DEBUG)

# The receive invisible duration used throughout (seconds); 10 s is the minimum the proxy accepts for receive.
INVISIBLE = 10
# SimpleConsumer long-polling duration (seconds).
AWAIT = 5


# ---------------------------------------------------------------- environment

def env(name, default=None):
    v = os.environ.get(name)
    return default if v is None or not v.strip() else v.strip()


def endpoint():
    e = env("GRPC_ENDPOINT")
    if e is None:
        raise RuntimeError("GRPC_ENDPOINT (host:port of the gRPC endpoint) is not set")
    return e


def tls():
    return env("GRPC_TLS", "false").lower() == "true"


def run_id():
    r = env("GRPC_RUN_ID")
    if r is None:
        raise RuntimeError("GRPC_RUN_ID is not set (grpc.sh sets it; Resources prints the names)")
    return r


def client_version():
    return SDK_VERSION


def check_name(check):
    return "grpc-python-" + client_version() + "/" + check


def timeout_ms(default_secs):
    """A wait's limit in ms: DEFAULT_SECS seconds, scaled by GRPC_TIMEOUT_SCALE (default 1)."""
    return int(default_secs * 1000 * float(env("GRPC_TIMEOUT_SCALE", "1")))


def now_ms():
    return time.time_ns() // 1_000_000


def config():
    return ClientConfiguration(endpoint(), Credentials(), request_timeout=10)


# ---------------------------------------------------------------- TLS with any certificate
#
# With tls_enable=True the SDK creates grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(), options),
# i.e. it verifies the server certificate against the system roots (and the host name). The checks must accept any
# certificate (like the Java SDK does), so with GRPC_TLS=true the test (not the SDK) fetches the endpoint's
# certificate once and makes it the trusted root of the credentials the SDK asks for, with the target name
# overridden to the certificate's subject. The SDK's own code path (secure_channel) is unchanged.

_tls_patched = False


def _patch_tls():
    global _tls_patched
    if _tls_patched:
        return
    import ssl
    import socket
    import grpc
    from grpc import aio
    host, port = endpoint().rsplit(":", 1)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        with ctx.wrap_socket(sock, server_hostname=host) as ss:
            der = ss.getpeercert(binary_form=True)
    pem = ssl.DER_cert_to_PEM_cert(der).encode()
    name = _cert_name(der) or host
    stderr("main", "TLS: trusting the endpoint's certificate (subject/SAN name %s) for the SDK's secure channels"
           % name)
    orig_creds = grpc.ssl_channel_credentials
    orig_secure = aio.secure_channel

    def creds(root_certificates=None, private_key=None, certificate_chain=None):
        return orig_creds(root_certificates or pem, private_key, certificate_chain)

    def secure_channel(target, credentials, options=None, *a, **kw):
        opts = list(options or []) + [("grpc.ssl_target_name_override", name)]
        return orig_secure(target, credentials, opts, *a, **kw)

    grpc.ssl_channel_credentials = creds
    aio.secure_channel = secure_channel
    _tls_patched = True


def _cert_name(der):
    """A DNS name (or the CN) of a DER certificate, for the target name override; None if none is found."""
    try:
        from cryptography import x509  # not a dependency; used when present
        cert = x509.load_der_x509_certificate(der)
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            names = san.get_values_for_type(x509.DNSName)
            if names:
                return names[0]
        except Exception:
            pass
        cns = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        return cns[0].value if cns else None
    except ImportError:
        pass
    # Minimal DER scan: the last commonName (OID 2.5.4.3) string, i.e. the subject's.
    oid = bytes([0x06, 0x03, 0x55, 0x04, 0x03])
    i = der.rfind(oid)
    if i < 0:
        return None
    j = i + len(oid)
    length = der[j + 1]
    return der[j + 2:j + 2 + length].decode("utf-8", "replace")


def tls_enable():
    if tls():
        _patch_tls()
        return True
    return False


# ---------------------------------------------------------------- resources (created by grpc.sh with mqadmin)

def topic(key):
    return "grpc_" + key + "_" + run_id()


def group(key):
    return "grpcg_" + key + "_" + run_id()


def dlq_topic(group_key):
    return "%DLQ%" + group(group_key)


# ---------------------------------------------------------------- output

_OUT = threading.Lock()
_T0 = time.time()


def stdout(line):
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def stderr(tag, line):
    with _OUT:
        t = "%7.3f" % (time.time() - _T0)
        for ln in str(line).split("\n"):
            sys.stderr.write("[" + tag + "] " + t + " " + ln + "\n")
        sys.stderr.flush()


# ---------------------------------------------------------------- scenarios and checks

class Failure(Exception):
    """A scenario failure with a reason: fails every check of the scenario not yet reported."""


class Scenario:
    """One scenario: a body that reports one or more checks. Problems are collected per check; a check passes when
    the body reported it without problems. A check the body did not reach is failed with the body's exception."""

    def __init__(self, name, checks, body):
        self.name = name
        self.checks = list(checks)
        self.body = body
        self._problems = {c: [] for c in self.checks}
        self._done = set()
        self._passed = {}
        self._lock = threading.Lock()

    def diag(self, a, b=None):
        """diag(line) tags the line with the scenario, diag(check, line) with the check."""
        if b is None:
            stderr(self.name, a)
        else:
            stderr(a, b)

    def problem(self, check, p):
        if check not in self._problems:
            raise ValueError("unknown check " + check)
        with self._lock:
            self._problems[check].append(p)
        stderr(check, "problem: " + p)

    def problem_count(self, check):
        with self._lock:
            return len(self._problems[check])

    def report(self, check):
        """Prints CHECK's verdict now (once): PASS when no problem was recorded."""
        with self._lock:
            if check in self._done:
                return
            self._done.add(check)
            probs = list(self._problems[check])
            if not probs:
                self._passed[check] = True
                stdout("PASS " + check_name(check))
            else:
                self._passed[check] = False
                more = " (and %d more problems, see stderr)" % (len(probs) - 1) if len(probs) > 1 else ""
                stdout("FAIL " + check_name(check) + ": " + probs[0] + more)

    def fail_now(self, check, reason):
        with self._lock:
            if check in self._done:
                return
            self._done.add(check)
            self._passed[check] = False
        stderr(check, "FAIL: " + reason)
        stdout("FAIL " + check_name(check) + ": " + reason)

    def reported(self, check):
        with self._lock:
            return check in self._done

    def all_passed(self):
        with self._lock:
            return all(self._passed.get(c) is True for c in self.checks)


def run_all(*scenarios):
    """Runs the scenarios concurrently (each in its own thread, with its own topics, groups and clients), selected
    by GRPC_CHECKS (space-separated check names; default all), then exits the process: status 0 when every
    selected check passed. A scenario still running after GRPC_PROGRAM_SECS (default 170 s) has its unreported
    checks failed."""
    selected = set(env("GRPC_CHECKS", "").split())
    run = [s for s in scenarios if not selected or any(c in selected for c in s.checks)]
    stderr("main", "client rocketmq-python-client %s, endpoint %s, tls %s, run id %s, scenarios %s"
           % (client_version(), endpoint(), tls(), run_id(), " ".join(s.name for s in run) or "(none)"))
    threads = []

    def runner(s):
        t0 = time.time()
        try:
            s.body(s)
            for c in s.checks:
                if not s.reported(c):
                    s.fail_now(c, "the scenario ended without a verdict for this check (test bug)")
        except Failure as f:
            for c in s.checks:
                s.fail_now(c, str(f))
        except BaseException as e:  # noqa: B902 - every failure must become a verdict
            s.diag("exception: %r\n%s" % (e, traceback.format_exc()))
            for c in s.checks:
                s.fail_now(c, "unexpected %s: %s" % (type(e).__name__, e))
        finally:
            s.diag("scenario took %d ms" % int((time.time() - t0) * 1000))

    for s in run:
        t = threading.Thread(target=runner, args=(s,), name="scenario-" + s.name, daemon=True)
        t.start()
        threads.append(t)
    limit = float(env("GRPC_PROGRAM_SECS", "170"))
    end = time.time() + limit
    for t in threads:
        t.join(max(0.0, end - time.time()))
    finished = all(not t.is_alive() for t in threads)
    ok = True
    for s in run:
        if not finished:
            for c in s.checks:
                s.fail_now(c, "scenario %s did not finish within %d s" % (s.name, limit))
        ok = ok and s.all_passed()
    sys.stdout.flush()
    sys.stderr.flush()
    # Like the Java checks' Runtime.halt: the SDK's threads (asyncio loop, schedulers) must not keep us alive.
    os._exit(0 if ok else 1)


# ---------------------------------------------------------------- waiting

def await_cond(s, what, timeout, cond, progress=None):
    """Waits until COND() holds or TIMEOUT ms pass (polls every 50 ms, a progress note on stderr every 10 s)."""
    start = now_ms()
    deadline = start + timeout
    next_note = start + 10_000
    while not cond():
        now = now_ms()
        if now >= deadline:
            raise Failure("timed out after %d s waiting for %s%s"
                          % (timeout // 1000, what, "" if progress is None else " (" + progress() + ")"))
        if now >= next_note:
            s.diag(".. still waiting for " + what + ("" if progress is None else ": " + progress()))
            next_note = now + 10_000
        time.sleep(0.05)


def build(s, what, factory):
    """Builds and starts a client, retrying for up to 30 s: right after mqadmin created a topic the endpoint may
    not see its route yet. FACTORY returns a new, not yet started client."""
    deadline = now_ms() + timeout_ms(30)
    attempts = 0
    while True:
        attempts += 1
        try:
            c = factory()
            c.startup()
            if attempts > 1:
                s.diag(what + " started after %d attempts" % attempts)
            return c
        except Exception as e:
            last = e
            s.diag(what + " did not start (attempt %d): %r" % (attempts, e))
        if now_ms() >= deadline:
            raise Failure("could not start %s within 30 s: %r" % (what, last))
        time.sleep(1)


def producer(s, t, checker=None):
    return build(s, "Producer(" + t + ")",
                 lambda: Producer(config(), topics=[t], checker=checker, tls_enable=tls_enable()))


def close_quietly(s, c):
    if c is None:
        return
    try:
        c.shutdown()
    except Exception as e:
        s.diag("shutdown of %s failed: %r" % (type(c).__name__, e))


# ---------------------------------------------------------------- messages

# RocketMQ-internal message properties that Apache RocketMQ 5.3.3's proxy passes through as user properties: the
# FIFO sharding key, the transaction id, the broker's check-back counter. An endpoint may or may not show them; any
# other extra property is a difference.
INTERNAL_PROPERTIES = {"__SHARDINGKEY", "__transactionId__", "TRANSACTION_CHECK_TIMES"}


class Sent:
    """A message this test sent, with what it must look like when received."""

    def __init__(self, check, index, tag):
        self.check = check
        self.index = index
        self.tag = tag
        self.key = "k_%s_%s_%d" % (check, run_id(), index)
        self.keys = [self.key, "alt_%d" % index]
        # A body with every byte value, of a length that varies with the index (binary-safe transport).
        n = 64 + (index * 37) % 1500
        head = (self.key + "|").encode("utf-8")
        self.body = bytes(head[i] if i < len(head) else (i * 31 + index) & 0xFF for i in range(n))
        self.props = {"p_check": check, "p_index": str(index), "p_text": "caf\u00e9 \u2713 %d" % index}
        self.message_group = None
        # Epoch ms, a whole second: the Python SDK sends delivery_timestamp in whole seconds.
        self.delivery_timestamp = None
        self.message_id = None
        self.send_start = 0
        self.send_end = 0

    def build(self, t):
        m = Message()
        m.topic = t
        m.body = self.body
        for k in self.keys:
            m.keys = k  # the SDK's keys setter adds one key per assignment
        if self.tag is not None:
            m.tag = self.tag
        for k, v in self.props.items():
            m.add_property(k, v)
        if self.message_group is not None:
            m.message_group = self.message_group
        if self.delivery_timestamp is not None:
            # Message.delivery_timestamp is put into the protobuf Timestamp's seconds field as it is.
            m.delivery_timestamp = self.delivery_timestamp // 1000
        return m

    def differences(self, v, t, compare_id):
        """Differences between this message and a received one (empty: identical)."""
        d = []
        if v.topic != t:
            d.append("topic %s != %s" % (v.topic, t))
        got = bytes(v.body or b"")
        if got != self.body:
            d.append("body differs (%d bytes received, %d sent)" % (len(got), len(self.body)))
        if v.tag != self.tag:
            d.append("tag %s != %s" % (v.tag, self.tag))
        if set(v.keys) != set(self.keys):
            d.append("keys %s != %s" % (sorted(v.keys), self.keys))
        props = dict(v.properties)
        got_props = {k: x for k, x in props.items() if k not in INTERNAL_PROPERTIES}
        if got_props != self.props:
            d.append("user properties %s != %s" % (dict(sorted(props.items())), dict(sorted(self.props.items()))))
        if compare_id and self.message_id is not None and self.message_id != v.message_id:
            d.append("message id %s != %s (from the send receipt)" % (v.message_id, self.message_id))
        if self.message_group is not None and self.message_group != v.message_group:
            d.append("message group %s != %s" % (v.message_group, self.message_group))
        if self.delivery_timestamp is not None and self.delivery_timestamp != v.delivery_timestamp:
            d.append("delivery timestamp %s != %s" % (v.delivery_timestamp, self.delivery_timestamp))
        return d


def key_of(v):
    """The first key of a received message (our Sent.key), or None."""
    for k in v.keys or ():
        if k.startswith("k_"):
            return k
    return None


def describe(v):
    return "id=%s key=%s tag=%s attempt=%s group=%s" % (v.message_id, key_of(v), v.tag, v.delivery_attempt,
                                                       v.message_group)


def by_key(sent):
    return {m.key: m for m in sent}


# ---------------------------------------------------------------- SimpleConsumer receive loop

class Arrival:
    """One message as the receive loop got it: AT when receive() returned it, RECEIVE_START when the receive()
    call that returned it was issued (the message became invisible no earlier)."""

    def __init__(self, view, at, receive_start):
        self.view = view
        self.at = at
        self.receive_start = receive_start


class Receiver:
    """A SimpleConsumer with a thread that calls receive() back to back and queues what arrives (optionally acking
    each message at once). The consumer is started (and its first receive issued) before the scenario sends."""

    def __init__(self, s, grp, t, expression, invisible, auto_ack, batch):
        self.s = s
        self.what = "SimpleConsumer(%s on %s %s)" % (grp, t, expression)
        self.invisible = invisible
        self.auto_ack = auto_ack
        self.batch = batch
        self.queue = queue.Queue()
        self.all = []
        self.receive_errors = 0
        self.ack_errors = 0
        self.last_error = None
        self._running = True
        self.consumer = build(s, self.what, lambda: SimpleConsumer(
            config(), grp, {t: FilterExpression(expression)}, await_duration=AWAIT, tls_enable=tls_enable()))
        self._thread = threading.Thread(target=self._loop, name="receive-" + grp, daemon=True)
        self._thread.start()

    def _loop(self):
        while self._running:
            t0 = now_ms()
            try:
                got = self.consumer.receive(self.batch, self.invisible)
            except Exception as e:
                if not self._running:
                    return
                self.receive_errors += 1
                self.last_error = repr(e)
                self.s.diag(self.what + ": receive failed: %r" % (e,))
                time.sleep(0.2)  # back off a failing endpoint instead of spinning
                continue
            t = now_ms()
            for v in got or ():
                if self.auto_ack:
                    try:
                        self.consumer.ack(v)
                    except Exception as e:
                        self.ack_errors += 1
                        self.last_error = "ack: %r" % (e,)
                        self.s.diag(self.what + ": ack of " + describe(v) + " failed: %r" % (e,))
                a = Arrival(v, t, t0)
                self.all.append(a)
                self.queue.put(a)

    def poll(self, until):
        """The next arrival, or None once UNTIL (epoch ms) has passed."""
        wait = until - now_ms()
        try:
            if wait <= 0:
                return self.queue.get_nowait()
            return self.queue.get(timeout=wait / 1000.0)
        except queue.Empty:
            return None

    def poll_now(self):
        try:
            return self.queue.get_nowait()
        except queue.Empty:
            return None

    def errors(self):
        return "receive errors %d, ack errors %d%s" % (self.receive_errors, self.ack_errors,
                                                       "" if self.last_error is None else ", last: " + self.last_error)

    def close(self):
        self._running = False
        close_quietly(self.s, self.consumer)


def receive_all(s, check, r, t, expect, timeout):
    """Receives until every message of EXPECT (by key) has arrived once, checking each arrival's content;
    duplicates and unknown messages are problems of CHECK. Returns the first arrival of each key."""
    first = {}
    deadline = now_ms() + timeout
    while len(first) < len(expect):
        a = r.poll(deadline)
        if a is None:
            missing = [k for k in expect if k not in first]
            s.problem(check, "received %d of %d messages within %d s; missing e.g. %s; %s"
                      % (len(first), len(expect), timeout // 1000, missing[:5], r.errors()))
            return first
        check_arrival(s, check, a, t, expect, first)
    return first


def check_arrival(s, check, a, t, expect, first):
    k = key_of(a.view)
    sent = expect.get(k) if k is not None else None
    if sent is None:
        s.problem(check, "received a message that was not sent to this topic: " + describe(a.view))
        return
    if k in first:
        s.problem(check, "received %s twice (%s)" % (k, describe(a.view)))
        return
    first[k] = a
    d = sent.differences(a.view, t, True)
    if d:
        s.problem(check, k + " arrived different from what was sent: " + "; ".join(d))
    if a.view.delivery_attempt != 1:
        s.problem(check, "%s arrived with deliveryAttempt %s, expected 1" % (k, a.view.delivery_attempt))


def ceil_second(ms):
    return int(math.ceil(ms / 1000.0)) * 1000
