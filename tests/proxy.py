"""A loopback TCP proxy for tests that need a broker to go away and come back without touching
the shared brokers: clients connect to :attr:`TcpProxy.port`, which forwards to a real broker.

- :meth:`~TcpProxy.close` stops listening and cuts every forwarded connection (the broker
  "dies": new connections are refused);
- :meth:`~TcpProxy.open` listens again on the same port, forwarding;
- :meth:`~TcpProxy.refuse` listens but closes each new connection at once (a broker that
  answers TCP and then drops it), counting them in :attr:`~TcpProxy.refused` with their times;
- :meth:`~TcpProxy.cut` cuts the forwarded connections, listening on.

:attr:`~TcpProxy.accepted` counts the connections forwarded. Threads are daemons; use it as a
context manager (or call :meth:`stop`) to end them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

__all__ = ["TcpProxy"]


class TcpProxy:
    """See the module docs. ``target``: the ``(host, port)`` to forward to."""

    def __init__(self, target: tuple[str, int], *, listening: bool = True) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._server: socket.socket | None = None
        self._mode = "forward"
        self._refuse_left: int | None = None
        #: Connections forwarded, and the monotonic times of those refused.
        self.accepted = 0
        self.refused: list[float] = []
        probe = socket.create_server(("127.0.0.1", 0))
        self.port: int = probe.getsockname()[1]
        probe.close()
        if listening:
            self.open()

    @property
    def url(self) -> str:
        return f"stomp://127.0.0.1:{self.port}"

    def open(self) -> None:
        """Listen (again) and forward each connection."""
        self._listen("forward")

    def refuse(self, count: int | None = None) -> None:
        """Listen, but close each new connection as soon as it is accepted (``count``: only the
        next that many, then forward again). Connections forwarded already stay."""
        self._listen("refuse", count)

    def cut(self) -> None:
        """Cut every forwarded connection, listening on."""
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _listen(self, mode: str, refuse: int | None = None) -> None:
        with self._lock:
            self._mode = mode
            self._refuse_left = refuse
            if self._server is not None:
                return
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", self.port))
            server.listen(64)
            self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def close(self) -> None:
        """Stop listening and cut every forwarded connection (both ends see it close)."""
        with self._lock:
            server, self._server = self._server, None
            conns, self._conns = self._conns, []
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    stop = close

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._server is not server:
                    client.close()
                    return
                mode = self._mode
                if mode == "refuse":
                    # Counted before the client can see the close (and a test act on it).
                    self.refused.append(time.monotonic())
                    if self._refuse_left is not None:
                        self._refuse_left -= 1
                        if self._refuse_left <= 0:
                            self._mode, self._refuse_left = "forward", None
            if mode == "refuse":
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
