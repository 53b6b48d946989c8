"""Many publishers at 1 Hz against one thread per publisher."""

from __future__ import annotations

import time
from typing import Any

from baselines import ThreadPerPublisher
from measure import Window, dist, pace

from scenarios import scenario


class NullTransport:
    """A transport that sends nothing: records (topic, monotonic time) of each publish."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []

    def publish(self, topic: str, body: bytes, headers: Any = None, **options: Any) -> None:
        self.sent.append((topic, time.monotonic()))

    def subscribe(self, pattern: str, handler: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


@scenario
def publishers(impl: str, n: int, period: float, warmup: float, window: float) -> dict[str, Any]:
    """``n`` publishers at one beat a ``period``, phases spread evenly over the period, sending
    to a null transport. CPU% of the process and send-time jitter (send time minus its slot)."""
    import uuid

    import heartwire as hw
    from heartwire.beat import Beat, BeatCodec

    transport = NullTransport()
    topics = [f"svc.pub.{i:05d}" for i in range(n)]
    slot0: dict[str, float] = {}
    t = time.monotonic()
    if impl == "heartwire":
        pubs = [hw.HeartbeatPublisher(transport, x, period=period) for x in topics]
        begin = time.monotonic() + 0.1
        for i, pub in enumerate(pubs):
            target = begin + i * period / n
            if target - time.monotonic() > 0.0005:
                pace(target)
            slot0[pub.topic] = time.monotonic()
            pub.start()

        def finish() -> None:
            for pub in pubs:
                pub.stop()

    elif impl == "threads":
        codec = BeatCodec()
        boot = uuid.uuid4().hex
        seqs = [0] * n

        def send(key: int, slot: float) -> None:
            seqs[key] += 1
            topic = topics[key]
            beat = Beat(topic, seqs[key], boot, time.time(), period)
            transport.publish(topic, codec.encode(beat))

        tpp = ThreadPerPublisher(period, send)
        begin = [0.0]

        def first_slot(i: int) -> float:
            if not begin[0]:
                begin[0] = time.monotonic() + 0.1
            slot0[topics[i]] = begin[0] + i * period / n
            return slot0[topics[i]]

        started = tpp.start(range(n), first_slot)
        assert started == n, started

        def finish() -> None:
            tpp.stop()

    else:
        raise ValueError(impl)
    start_s = time.monotonic() - t
    pace(max(slot0.values()) + warmup)
    i0 = len(transport.sent)
    w = Window()
    time.sleep(window)
    out = w.close()
    sent = transport.sent[i0:]
    finish()
    jitter = [(ts - slot0[topic]) % period for topic, ts in sent]
    # A send a hair *before* its slot (clock rounding) wraps to ~period: count it as early.
    jitter = [j - period if j > period * 0.9 else j for j in jitter]
    return {
        "impl": impl,
        "n": n,
        "start_s": start_s,
        **out,
        "sends_per_s": len(sent) / out["wall_s"],
        "jitter": dist(jitter),
    }
