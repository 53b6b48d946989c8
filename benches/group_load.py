"""A group of 2 carries what one cannot (issue 18's load test), outside CI.

::

    PYTHONPATH=python .venv/bin/python benches/group_load.py --steps 3000,4000 --repeat 2
    PYTHONPATH=python .venv/bin/python benches/group_load.py --steps 2000 --warmup 3 \\
        --window 5 --no-write                                   # a short try
    PYTHONPATH=python .venv/bin/python benches/group_load.py --render benches/group_load.json

For each N (topics), each repeat and each size (``--members``, default ``raw,1,2``), in turn:

- a fresh group (``ShardLayout(group, --shards)``) and topic prefix; on RabbitMQ its objects are
  declared with :func:`heartwire.groups.declare_rabbitmq` (they expire 10 minutes after the run);
- each member is a process of its own (``group_load.py member``): a ``HeartbeatMonitor`` of
  ``<prefix>.>`` (period 1 s, grace ``--grace``) inside a ``MonitorGroupMember``, on a connection
  with a 1 s STOMP heart-beat, as ``docs/groups.md`` runs them. ``raw`` is the baseline instead:
  one process with one raw socket subscribed to every shard queue, counting frames (what the
  broker delivers of this layout here, with the least work on the reading side);
- each of these processes is put, as soon as it is spawned, in a cgroup (v1 ``cpu``
  controller) of its own with the **same quota**: ``cpu.cfs_quota_us=--quota`` per
  ``cpu.cfs_period_us=--cfs-period`` (100 000 by default; 15 000: 15 % of one core), and
  ``cpu.shares=--shares`` (8192), so that on a machine busy with other work the quota, not the
  other work, is what limits a member. The publisher gets a cgroup with the same shares and no
  quota, so that it keeps its schedule. The cgroups are removed at the end of each run (also on
  Ctrl-C or SIGTERM). Without a writable cgroup the bench stops; ``--quota 0`` runs uncapped;
- the bench waits until the members own every shard between them, each at most
  ``ceil(shards / members)`` (the group's own balance), and stay so for 2 s;
- then a raw-socket publisher (``group_load.py publish``: pre-built SEND frames, ``wire.py``'s
  pacing, not heartwire) beats the N topics ``<prefix>.<i>`` once a second, spread over the
  second, for ``warmup + window`` seconds, **sharded as** ``HeartbeatPublisher(...,
  shards=layout)`` sends them (``StompTransport.publish_sharded``): RabbitMQ, to the topic with
  the ``heartwire-shard: <k>`` header (``shard_of``); ActiveMQ, to the shard's queue
  ``/queue/heartwire.<group>.<k>`` with that header; both with the 10-period ``expires``
  (``SHARD_TTL_PERIODS``) and, on RabbitMQ, the ``expiration`` heartwire's dialect adds.
  ``check_frames`` holds the frames to heartwire's (destination, header, body).

Figures, as ``rabbit_steps.py`` (its criteria): **counted** (beats the members' detectors
recorded, summed, of all sent, by the end plus ``--settle``), **false failures** (topics named by a
``failed`` event whose outage began before the end plus the grace: every topic beats until then),
**p99 lag** (estimated from the summed count curves against the publisher's: when the members'
count reached c minus when c beats had been sent; sampled every 10 ms; with two members the
curves are summed, an estimate of the same kind), **CPU per beat** (the members' CPU over the
window per beat counted in it), each member's CPU (% of one core) and how often its cgroup
throttled it, the publisher's own lag (``publisher-bound`` over ``--publisher-bound`` ms), the
broker's CPU and the whole machine's busy share over the window, ownership changes during the
window. A group **keeps up** when it counted every beat sent, reported no false failure, and its
p99 lag is under the grace.

Writes ``benches/group_load.json`` and the ``group_load:begin``/``end`` section of
``benches/results.md`` (``--section``) with the command (``--render`` writes the section again
from a JSON).
"""

from __future__ import annotations

import argparse
import array
import datetime
import itertools
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import wire  # noqa: E402

CGROUP_ROOT = Path("/sys/fs/cgroup/cpu")
CFS_PERIOD_US = 100_000  # the default; --cfs-period
SHARD_TTL_PERIODS = 10  # heartwire.publisher's default for a sharded publisher's beats
PORTS = {"rabbitmq": 61623, "activemq": 61613}
LABELS = {"raw": "raw socket", "1": "1 member", "2": "2 members"}

# ----- the member process -------------------------------------------------------------------------

_say_lock = threading.Lock()


