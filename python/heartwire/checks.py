"""Stock dependency checks for dependent publishers.

A dependent publisher calls its check before each beat and, when the check fails, sends a
*down* beat with the check's reason instead (see ``docs/explicit-failure.md``), so monitors
report the service failed at once while what it depends on is down::

    pub = HeartbeatPublisher(broker, "prices.feed", dependency=checks.tcp("db", 5432))

Each check is a small callable object: calling it returns ``True`` when healthy and raises
:class:`CheckFailed` (with a readable ``reason``) when not. A reason goes on the wire in the
down beat, plain text to every subscriber, so every stock check builds it from an exception by
one rule (:func:`_describe`): the exception's type and its text with anything secret-looking
hidden as ``***`` (a URL's password and secret-looking query values, ``password=...``,
``token=...`` and the like). A :class:`CheckFailed` raised by a user's callable (an ``sql``
connect factory) is passed on as it is: its reason is the user's. Checks run on the publisher
executor's check threads, and a check's ``timeout`` is its deadline: name resolution,
connecting (to every address the name resolves to, together) and reading the answer all fit in
it, however the server trickles its bytes. A name lookup cannot be interrupted, so one that
outlives its check goes on on a thread of its own (``heartwire-dns``), one per name being looked
up (whatever the ports), which later checks of that name wait for instead of starting another.
The last answer of a name is kept (:data:`ANSWER_TTL`): a check whose lookup is late (a slow
resolver) uses it after half its time, so a resolver slower than the checks does not fail
them all.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import ipaddress
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Container
from http import client as http_client
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from heartwire import _validate

__all__ = ["Check", "CheckFailed", "http", "path", "sql", "tcp"]


class CheckFailed(Exception):
    """A dependency check found its dependency unhealthy; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))


class _Lookup:
    """One name lookup (see the module docs)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: list[Any] = []
        self.error: Exception | None = None  # OSError, or ValueError for a name refused
        self.finished = 0.0  # time.monotonic() when done


#: How long the last answer of a name that resolved serves checks whose own lookup is late.
ANSWER_TTL = 60.0

_lookups: dict[str, _Lookup] = {}  # in flight, by name
_answers: dict[str, _Lookup] = {}  # the last lookup of each name that resolved
_lookups_lock = threading.Lock()


def _run_lookup(host: str, lookup: _Lookup) -> None:
    try:  # the port is set per check (one lookup serves every port of the name)
        lookup.result = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except Exception as exc:  # (a label too long for the idna codec is a UnicodeError)
        lookup.error = exc
    finally:
        lookup.finished = time.monotonic()
        with _lookups_lock:
            if _lookups.get(host) is lookup:
                del _lookups[host]
            if lookup.error is None and lookup.result:
                for name in [
                    n for n, a in _answers.items() if a.finished < lookup.finished - ANSWER_TTL
                ]:
                    del _answers[name]
                _answers[host] = lookup
        lookup.done.set()


def _with_port(infos: list[Any], port: int) -> list[Any]:
    return [(f, k, p, c, (a[0], port, *a[2:])) for f, k, p, c, a in infos]


def _resolve(host: str, port: int, deadline: float) -> list[Any]:
    """``getaddrinfo`` for a stream socket, by ``deadline`` (``time.monotonic()``). When the
    lookup is late, the name's last answer (at most :data:`ANSWER_TTL` old) serves, after half
    the time left (the other half is for connecting)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:  # an address literal needs no lookup
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    with _lookups_lock:
        lookup = _lookups.get(host)
        if lookup is None:
            lookup = _lookups[host] = _Lookup()
            try:
                threading.Thread(
                    target=_run_lookup, args=(host, lookup), name="heartwire-dns", daemon=True
                ).start()
            except RuntimeError as exc:  # can't start new thread: this check fails, not later
                del _lookups[host]  # ones (they would wait for a lookup never made)
                raise OSError(f"name lookup not started: {exc}") from exc
        last = _answers.get(host)
    left = max(0.0, deadline - time.monotonic())
    if last is not None and last.finished >= time.monotonic() - ANSWER_TTL:
        if not lookup.done.wait(left / 2):
            return _with_port(last.result, port)
    elif not lookup.done.wait(left):
        raise TimeoutError("timed out")
    if lookup.error is not None:
        raise lookup.error
    return _with_port(lookup.result, port)


