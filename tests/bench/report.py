#!/usr/bin/env python3
"""Turns the raw outputs that compare.sh saved in LOG_DIR into a Markdown report (stdout).

LOG_DIR/{conveyor,apache}/NAME.out hold what `conveyor bench ...` printed; mem-*.txt the /proc/PID/status lines;
commands.txt the client commands; server-*.txt the server command lines; LOG_DIR/machine.txt the machine info.
"""
import os
import re
import sys

LOG = sys.argv[1]
KINDS = ("conveyor", "apache")

NUM = r"([0-9.]+)"
STATS_RE = re.compile(
    rf"(?P<what>[^:]+): (?P<msgs>\d+) msgs in {NUM} s = {NUM} msgs/s, {NUM} MB/s; "
    rf"latency p50 {NUM} ms, p99 {NUM} ms, p999 {NUM} ms; errors (?P<errors>\d+)(?P<first>.*)"
)
DELIVERY_RE = re.compile(
    rf"delivery: (\d+) of (\d+) delivered over {NUM} s = {NUM} msgs/s; early deliveries (\d+); max lateness (\d+) ms"
)
LONGPOLL_RE = re.compile(rf"long poll wake-up over (\d+) trials: min {NUM} ms, median {NUM} ms, max {NUM} ms")


def read(kind, name):
    try:
        with open(os.path.join(LOG, kind, name)) as f:
            return f.read()
    except OSError:
        return None


def stats(kind, name, what=None):
    text = read(kind, name) or ""
    for line in text.splitlines():
        m = STATS_RE.match(line)
        if m and (what is None or m.group("what") == what):
            g = m.groups()
            return {
                "msgs": int(m.group("msgs")),
                "secs": float(g[2]),
                "rate": float(g[3]),
                "mbps": float(g[4]),
                "p50": float(g[5]),
                "p99": float(g[6]),
                "p999": float(g[7]),
                "errors": int(m.group("errors")),
                "first": m.group("first").strip(),
            }
    return None


def delivery(kind):
    m = DELIVERY_RE.search(read(kind, "delay.out") or "")
    if not m:
        return None
    return {
        "delivered": int(m.group(1)),
        "scheduled": int(m.group(2)),
        "window": float(m.group(3)),
        "rate": float(m.group(4)),
        "early": int(m.group(5)),
        "late": int(m.group(6)),
    }


def longpoll(kind):
    m = LONGPOLL_RE.search(read(kind, "long-poll.out") or "")
    if not m:
        return None
    return {"min": float(m.group(2)), "median": float(m.group(3)), "max": float(m.group(4))}


def mem(kind, name):
    text = read(kind, name)
    if not text:
        return None
    out = {}
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+(\d+) kB", line)
        if m:
            out[m.group(1)] = int(m.group(2)) / 1024.0
    return out or None


def failure(kind, name):
    text = read(kind, name)
    if text is None:
        return "not run"
    m = re.search(r"FAILED.*", text)
    return m.group(0)[:80] if m else "no result"


rows = []  # (metric, conveyor value, apache value, digits, better) ; value None = n/a


def add(metric, get, digits=0, better="higher"):
    vals = []
    for k in KINDS:
        try:
            vals.append(get(k))
        except (TypeError, KeyError):
            vals.append(None)
    rows.append((metric, vals[0], vals[1], digits, better))


def fmt(v, digits):
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    return f"{v:,.{digits}f}"


def ratio(a, b):
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or b == 0:
        return "n/a"
    r = a / b
    return f"{r:.2f}" if r == 0 or r >= 0.1 else f"{r:.2g}"


def produced(k):
    s, b = stats(k, "produce-single.out"), stats(k, "produce-batch.out")
    return (s["msgs"] if s else 0) + (b["msgs"] if b else 0)


for label, name in (
    ("1. produce 1 KiB singles, async flush", "produce-single.out"),
    ("2. produce 1 KiB batches of 16, async flush", "produce-batch.out"),
):
    add(f"{label}: msgs/s", lambda k, n=name: stats(k, n)["rate"])
    add(f"{label}: MB/s", lambda k, n=name: stats(k, n)["mbps"], 1)
    add(f"{label}: p50 latency per request (ms)", lambda k, n=name: stats(k, n)["p50"], 2, "lower")
    add(f"{label}: p99 latency per request (ms)", lambda k, n=name: stats(k, n)["p99"], 2, "lower")
    add(f"{label}: failed requests", lambda k, n=name: stats(k, n)["errors"], 0, "lower")
add("3. catch-up consume of 1+2: msgs/s", lambda k: stats(k, "consume.out")["rate"])
add("3. catch-up consume: MB/s", lambda k: stats(k, "consume.out")["mbps"], 1)
add("3. catch-up consume: messages read (of produced in 1+2)", lambda k: f"{stats(k, 'consume.out')['msgs']:,} of {produced(k):,}")
add("3. catch-up consume: p99 pull latency (ms)", lambda k: stats(k, "consume.out")["p99"], 2, "lower")
add("4. long-poll wake-up, median of 20 (ms)", lambda k: longpoll(k)["median"], 2, "lower")
add("4. long-poll wake-up, min / max (ms)", lambda k: f"{longpoll(k)['min']:.2f} / {longpoll(k)['max']:.2f}", 0, "lower")
add("5. produce 1 KiB singles, SYNC flush: msgs/s", lambda k: stats(k, "produce-sync.out")["rate"])
add("5. SYNC flush: p50 latency (ms)", lambda k: stats(k, "produce-sync.out")["p50"], 2, "lower")
add("5. SYNC flush: p99 latency (ms)", lambda k: stats(k, "produce-sync.out")["p99"], 2, "lower")
add("5. SYNC flush: failed requests", lambda k: stats(k, "produce-sync.out")["errors"], 0, "lower")
add("6. delay level 1 (1 s): scheduling sends, msgs/s", lambda k: stats(k, "delay.out", "schedule")["rate"])
add("6. delay level 1: delivery rate, msgs/s (first to last delivery)", lambda k: delivery(k)["rate"])
add("6. delay level 1: delivered / early / max lateness (ms)",
    lambda k: f"{delivery(k)['delivered']:,} / {delivery(k)['early']} / {delivery(k)['late']:,}")