def say(line: str) -> None:
    """One whole line on stdout (the bench reads them; two threads write)."""
    with _say_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def member_main(params: dict[str, Any]) -> dict[str, Any]:
    """One group member: prints ``READY``, then ``OWNED [shards]`` at each change; waits for a
    ``GO {"until": wall, "false_before": wall}`` line on stdin, samples (wall time, beats, CPU,
    RSS) every ``sample`` seconds until ``until``, and returns its figures."""
    import heartwire as hw
    from heartwire.groups import MonitorGroupMember, ShardLayout

    false_topics: set[str] = set()
    counts = {"failed_events": 0, "false_failed_events": 0, "lagging": 0}
    false_before = [math.inf]

    class Counter(hw.SubscriberListener):
        def on_failed(self, event: Any) -> None:
            counts["failed_events"] += 1
            if event.wall_since < false_before[0]:
                counts["false_failed_events"] += 1
                false_topics.add(event.topic)

        def on_lagging(self, event: Any) -> None:
            counts["lagging"] += 1

    layout = ShardLayout(params["group"], params["shards"])
    transport = hw.connect(params["url"])
    mon = hw.HeartbeatMonitor(
        None,
        f"{params['prefix']}.>",
        period=params["period"],
        grace=params["grace"],
        listeners=[Counter()],
    )
    m = MonitorGroupMember(transport, mon, layout, member=params["name"]).start()
    det = mon.detector
    owned_log: list[tuple[float, list[int]]] = []
    finished = threading.Event()
    lock = threading.Lock()

    def watch_owned() -> None:
        last: frozenset[int] | None = None
        while not finished.is_set():
            owned = m.owned
            if owned != last:
                last = owned
                with lock:
                    owned_log.append((time.time(), sorted(owned)))
                say("OWNED " + json.dumps(sorted(owned)))
            time.sleep(0.05)

    say("READY")
    watcher = threading.Thread(target=watch_owned, daemon=True)
    watcher.start()
    go = json.loads(sys.stdin.readline().split(" ", 1)[1])
    until = go["until"]
    false_before[0] = go["false_before"]
    ts, cs, cpus = array.array("d"), array.array("q"), array.array("d")
    sample = params["sample"]
    while True:
        now = time.time()
        ts.append(now)
        cs.append(int(det.stats()["beats"]))
        cpus.append(time.process_time())
        if now >= until:
            break
        time.sleep(sample)
    finished.set()
    watcher.join()  # no OWNED line in the middle of the result's
    stats = mon.stats()
    with lock:
        owned = list(owned_log)
    return {
        "name": params["name"],
        "samples": [list(ts), list(cs), list(cpus)],
        "counted": cs[-1],
        "rss_max_mb": wire.proc_status("VmHWM") / 2**20,
        "false_failed_topics": len(false_topics),
        "learned": stats.get("learned"),
        "topics": len(mon),
        "rejected": stats.get("rejected"),
        "dropped": stats.get("dropped"),
        "ingest_lag_s": stats.get("ingest_lag"),
        "takeovers": m.takeovers,
        "releases": m.releases,
        "slowest_worker_gap_s": m.slowest,
        "owned_log": owned,
        **counts,
    }


def raw_main(params: dict[str, Any]) -> dict[str, Any]:
    """The baseline: one raw socket subscribed to every shard queue (the only consumer, so the
    active one of each), MESSAGE frames counted; what the broker delivers of this layout with
    the least work per beat on the reading side."""
    from heartwire.groups import ShardLayout, shard_destination

    layout = ShardLayout(params["group"], params["shards"])
    host, port = params["url"].split("://", 1)[1].split("?", 1)[0].rsplit(":", 1)
    sock = wire.open_stomp(host, int(port), "guest", "guest", "/")
    dialect = "rabbitmq" if params["broker"] == "rabbitmq" else "activemq"
    subs = [
        f"SUBSCRIBE\nid:{k}\ndestination:{shard_destination(layout, k, dialect)}\nack:auto\n"
        + ("activemq.exclusive:true\n" if dialect == "activemq" else "")
        + "\n\0"
        for k in range(layout.shards)
    ]
    sock.sendall("".join(subs).encode())
    counted, errors = [0], []

    def run() -> None:
        while True:
            chunk = sock.recv(1 << 18)
            if not chunk:
                errors.append("the broker closed the connection")
                return
            counted[0] += chunk.count(b"\0")  # every frame ends with a NUL; only beats come

    threading.Thread(target=run, daemon=True).start()
    say("READY")
    say("OWNED " + json.dumps(list(range(layout.shards))))
    go = json.loads(sys.stdin.readline().split(" ", 1)[1])
    ts, cs, cpus = array.array("d"), array.array("q"), array.array("d")
    while True:
        now = time.time()
        ts.append(now)
        cs.append(counted[0])
        cpus.append(time.process_time())
        if now >= go["until"]:
            break
        time.sleep(params["sample"])
    return {
        "name": params["name"],
        "samples": [list(ts), list(cs), list(cpus)],
        "counted": cs[-1],
        "rss_max_mb": wire.proc_status("VmHWM") / 2**20,
        "false_failed_topics": 0,
        "failed_events": 0,
        "false_failed_events": 0,
        "learned": None,
        "topics": None,
        "rejected": None,
        "dropped": None,
        "ingest_lag_s": None,
        "takeovers": 0,
        "releases": 0,
        "slowest_worker_gap_s": None,
        "owned_log": [],
        "lagging": 0,
        "errors": errors,
    }


