"""The end-to-end benches' STOMP pieces: a publisher on a plain socket and three readers.

Used by ``rabbit_steps.py`` (N topics at 1 Hz, stepped), ``million.py`` (1 M topics at one beat a
minute) and ``suite.py --only e2e`` (a flood). Each piece runs in a child process of its own::

    python benches/wire.py publish '<json params>'   # one JSON result line at the end
    python benches/wire.py read '<json params>'      # READY once subscribed, then one JSON line

**The publisher** is not heartwire: pre-built SEND frames (per topic, only ``sent`` and ``seq``
change) written to a plain socket, with a heartwire-format body, the canonical JSON of
:meth:`heartwire.beat.BeatCodec.encode` (``check_body`` holds it to that)::

    {"period":1.0,"sent":<wall time>,"seq":<round>,"topic":"<prefix>.<i>","v":1}

Paced, it beats ``n`` topics once a ``period``, topic ``i`` of round ``k`` due at
``t0 + k * period + i * period / n`` (spread evenly), sending every beat that is due each few
milliseconds; its own lag (send time minus due time) says whether it kept to its schedule. Flooding,
it sends ``total`` beats over ``n`` topics as fast as the broker takes them.

**The readers**, each counting beats and sampling (wall time, beats counted, process CPU) every
``sample`` seconds from its main thread:

- ``raw``: a raw socket (CONNECT, SUBSCRIBE, ``recv`` of 256 KiB), frames split on NUL, the body
  read with ``bytes.find`` (``sent``, ``seq``, ``topic``), counts per topic, transit
  ``now - sent``;
- ``stomppy``: a plain ``stomp.Connection12`` listener whose ``on_message`` ``json.loads`` the
  body and does the same;
- ``monitor``: ``heartwire.HeartbeatMonitor(connect(url), "<prefix>.>", period)``, beats counted
  from ``detector.stats()["beats"]``, ``on_failed`` events counted (those whose outage began
  before ``false_before`` as false, with the topics they named), and the monitor's ingest lag
  and ``lagging`` events when it has them. It does not see each beat's ``sent``: its transit is
  estimated by ``transit_from_curves`` (when its count reached each level, against when the
  publisher had sent that many).
"""

from __future__ import annotations

import array
import bisect
import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# ----- frames ------------------------------------------------------------------------------------


def connect_frame(login: str, passcode: str, vhost: str) -> bytes:
    return (
        f"CONNECT\naccept-version:1.2\nhost:{vhost}\nlogin:{login}\npasscode:{passcode}\n"
        "heart-beat:0,0\n\n\0"
    ).encode()


def subscription(prefix: str, dialect: str) -> str:
    """The STOMP destination for every topic under ``prefix`` (the API's ``<prefix>.>``)."""
    return f"/topic/{prefix}." + ("#" if dialect == "rabbitmq" else ">")


def open_stomp(host: str, port: int, login: str, passcode: str, vhost: str) -> socket.socket:
    """A socket past the STOMP handshake (CONNECTED read), or RuntimeError with the reply."""
    sock = socket.create_connection((host, port), timeout=10)
    # No Nagle: the tail of each batch would wait for the broker's delayed ACK (40 ms here).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect_frame(login, passcode, vhost))
    reply = b""
    while b"\0" not in reply:
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    if not reply.lstrip(b"\r\n").startswith(b"CONNECTED"):
        sock.close()
        raise RuntimeError(f"{host}:{port} refused the STOMP CONNECT: {reply[:300]!r}")
    sock.settimeout(None)
    return sock


def beat_parts(topics: list[str], period: float) -> tuple[list[bytes], list[bytes]]:
    """Per topic, the bytes before and after ``<sent>,"seq":<seq>`` of its SEND frame."""
    per = json.dumps(float(period)).encode()
    heads = [
        b"SEND\ndestination:/topic/" + t.encode() + b'\n\n{"period":' + per + b',"sent":'
        for t in topics
    ]
    tails = [b',"topic":"' + t.encode() + b'","v":1}\0' for t in topics]
    return heads, tails


