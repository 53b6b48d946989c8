"""Review 2 probes of the native read loop (link.py _install_reader/_waiting)."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import time
from types import SimpleNamespace
from typing import Any

import pytest
import stomp.transport as st

from heartwire._core import Routes
from heartwire.transport import link as link_mod
from heartwire.transport.link import StompLink, _waiting


def _bare_link(routes: Any) -> StompLink:
    lk = StompLink.__new__(StompLink)
    lk._routes = routes
    lk._after_read = None
    lk.broker = "probe"
    return lk


def test_broker_heartbeats_reach_stomp_py_on_every_read() -> None:
    """heartbeat=0.01 (allowed: the option's minimum is 0): stomp.py's receive timeout is
    2 x 10 ms. The core drops the broker's EOLs; the reader must still move stomp.py's
    ``received_heartbeat`` forward on every read (it told stomp.py only every 50 ms).
    Checked at each next read: no thread timing, so a loaded machine cannot fail it."""
    returned: list[float] = []
    behind: list[tuple[int, float]] = []

    def receive() -> bytes:
        if returned and conn.received_heartbeat < returned[-1]:
            behind.append((len(returned), returned[-1] - conn.received_heartbeat))
        if len(returned) == 50:
            return b""  # closed: the reader hands it to stomp.py and returns
        returned.append(time.monotonic())
        return b"\n"  # a broker heart-beat, which the core drops

    transport = SimpleNamespace(receive=receive, socket=None)
    conn = SimpleNamespace(transport=transport, received_heartbeat=time.monotonic())
    _bare_link(Routes())._install_reader(conn)
    read = transport.receive
    while read():  # stomp.py's loop: each heart-beat EOL handed back is read again
        pass
    assert len(returned) == 50
    assert behind == [], f"reads after which stomp.py was not told data came: {behind[:5]}"


def test_a_native_reader_failure_ends_a_tls_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a TLS link stomp.py reads non-blocking: its __read takes any Exception from a read
    as 'nothing yet' (c = b'' -> break), so the OSError is swallowed and the link goes on
    with the failed reader (the chunk, and any RECEIPT/ERROR in it, lost)."""

    class Boom:
        def __init__(self, routes: Any) -> None:
            pass

        def feed(self, data: bytes, backlogged: bool) -> bytes:
            raise RuntimeError("a bug in the core")

    monkeypatch.setattr(link_mod, "FrameReader", Boom)
    t = st.Transport([("127.0.0.1", 1)])
    t.running = True
    t.blocking = False  # as after stomp.py's TLS handshake
    chunks = [b"RECEIPT\nreceipt-id:x\n\n\x00"]

    def receive() -> bytes:
        if chunks:
            return chunks.pop(0)
        raise ssl.SSLWantReadError()

    t.receive = receive
    link = _bare_link(Routes())
    aborted: list[str] = []
    link.abort = aborted.append  # type: ignore[method-assign]
    link._install_reader(SimpleNamespace(transport=t))
    with contextlib.suppress(Exception):
        t._BaseTransport__read()
    # The link itself is ended (reported lost: the connector opens a fresh one), whatever
    # stomp.py's loop makes of the error.
    assert aborted == ["the native frame reader failed"]


def test_waiting_sees_bytes_on_a_descriptor_above_1024() -> None:
    """select.select() refuses fds >= FD_SETSIZE (ValueError, caught: 'not waiting'): in a
    process with many files open the backlog signal is always False (lag guard off)."""
    held = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)
            held.append(fd)
            if fd >= 1100:
                break
        a, b = socket.socketpair()
        try:
            assert a.fileno() > 1024
            b.sendall(b"x" * 10)
            time.sleep(0.05)
            assert _waiting(a), f"bytes waiting on fd {a.fileno()} not seen"
        finally:
            a.close()
            b.close()
    finally:
        for fd in held:
            os.close(fd)


def test_a_tls_read_loop_gives_way_to_frames_waiting_to_be_written() -> None:
    """stomp.py writes a TLS (non-blocking) link on its receiver thread, between reads (one
    frame from send_queue per io-loop pass, its bytes on the next). While every read is
    consumed, our loop keeps the thread up to _ALIVE_EVERY (50 ms) per pass: SEND/ACK/
    DISCONNECT and the client's heart-beats on that link are capped at ~10 frames/s."""
    import queue as queue_mod

    from heartwire import HeartbeatMonitor
    from heartwire._core import ManualClock
    from heartwire.beat import Beat, BeatCodec

    clock = ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock)
    mon.start()
    routes = Routes()
    routes.add("s", mon._intake)
    body = BeatCodec().encode(Beat("svc.a"))  # type: ignore[arg-type]
    frame = (
        (
            f"MESSAGE\nsubscription:s\ndestination:/topic/svc.a\nmessage-id:m\n"
            f"content-length:{len(body)}\n\n"
        ).encode()
        + body
        + b"\x00"
    )

    def receive() -> bytes:
        time.sleep(0.001)  # a beat a millisecond, consumed by the core
        return frame

    sq: queue_mod.Queue[bytes] = queue_mod.Queue()
    sq.put(b"SEND\n\n\x00")  # an application frame waiting for the io loop
    transport = SimpleNamespace(receive=receive, socket=None, blocking=False, send_queue=sq)
    _bare_link(routes)._install_reader(SimpleNamespace(transport=transport))
    read = transport.receive
    read()  # the first pass tells stomp.py (told starts at install)
    t0 = time.monotonic()
    read()
    took = time.monotonic() - t0
    mon.stop()
    assert took < 0.01, f"a frame waited {took * 1000:.0f} ms to be written"