# ----- the sharded publisher ----------------------------------------------------------------------


def sharded_parts(
    topics: list[str], period: float, broker: str, group: str, shards: int
) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Per topic: the frame's bytes before the ``expires`` value, between it and
    ``<sent>,"seq":<seq>``, and after: the SEND frame ``StompTransport.publish_sharded`` writes
    for a beat of the topic (destination and ``heartwire-shard`` by broker)."""
    from heartwire.groups import ShardLayout

    layout = ShardLayout(group, shards)
    per = json.dumps(float(period)).encode()
    ttl_ms = str(round(SHARD_TTL_PERIODS * period * 1000)).encode()
    pre, mid, tails = [], [], []
    for t in topics:
        k = layout.shard_of(t)
        if broker == "activemq":
            dest = b"/queue/" + layout.queue(k).encode()
            extra = b""
        else:  # RabbitMQ: the topic, routed on the header; heartwire's dialect adds expiration
            dest = b"/topic/" + t.encode()
            extra = b"expiration:" + ttl_ms + b"\n"
        pre.append(
            b"SEND\ndestination:" + dest + b"\nheartwire-shard:" + str(k).encode() + b"\n"
            + extra + b"expires:"
        )  # fmt: skip
        mid.append(b'\n\n{"period":' + per + b',"sent":')
        tails.append(b',"topic":"' + t.encode() + b'","v":1}\0')
    return pre, mid, tails


def publish_main(p: dict[str, Any]) -> dict[str, Any]:
    """``wire.publish``'s paced schedule (topic ``i`` of round ``k`` due at ``t0 + k * period +
    i * period / n``), with sharded frames; its result has the same fields."""
    n, period, total, t0 = p["n"], p["period"], p["beats"], p["t0"]
    topics = [f"{p['prefix']}.{i}" for i in range(n)]
    pre, mid, tails = sharded_parts(topics, period, p["broker"], p["group"], p["shards"])
    ttl = SHARD_TTL_PERIODS * period
    sock = wire.open_stomp(p["host"], p["port"], "guest", "guest", "/")
    step = period / n
    tick, max_batch = 0.005, 4000
    curve_t, curve_c = array.array("d"), array.array("q")
    lags, weights = array.array("d"), array.array("q")
    sent = 0
    cpu0 = time.process_time()
    start = time.time()
    while sent < total:
        now = time.time()
        due = min(total, int((now - t0) / step) + 1, sent + max_batch)
        if due <= sent:
            time.sleep(max(0.0, min(tick, t0 + sent * step - now)))
            continue
        expires = str(int((now + ttl) * 1000)).encode()
        parts: list[bytes] = []
        g = sent
        while g < due:
            k, i = divmod(g, n)
            j = min(n, i + (due - g))
            sm = wire.middle(now, k)
            parts.extend(
                a + expires + b + sm + c
                for a, b, c in zip(pre[i:j], mid[i:j], tails[i:j], strict=True)
            )
            g += j - i
        sock.sendall(b"".join(parts))
        curve_t.append(now)
        curve_c.append(due)
        lags.append(now - (t0 + sent * step))
        weights.append(due - sent)
        caught_up = due - sent < max_batch
        sent = due
        if sent < total and caught_up:
            time.sleep(max(0.0, now + tick - time.time()))
    end = time.time()
    sock.sendall(b"DISCONNECT\nreceipt:bench-bye\n\n\0")
    sock.settimeout(30)
    reply = b""
    try:
        while b"RECEIPT" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    except OSError:
        pass
    sock.close()
    return {
        "sent": sent,
        "seconds": end - start,
        "cpu_s": time.process_time() - cpu0,
        "receipt": b"RECEIPT" in reply,
        "curve": [list(curve_t), list(curve_c)],
        "lag": wire.weighted_pctls(list(lags), list(weights)),
    }


def check_frames() -> None:
    """The bench's frame for a beat is heartwire's own: same destination, ``heartwire-shard``
    header and body as ``StompTransport.publish_sharded`` of ``BeatCodec.encode``'s body (the
    ``expires`` header's value aside, which is the send time's)."""
    from heartwire.beat import Beat, BeatCodec
    from heartwire.groups import SHARD_HEADER, ShardLayout
    from heartwire.transport.dialect import ACTIVEMQ, RABBITMQ

    layout = ShardLayout("bench.check", 16)
    sent = 1764000000.123456
    theirs = BeatCodec().encode(Beat("bench.x.7", 42, None, sent, 1.0))
    for broker, dialect in (("rabbitmq", RABBITMQ), ("activemq", ACTIVEMQ)):
        pre, mid, tails = sharded_parts(["bench.x.7"], 1.0, broker, "bench.check", 16)
        frame = pre[0] + b"1" + mid[0] + wire.middle(sent, 42) + tails[0]
        head, body = frame.rstrip(b"\0").split(b"\n\n", 1)
        assert body == theirs, (body, theirs)
        headers = dict(line.split(b":", 1) for line in head.split(b"\n")[1:])
        want_dest = layout.destination("bench.x.7", dialect).encode()
        assert headers[b"destination"] == want_dest, (headers, want_dest)
        want_shard = layout.headers("bench.x.7")[SHARD_HEADER].encode()
        assert headers[SHARD_HEADER.encode()] == want_shard, headers


# ----- cgroups ------------------------------------------------------------------------------------


class Cap:
    """A v1 ``cpu`` cgroup of its own for one process, with ``quota_us`` per ``period_us`` and
    ``shares`` (0: the default 1024) against the machine's other work."""

    def __init__(
        self, name: str, quota_us: int, period_us: int = CFS_PERIOD_US, shares: int = 0
    ) -> None:
        self.path = CGROUP_ROOT / name
        self.path.mkdir()
        (self.path / "cpu.cfs_period_us").write_text(str(period_us))
        (self.path / "cpu.cfs_quota_us").write_text(str(quota_us))  # -1: no quota
        if shares:
            (self.path / "cpu.shares").write_text(str(shares))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def stat(self) -> dict[str, int]:
        out = {}
        for line in (self.path / "cpu.stat").read_text().splitlines():
            k, v = line.split()
            out[k] = int(v)
        return out

    def remove(self) -> None:
        # Once its processes ended (the caller waited for them); a few tries while the kernel
        # lets the last task go.
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        print(f"warning: could not remove {self.path}", file=sys.stderr)