def middle(sent: float, seq: int) -> bytes:
    return repr(sent).encode() + b',"seq":' + str(seq).encode()


def body_of(frame: bytes) -> bytes:
    return frame.split(b"\n\n", 1)[1].rstrip(b"\0")


def check_body() -> None:
    """The publisher's bodies are what heartwire's own publisher sends, byte for byte."""
    from heartwire.beat import Beat, BeatCodec

    heads, tails = beat_parts(["bench.x.7"], 1.0)
    sent = 1764000000.123456
    ours = body_of(heads[0] + middle(sent, 42) + tails[0])
    theirs = BeatCodec().encode(Beat("bench.x.7", 42, None, sent, 1.0))
    if ours != theirs:
        raise AssertionError(f"bench body {ours!r} is not heartwire's {theirs!r}")
    beat = BeatCodec().decode(ours, "bench.x.7")
    assert (beat.topic, beat.seq, beat.sent_at, beat.period) == ("bench.x.7", 42, sent, 1.0)


# ----- the publisher -----------------------------------------------------------------------------


def publish(
    host: str,
    port: int,
    prefix: str,
    n: int,
    period: float = 1.0,
    t0: float | None = None,
    rounds: int = 1,
    beats: int | None = None,
    flood: bool = False,
    tick: float = 0.005,
    max_batch: int = 4000,
    login: str = "guest",
    passcode: str = "guest",
    vhost: str = "/",
) -> dict[str, Any]:
    """Send ``rounds`` rounds of one beat per topic (paced from ``t0``, or as a flood), or
    ``beats`` beats in that order (the last round cut short).

    Returns counts, the curve ``[(wall time a batch was handed to the socket, beats sent
    with it)]`` and the lag of each batch (paced: its first beat's send time minus its due time).
    """
    topics = [f"{prefix}.{i}" for i in range(n)]
    heads, tails = beat_parts(topics, period)
    del topics
    sock = open_stomp(host, port, login, passcode, vhost)
    total = n * rounds if beats is None else beats
    step = period / n
    t0 = time.time() if t0 is None else t0
    curve_t = array.array("d")
    curve_c = array.array("q")
    lags = array.array("d")  # per batch: first beat's lag (paced)
    weights = array.array("q")  # beats in the batch
    sent = 0
    cpu0 = time.process_time()
    start = time.time()
    while sent < total:
        now = time.time()
        if flood:
            due = min(total, sent + max_batch)
        else:
            # Every beat due by now (beat g is due at t0 + g * step), then a pause of `tick`:
            # beats go out in batches of a few milliseconds' worth, each at most `tick` late.
            due = min(total, int((now - t0) / step) + 1, sent + max_batch)
            if due <= sent:
                time.sleep(max(0.0, min(tick, t0 + sent * step - now)))
                continue
        parts: list[bytes] = []
        g = sent
        while g < due:  # one round's slice at a time: seq and the middle are shared
            k, i = divmod(g, n)
            j = min(n, i + (due - g))
            mid = middle(now, k)
            parts.extend(h + mid + t for h, t in zip(heads[i:j], tails[i:j], strict=True))
            g += j - i
        sock.sendall(b"".join(parts))
        curve_t.append(now)
        curve_c.append(due)
        if not flood:
            lags.append(now - (t0 + sent * step))
            weights.append(due - sent)
        caught_up = due - sent < max_batch
        sent = due
        if not flood and sent < total and caught_up:
            time.sleep(max(0.0, now + tick - time.time()))
    end = time.time()
    # Everything written was read by the broker once it answers a receipt sent after it.
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
    out: dict[str, Any] = {
        "sent": sent,
        "seconds": end - start,
        "rate": sent / max(1e-9, end - start),
        "cpu_s": time.process_time() - cpu0,
        "receipt": b"RECEIPT" in reply,
        "curve": [list(curve_t), list(curve_c)],
    }
    if not flood:
        out["lag"] = weighted_pctls(list(lags), list(weights))
    return out


