"""Native ingest pieces against their Python counterparts, in the same run (issue 15).

::

    .venv/bin/python benches/bench_ingest.py            # ~10 s
    .venv/bin/python benches/bench_ingest.py --n 2000   # shorter

- decode: ``heartwire._core.decode_beat`` against ``BeatCodec.decode`` on the bodies heartwire's
  publisher writes (unsigned, signed) and a legacy text beat. ``decode_beat`` is the test entry
  point: it builds a decoder (and its HMAC key state) per call and returns a tuple, so the native
  figure includes costs the monitor's reader will not pay per beat.
- split: ``heartwire._core.split_frames`` (split and consume every beat frame) against stomp.py's
  own receive loop and ``parse_frame`` on the same stream, read in 64 KiB chunks.
- interval histogram (issue 17): a monitor's whole native read path (``FrameReader.feed``:
  split, route, decode, the intake's rules, record) over 1000 topics, and ``Intake.beat_many``
  (the batch path), each with the detector's beat inter-arrival histogram counted and not
  (``Detector.count_intervals``), alternating on the same detector, best of the rounds: the cost
  of the histogram per beat. (The pure-Rust figure, without a Python call: ``cargo test
  --release --lib -- --ignored --nocapture interval_timing``.)
- shard check (issue 18): the same read path over a group's shard queue (``from_body``), its
  route given the queue's shard (the ``wrong_shard`` check: a CRC-32 and a jump hash per beat)
  and not, alternating on the same intake: the check's cost per beat.

Figures are medians of interleaved rounds; read the ratios, the absolute numbers come from a
shared, noisy machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from stomp.transport import BaseTransport  # type: ignore[import-untyped]
from stomp.utils import parse_frame  # type: ignore[import-untyped]

from heartwire._core import (
    Detector,
    FrameReader,
    Intake,
    ManualClock,
    Routes,
    decode_beat,
    split_frames,
)
from heartwire.beat import Beat, BeatCodec
from heartwire.transport.shards import shard_of

KEY = b"bench-key"


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each contender, run in turn round after round (plus one warm-up)."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds + 1):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            if r:
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


class _Reader(BaseTransport):  # type: ignore[misc]
    def __init__(self, chunks: list[bytes]) -> None:
        super().__init__()
        self._chunks = list(chunks)
        self.running = True
        self.blocking = False

    def receive(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


def stomp_py_split(chunks: list[bytes]) -> int:
    """stomp.py's framing of the stream: its receive loop, then parse_frame per frame."""
    reader = _Reader(chunks)
    n = 0
    while reader._chunks:
        for raw in reader._BaseTransport__read():
            if parse_frame(raw) is not None:
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="beats per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    n = args.n

    beat = Beat(
        "svc.prices.feed-7",
        seq=123456,
        boot_id="3f2c9a1b0d7e4c5f8a6b2d1e0f9c8b7a",
        sent_at=1718000000.25,
        period=1.0,
    )
    bodies = {
        "unsigned": (BeatCodec().encode(beat), None),
        "signed": (BeatCodec(key=KEY).encode(beat), KEY),
        "legacy": (b"svc.prices.feed-7 HEARTBEAT", None),
    }
    print(f"decode, {n} beats per round, median of {args.rounds} rounds")
    for name, (body, key) in bodies.items():
        codec = BeatCodec(key=key)
        assert decode_beat(body, key)[0] == "beat"

        def native(body: bytes = body, key: bytes | None = key) -> None:
            for _ in range(n):
                decode_beat(body, key)

        def python(body: bytes = body, codec: BeatCodec = codec) -> None:
            for _ in range(n):
                codec.decode(body)

        t = interleaved({"native": native, "python": python}, args.rounds)
        print(
            f"  {name:9} native {t['native'] / n * 1e9:7.0f} ns  python "
            f"{t['python'] / n * 1e9:7.0f} ns  = {t['python'] / t['native']:5.1f}x"
        )

    body = bodies["unsigned"][0]
    frame = (
        (
            b"MESSAGE\ncontent-length:%d\nexpires:0\ndestination:/topic/svc.prices.feed-7\n"
            b"subscription:1\npriority:4\nmessage-id:ID:host-41234-1718000000000-3:1:1:1:12345\n"
            b"timestamp:1718000000250\n\n" % len(body)
        )
        + body
        + b"\0\n"
    )
    stream = frame * n
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    assert stomp_py_split(chunks) == n
    consumed, out, _, _ = split_frames(chunks, b"1")
    assert len(consumed) == n and not out
    t = interleaved(
        {"native": lambda: split_frames(chunks, b"1"), "python": lambda: stomp_py_split(chunks)},
        args.rounds,
    )
    print(
        f"split ({len(frame)}-byte MESSAGE frames, 64 KiB reads): native "
        f"{t['native'] / n * 1e9:5.0f} ns/frame  stomp.py {t['python'] / n * 1e9:6.0f} ns/frame"
        f"  = {t['python'] / t['native']:5.1f}x"
    )

    histogram_cost(n, args.rounds)
    shard_check_cost(n, args.rounds)


