"""One STOMP connection to one broker, over stomp.py.

A :class:`StompLink` is opened once and used until it is lost or closed; reconnecting means a new
link (see :mod:`heartwire.transport.failover`). It reports, exactly once, the end of a link that
was open (``on_lost(link, reason)``), whatever ended it: the socket closing, a STOMP heart-beat
timeout, an ERROR frame, or :meth:`StompLink.abort`. An orderly :meth:`StompLink.close` is not
reported.

Reliable delivery uses a few more frames: RECEIPTs (``on_receipt(link, receipt_id)``), ERROR
frames after CONNECTED (``on_error_frame(link, headers, detail)``), ACK/NACK, BEGIN/COMMIT/ABORT,
and a ``client-id`` CONNECT header (ActiveMQ's durable subscriptions need one).

Writes are bounded: on a plain socket, a write that makes no progress for
max(its caller's timeout, 1 s) (``request_blocking_time`` for frames without one) fails and
ends the link as lost ("the broker stopped reading"), so a hung broker whose socket is still
open never blocks a sender (a publisher's scheduler thread) for good. (stomp.py writes TLS
sockets from its receiver thread, so a TLS send does not block its caller.)

Threads: stomp.py reads each link on its own receiver thread, which calls ``on_message(link,
frame)``; with heart-beating on, a second stomp.py thread sends and checks heart-beats. Both end
when the link ends. Sends may come from any thread: the link writes one frame at a time, in the
order the threads asked (a FIFO turn), so a thread writing a long backlog frame after frame
never starves another thread's single send (stomp.py's own socket lock is not fair).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import socket
import struct
import termios
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import stomp  # type: ignore[import-untyped]
import stomp.exception  # type: ignore[import-untyped]

from heartwire._core import FrameReader, Routes
from heartwire.transport import tls
from heartwire.transport.dialect import ACTIVEMQ, Dialect, detect, named
from heartwire.transport.urls import BrokerAddress, StompOptions

__all__ = ["LinkError", "StompLink"]

log = logging.getLogger("heartwire.transport.stomp")

# A silent broker is dropped after this many heart-beat intervals.
_HEARTBEAT_RECEIVE_SCALE = 2.0
# How much one read of the socket takes (the core splits and records it in one call).
_READ_BYTES = 256 * 1024
# How often a reader that consumes every frame itself still shows stomp.py that data arrives
# (a heart-beat EOL), seconds: well under any STOMP heart-beat interval.
_ALIVE_EVERY = 0.05
# A read smaller than this waits _GATHER seconds before the next one (see _install_reader).
_SMALL_READ = 16 * 1024
_GATHER = 0.002
# The frames StompLink.frame sends.
_FRAMES = ("ACK", "NACK", "BEGIN", "COMMIT", "ABORT", "UNSUBSCRIBE")
# How long close() waits for the broker's receipt of DISCONNECT.
_CLOSE_WAIT = 1.0
# A write on a plain socket that makes no progress for max(the caller's timeout, this) seconds
# fails and ends the link: the broker stopped reading (its buffers are full).
_WRITE_FLOOR = 1.0


# Name lookups in flight, by (host, port): a slow resolver gets one thread per name, whatever
# the number of reconnection attempts waiting on it.
_LOOKUPS: dict[tuple[str, int], tuple[threading.Event, list[Any]]] = {}
_LOOKUPS_LOCK = threading.Lock()


def _resolve(broker: BrokerAddress, deadline: float) -> list[Any]:
    """``socket.getaddrinfo`` of ``broker`` (TCP), waited for until ``deadline`` (time.monotonic);
    raises :class:`LinkError` if it fails or does not finish in time."""
    key = (broker.host, broker.port)
    with _LOOKUPS_LOCK:
        entry = _LOOKUPS.get(key)
        if entry is None:
            entry = _LOOKUPS[key] = (threading.Event(), [])

            def lookup(done: threading.Event = entry[0], out: list[Any] = entry[1]) -> None:
                try:
                    out.append(socket.getaddrinfo(*key, type=socket.SOCK_STREAM))
                except Exception as exc:  # OSError, and UnicodeError for a name IDNA refuses
                    out.append(exc)
                finally:
                    with _LOOKUPS_LOCK:
                        _LOOKUPS.pop(key, None)
                    done.set()

            try:
                threading.Thread(target=lookup, name="heartwire-dns", daemon=True).start()
            except RuntimeError as exc:  # no thread: this connect fails, the next one retries
                _LOOKUPS.pop(key, None)
                why = f"the name lookup of {broker.host!r} failed: {exc}"
                raise LinkError(broker, why) from None
    done, out = entry
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise LinkError(broker, f"the name lookup of {broker.host!r} did not finish in time")
    result = out[0]
    if isinstance(result, Exception):
        raise LinkError(broker, f"the name lookup of {broker.host!r} failed: {result}")
    if not result:
        raise LinkError(broker, f"the name lookup of {broker.host!r} found no address")
    return list(result)


def _waiting(sock: Any) -> bool:
    """Whether more bytes wait to be read on ``sock`` right now (a TLS socket's decrypted
    buffer included): the reader is behind its feed. (FIONREAD, not select(): select cannot
    take a descriptor above 1023.)"""
    if sock is None:
        return False
    try:
        pending = getattr(sock, "pending", None)  # ssl.SSLSocket: decrypted, not yet read
        if pending is not None and pending() > 0:
            return True
        queued = fcntl.ioctl(sock.fileno(), termios.FIONREAD, _NO_BYTES)
        return struct.unpack("i", queued)[0] > 0
    except (OSError, ValueError):  # closed meanwhile: the next read says so
        return False


_NO_BYTES = struct.pack("i", 0)


class _Turns:
    """A FIFO lock: threads get it in the order they asked (``threading.Lock`` is not fair: a
    thread that releases and re-acquires it in a loop can keep it from the others)."""

    __slots__ = ("_busy", "_guard", "_waiting")

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._busy = False
        self._waiting: deque[threading.Lock] = deque()

    def __enter__(self) -> None:
        with self._guard:
            if not self._busy:
                self._busy = True
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        turn.acquire()  # released by the holder, which hands its turn over to us

    def __exit__(self, *exc: object) -> None:
        with self._guard:
            if self._waiting:
                self._waiting.popleft().release()
            else:
                self._busy = False


class LinkError(ConnectionError):
    """Opening a link failed; ``reason`` says why (never contains credentials)."""

    def __init__(self, broker: BrokerAddress, reason: str) -> None:
        super().__init__(f"{broker}: {reason}")
        self.broker = broker
        self.reason = reason


class StompLink(stomp.ConnectionListener):  # type: ignore[misc]
    """One STOMP 1.2 connection to ``broker`` (see the module docs)."""

    def __init__(
        self,
        broker: BrokerAddress,
        options: StompOptions,
        on_message: Callable[[StompLink, Any], None],
        on_lost: Callable[[StompLink, str], None],
        *,
        client_id: str | None = None,
        on_receipt: Callable[[StompLink, str], None] | None = None,
        on_error_frame: Callable[[StompLink, dict[str, str], str], None] | None = None,
        routes: Routes | None = None,
        after_read: Callable[[], None] | None = None,
    ) -> None:
        self.broker = broker
        self._routes = routes
        self._after_read = after_read
        #: The core's reader of this link's bytes (None: stomp.py reads every frame).
        self.reader: FrameReader | None = None
        #: The ``client-id`` CONNECT header, if any.
        self.client_id = client_id
        self._on_receipt = on_receipt
        self._on_error_frame = on_error_frame
        self.options = options
        self.dialect: Dialect = ACTIVEMQ
        #: The CONNECTED frame's ``server`` header ("ActiveMQ/5.17.2").
        self.server: str | None = None
        #: When the link was opened (time.monotonic()).
        self.opened_at: float | None = None
        self._on_message = on_message
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._connected = False
        self._ended = False  # lost, aborted or closed: never reported twice
        self._closing = False
        self._error: str | None = None
        self._conn: Any = None
        self._writing = _Turns()  # one frame at a time, first come first served
        self._sock: socket.socket | None = None  # the plain socket whose writes are bounded
        self._write_bound = -1.0  # its SO_SNDTIMEO now (seconds)
        self._receiver: threading.Thread | None = None  # stomp.py's thread reading this link

    def __repr__(self) -> str:
        state = "open" if self._connected and not self._ended else "ended"
        return f"<StompLink {self.broker} {self.dialect.name} {state}>"

    @property
    def open(self) -> bool:
        """Connected and not ended."""
        return self._connected and not self._ended

    def receiving_here(self) -> bool:
        """Whether the calling thread is the one that reads this link's frames (its message
        handlers, receipts and errors run there: waiting on it for a receipt never ends)."""
        return self._receiver is threading.current_thread()

    # -- opening ------------------------------------------------------------------------------

    def connect(self) -> StompLink:
        """Open the connection (TCP, then CONNECT/CONNECTED) within ``connect_timeout``.

        Raises :class:`LinkError` with the reason on failure; returns self.
        """
        opts = self.options
        hb = round(opts.heartbeat * 1000)
        deadline = time.monotonic() + opts.connect_timeout
        # The name is looked up here, within the deadline (stomp.py's create_connection would
        # look it up outside its timeout, and give each address the whole timeout). A plain
        # broker is then reached by address, each address with an equal share of the time left;
        # a TLS broker keeps its name (the certificate check needs it).
        addresses = _resolve(self.broker, deadline)
        if self.broker.tls:
            targets = [(self.broker.host, self.broker.port)]
        else:
            targets = [(str(a[4][0]), int(a[4][1])) for a in addresses]
        share = max(0.01, deadline - time.monotonic()) / len(targets)
        conn = stomp.Connection12(
            targets,
            prefer_localhost=False,
            try_loopback_connect=False,
            reconnect_sleep_initial=0.0,
            reconnect_sleep_increase=0.0,
            reconnect_sleep_jitter=0.0,
            reconnect_attempts_max=1,
            timeout=share,
            heartbeats=(hb, hb),
            vhost=opts.vhost or self.broker.host,  # (stomp.py's default: the host it dialled)
            auto_decode=False,
            heart_beat_receive_scale=_HEARTBEAT_RECEIVE_SCALE,
        )
        conn.set_listener("heartwire", self)
        self._install_reader(conn)
        tls.configure(conn, self.broker, opts)
        self._conn = conn
        login, passcode = opts.credentials(self.broker)
        try:
            conn.connect(
                login,
                passcode,
                wait=False,
                with_connect_command=True,
                headers={"client-id": self.client_id} if self.client_id else None,
            )
        except stomp.exception.ConnectFailedException:
            self._end_quietly()
            why = tls.explain(self.broker, opts) or "connection refused or unreachable"
            raise LinkError(self.broker, why) from None
        except OSError as exc:
            self._end_quietly()
            raise LinkError(self.broker, f"connection failed: {exc.strerror or exc}") from None
        except Exception as exc:  # e.g. the socket closed under stomp.py before CONNECT went out
            self._end_quietly()
            raise LinkError(self.broker, f"connection failed: {exc!r}") from None
        sock = getattr(conn.transport, "socket", None)
        if sock is not None and not self.broker.tls:  # stomp.py runs TLS sockets non-blocking
            # The connect timeout must not stay on the socket: an idle read would end the link.
            # Writes are bounded with SO_SNDTIMEO instead (see _write), which reads ignore.
            with contextlib.suppress(OSError):
                sock.settimeout(None)
            self._sock = sock
            self._bound_writes()  # stomp.py's heart-beat thread writes too
        if not self._ready.wait(max(0.0, deadline - time.monotonic())):
            self._end_quietly()
            late = f"no CONNECTED frame within {opts.connect_timeout:g} s"
            raise LinkError(self.broker, tls.explain(self.broker, opts) or late)
        with self._lock:
            ok = self._connected and not self._ended
            error = self._error
        if not ok:
            self._end_quietly()
            if error:
                raise LinkError(self.broker, f"the broker refused the connection: {error}")
            why = tls.explain(self.broker, opts) or "the connection closed before CONNECTED"
            raise LinkError(self.broker, why)
        self.opened_at = time.monotonic()
        return self

    def _install_reader(self, conn: Any) -> None:
        """Pass every chunk stomp.py reads from the socket through the core's FrameReader
        first: it records the beats of routed subscriptions and hands back only the other
        frames, whole and in order, for stomp.py's own frame handling.

        stomp.py reads the socket in ``Transport.receive()``; this wraps it. A read the core
        consumed whole is not handed to stomp.py (its frame handling costs more than the core's
        whole read): the wrapper reads again, and only every :data:`_ALIVE_EVERY` seconds
        returns one heart-beat EOL instead, which keeps stomp.py's heart-beat bookkeeping fed
        (data arrived; an empty read would mean "closed" to it). After a small read it waits
        :data:`_GATHER` seconds for more to gather (at most that much latency, and a read per
        many beats instead of per two or three). Chunks are read up to
        :data:`_READ_BYTES` at a time (stomp.py's 16 KiB default costs a Python round trip
        per ~60 beats). Reading is the intake's back-pressure: while the core works on a
        chunk nothing is read, so a monitor that falls behind leaves the backlog in the
        kernel's socket buffer and the broker, never in its own memory."""
        routes = self._routes
        transport = getattr(conn, "transport", None)
        if routes is None or transport is None or not hasattr(transport, "receive"):
            return
        reader = FrameReader(routes)
        receive = transport.receive
        if hasattr(transport, "_Transport__recv_bytes"):  # stomp.py's private read size
            transport._Transport__recv_bytes = _READ_BYTES
        after = self._after_read
        feed = reader.feed
        clock = time.monotonic
        sleep = time.sleep
        # On a TLS link stomp.py's receiver thread also writes (a non-blocking socket, one
        # frame a loop): every read goes back to its loop then, or sends would wait on reads.
        hand_back = not getattr(transport, "blocking", True)
        told = [clock()]  # when stomp.py last saw data

        def read() -> Any:
            while True:
                data = receive()
                if not data:
                    return data  # closed (or nothing yet on a TLS socket): stomp.py decides
                backlogged = _waiting(transport.socket)
                try:
                    left = feed(data, backlogged)
                except BaseException as exc:  # a bug in the core must not kill the receiver
                    log.error("%s: the native frame reader failed", self.broker, exc_info=exc)
                    # The link ends (the next one starts with a fresh reader); the OSError
                    # tells stomp.py's loop too (on a TLS link it would otherwise go on).
                    self.abort("the native frame reader failed")
                    raise OSError("the native frame reader failed") from exc
                if after is not None:
                    after()
                now = clock()
                # Data arrived: stomp.py's heart-beat check must know, as if it had seen a
                # frame (it only moves this forward; None: heart-beats are off).
                seen = getattr(conn, "received_heartbeat", None)
                if seen is not None and now > seen:
                    conn.received_heartbeat = now
                if left:
                    told[0] = now
                    return left
                if hand_back or now - told[0] >= _ALIVE_EVERY:
                    told[0] = now
                    return b"\n"
                if len(data) < _SMALL_READ and not backlogged:
                    # Let beats gather before the next read: a broker that sends each message
                    # on its own (RabbitMQ) otherwise costs a read (and a Python round trip)
                    # per 2-3 beats. As Kafka's fetch.max.wait: a little latency for throughput.
                    sleep(_GATHER)

        transport.receive = read
        self.reader = reader

    @property
    def native_consumed(self) -> int:
        """Beat frames the core took from this link (stomp.py never saw them)."""
        reader = self.reader
        return 0 if reader is None else int(reader.stats()["consumed"])

    def _choose_dialect(self) -> None:
        wanted = self.options.dialect
        if wanted != "auto":
            self.dialect = named(wanted)
            return
        found = detect(self.server)
        if found is None:
            log.warning(
                "%s: unknown broker %r; using the activemq dialect (pass dialect= to choose)",
                self.broker,
                self.server,
            )
            found = ACTIVEMQ
        self.dialect = found

    # -- stomp.py callbacks (on its threads) --------------------------------------------------

    def on_connected(self, frame: Any) -> None:
        self._receiver = threading.current_thread()
        self.server = frame.headers.get("server")
        self._choose_dialect()
        with self._lock:
            self._connected = True
        self._ready.set()

    def on_error(self, frame: Any) -> None:
        message = frame.headers.get("message", "")
        body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else ""
        detail = f"{message}: {body.strip()}" if body.strip() else message
        detail = detail.replace("\n", " ")[:300] or "ERROR frame"
        if not self._connected:
            with self._lock:
                self._error = detail
            self._ready.set()
            return
        log.warning("%s: ERROR frame from the broker: %s", self.broker, detail)
        if self._on_error_frame is not None:
            self._on_error_frame(self, dict(frame.headers), detail)

    def on_receipt(self, frame: Any) -> None:
        receipt = frame.headers.get("receipt-id")
        if receipt is not None and self._on_receipt is not None:
            self._on_receipt(self, receipt)

    def on_message(self, frame: Any) -> None:
        self._on_message(self, frame)

    def on_disconnected(self) -> None:
        self._lost("STOMP heart-beat timeout" if self._heartbeat_expired() else "connection lost")

    def _heartbeat_expired(self) -> bool:
        # stomp.py's heart-beat thread closes the socket on a timeout; the receiver thread may
        # report the close first, so look at the heart-beat state rather than at the thread.
        if "Heartbeat" in threading.current_thread().name:
            return True
        conn = self._conn
        wait = getattr(conn, "receive_sleep", 0) or 0
        last = getattr(conn, "received_heartbeat", None)
        return (
            bool(self.options.heartbeat)
            and wait > 0
            and last is not None
            and (time.monotonic() - last > wait)
        )

    # -- use ------------------------------------------------------------------------------------

    def send(
        self,
        destination: str,
        body: bytes,
        headers: dict[str, str],
        timeout: float | None = None,
    ) -> None:
        """Send one message; raises (OSError, stomp.py's exceptions) if the socket fails, or
        if the write makes no progress for max(``timeout``, 1 s) (then the link ends)."""
        if self._ended:
            raise ConnectionError(f"{self.broker}: the connection has ended")
        with self._writing:
            self._write(lambda: self._conn.send(destination, body, headers=headers), timeout)

    def _bound_writes(self, timeout: float | None = None) -> float:
        # Set the plain socket's SO_SNDTIMEO (a write that makes no progress that long fails
        # with EAGAIN; reads are not affected) for a caller's ``timeout``; returns the bound.
        bound = max(
            _WRITE_FLOOR, self.options.request_blocking_time if timeout is None else timeout
        )
        sock = self._sock
        if sock is not None and bound != self._write_bound:
            seconds = int(min(bound, 10**6))
            micros = int((min(bound, 10**6) - seconds) * 1e6)
            with contextlib.suppress(OSError, struct.error):
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", seconds, micros)
                )
                self._write_bound = bound
        return bound

    def _write(self, write: Callable[[], Any], timeout: float | None = None) -> None:
        # Call ``write`` (holding the turn) with the socket's writes bounded; a write that timed
        # out may have sent part of a frame, so the link ends.
        bound = self._bound_writes(timeout)
        try:
            write()
        except (BlockingIOError, TimeoutError) as exc:
            why = f"the broker stopped reading: a write made no progress for {bound:g} s"
            self.abort(why)
            raise ConnectionError(f"{self.broker}: {why}") from exc

    def subscribe(
        self,
        destination: str,
        sub_id: str,
        ack: str = "auto",
        headers: dict[str, str] | None = None,
    ) -> None:
        """SUBSCRIBE with the given id, ack mode and extra headers."""
        if self._ended:
            raise ConnectionError(f"{self.broker}: the connection has ended")
        with self._writing:
            self._write(lambda: self._conn.subscribe(destination, sub_id, ack=ack, headers=headers))

    def frame(self, command: str, headers: dict[str, str]) -> None:
        """Send an ACK, NACK, BEGIN, COMMIT, ABORT or UNSUBSCRIBE frame with ``headers``;
        raises like :meth:`send` if the socket fails."""
        if command not in _FRAMES:
            raise ValueError(f"command must be one of {', '.join(_FRAMES)}, got {command!r}")
        if self._ended:
            raise ConnectionError(f"{self.broker}: the connection has ended")
        with self._writing:
            self._write(lambda: self._conn.send_frame(command, headers))

    def unsubscribe(self, sub_id: str, headers: dict[str, str] | None = None) -> None:
        """UNSUBSCRIBE the id (errors ignored: the link may be going down)."""
        if self._ended:
            return
        try:
            with self._writing:
                self._write(lambda: self._conn.unsubscribe(sub_id, headers=headers))
        except Exception as exc:
            log.debug("%s: unsubscribe %s failed: %r", self.broker, sub_id, exc)

    # -- ending -------------------------------------------------------------------------------

    def _lost(self, reason: str) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
            report = self._connected and not self._closing
        self._ready.set()
        if report:
            self._on_lost(self, reason)

    def _end_quietly(self) -> None:
        with self._lock:
            self._ended = True
            self._closing = True
        self._disconnect_socket()

    def _disconnect_socket(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            conn.transport.disconnect_socket()
        except Exception as exc:  # already closed, or closing under us
            log.debug("%s: closing the socket: %r", self.broker, exc)

    def abort(self, reason: str) -> None:
        """Tear the connection down now (no DISCONNECT); reported through ``on_lost``."""
        self._disconnect_socket()
        self._lost(reason)

    def close(self) -> None:
        """DISCONNECT (waiting briefly for the receipt, so earlier sends are flushed), then
        close the socket. Not reported as a loss. Idempotent."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            was_open = self._connected and not self._ended
        conn = self._conn
        if conn is not None and was_open:
            receipt = f"close-{uuid.uuid4().hex[:8]}"
            try:
                conn.transport.set_receipt(receipt, "DISCONNECT")
                self._bound_writes(_CLOSE_WAIT)
                conn.send_frame("DISCONNECT", {"receipt": receipt})
            except Exception as exc:
                log.debug("%s: DISCONNECT failed: %r", self.broker, exc)
            else:
                deadline = time.monotonic() + _CLOSE_WAIT
                while conn.transport.is_connected() and time.monotonic() < deadline:
                    time.sleep(0.01)
        with self._lock:
            self._ended = True
        self._disconnect_socket()