add("6. transactions (half + commit) of 20,000: units/s", lambda k: stats(k, "transaction.out")["rate"])
add("6. transactions: p99 latency per unit (ms)", lambda k: stats(k, "transaction.out")["p99"], 2, "lower")
add("7. broker RSS after runs 1+2 (MiB)", lambda k: mem(k, "mem-after-produce.txt")["VmRSS"], 0, "lower")
add("7. broker RssAnon after runs 1+2 (MiB)", lambda k: mem(k, "mem-after-produce.txt")["RssAnon"], 0, "lower")
add("7. broker RssFile after runs 1+2 (MiB)", lambda k: mem(k, "mem-after-produce.txt")["RssFile"], 0, "lower")
add("7. broker RSS at end of async phase (after 3, 4, 6) (MiB)", lambda k: mem(k, "mem-end-async.txt")["VmRSS"], 0, "lower")
add("7. broker RSS after run 5, SYNC (MiB)", lambda k: mem(k, "mem-after-sync.txt")["VmRSS"], 0, "lower")
add("7. separate name server process RSS (MiB)",
    lambda k: "in-process" if k == "conveyor" else mem(k, "mem-namesrv-async.txt")["VmRSS"], 0, "lower")
add("store size after async phase (MiB, du)", lambda k: float(read(k, "store-mb-async.txt")), 0, "lower")

SECOND = os.environ.get("BENCH_SECOND_LABEL") or "Apache RocketMQ 5.3.3"
print(f"| metric | Conveyor | {SECOND} | ratio (Conveyor/{SECOND.split()[0]}) |")
print("| --- | ---: | ---: | ---: |")
for metric, c, a, digits, better in rows:
    print(f"| {metric} | {fmt(c, digits)} | {fmt(a, digits)} | {ratio(c, a)} |")
print()
print("Ratios above 1 favour Conveyor for rates and Apache for latencies, failures and memory.")

notes = []
for k in KINDS:
    for name in ("produce-single.out", "produce-batch.out", "consume.out", "produce-sync.out", "delay.out",
                 "transaction.out", "long-poll.out"):
        text = read(k, name)
        if text is None:
            continue
        if "FAILED" in text:
            notes.append(f"{k} {name[:-4]}: {failure(k, name)}")
        s = stats(k, name)
        if s and s["first"]:
            notes.append(f"{k} {name[:-4]}: {s['errors']} failed requests {s['first']}")
for k in KINDS:
    t = read(k, "create-fallback.txt")
    if t:
        by_error = {}
        for line in t.strip().splitlines():
            topic, _, err = line.partition("|")
            by_error.setdefault(err.strip(), []).append(topic)
        for err, topics in by_error.items():
            notes.append(
                f"{k} setup: `conveyor admin create-topic` failed ({err}) for {', '.join(topics)}; those topics were "
                "created with Apache's own mqadmin: `updateTopic -c DefaultCluster -t TOPIC -r 8 -w 8`")
if notes:
    print()
    print("Errors and notes:")
    print()
    for n in notes:
        print(f"- {n}")

machine = {}
with open(os.path.join(LOG, "machine.txt")) as f:
    for line in f:
        key, _, val = line.rstrip("\n").partition(": ")
        machine[key] = val
print()
print("Machine:")
print()
print(f"- date: {machine.get('date')}; commit {machine.get('commit')}")
print(f"- nproc: {machine.get('nproc')} ({machine.get('cpu')}), {machine.get('mem')}, kernel {machine.get('kernel')}")
print(f"- {machine.get('java')}")
print(f"- uptime before starting: `{machine.get('start', '').strip()}`")
if machine.get("waited_for_load") == "1":
    print(f"- load was above {machine.get('max_load')}: waited up to 2 minutes; measuring started at "
          f"`{machine.get('measuring from', '').strip()}`")
for k in KINDS:
    for phase in ("async", "sync"):
        t = read(k, f"load-{phase}.txt")
        if t:
            print(f"- {k} {phase} phase began at: `{t.strip()}`")
print(f"- after the last run: `{machine.get('end', '').strip()}`")
print()
print("Servers:")
print()
for k in KINDS:
    for phase in ("async", "sync"):
        t = read(k, f"server-{phase}.txt")
        if t:
            print(f"- {k}, {phase}:")
            print()
            print("  ```")
            for line in t.rstrip("\n").splitlines():
                print("  " + line)
            print("  ```")
print()
print("Client commands (the same for both; NS = the name server of the broker under test):")
print()
print("```")
for k in KINDS:
    t = read(k, "commands.txt")
    if t:
        print(re.sub(r"--namesrv-addr \S+", "--namesrv-addr NS", t).rstrip("\n"))
        break
print("```")