def cgroup_writable() -> str | None:
    """None if a cpu cgroup can be made and capped here, else why not."""
    try:
        cap = Cap(f"hwload-probe-{os.getpid()}", 10_000)
        cap.remove()
    except OSError as exc:
        return f"{CGROUP_ROOT}: {exc}"
    return None


# ----- the orchestrator ---------------------------------------------------------------------------


def spawn(what: str, params: dict[str, Any], stderr: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), what, json.dumps(params)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=ROOT,
    )


class Member:
    """A member process seen from the bench: its stdout read on a thread (OWNED lines)."""

    def __init__(self, proc: subprocess.Popen[str], name: str, err: Any) -> None:
        self.proc, self.name, self.err = proc, name, err
        self.ready = threading.Event()
        self.owned: frozenset[int] = frozenset()
        self.lines: list[str] = []
        self.result: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("READY"):
                self.ready.set()
            elif line.startswith("OWNED "):
                try:
                    self.owned = frozenset(json.loads(line[6:]))
                except ValueError:
                    self.lines.append(line)
            elif line.startswith("{"):
                try:
                    self.result = json.loads(line)
                except ValueError:
                    self.lines.append(line[:300])
            else:
                self.lines.append(line)

    def go(self, until: float, false_before: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("GO " + json.dumps({"until": until, "false_before": false_before}))
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        self.err.seek(0)
        return str(self.err.read())[-1500:]

    def finish(self, timeout: float) -> dict[str, Any]:
        # Only the reader thread reads stdout (its last line is the result).
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return {"error": f"member {self.name} did not finish in {timeout:.0f} s"}
        self._reader.join(30)
        if self.result is None:
            return {"error": f"member {self.name} exited {self.proc.returncode}: {self.stderr()}"}
        return self.result


def balanced(members: list[Member], shards: int) -> bool:
    owned = [m.owned for m in members]
    share = math.ceil(shards / len(members))
    union = frozenset().union(*owned)
    return (
        len(union) == shards
        and sum(len(o) for o in owned) == shards
        and all(len(o) <= share for o in owned)
    )


def combined_curve(results: list[dict[str, Any]]) -> list[list[float]]:
    """The members' summed count at each sample time of any of them (step functions)."""
    import bisect

    times = sorted({t for r in results for t in r["samples"][0]})
    counts = []
    for t in times:
        c = 0
        for r in results:
            ts, cs = r["samples"][0], r["samples"][1]
            i = bisect.bisect_right(ts, t) - 1
            c += cs[i] if i >= 0 else 0
        counts.append(c)
    return [times, counts]


def one_run(
    n: int,
    size: str,
    args: argparse.Namespace,
    run_id: str,
    broker_pid: int | None,
    attempt: int = 0,
) -> dict[str, Any]:
    """``size`` members (``"raw"``: the raw-socket baseline, one process) reading ``n``
    topics."""
    from heartwire.groups import ShardLayout, declare_rabbitmq

    members = 1 if size == "raw" else int(size)
    tag = f"{run_id}n{n}m{size}a{attempt}"  # fresh names: no run sees another's beats
    group, prefix = f"hwload{tag}", f"load{tag}"
    layout = ShardLayout(group, args.shards)
    if args.broker == "rabbitmq":
        declare_rabbitmq(layout, f"{prefix}.>", host=args.host, expires=600)
    port = args.port or PORTS[args.broker]
    url = f"stomp://{args.host}:{port}?heartbeat=1"
    out: dict[str, Any] = {"n": n, "members": size, "group": group, "quota_us": args.quota,
                           "cfs_period_us": args.cfs_period}  # fmt: skip
    caps: list[Cap] = []
    procs: list[Member] = []
    pub: subprocess.Popen[str] | None = None
    try:
        for i in range(members):
            name = f"m{i}"
            params = {"url": url, "group": group, "shards": args.shards, "prefix": prefix,
                      "period": 1.0, "grace": args.grace, "name": name,
                      "sample": args.sample, "broker": args.broker}  # fmt: skip
            err = tempfile.TemporaryFile("w+")  # noqa: SIM115  (closed with the run)
            proc = spawn("raw" if size == "raw" else "member", params, err)
            if args.quota:
                cap = Cap(f"hwload-{tag}-{name}", args.quota, args.cfs_period, args.shares)
                caps.append(cap)
                cap.add(proc.pid)  # before it has imported anything: capped from the start
            procs.append(Member(proc, name, err))
        deadline = time.monotonic() + args.balance_budget
        stable_since = None
        while time.monotonic() < deadline:
            if all(m.ready.is_set() for m in procs) and balanced(procs, args.shards):
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since >= 2.0:
                    break
            else:
                stable_since = None
            if any(m.proc.poll() is not None for m in procs):
                break
            time.sleep(0.05)
        if stable_since is None or time.monotonic() - stable_since < 2.0:
            owned = {m.name: sorted(m.owned) for m in procs}
            errs = " | ".join(m.stderr()[-300:] for m in procs)
            out["error"] = f"members not balanced in {args.balance_budget:.0f} s: {owned} {errs}"
            return out
        out["owned_at_start"] = {m.name: sorted(m.owned) for m in procs}
        total = n * (args.warmup + args.window)
        t0 = time.time() + 1.0
        end = t0 + args.warmup + args.window
        for m in procs:
            m.go(end + args.settle, end + args.grace)
        pub = spawn(
            "publish",
            {"host": args.host, "port": port, "prefix": prefix, "n": n, "period": 1.0,
             "t0": t0, "beats": total, "broker": args.broker, "group": group,
             "shards": args.shards},
            subprocess.PIPE,
        )  # fmt: skip
        if args.quota and args.shares:  # the publisher keeps its schedule on a busy machine
            pub_cap = Cap(f"hwload-{tag}-pub", -1, CFS_PERIOD_US, args.shares)
            caps.append(pub_cap)
            pub_cap.add(pub.pid)
        ws, we = t0 + args.warmup, end
        rabbit_steps_sleep_until(ws)
        m0 = machine_jiffies()
        b0 = broker_cpu(broker_pid)
        s0 = [c.stat() for c in caps[:members]]
        rabbit_steps_sleep_until(we)
        m1 = machine_jiffies()
        b1 = broker_cpu(broker_pid)
        s1 = [c.stat() for c in caps[:members]]
        p = publisher_result(pub, args.warmup + args.window + 120)
        rs = [m.finish(args.settle + 120) for m in procs]
    finally:
        for proc in [m.proc for m in procs] + ([pub] if pub else []):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for m in procs:
            m.err.close()
        for c in caps:
            c.remove()  # after its processes ended
    bad = [x["error"] for x in [p, *rs] if "error" in x]
    if bad:
        out["error"] = "; ".join(bad)
        return out
    busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
    per_member = []
    counted_w = cpu_w = 0.0
    for r, a, b in zip(rs, s0 or [None] * members, s1 or [None] * members, strict=True):
        c0, cpu0, _ = wire.at_time([*r["samples"], r["samples"][0]], ws)
        c1, cpu1, _ = wire.at_time([*r["samples"], r["samples"][0]], we)
        counted_w += c1 - c0
        cpu_w += cpu1 - cpu0
        thr = None if a is None or b is None else {
            "periods": b["nr_periods"] - a["nr_periods"],
            "throttled": b["nr_throttled"] - a["nr_throttled"],
            "throttled_ms": (b["throttled_time"] - a["throttled_time"]) / 1e6,
        }  # fmt: skip
        window_changes = [e for e in r["owned_log"] if ws <= e[0] <= we]
        per_member.append(
            {
                "name": r["name"],
                "counted": r["counted"],
                "cpu_pct": 100 * (cpu1 - cpu0) / (we - ws),
                "throttle": thr,
                "false_failed_topics": r["false_failed_topics"],
                "failed_events": r["failed_events"],
                "false_failed_events": r["false_failed_events"],
                "topics": r["topics"],
                "learned": r["learned"],
                "dropped": r["dropped"],
                "takeovers": r["takeovers"],
                "releases": r["releases"],
                "ownership_changes_in_window": len(window_changes),
                "owned_at_end": r["owned_log"][-1][1] if r["owned_log"] else [],
                "slowest_worker_gap_s": r["slowest_worker_gap_s"],
                "rss_max_mb": r["rss_max_mb"],
                "ingest_lag_s": r["ingest_lag_s"],
                "lagging": r["lagging"],
            }
        )
    curve = combined_curve(rs)
    est = wire.weighted_summary(
        *wire.transit_from_curves(p["curve"], curve, n * args.warmup, total)
    )
    counted = sum(r["counted"] for r in rs)
    false_failures = sum(r["false_failed_topics"] for r in rs)
    out.update(
        sent=p["sent"],
        counted=counted,
        counted_pct=100.0 * counted / max(1, p["sent"]),
        false_failures=false_failures,
        lag_est=est,
        p99_ms=est["p99_ms"],
        cpu_us_per_beat=1e6 * cpu_w / counted_w if counted_w > 0 else None,
        members_cpu_pct=100 * cpu_w / (we - ws),
        per_member=per_member,
        publisher_lag=p["lag"],
        publisher_cpu_pct=100 * p["cpu_s"] / max(1e-9, p["seconds"]),
        publisher_receipt=p["receipt"],
        broker_cpu_pct=None if b0 is None or b1 is None else 100 * (b1 - b0) / (we - ws),
        machine_busy_pct=100 * busy,
        load=os.getloadavg()[0],
        ownership_changes_in_window=sum(m["ownership_changes_in_window"] for m in per_member),
    )
    out["keeps_up"] = bool(
        counted >= p["sent"] and not false_failures and est["p99_ms"] is not None
        and est["p99_ms"] < args.grace * 1e3
    )  # fmt: skip
    return out


def find_broker(broker: str, marker: str) -> int | None:
    """The broker's process. ActiveMQ: the pid ``scripts/brokers`` wrote, its JVM (the standby
    ActiveMQ's command line names ``activemq`` too: no search). RabbitMQ: its BEAM, found by
    ``marker`` (``scripts/brokers`` writes the pid of its start script)."""
    if broker != "activemq":
        return wire.find_broker_pid(marker)
    base = Path(os.environ.get("HEARTWIRE_BROKERS_DIR", "/tmp/heartwire-brokers"))
    try:
        pid = int((base / broker / "pid").read_text().strip())
        if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    except (OSError, ValueError):
        pass
    return None


def broker_cpu(pid: int | None) -> float | None:
    """The broker's CPU seconds so far (None: not found, or it was restarted meanwhile)."""
    try:
        return wire.proc_cpu_s(pid) if pid else None
    except OSError:
        return None


def rabbit_steps_sleep_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def publisher_result(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    from rabbit_steps import result_of

    return result_of(proc, timeout, "publisher")


def machine_jiffies() -> tuple[int, int]:
    from measure import machine_jiffies as mj

    return mj()


def fmt(x: float | None, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def verdict(r: dict[str, Any], grace: float, bound_ms: float) -> str:
    if "error" in r:
        one_line = " ".join(r["error"].split()).replace("|", "/")  # a table cell
        return f"**error**: {one_line[:160]}"
    why = []
    if r["counted"] < r["sent"]:
        why.append(f"missed {r['sent'] - r['counted']}")
    if r["false_failures"]:
        why.append(f"{r['false_failures']} live topics reported failed")
    if r["p99_ms"] is None or r["p99_ms"] >= grace * 1e3:
        why.append("late")
    notes = []
    pub = r["publisher_lag"]["p99_ms"]
    if pub is not None and pub > bound_ms:
        notes.append("publisher-bound")
    if r["ownership_changes_in_window"]:
        notes.append(f"{r['ownership_changes_in_window']} ownership changes in the window")
    note = f" ({'; '.join(notes)})" if notes else ""
    return ("yes" if r["keeps_up"] else "**no**: " + ", ".join(why)) + note


def label(r: dict[str, Any]) -> str:
    return "raw socket (baseline)" if str(r["members"]) == "raw" else str(r["members"])


def table(runs: list[dict[str, Any]], grace: float, bound_ms: float) -> str:
    lines = [
        "| N | members | counted | false failures | p99 lag (est.) | CPU/beat | "
        "member CPU (throttled periods) | publisher lag p99 | broker CPU | machine busy | "
        "keeps up? |",
        "| ---: | ---: |" + " ---: |" * 8 + " --- |",
    ]
    for r in runs:
        if "error" in r:
            lines.append(
                f"| {r['n']} | {label(r)} | | | | | | | | | {verdict(r, grace, bound_ms)} |"
            )
            continue
        cpus = ", ".join(
            f"{m['cpu_pct']:.0f}%"
            + (
                f" ({m['throttle']['throttled']}/{m['throttle']['periods']})"
                if m["throttle"]
                else ""
            )
            for m in r["per_member"]
        )
        b = r["broker_cpu_pct"]
        broker = "n/a" if b is None else f"{fmt(b)}%"
        lines.append(
            f"| {r['n']} | {label(r)} | {r['counted_pct']:.2f}% | {r['false_failures']} | "
            f"{fmt(r['p99_ms'])} ms | {fmt(r['cpu_us_per_beat'])} µs | {cpus} | "
            f"{fmt(r['publisher_lag']['p99_ms'])} ms | {broker} | "
            f"{r['machine_busy_pct']:.0f}% | {verdict(r, grace, bound_ms)} |"
        )
    return "\n".join(lines)


def kept_up(runs: list[dict[str, Any]], n: int, size: str) -> tuple[int, int]:
    """(runs that kept up, runs) of group size ``size`` at ``n`` topics."""
    mine = [r for r in runs if r["n"] == n and str(r["members"]) == size]
    return sum(1 for r in mine if r.get("keeps_up")), len(mine)


def summary_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Per N, the runs each size kept up in; and whether, at some N, two members kept up in
    most runs where one did in fewer than half (the issue's "a group of 2 carries what one
    cannot")."""
    lines = []
    met = []
    for n in sorted({r["n"] for r in runs}):
        sizes = sorted(
            {str(r["members"]) for r in runs if r["n"] == n},
            key=lambda x: (x != "raw", x),
        )
        tally = {size: kept_up(runs, n, size) for size in sizes}
        lines.append(
            f"- N={n}: kept up in "
            + ", ".join(
                f"{k}/{m} runs ({LABELS.get(size, size + ' members')})"
                for size, (k, m) in tally.items()
            )
        )
        one, two = tally.get("1"), tally.get("2")
        if one and two and 2 * two[0] > two[1] and 2 * one[0] < one[1]:
            met.append(n)
    lines.append(
        "- A group of 2 carries what one member cannot (same quota each): "
        + (f"**met** at N={', '.join(map(str, met))}" if met else "**not shown** in this run")
    )
    return lines


def render(res: dict[str, Any]) -> str:
    """The results.md section of a run (``res`` as written to the JSON)."""
    meta, args, runs = res["meta"], argparse.Namespace(**res["args"]), res["runs"]
    period = getattr(args, "cfs_period", CFS_PERIOD_US)  # (JSONs of earlier versions)
    shares = getattr(args, "shares", 0)
    cap = (
        f"each member process in a cpu cgroup of its own, quota {args.quota} µs per "
        f"{period} µs ({100 * args.quota / period:.0f}% of one core)"
        + (f", cpu.shares {shares} (the publisher's cgroup too, without a quota)" if shares else "")
        if args.quota
        else "members uncapped"
    )
    load0, load1 = meta["load_start"][0], meta["load_end"][0]
    machine = meta.get("machine") or f"Load average {load1:.2f} at the end."
    md = [
        f"## A monitor group under load over {args.broker}: 1 member vs 2, CPU-capped "
        "(`benches/group_load.py`)",
        "",
        f"Command: `PYTHONPATH=python .venv/bin/python {meta['command']}`, {meta['date']}, "
        f"{meta['wall_s']:.0f} s; {args.shards} shards, N topics beating at 1 Hz sharded as "
        f"`publish_sharded` sends them (raw-socket publisher), {cap}; {args.warmup} s warm-up, "
        f"{args.window} s window per run, grace {args.grace} s.  ",
        f"{machine} Load average at the start {load0:.2f}.",
        "",
        table(runs, args.grace, args.publisher_bound),
        "",
        *summary_lines(runs),
        *([f"- Note: {meta['note']}"] if meta.get("note") else []),
        "",
        "Counted: beats the members' detectors recorded (summed), of all sent, by the end plus "
        f"{args.settle:g} s. False failures: live topics reported failed. p99 lag: estimated from "
        "the members' summed counts against the publisher's (sampled every 10 ms). CPU per "
        "beat: the members' CPU over the window per beat counted in it. Member CPU: % of one "
        "core over the window, and in brackets the CFS periods in which its cgroup "
        "throttled it, of the periods it ran. Broker CPU: % of one core. Machine busy: both "
        "cores, everything on the machine (other work included). Keeps up: counted every beat, "
        "no false failure, p99 lag under the grace (`rabbit_steps.py`'s criteria). The raw "
        "socket (baseline): one socket reading every shard queue, frames counted, no monitor: "
        "what the broker delivers of this layout on this machine.",
    ]
    return "\n".join(md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--broker", choices=tuple(PORTS), default="rabbitmq")
    ap.add_argument("--steps", default="10000", help="topic counts N")
    ap.add_argument("--members", default="raw,1,2",
                    help="group sizes in turn at each N (raw: a raw-socket baseline)")  # fmt: skip
    ap.add_argument("--quota", type=int, default=20_000,
                    help="each member's cpu.cfs_quota_us (0: uncapped)")  # fmt: skip
    ap.add_argument("--cfs-period", type=int, default=CFS_PERIOD_US,
                    help="the cgroups' cpu.cfs_period_us (the quota is per it)")  # fmt: skip
    ap.add_argument("--shares", type=int, default=8192,
                    help="cpu.shares of the bench's cgroups (0: 1024)")  # fmt: skip
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=5, help="seconds before the window")
    ap.add_argument("--window", type=int, default=20, help="measured seconds")
    ap.add_argument("--repeat", type=int, default=1, help="runs per N and size, interleaved")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds to count after the end")
    ap.add_argument("--grace", type=float, default=0.1, help="members' grace; p99 lag bound, s")
    ap.add_argument("--publisher-bound", type=float, default=50.0, help="publisher p99 lag, ms")
    ap.add_argument("--balance-budget", type=float, default=60.0, help="seconds to balance")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="STOMP port (default by broker)")
    ap.add_argument("--sample", type=float, default=0.01, help="member sampling interval, s")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between runs")
    ap.add_argument("--json", default=None, help="raw results (default benches/group_load.json)")
    ap.add_argument("--write", default=str(HERE / "results.md"), help="markdown file to update")
    ap.add_argument("--section", default="group_load", help="results.md section (markers)")
    ap.add_argument("--no-write", action="store_true", help="print only (and no default JSON)")
    ap.add_argument("--render", default=None, metavar="JSON",
                    help="no runs: the results.md section of a JSON this bench wrote")  # fmt: skip
    args = ap.parse_args()
    if args.render:
        from rabbit_steps import write_section

        text = render(json.loads(Path(args.render).read_text()))
        print(text)
        if not args.no_write:
            write_section(Path(args.write), text, args.section)
            print(f"wrote {args.write}")
        return 0
    steps = [int(x) for x in args.steps.split(",") if x.strip()]
    sizes = [x.strip() for x in args.members.split(",") if x.strip()]
    bad_size = [x for x in sizes if x != "raw" and not (x.isdigit() and int(x) >= 1)]
    if any(n < 1 for n in steps) or bad_size or args.window < 1:
        ap.error(f"bad --steps/--members/--window: {steps} {sizes} {args.window}")
    if not 1000 <= args.cfs_period <= 1_000_000:
        ap.error(f"--cfs-period must be in [1000, 1000000] µs, got {args.cfs_period}")
    if args.quota < 0 or (args.quota and args.quota < 1000):
        ap.error(f"--quota must be 0 or >= 1000 (µs per --cfs-period), got {args.quota}")
    if args.quota:
        why = cgroup_writable()
        if why:
            print(
                f"no writable cpu cgroup ({why}); run with --quota 0 (uncapped)",
                flush=True,
            )
            return 2
    # SIGTERM ends the bench as Ctrl-C does: its runs' finally blocks kill the children and
    # remove the cgroups.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wire.check_body()
    check_frames()
    marker = "rabbit" if args.broker == "rabbitmq" else "activemq"
    run_id = secrets.token_hex(3)
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    load0 = os.getloadavg()
    runs: list[dict[str, Any]] = []
    for n in steps:
        for attempt, members in itertools.product(range(args.repeat), sizes):
            print(f"  - N={n} members={members} ...", end="", flush=True)
            broker_pid = find_broker(args.broker, marker)  # per run: it may be restarted
            r = one_run(n, members, args, run_id, broker_pid, attempt)
            runs.append(r)
            if "error" in r:
                print(f" ERROR {r['error'][:400]}", flush=True)
            else:
                cpus = ", ".join(f"{m['cpu_pct']:.0f}%" for m in r["per_member"])
                print(
                    f" counted {r['counted_pct']:.2f}%, false {r['false_failures']}, "
                    f"p99 lag {fmt(r['p99_ms'])} ms, {fmt(r['cpu_us_per_beat'])} us/beat, "
                    f"member CPU {cpus}, machine busy {r['machine_busy_pct']:.0f}%: "
                    f"{verdict(r, args.grace, args.publisher_bound)}",
                    flush=True,
                )
            time.sleep(args.pause)
    wall = time.monotonic() - t_start
    from rabbit_steps import machine_line, save

    res = {
        "meta": {"command": " ".join(["benches/group_load.py", *sys.argv[1:]]),
                 "date": f"{started:%Y-%m-%d %H:%M} UTC", "wall_s": wall,
                 "load_start": load0, "load_end": os.getloadavg(),
                 "machine": machine_line()},
        "args": vars(args),
        "runs": runs,
    }  # fmt: skip
    save(args, render(res), res, "group_load", args.section)
    return 0


def child_main() -> int:
    what, params = sys.argv[1], json.loads(sys.argv[2])
    main_of = {"member": member_main, "raw": raw_main, "publish": publish_main}
    result = main_of[what](params)
    say(json.dumps(result))
    os._exit(0)  # no interpreter shutdown: the member's and transport's threads may still run


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in ("member", "raw", "publish"):
        sys.exit(child_main())
    sys.exit(main())
