"""Stock dependency checks, against real local things."""

from __future__ import annotations

import contextlib
import functools
import http.server
import pickle
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from heartwire import checks
from heartwire.checks import CheckFailed


def _failure(check: checks.Check) -> str:
    with pytest.raises(CheckFailed) as info:
        check()
    return info.value.reason


# -- tcp ------------------------------------------------------------------------------------


def test_tcp_listening_socket_is_healthy_closed_port_is_not() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        check = checks.tcp("127.0.0.1", port, timeout=2.0)
        assert check() is True
        assert check() is True
    # The port is closed now: connection refused.
    reason = _failure(check)
    assert reason.startswith(f"tcp 127.0.0.1:{port}: ")
    assert "refused" in reason.lower()
    assert repr(check) == f"tcp('127.0.0.1', {port}, timeout=2)"


def test_tcp_unresolvable_host_fails_with_a_reason() -> None:
    reason = _failure(checks.tcp("no-such-host.invalid", 80, timeout=1.0))
    assert reason.startswith("tcp no-such-host.invalid:80: ")


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("", 80), ValueError, "host must be a non-empty str"),
        (("h", 0), ValueError, "port must be an int from 1 to 65535, got 0"),
        (("h", 70000), ValueError, "got 70000"),
        (("h", True), TypeError, "port must be an int, got bool True"),
        (("h", 80, 0), ValueError, "timeout must be a finite number of seconds > 0, got 0"),
        (("h", 80, float("nan")), ValueError, "got nan"),
        (("h", 80, "1"), TypeError, "timeout must be a number of seconds, got str"),
    ],
)
def test_tcp_arguments_are_checked(args: tuple[object, ...], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        checks.tcp(*args)  # type: ignore[arg-type]


# -- path -----------------------------------------------------------------------------------


def test_path_exists_or_not(tmp_path: Path) -> None:
    target = tmp_path / "ready"
    check = checks.path(target)
    assert _failure(check) == f"path {str(target)!r} does not exist"
    target.write_text("ok")
    assert check() is True
    assert checks.path(str(tmp_path))() is True
    assert repr(check) == f"path({str(target)!r})"
    with pytest.raises(ValueError, match="p must be a non-empty path"):
        checks.path("")


# -- sql ------------------------------------------------------------------------------------


def test_sql_select_1_through_sqlite(tmp_path: Path) -> None:
    check = checks.sql(functools.partial(sqlite3.connect, str(tmp_path / "db.sqlite")))
    assert check() is True
    assert "SELECT 1" in repr(check)


def test_sql_failures_give_reasons(tmp_path: Path) -> None:
    factory = functools.partial(sqlite3.connect, str(tmp_path / "db.sqlite"))
    reason = _failure(checks.sql(factory, "SELECT * FROM missing_table"))
    assert reason.startswith("sql 'SELECT * FROM missing_table': OperationalError")
    assert "missing_table" in reason
    missing_dir = tmp_path / "no" / "such" / "dir" / "db.sqlite"
    reason = _failure(checks.sql(functools.partial(sqlite3.connect, str(missing_dir))))
    assert reason.startswith("sql connect: OperationalError")

    def refuse() -> sqlite3.Connection:
        raise ConnectionRefusedError("server down")

    assert _failure(checks.sql(refuse)) == "sql connect: ConnectionRefusedError: server down"


def test_sql_closes_its_connection_every_time() -> None:
    closed: list[bool] = []

    class Conn:
        def __init__(self) -> None:
            self.inner = sqlite3.connect(":memory:")

        def cursor(self) -> sqlite3.Cursor:
            return self.inner.cursor()

        def close(self) -> None:
            closed.append(True)
            self.inner.close()

    assert checks.sql(Conn)() is True
    _failure(checks.sql(Conn, "SELEC 1"))
    assert closed == [True, True]


def test_sql_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="connect_factory must be callable, got str"):
        checks.sql("sqlite:///x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="query must be a non-empty str"):
        checks.sql(lambda: sqlite3.connect(":memory:"), " ")


# -- http -----------------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/auth"):  # Basic admin:Hunter2 (what a URL's userinfo gives)
            good = self.headers.get("Authorization") == "Basic YWRtaW46SHVudGVyMg=="
            self.send_response(200 if good else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status = int(self.path.strip("/").partition("?")[0] or 200)
        self.send_response(status)
        if 300 <= status < 400:
            self.send_header("Location", "/500")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def test_http_status_in_expected_range(server: str) -> None:
    assert checks.http(server + "/200")() is True
    assert checks.http(server + "/204")() is True
    # Redirects are not followed: the 302 itself is healthy by default.
    assert checks.http(server + "/302")() is True
    assert _failure(checks.http(server + "/503")) == (
        f"http GET {server}/503: status 503, expected 200..399"
    )
    assert _failure(checks.http(server + "/404")).endswith("status 404, expected 200..399")


def test_http_expect_a_status_or_a_set(server: str) -> None:
    assert checks.http(server + "/418", expect=418)() is True
    assert checks.http(server + "/503", expect={200, 503})() is True
    assert _failure(checks.http(server + "/200", expect=204)).endswith("expected 204")


def test_http_unreachable_server_fails_with_a_reason() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reason = _failure(checks.http(f"http://127.0.0.1:{port}/", timeout=1.0))
    assert reason.startswith(f"http GET http://127.0.0.1:{port}/: ")
    assert "refused" in reason.lower()


def test_http_times_out_on_a_silent_server() -> None:
    with socket.socket() as listener:  # accepts (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        reason = _failure(checks.http(f"http://127.0.0.1:{port}/", timeout=0.2))
    assert reason == f"http GET http://127.0.0.1:{port}/: timed out"


def test_http_arguments_and_repr() -> None:
    check = checks.http("http://svc:8080/health", timeout=1.5)
    assert repr(check) == "http('http://svc:8080/health', expect=200..399, timeout=1.5)"
    with pytest.raises(ValueError, match="url must be an http:// or https:// URL, got 'svc'"):
        checks.http("svc")
    with pytest.raises(TypeError, match="expect must be a status"):
        checks.http("http://svc", expect=True)


def test_http_never_shows_a_password_and_sends_userinfo_as_basic_auth(server: str) -> None:
    # Issue 14, R4 F2: the URL's password was in the repr, the reasons (hence on_exception
    # details, the CLI, alerts, logs) and the constructor's error; the check never worked with
    # userinfo either (urllib took "admin:Hunter2@127.0.0.1" for the host).
    dead = checks.http("http://admin:Hunter2@127.0.0.1:1/health?token=Tok3n&x=1", timeout=0.5)
    assert repr(dead) == (
        "http('http://admin:***@127.0.0.1:1/health?token=***&x=1', expect=200..399, timeout=0.5)"
    )
    reason = _failure(dead)
    assert reason.startswith("http GET http://admin:***@127.0.0.1:1/health?token=***&x=1: ")
    assert "Hunter2" not in reason and "Tok3n" not in reason, reason
    assert "refused" in reason.lower(), reason  # it reached the host, not a host "admin:..."
    # The userinfo is sent as Basic auth (and a wrong password is a 401, still redacted).
    good = server.replace("http://", "http://admin:Hunter2@") + "/auth"
    assert checks.http(good, timeout=2.0)() is True
    bad = checks.http(server.replace("http://", "http://admin:Wrong9@") + "/auth?api_key=K3y")
    reason = _failure(bad)
    assert reason.endswith(
        ":***@" + server[7:] + "/auth?api_key=***: status 401, expected 200..399"
    )
    assert "Wrong9" not in reason and "K3y" not in reason, reason
    token_only = checks.http("https://s3cr3tT0ken@example.invalid/x")
    assert "s3cr3tT0ken" not in repr(token_only) and "***@example.invalid" in repr(token_only)
    with pytest.raises(ValueError) as info:
        checks.http("ftp://admin:Hunter2@h/x?password=Pw0rd")
    assert "Hunter2" not in str(info.value) and "Pw0rd" not in str(info.value), info.value
    assert "'ftp://admin:***@h/x?password=***'" in str(info.value)


def test_sql_repr_names_the_factory_never_its_arguments() -> None:
    # Issue 14, R4 F2: a partial (the docstring's own advice) has no __qualname__, so the repr
    # printed the DSN, password included, and the publisher put it in "timed out" details.
    def connect(dsn: str, connect_timeout: int = 2) -> sqlite3.Connection:
        return sqlite3.connect(":memory:")

    dsn = "postgresql://app:Hunter2@db/prod"
    check = checks.sql(functools.partial(connect, dsn, connect_timeout=2))
    assert "Hunter2" not in repr(check), repr(check)
    assert repr(check) == (
        "sql(test_sql_repr_names_the_factory_never_its_arguments.<locals>.connect(...), 'SELECT 1')"
    )

    class Factory:
        def __init__(self, dsn: str) -> None:
            self.dsn = dsn

        def __call__(self) -> sqlite3.Connection:
            return sqlite3.connect(":memory:")

        def __repr__(self) -> str:
            return f"Factory({self.dsn!r})"

    assert "Hunter2" not in repr(checks.sql(Factory(dsn)))
    assert repr(checks.sql(sqlite3.connect)) == "sql(connect, 'SELECT 1')"


def test_check_failed_carries_the_reason_and_pickles() -> None:
    err = CheckFailed("tcp db:5432: timed out")
    assert str(err) == err.reason == "tcp db:5432: timed out"
    assert pickle.loads(pickle.dumps(err)).reason == err.reason


# -- a check's timeout is its deadline (issue 14, item 18) ----------------------------------


def _timed(check: checks.Check, limit: float) -> tuple[object, float]:
    """Run ``check`` on a thread; (its result or exception, seconds taken). Fails the test if
    it is still running after ``limit`` seconds."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(check())
        except Exception as exc:
            out.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    took = time.monotonic() - started
    assert out, f"{check!r} still running after {took:.1f} s"
    return out[0], took


class TrickleServer:
    """A real HTTP server that answers 200, one byte every ``gap`` seconds."""

    RESPONSE = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nX-Pad: trickle\r\n\r\n"

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            for i in range(len(self.RESPONSE)):
                if self.stop.wait(self.gap):
                    return
                try:
                    conn.sendall(self.RESPONSE[i : i + 1])
                except OSError:
                    return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def trickle() -> Iterator[TrickleServer]:
    srv = TrickleServer(gap=0.1)  # the whole answer takes about 5 s
    yield srv
    srv.close()


def test_http_timeout_bounds_the_whole_check_against_a_trickling_server(
    trickle: TrickleServer,
) -> None:
    url = f"http://127.0.0.1:{trickle.port}/"
    result, took = _timed(checks.http(url, timeout=0.5), limit=2.0)
    assert isinstance(result, CheckFailed), f"returned {result!r} after {took:.1f} s"
    assert result.reason == f"http GET {url}: timed out"
    assert took < 0.5 + 0.3


@pytest.fixture
def blackhole() -> Iterator[tuple[str, int]]:
    """A loopback port whose accept queue is full: connects to it hang (SYNs are dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(address)
        fillers.append(s)
    time.sleep(0.05)  # let the handshakes complete and fill the queue
    yield address
    for s in fillers:
        s.close()
    listener.close()


def _addresses_times(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS answers every name with ``n`` copies of its address (n A records)."""
    real = socket.getaddrinfo

    def many(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs) * n

    monkeypatch.setattr(socket, "getaddrinfo", many)


def test_tcp_timeout_is_shared_by_every_resolved_address(
    blackhole: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    _addresses_times(3, monkeypatch)
    host, port = blackhole
    result, took = _timed(checks.tcp(host, port, timeout=0.3), limit=3.0)
    assert isinstance(result, CheckFailed), result
    assert result.reason == f"tcp {host}:{port}: timed out"
    assert took < 0.3 + 0.25, f"took {took:.2f} s for a 0.3 s timeout"


def _slow_dns(seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow DNS server: resolving a name (not an address literal) takes ``seconds``."""
    real = socket.getaddrinfo

    def slow(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "localhost":
            time.sleep(seconds)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    # No answer kept from an earlier lookup (which would serve a late one: see the last test).
    monkeypatch.setattr(checks, "_answers", {})


def test_tcp_timeout_includes_name_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert checks.tcp("localhost", port, timeout=1.0)() is True
        _slow_dns(1.5, monkeypatch)
        result, took = _timed(checks.tcp("localhost", port, timeout=0.3), limit=3.0)
    assert isinstance(result, CheckFailed), f"returned {result!r} after {took:.1f} s"
    assert result.reason == f"tcp localhost:{port}: timed out"
    assert took < 0.3 + 0.25


def test_a_lookup_thread_that_cannot_start_fails_that_check_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = threading.Thread.start
    failing = [True]

    def start(thread: threading.Thread) -> None:
        if failing[0] and thread.name == "heartwire-dns":
            raise RuntimeError("can't start new thread")  # as at a pids limit
        real(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    # Nothing in flight or kept from the tests before (a lookup is shared by every check of
    # its name, and a late one's answer kept).
    monkeypatch.setattr(checks, "_lookups", {})
    monkeypatch.setattr(checks, "_answers", {})
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        first, _ = _timed(checks.tcp("localhost", port, timeout=0.5), limit=3.0)
        failing[0] = False  # threads start again: the next lookup must not wait on a dead one
        second, took = _timed(checks.tcp("localhost", port, timeout=0.5), limit=3.0)
    assert second is True, f"after threads could start again: {second!r} after {took:.1f} s"
    assert isinstance(first, CheckFailed), repr(first)
    assert first.reason == (
        f"tcp localhost:{port}: OSError: name lookup not started: can't start new thread"
    )


def test_a_name_the_resolver_refuses_gives_its_reason() -> None:
    host = "a" * 70 + ".example"  # a label over 63 characters: the idna codec refuses it
    reason = _failure(checks.tcp(host, 80, timeout=1.0))
    assert reason.startswith(f"tcp {host}:80: "), reason
    assert "label empty or too long" in reason, reason


def test_http_timeout_includes_name_resolution(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = server.replace("127.0.0.1", "localhost") + "/200"
    assert checks.http(url, timeout=1.0)() is True
    _slow_dns(1.5, monkeypatch)
    result, took = _timed(checks.http(url, timeout=0.3), limit=3.0)
    assert isinstance(result, CheckFailed), f"returned {result!r} after {took:.1f} s"
    assert result.reason == f"http GET {url}: timed out"
    assert took < 0.3 + 0.25


def test_https_handshake_with_a_silent_server_fits_in_the_timeout() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:  # accepts, never answers
        port = listener.getsockname()[1]
        url = f"https://127.0.0.1:{port}/"
        result, took = _timed(checks.http(url, timeout=0.3), limit=3.0)
    assert isinstance(result, CheckFailed) and result.reason == f"http GET {url}: timed out"
    assert took < 0.3 + 0.25


def test_a_slow_resolver_is_looked_up_once_per_name_and_its_answer_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 14, R4 F8: a lookup slower than the check's timeout had its answer thrown away, so
    # the name's checks failed for good; and one lookup ran per (host, port), not per host.
    real = socket.getaddrinfo
    calls: list[tuple[Any, Any]] = []
    release = threading.Event()

    def slow(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "slow.example":
            calls.append((host, port))
            release.wait(5)
            return real("127.0.0.1", port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        for p in (port, port + 1, port + 2):  # one name on three ports: one lookup
            reason = _failure(checks.tcp("slow.example", p, timeout=0.1))
            assert reason == f"tcp slow.example:{p}: timed out"
        assert len(calls) == 1, calls
        release.set()  # the lookup finishes after every check gave up on it
        assert _wait_until(lambda: not checks._lookups, 2.0), "the lookup did not finish"
        release.clear()  # from now on every lookup is slower than the checks
        # The finished answer serves the next checks (each starts a fresh lookup, or waits for
        # the one in flight), on the port each asks for.
        assert checks.tcp("slow.example", port, timeout=0.2)() is True
        assert checks.tcp("slow.example", port, timeout=0.2)() is True
        assert len(calls) == 2, calls
        assert _failure(checks.tcp("slow.example", port + 1, timeout=0.2)) == (
            f"tcp slow.example:{port + 1}: ConnectionRefusedError: [Errno 111] Connection refused"
        )
    release.set()


def _wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
