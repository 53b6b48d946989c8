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

from heartwire._core import decode_beat, split_frames
from heartwire.beat import Beat, BeatCodec

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


if __name__ == "__main__":
    main()