def _connect(
    host: str, port: int, deadline: float, source_address: tuple[str, int] | None = None
) -> socket.socket:
    """A TCP connection to ``host:port`` by ``deadline``: the lookup and every address share it
    (each address left gets an equal part of the time left), unlike
    :func:`socket.create_connection`, which gives each its own whole timeout."""
    infos = _resolve(host, port, deadline)
    if not infos:
        raise OSError(f"getaddrinfo returned no address for {host}")
    error: OSError = TimeoutError("timed out")
    for i, (family, kind, proto, _, address) in enumerate(infos):
        left = deadline - time.monotonic()
        if left <= 0:
            error = TimeoutError("timed out")
            break
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(left / (len(infos) - i))
            if source_address is not None:
                sock.bind(source_address)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            sock.close()
            raise TimeoutError("timed out")
        sock.settimeout(left)  # what follows (a TLS handshake, a request) by the deadline too
        return sock
    raise error


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
        self.host = host
        self.port = _validate.count(port, "port", 1, maximum=65535)
        self.timeout = _validate.seconds(timeout, "timeout")

    def __call__(self) -> bool:
        try:
            conn = _connect(self.host, self.port, time.monotonic() + self.timeout)
        except (OSError, ValueError) as exc:
            raise CheckFailed(f"tcp {self.host}:{self.port}: {_describe(exc)}") from exc
        conn.close()
        return True

    def __repr__(self) -> str:
        return f"tcp({self.host!r}, {self.port}, timeout={self.timeout:g})"


class path(Check):
    """Healthy when the path exists (a file, a directory, a socket: anything).

    It has no timeout of its own: a hung file system (a dead NFS mount) blocks it, and then the
    publisher's ``timeout`` bounds the beat (the check keeps its thread until the call returns).
    """

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
    ``functools.partial(psycopg.connect, dsn, connect_timeout=2)``: this check cannot interrupt
    a driver. Without one, a hung driver is bounded by the publisher's ``timeout`` (the beat
    fails as timed out), but holds its check thread until the driver returns.
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
        except CheckFailed:
            raise  # the factory's own reason
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
        return f"sql({_callable_name(self.connect_factory)}, {self.query!r})"


def _callable_name(obj: object) -> str:
    """A name for a user's callable that never shows its arguments or state (which may hold a
    password, like a DSN in a :func:`functools.partial`): its ``__qualname__``, a partial's
    function's followed by ``(...)``, else its type's name."""
    if type(obj) in (tcp, path, sql, http):
        return repr(obj)  # the stock checks' reprs show no secret
    if isinstance(obj, functools.partial):
        return f"{_callable_name(obj.func)}(...)"
    name = getattr(obj, "__qualname__", None)
    if isinstance(name, str) and name:
        return name
    return f"<{type(obj).__qualname__} object>"


# A query option whose value looks like a secret (password, passcode, token, api_key, sig...).
_SECRET_OPTION = re.compile(r"pass|pwd|secret|token|key|auth|sig|cred|session", re.IGNORECASE)