def weighted_pctls(values: list[float], weights: list[int]) -> dict[str, float | None]:
    """p50/p99/max (ms) of ``values`` each counted ``weights`` times."""
    if not values:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(weights)
    out: dict[str, float | None] = {}
    for q in (50, 99):
        target = q / 100 * total
        acc = 0
        for v, w in pairs:
            acc += w
            if acc >= target:
                out[f"p{q}_ms"] = v * 1e3
                break
    out["max_ms"] = pairs[-1][0] * 1e3
    return out


# ----- the readers -------------------------------------------------------------------------------


class Tally:
    """What a reader counted (written by its receiving thread, read by the sampler)."""

    def __init__(self, w0: int, w1: int) -> None:
        self.count = 0
        self.w0, self.w1 = w0, w1  # seq window whose transits are kept
        self.transits = array.array("d")
        self.per_topic: dict[Any, int] = {}
        self.errors: list[str] = []


def raw_reader(
    host: str, port: int, login: str, passcode: str, vhost: str, dest: str, tally: Tally
) -> Callable[[], None]:
    sock = open_stomp(host, port, login, passcode, vhost)
    sock.sendall(f"SUBSCRIBE\nid:0\ndestination:{dest}\nack:auto\n\n\0".encode())

    def run() -> None:
        buf = b""
        per_topic = tally.per_topic
        transits = tally.transits
        w0, w1 = tally.w0, tally.w1
        while True:
            try:
                chunk = sock.recv(1 << 18)
            except OSError as exc:
                tally.errors.append(f"recv: {exc}")
                return
            if not chunk:
                tally.errors.append("the broker closed the connection")
                return
            now = time.time()
            frames = (buf + chunk).split(b"\0")
            buf = frames.pop()
            got = 0
            for fr in frames:
                if not fr.startswith(b"MESSAGE"):
                    fr = fr.lstrip(b"\r\n")  # heart-beat EOLs before a frame
                    if not fr:
                        continue
                    if not fr.startswith(b"MESSAGE"):
                        tally.errors.append(fr[:300].decode("utf-8", "replace"))
                        continue
                b = fr.find(b"\n\n")
                i = fr.find(b'"sent":', b) + 7
                j = fr.find(b",", i)
                sent = float(fr[i:j])
                i = fr.find(b'"seq":', j) + 6
                j = fr.find(b",", i)
                seq = int(fr[i:j])
                i = fr.find(b'"topic":"', j) + 9
                topic = fr[i : fr.find(b'"', i)]
                per_topic[topic] = per_topic.get(topic, 0) + 1
                if w0 <= seq < w1:
                    transits.append(now - sent)
                got += 1
            tally.count += got

    return run


