"""Real brokers for the integration tests, run by the project's own ``scripts/brokers``.

``brokers`` is a session fixture: it starts every broker that does not answer STOMP yet (the
script is idempotent and waits, bounded, until each accepts a STOMP CONNECT) and fails with the
script's output if that does not work. Tests that kill or pause a broker use :func:`kill9`,
:func:`start`, :func:`pause` and :func:`resume`; :func:`ensure` brings a broker back (each test
calls it for the brokers it needs, so one test's crash does not leak into the next).

The ``tls`` broker (STOMP over TLS only, with test keys made at its start) is not in
:data:`PORTS`: tests that need it use the :func:`tls_broker` fixture, which starts it if needed.

Every test that uses one of these two fixtures (as an argument, through ``usefixtures`` or a
module's ``pytestmark``) carries the ``brokers`` marker (set in ``tests/conftest.py``):
``pytest -m "not brokers"`` runs the rest on a machine without the brokers. CI runs everything
(``scripts/test`` starts them).
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "brokers"
HOST = "127.0.0.1"
PORTS = {"activemq": 61613, "standby": 61614, "rabbitmq": 61623}
#: The tls broker: STOMP over TLS (server certificate only), and with client certificates required.
TLS_PORT = 61612
TLS_CLIENT_AUTH_PORT = 61619
#: Where scripts/brokers writes the tls broker's test CA (ca.pem), client key (client.pem) and an
#: unrelated CA (other-ca.pem).
TLS_CERTS = (
    Path(os.environ.get("HEARTWIRE_BROKERS_DIR", "/tmp/heartwire-brokers")) / "tls" / "certs"
)
# Bound on one scripts/brokers call (a first start installs packages and starts three brokers).
SCRIPT_TIMEOUT = float(os.environ.get("HEARTWIRE_BROKERS_SCRIPT_TIMEOUT", "600"))

T = TypeVar("T")


def url(name: str) -> str:
    """``stomp://127.0.0.1:<port>`` of the broker called ``name``."""
    return f"stomp://{HOST}:{PORTS[name]}"


def _connects(sock: socket.socket, timeout: float, login: bytes = b"") -> bool:
    """Whether a STOMP CONNECT on ``sock`` (with the ``login`` header lines) is answered with
    CONNECTED within ``timeout``; then says DISCONNECT."""
    sock.settimeout(timeout)
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n" + login + b"\n\0")
    reply = sock.recv(64)
    with contextlib.suppress(OSError):
        sock.sendall(b"DISCONNECT\n\n\0")
    return reply.startswith(b"CONNECTED")


def stomp_ready(port: int, timeout: float = 2.0) -> bool:
    """Whether 127.0.0.1:``port`` answers a STOMP CONNECT with CONNECTED within ``timeout``."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            return _connects(sock, timeout, b"login:guest\npasscode:guest\n")
    except OSError:
        return False


def tls_ready(timeout: float = 3.0) -> bool:
    """Whether the tls broker completes a verified TLS handshake and answers a STOMP CONNECT."""
    ca = TLS_CERTS / "ca.pem"
    if not ca.is_file():
        return False
    try:
        ctx = ssl.create_default_context(cafile=str(ca))
        with (
            socket.create_connection((HOST, TLS_PORT), timeout=timeout) as raw,
            ctx.wrap_socket(raw, server_hostname=HOST) as sock,
        ):
            return _connects(sock, timeout)
    except (OSError, ssl.SSLError):
        return False


def run(*args: str, timeout: float = SCRIPT_TIMEOUT) -> str:
    """Run ``scripts/brokers ARGS``; its output, or a test failure quoting it."""
    try:
        done = subprocess.run(
            [str(SCRIPT), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scripts/brokers {' '.join(args)} did not finish within {timeout:g} s: {exc}")
    out = done.stdout + done.stderr
    if done.returncode != 0:
        pytest.fail(f"scripts/brokers {' '.join(args)} failed (exit {done.returncode}):\n{out}")
    return out


def ensure(*names: str) -> None:
    """Make sure the named brokers (default: all) answer STOMP, starting those that do not."""
    wanted = names or tuple(PORTS)
    missing = [n for n in wanted if not stomp_ready(PORTS[n], timeout=1.0)]
    if missing:
        run("start", *missing)


def kill9(name: str) -> None:
    run("kill9", name)


def start(name: str) -> None:
    run("start", name)


def pause(name: str) -> None:
    run("pause", name)


def resume(name: str) -> None:
    run("resume", name)


def wait_for(predicate: Callable[[], T], timeout: float, what: str, step: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout``
    seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


@pytest.fixture(scope="session")
def tls_broker() -> Iterator[Path]:
    """The tls broker running (started through scripts/brokers if needed): its certs dir."""
    if not tls_ready():
        run("start", "tls")
    yield TLS_CERTS


@pytest.fixture(scope="session")
def brokers() -> Iterator[dict[str, str]]:
    """Every broker running (started through scripts/brokers if needed): name -> URL."""
    ensure()
    yield {name: url(name) for name in PORTS}