def _url_secrets(url: str) -> list[tuple[int, int]]:
    # (start, end) of the secrets in ``url``: the password of its userinfo (all of a userinfo
    # without ':', a token), the values of secret-looking query options. A password may hold
    # raw '/', '?' or '#': with a ':' after '//', the userinfo runs up to the last '@'.
    spans = []
    s = url.find("://")
    s = 0 if s < 0 else s + 3
    rest = s
    at = url.rfind("@", s)
    if at >= 0:
        userinfo = url[s:at]
        colon = userinfo.find(":")
        if colon >= 0:
            spans.append((s + colon + 1, at))
            rest = at + 1
        elif not re.search(r"[/?#]", userinfo):
            spans.append((s, at))
            rest = at + 1
    q = url.find("?", rest)
    if q >= 0:
        end = url.find("#", q)
        end = len(url) if end < 0 else end
        pos = q + 1
        for piece in re.split(r"[&;]", url[q + 1 : end]):
            name, eq, value = piece.partition("=")
            if eq and value and _SECRET_OPTION.search(unquote(name)):
                spans.append((pos + len(name) + 1, pos + len(piece)))
            pos += len(piece) + 1
    return [(a, b) for a, b in spans if b > a]


def _redact_url(url: str) -> str:
    """``url`` with its secrets (see :func:`_url_secrets`) replaced by ``***``."""
    out, pos = [], 0
    for a, b in sorted(_url_secrets(url)):
        if a < pos:
            continue
        out += [url[pos:a], "***"]
        pos = b
    return "".join(out) + url[pos:]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is an answer in its own right, judged by ``expect``