def stomppy_reader(
    host: str, port: int, login: str, passcode: str, vhost: str, dest: str, tally: Tally
) -> Callable[[], None]:
    import stomp

    per_topic = tally.per_topic
    transits = tally.transits
    w0, w1 = tally.w0, tally.w1

    class Counter(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            now = time.time()
            beat = json.loads(frame.body)
            topic = beat["topic"]
            per_topic[topic] = per_topic.get(topic, 0) + 1
            if w0 <= beat["seq"] < w1:
                transits.append(now - beat["sent"])
            tally.count += 1

        def on_error(self, frame: Any) -> None:
            tally.errors.append(str(frame.body)[:300])

    conn = stomp.Connection12([(host, port)], heartbeats=(0, 0), vhost=vhost)
    conn.set_listener("count", Counter())
    conn.connect(login, passcode, wait=True)
    conn.subscribe(dest, id="0", ack="auto")
    return lambda: None  # stomp.py's own thread receives


def monitor_reader(
    host: str,
    port: int,
    login: str,
    passcode: str,
    vhost: str,
    prefix: str,
    period: float,
    max_topics: int | None,
    false_before: float,
    tally: Tally,
) -> tuple[Callable[[], int], Callable[[], dict[str, Any]]]:
    import heartwire as hw

    # A failed event whose outage began (its first missed deadline, wall time) before
    # `false_before` is false: every topic beats until then.
    false_topics: set[str] = set()
    counts = {"failed_events": 0, "false_failed_events": 0, "lagging": 0, "caught_up": 0}

    class Counter(hw.SubscriberListener):
        def on_failed(self, event: Any) -> None:
            counts["failed_events"] += 1
            if event.wall_since < false_before:
                counts["false_failed_events"] += 1
                false_topics.add(event.topic)

        def on_lagging(self, event: Any) -> None:  # from issue 15's lag guard, when present
            counts["lagging"] += 1

        def on_caught_up(self, event: Any) -> None:
            counts["caught_up"] += 1

    broker = hw.connect(f"stomp://{host}:{port}", login=login, passcode=passcode, vhost=vhost)
    mon = hw.HeartbeatMonitor(
        broker, f"{prefix}.>", period=period, listeners=[Counter()], max_topics=max_topics
    )
    mon.start()
    det = mon.detector

    def beats() -> int:
        return int(det.stats()["beats"])

    def finish() -> dict[str, Any]:
        stats = mon.stats()
        return {
            "false_failed_topics": len(false_topics),
            "failed_stat": stats.get("failed"),
            "learned": stats.get("learned"),
            "topics": len(mon),
            "rejected": stats.get("rejected"),
            "dropped": stats.get("dropped"),
            "listener_dropped": stats.get("listener_dropped"),
            "ingest_lag_s": stats.get("ingest_lag"),
            **counts,
        }

    return beats, finish


def proc_status(key: str) -> int:
    """A ``/proc/self/status`` size field (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def read(
    impl: str,
    host: str,
    port: int,
    prefix: str,
    n: int,
    expected: int,
    until: float,
    dialect: str = "rabbitmq",
    period: float = 1.0,
    window: tuple[int, int] = (0, 1 << 62),
    idle: float = 0.0,
    sample: float = 0.01,
    max_topics: int | None = None,
    false_before: float = math.inf,
    login: str = "guest",
    passcode: str = "guest",
    vhost: str = "/",
) -> dict[str, Any]:
    """Count beats under ``prefix`` until ``expected`` are counted, wall time ``until`` passes,
    or (``idle`` > 0) nothing came for ``idle`` seconds after the first beat.

    Transits are kept for beats whose ``seq`` is in ``window`` (raw and stomppy readers). The
    monitor counts ``failed`` events whose outage began before ``false_before`` (wall time) as
    false, and the topics they named."""
    tally = Tally(*window)
    dest = subscription(prefix, dialect)
    finish: Callable[[], dict[str, Any]] = dict
    count: Callable[[], int] = lambda: tally.count  # noqa: E731
    if impl == "raw":
        run = raw_reader(host, port, login, passcode, vhost, dest, tally)
        threading.Thread(target=run, daemon=True, name="raw-reader").start()
    elif impl == "stomppy":
        stomppy_reader(host, port, login, passcode, vhost, dest, tally)
    elif impl == "monitor":
        count, finish = monitor_reader(
            host, port, login, passcode, vhost, prefix, period, max_topics, false_before, tally
        )
    else:
        raise ValueError(f"impl must be raw, stomppy or monitor; got {impl!r}")
    time.sleep(0.5)  # the subscription settles on the broker
    print("READY", flush=True)
    ts = array.array("d")
    cs = array.array("q")
    cpus = array.array("d")
    rss = array.array("d")  # MB, read every 20th sample (carried forward between)
    rss_now = 0.0
    last_change = time.time()
    seen = 0
    k = 0
    while True:
        now = time.time()
        c = count()
        ts.append(now)
        cs.append(c)
        cpus.append(time.process_time())
        if k % 20 == 0:
            rss_now = proc_status("VmRSS") / 2**20
        rss.append(rss_now)
        k += 1
        if c != seen:
            seen, last_change = c, now
        if c >= expected or now >= until or (idle and seen and now - last_change > idle):
            break
        if tally.errors and impl != "monitor":
            break
        time.sleep(sample)
    out: dict[str, Any] = {
        "impl": impl,
        "counted": seen,
        "expected": expected,
        "samples": [list(ts), list(cs), list(cpus), list(rss)],
        "rss_max": max(max(rss, default=0.0), proc_status("VmRSS") / 2**20) * 2**20,
        "hwm": proc_status("VmHWM"),
        "errors": tally.errors[:5],
        "transit": summary(sorted(tally.transits)),
    }
    if tally.per_topic:
        out["topics"] = len(tally.per_topic)
    out.update(finish())
    return out


# ----- orchestration helpers ---------------------------------------------------------------------


def transit_from_curves(
    pub: list[list[float]], rdr: list[list[float]], lo: int, hi: int
) -> tuple[list[float], list[int]]:
    """Estimated transits (s) of the beats numbered ``lo + 1``..``hi``, with their weights.

    ``pub``: [times a batch was built (its beats' ``sent``), cumulative beats sent with it];
    ``rdr``: [times, beats counted by then] (sampled). The beats a reader's count rose by
    between two samples arrived by the second: each is given that sample's time minus its own
    batch's send time. For an in-order feed (one publisher connection, one subscription) that
    is the transit, over by at most the sampling interval. Returns (delays, beats each)."""
    pt, pc = pub
    rt, rc = rdr[0], rdr[1]
    delays: list[float] = []
    weights: list[int] = []
    prev = lo
    j = bisect.bisect_left(pc, lo + 1)  # the batch holding beat lo + 1
    for t, c in zip(rt, rc, strict=True):
        c = min(int(c), hi)
        while prev < c and j < len(pc):
            upto = min(c, int(pc[j]))
            delays.append(t - pt[j])
            weights.append(upto - prev)
            prev = upto
            if prev >= pc[j]:
                j += 1
    return delays, weights


def weighted_summary(delays: list[float], weights: list[int]) -> dict[str, Any]:
    """Like :func:`summary` over ``delays`` each counted ``weights`` times."""
    out = weighted_pctls(delays, weights)
    return {"n": sum(weights), **out}


def at_time(samples: list[list[float]], t: float) -> tuple[float, float, float]:
    """(count, cpu s, RSS MB) of the last sample at or before wall time ``t`` (the first if
    none)."""
    ts, cs, cpus, rss = samples
    i = max(0, bisect.bisect_right(ts, t) - 1)
    return cs[i], cpus[i], rss[i]


def pctl(sorted_values: Any, q: float) -> float | None:
    if not len(sorted_values):
        return None
    i = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return float(sorted_values[i])


def summary(sorted_values: Any) -> dict[str, Any]:
    """Count and p50/p99/max in ms of sorted seconds."""

    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    return {
        "n": len(sorted_values),
        "p50_ms": ms(pctl(sorted_values, 50)),
        "p99_ms": ms(pctl(sorted_values, 99)),
        "max_ms": ms(pctl(sorted_values, 100)),
    }


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def find_broker_pid(marker: str) -> int | None:
    """The broker's JVM/BEAM process: its command line holds ``marker`` (``rabbit``,
    ``activemq``)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if marker.encode() in cmd and (b"beam" in cmd or b"java" in cmd):
            return int(entry)
    return None


def main() -> int:
    what, params = sys.argv[1], json.loads(sys.argv[2])
    if what == "publish":
        result = publish(**params)
    elif what == "read":
        if "window" in params:
            params["window"] = tuple(params["window"])
        result = read(**params)
    else:
        raise SystemExit(f"usage: wire.py publish|read '<json>' (got {what!r})")
    print(json.dumps(result), flush=True)
    os._exit(0)  # no interpreter shutdown: the monitor's and stomp.py's threads may still run


if __name__ == "__main__":
    sys.exit(main())
