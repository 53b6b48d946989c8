"""Stock dependency checks for dependent publishers.

A dependent publisher calls its check before each beat and sends nothing when the check fails,
so monitors see the service as down while what it depends on is down::

    pub = HeartbeatPublisher(broker, "prices.feed", dependency=checks.tcp("db", 5432))

Each check is a small callable object: calling it returns ``True`` when healthy and raises
:class:`CheckFailed` (with a readable ``reason``) when not. Checks run on the publisher
scheduler's check threads, so each one bounds its own time with a ``timeout``.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Container
from typing import Any, Callable

__all__ = ["Check", "CheckFailed", "http", "path", "sql", "tcp"]


class CheckFailed(Exception):
    """A dependency check found its dependency unhealthy; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))


def _timeout(value: object, field: str = "timeout") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{field} must be a number of seconds, got {type(value).__name__} {value!r}"
        )
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{field} must be a positive finite number of seconds, got {value!r}")
    return float(value)


class Check:
    """Base class of the stock checks: ``check()`` returns True or raises CheckFailed."""

    def __call__(self) -> bool:
        """Run the check: True when healthy, :class:`CheckFailed` otherwise."""
        raise NotImplementedError


class tcp(Check):  # lower case: used like a function, checks.tcp("db", 5432)
    """Healthy when a TCP connection to ``host:port`` opens within ``timeout`` seconds."""

    def __init__(self, host: str, port: int, timeout: float = 1.0) -> None:
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty str, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be an int in 1..65535, got {port!r}")
        self.host = host
        self.port = port
        self.timeout = _timeout(timeout)

    def __call__(self) -> bool:
        try:
            conn = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise CheckFailed(f"tcp {self.host}:{self.port}: {_describe(exc)}") from exc
        conn.close()
        return True

    def __repr__(self) -> str:
        return f"tcp({self.host!r}, {self.port}, timeout={self.timeout:g})"


class path(Check):
    """Healthy when the path exists (a file, a directory, a socket: anything)."""

    def __init__(self, p: str | os.PathLike[str]) -> None:
        if not isinstance(p, (str, os.PathLike)) or not os.fspath(p):
            raise ValueError(f"p must be a non-empty path, got {p!r}")
        self.path = os.fspath(p)

    def __call__(self) -> bool:
        if os.path.exists(self.path):
            return True
        raise CheckFailed(f"path {self.path!r} does not exist")

    def __repr__(self) -> str:
        return f"path({self.path!r})"


class sql(Check):
    """Healthy when a new DB-API connection from ``connect_factory()`` runs ``query``.

    Each check opens a connection, executes ``query`` (default ``SELECT 1``), fetches one row
    and closes the connection, so a dead server, bad credentials or a broken pool all show.
    Pass a factory that sets the driver's own connect timeout, e.g.
    ``functools.partial(psycopg.connect, dsn, connect_timeout=2)``.
    """

    def __init__(self, connect_factory: Callable[[], Any], query: str = "SELECT 1") -> None:
        if not callable(connect_factory):
            raise TypeError(
                f"connect_factory must be callable, got {type(connect_factory).__name__}"
            )
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty str, got {query!r}")
        self.connect_factory = connect_factory
        self.query = query

    def __call__(self) -> bool:
        try:
            conn = self.connect_factory()
        except Exception as exc:
            raise CheckFailed(f"sql connect: {_describe(exc)}") from exc
        try:
            cursor = conn.cursor()
            try:
                cursor.execute(self.query)
                cursor.fetchone()
            finally:
                cursor.close()
        except Exception as exc:
            raise CheckFailed(f"sql {self.query!r}: {_describe(exc)}") from exc
        finally:
            with contextlib.suppress(Exception):
                conn.close()
        return True

    def __repr__(self) -> str:
        factory = getattr(self.connect_factory, "__qualname__", None) or repr(self.connect_factory)
        return f"sql({factory}, {self.query!r})"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is an answer in its own right, judged by ``expect``


class http(Check):
    """Healthy when a GET of ``url`` answers with a status in ``expect`` within ``timeout``.

    ``expect`` is one status or a container of them (default ``range(200, 400)``); redirects are
    not followed, so a 3xx status is judged like any other. Proxies come from the environment,
    as for :func:`urllib.request.urlopen`.
    """

    def __init__(
        self, url: str, expect: int | Container[int] = range(200, 400), timeout: float = 2.0
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http:// or https:// URL, got {url!r}")
        if isinstance(expect, bool) or not isinstance(expect, (int, Container)):
            raise TypeError(f"expect must be a status or a container of them, got {expect!r}")
        self.url = url
        self.expect = expect
        self.timeout = _timeout(timeout)
        self._opener = urllib.request.build_opener(_NoRedirect)

    def _ok(self, status: int) -> bool:
        if isinstance(self.expect, int):
            return status == self.expect
        return status in self.expect

    def __call__(self) -> bool:
        request = urllib.request.Request(self.url, method="GET")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
            exc.close()
        except (OSError, ValueError) as exc:
            raise CheckFailed(f"http GET {self.url}: {_describe(exc)}") from exc
        if self._ok(status):
            return True
        raise CheckFailed(f"http GET {self.url}: status {status}, expected {self._expected()}")

    def _expected(self) -> str:
        e = self.expect
        if isinstance(e, range) and e.step == 1:
            return f"{e.start}..{e.stop - 1}"
        return repr(e)

    def __repr__(self) -> str:
        return f"http({self.url!r}, expect={self._expected()}, timeout={self.timeout:g})"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text