def shard_check_cost(n: int, rounds: int, topics: int = 1000) -> None:
    """The shard check of a group's shard queue (issue 18, ``wrong_shard``): the native read
    path with the route given its shard (``Routes.add(..., from_body=True, shard=(16, 3))``:
    a CRC-32 and a jump hash per beat) against the same route without, on the same intake and
    the same frames (every topic in shard 3: nothing refused)."""
    clock = ManualClock()
    det = Detector(period=3600.0, clock=clock)
    intake = Intake(det, "svc.>", 3600.0)
    intake.running = True
    readers = {}
    for checked in (False, True):
        routes = Routes()
        routes.add("1", intake, from_body=True, shard=(16, 3) if checked else None)
        readers[checked] = FrameReader(routes)
    codec = BeatCodec()
    names = [f"svc.t{i}" for i in range(16 * topics) if shard_of(f"svc.t{i}", 16) == 3][:topics]
    frames = []
    for name in names:
        body = codec.encode(Beat(name, period=3600.0))
        frames.append(
            b"MESSAGE\ncontent-length:%d\ndestination:/queue/heartwire.g.3\nsubscription:1\n"
            b"message-id:ID:host-1:1:1:1:%d\n\n" % (len(body), len(frames)) + body + b"\0\n"
        )
    stream = b"".join(frames) * max(1, n // len(names))
    beats = len(frames) * max(1, n // len(names))
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    assert intake.beat_many(names) == len(names)

    def fed(checked: bool) -> None:
        reader = readers[checked]
        for chunk in chunks:
            reader.feed(chunk)
        clock.advance(0.001)

    best: dict[bool, float] = {}
    for r in range(rounds + 1):
        for checked in (r % 2 == 0, r % 2 != 0):
            t0 = time.perf_counter()
            fed(checked)
            took = time.perf_counter() - t0
            if r:
                best[checked] = min(best.get(checked, took), took)
    assert not intake.stats()["rejected"], intake.stats()["rejected"]
    off, on = best[False] / beats * 1e9, best[True] / beats * 1e9
    print(
        f"shard check, read ({len(names)} topics of shard 3 of 16): unchecked {off:6.1f} "
        f"ns/beat  checked {on:6.1f} ns/beat  = {on / off:5.3f}x (+{on - off:4.1f} ns)"
    )


def histogram_cost(n: int, rounds: int, topics: int = 1000) -> None:
    """The beat inter-arrival histogram's cost on the native beat paths (on against off)."""
    clock = ManualClock()
    det = Detector(period=3600.0, clock=clock)
    intake = Intake(det, "svc.>", 3600.0)
    intake.running = True
    routes = Routes()
    routes.add("1", intake)
    reader = FrameReader(routes)
    codec = BeatCodec()
    names = [f"svc.t{i}" for i in range(topics)]
    frames = []
    for name in names:
        body = codec.encode(Beat(name, period=3600.0))
        frames.append(
            b"MESSAGE\ncontent-length:%d\ndestination:/topic/%s\nsubscription:1\n"
            b"message-id:ID:host-1:1:1:1:%d\n\n"
            % (len(body), name.encode(), len(frames))
            + body
            + b"\0\n"
        )
    stream = b"".join(frames) * max(1, n // topics)
    beats = len(frames) * max(1, n // topics)
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    batch = names * max(1, n // topics)
    assert intake.beat_many(names) == topics  # learned: later beats have an interval

    def fed(on: bool) -> None:
        det.count_intervals = on
        for chunk in chunks:
            reader.feed(chunk)
        clock.advance(0.001)  # the next round's beats are 1 ms later

    def batched(on: bool) -> None:
        det.count_intervals = on
        intake.beat_many(batch)
        clock.advance(0.001)

    # Best of the rounds, "on" and "off" alternating which goes first: on a shared machine the
    # minimum is the cost, and a fixed order would favour whichever runs second (warm caches).
    best: dict[tuple[str, bool], float] = {}
    for r in range(rounds + 1):
        for on in (r % 2 == 0, r % 2 != 0):
            for path, fn in (("read", fed), ("batch", batched)):
                t0 = time.perf_counter()
                fn(on)
                took = time.perf_counter() - t0
                if r:
                    best[path, on] = min(best.get((path, on), took), took)
    counted = sum(det.interval_histogram()[1])
    assert counted >= (rounds + 1) * 2 * beats, counted  # the "on" rounds, warm-up included
    for path, size in (("read", beats), ("batch", len(batch))):
        off, on = best[path, False] / size * 1e9, best[path, True] / size * 1e9
        print(
            f"interval histogram, {path:5} ({topics} topics): off {off:6.1f} ns/beat  on "
            f"{on:6.1f} ns/beat  = {on / off:5.3f}x (+{on - off:4.1f} ns)"
        )


if __name__ == "__main__":
    main()