class _DeadlineReader(io.RawIOBase):
    """A socket's reader (``sock.makefile("rb")``'s raw stream) whose every read ends by the
    deadline: the socket's timeout is set to the time left before each one."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._raw = raw
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self._sock.settimeout(left)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _DeadlineResponse(http_client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        raw = self.fp.detach()
        self.fp = io.BufferedReader(_DeadlineReader(raw, sock, deadline))  # type: ignore[arg-type]


def _by_deadline(conn: http_client.HTTPConnection, deadline: float) -> None:
    """Make ``conn`` connect (lookup included) and read its answer by ``deadline``."""

    def create_connection(
        address: tuple[str, int], timeout: object = None, source: Any = None
    ) -> socket.socket:
        return _connect(address[0], address[1], deadline, source)

    conn._create_connection = create_connection  # type: ignore[attr-defined]
    conn.response_class = functools.partial(_DeadlineResponse, deadline=deadline)  # type: ignore[assignment]


class _DeadlineHTTPConnection(http_client.HTTPConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _by_deadline(self, deadline)


class _DeadlineHTTPSConnection(http_client.HTTPSConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _by_deadline(self, deadline)


class _DeadlineHandler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """Opens http and https URLs with connections that keep one deadline."""

    def __init__(self, deadline: float) -> None:
        urllib.request.HTTPHandler.__init__(self)
        urllib.request.HTTPSHandler.__init__(self)
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http_client.HTTPResponse:
        conn = functools.partial(_DeadlineHTTPConnection, deadline=self._deadline)
        return self.do_open(conn, req)  # type: ignore[arg-type]

    def https_open(self, req: urllib.request.Request) -> http_client.HTTPResponse:
        conn = functools.partial(_DeadlineHTTPSConnection, deadline=self._deadline)
        return self.do_open(conn, req)  # type: ignore[arg-type]


class http(Check):
    """Healthy when a GET of ``url`` answers with a status in ``expect`` within ``timeout``.

    ``expect`` is one status or a container of them (default ``range(200, 400)``); redirects are
    not followed, so a 3xx status is judged like any other. Proxies come from the environment,
    as for :func:`urllib.request.urlopen`. A ``user:password@`` in the URL is sent as Basic
    auth; the repr and reasons show the URL redacted (its password and secret-looking query
    values, ``token=`` and the like, as ``***``). ``timeout`` bounds the whole check: lookup,
    connect, request, status line and headers (the body is not read).
    """

    def __init__(
        self, url: str, expect: int | Container[int] = range(200, 400), timeout: float = 2.0
    ) -> None:
        if not isinstance(url, str):
            raise ValueError(f"url must be an http:// or https:// URL, got {type(url).__name__}")
        shown = _redact_url(url)
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http:// or https:// URL, got {shown!r}")
        if isinstance(expect, bool) or not isinstance(expect, (int, Container)):
            raise TypeError(f"expect must be a status or a container of them, got {expect!r}")
        self.url = url
        self.expect = expect
        self.timeout = _validate.seconds(timeout, "timeout")
        self._shown = shown
        self._hidden = sorted({url[a:b] for a, b in _url_secrets(url)}, key=len, reverse=True)
        # A userinfo goes as Basic auth (urllib would take it for part of the host).
        self._target, self._auth = url, None
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # (the message names no part of the URL: "Invalid IPv6 URL")
            raise ValueError(f"url {shown!r} is not a valid URL: {exc}") from None
        user, at, host = parts.netloc.rpartition("@")
        if at:
            login, _, password = user.partition(":")
            token = f"{unquote(login)}:{unquote(password)}".encode()
            self._auth = "Basic " + base64.b64encode(token).decode("ascii")
            self._target = urlunsplit(parts._replace(netloc=host))

    def _ok(self, status: int) -> bool:
        if isinstance(self.expect, int):
            return status == self.expect
        return status in self.expect

    def __call__(self) -> bool:
        deadline = time.monotonic() + self.timeout
        request = urllib.request.Request(self._target, method="GET")
        if self._auth is not None:
            request.add_header("Authorization", self._auth)
        opener = urllib.request.build_opener(_NoRedirect, _DeadlineHandler(deadline))
        try:
            with opener.open(request, timeout=self.timeout) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
            exc.close()
        except (OSError, ValueError) as exc:
            raise CheckFailed(f"http GET {self._shown}: {self._scrub(_describe(exc))}") from exc
        if self._ok(status):
            return True
        raise CheckFailed(f"http GET {self._shown}: status {status}, expected {self._expected()}")

    def _scrub(self, text: str) -> str:
        # An error's own text (urllib's, a proxy's) could quote the URL: hide its secrets.
        for secret in self._hidden:
            text = text.replace(secret, "***")
        return text

    def _expected(self) -> str:
        e = self.expect
        if isinstance(e, range) and e.step == 1:
            return f"{e.start}..{e.stop - 1}"
        return repr(e)

    def __repr__(self) -> str:
        return f"http({self._shown!r}, expect={self._expected()}, timeout={self.timeout:g})"


# A URL with a scheme, up to a space or a quote (its secrets: see _url_secrets).
_URL_IN_TEXT = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+""")
# A secret-looking ``name=value`` (a libpq DSN's ``password=``, ``api_key=``, ``token=``), its
# name maybe quoted (a dict's repr, JSON: ``'password': 's3cr3t'``), or ``name: value`` (a YAML
# line, a header ``Authorization: Bearer x``) when the name ends with the secret word (so that
# ``KeyError: 'host'`` is left alone): the value is a quoted string or runs up to a space, quote
# or separator, an auth scheme's word (``Bearer``, ``Basic``) taken with the token after it.
_SECRET_WORD = r"(?:pass|pwd|secret|token|key|auth|sig|cred|session)"
_SECRET_VALUE = (
    r"""((?:(?:bearer|basic|digest|token|negotiate)\s+)?"""
    r"""(?:'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s&;,'"}\]]+))"""
)
_SECRET_PAIR = re.compile(
    rf"""\b([\w.-]*{_SECRET_WORD}[\w.-]*['"]?\s*=\s*){_SECRET_VALUE}"""
    rf"""|\b([\w.-]*{_SECRET_WORD}(?:word|wd|phrase|s|id|_id|ential|entials|nature|orization)?"""
    rf"""['"]?\s*:\s*){_SECRET_VALUE}""",
    re.IGNORECASE,
)
# The host after a login's ``@``: EZConnect's ``//host``, an IPv6 ``[...]``, or a name; not a
# content digest (``library/redis@sha256:...``) nor a version (``pkg/sub@1.2.3``, ``@v2.1``)
# unless a port or a path follows (``bob/pw@10.0.0.5:1521``, ``@4.1/orcl``).
_LOGIN_HOST = (
    r"""(@(?://|\[|(?!(?:sha\d*|md5|blake\d*):)"""
    r"""(?!v?\d+(?:\.\d+){0,2}(?:[-+][\w.]*)?(?![\w.:/-]))[A-Za-z0-9]))"""
)
# ``user/password@host`` (Oracle's EZConnect and sqlplus logins, ``scott/tiger@orcl`` too) and
# a URL's ``user:password@host`` written without its scheme: the password. The user starts
# with a letter and follows no word, path, ``@`` or ``:`` (``@scope/pkg@1.2.3``,
# ``/usr/lib/x@2``, ``3/5@10s``, ``12:30@host`` are left alone).
_SLASH_LOGIN = re.compile(
    rf"""(?<![\w/:.$#@-])([A-Za-z][\w.$#-]*/)([^\s/@'"]+){_LOGIN_HOST}"""
    rf"""|(?<![\w/:.$#@-])((?!mailto:)[A-Za-z][\w.$#+-]*:)([^\s/@:'"]+){_LOGIN_HOST}"""
)
# A weaker secret word (not a password's): ``session: expired after 30 s`` or ``missing keys:
# host, port`` is prose, not a secret; see _hide_pair.
_STRONG_NAME = re.compile(r"pass|pwd|secret|cred", re.IGNORECASE)
_PROSE_WORD = re.compile(r"[a-z]+")
_PROSE_AFTER = re.compile(r"[ \t]*,|[ \t]+[a-z]+\b(?![:=])")


def _hide_login(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return m.group(1) + "***" + m.group(3)
    return m.group(4) + "***" + m.group(6)


def _hide_pair(m: re.Match[str]) -> str:
    """A secret pair's value as ``***``; but an unquoted ``name: word`` whose name is no
    password's (``token``, ``key``, ``session``...), the value one lowercase word that runs on
    into prose or a list (``session: expired after 30 s``, ``keys: host, port``), is left:
    a secret of lowercase letters only, written so, would show (ambiguous; a password's
    never does)."""
    if m.group(1) is not None:
        return m.group(1) + "***"
    name, value = m.group(3), m.group(4)
    if (
        not _STRONG_NAME.search(name)
        and _PROSE_WORD.fullmatch(value)
        and _PROSE_AFTER.match(m.string, m.end())
    ):
        return m.group(0)
    return name + "***"


def _scrub(text: str) -> str:
    """``text`` (an exception's, going on the wire) with secret-looking parts as ``***``: the
    secrets of every URL in it (see :func:`_url_secrets`), the values of secret-looking
    ``name=value`` and ``name: value`` pairs (names quoted or not; see :func:`_hide_pair`)
    and the password of a ``user/password@host`` login (EZConnect's ``@//host`` too) or a
    ``user:password@host`` without a scheme.

    Ambiguous forms are hidden: ``name/word@host`` reads as a login (``docs/guide@home``
    loses ``guide``), ``word:word@host`` too (``From:alice@example.com`` loses ``alice``)."""
    text = _URL_IN_TEXT.sub(lambda m: _redact_url(m.group(0)), text)
    text = _SLASH_LOGIN.sub(_hide_login, text)
    return _SECRET_PAIR.sub(_hide_pair, text)


def _describe(exc: BaseException) -> str:
    """The one rule by which every stock check tells an exception in its reason (which goes on
    the wire): ``"<type>: <text>"`` with the text scrubbed (:func:`_scrub`); a timeout is
    ``"timed out"``."""
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    name = type(exc).__name__
    text = _scrub(str(exc)) or name
    return f"{name}: {text}" if name not in text else text
