"""STOMP over TLS (``stomp+ssl://``) against ActiveMQ's SSL connectors, with keys made by keytool.

The ``tls`` broker of scripts/brokers speaks STOMP only over TLS: 61612 wants a server
certificate check only, 61619 also a client certificate. Each start of that broker makes a new
test CA (``ca.pem``), broker and client keys, and an unrelated CA (``other-ca.pem``) with
keytool. URL and option parsing for TLS is tested first, without a broker.
"""

from __future__ import annotations

import inspect
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import heartwire as hw
from heartwire.transport import ConnectFailed, Message, StompTransport, connect
from heartwire.transport.urls import DEFAULT_TLS_PORT, BrokerAddress, parse_url
from tests import brokers as B
from tests.brokers import tls_broker, wait_for  # noqa: F401  (tls_broker: the session fixture)

CERTS = B.TLS_CERTS
TLS = f"stomp+ssl://{B.HOST}:{B.TLS_PORT}"
MUTUAL = f"stomp+ssl://{B.HOST}:{B.TLS_CLIENT_AUTH_PORT}"
FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=3&keepalive_interval=0"
PERIOD = 0.2
_GRACE = {"grace": 0.1} if "grace" in inspect.signature(hw.HeartbeatMonitor).parameters else {}


def uid() -> str:
    return "tls" + uuid.uuid4().hex[:10]


# -- parsing (no broker) ------------------------------------------------------------------------


def test_tls_urls_parse(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked at parse time beyond being a readable file")
    o = parse_url("stomp+ssl://mq.example", ssl_ca_file=str(ca))
    assert o.brokers == (BrokerAddress("mq.example", DEFAULT_TLS_PORT, tls=True),)
    assert o.url == "stomp+ssl://mq.example:61612" and o.ssl_ca_file == str(ca)
    assert o.ssl_verify is True and o.ssl_cert_file is None
    mixed = parse_url("failover:(stomp://a:61613,STOMP+SSL://b:1)?ssl_verify=false")
    assert [b.tls for b in mixed.brokers] == [False, True]
    assert mixed.url == "failover:(stomp://a:61613,stomp+ssl://b:1)" and mixed.ssl_verify is False
    o = parse_url("stomp+ssl://u:pw-123@h:1", ssl_key_password="kp-456")
    assert "pw-123" not in repr(o) and "kp-456" not in repr(o) and "pw-123" not in o.url


@pytest.mark.usefixtures("tls_broker")
@pytest.mark.parametrize(
    ("url", "options", "needles"),
    [
        ("stomp://h:1", {"ssl_verify": "false"}, ["no stomp+ssl:// broker", "ssl_verify"]),
        ("stomp+ssl://h:1", {"ssl_ca_file": "/no/such/ca.pem"}, ["ssl_ca_file", "no such file"]),
        ("stomp+ssl://h:1", {"ssl_cert_file": ""}, ["ssl_cert_file", "empty"]),
        ("stomp+ssl://h:1?ssl_verify=maybe", {}, ["ssl_verify='maybe'", "not a boolean"]),
        ("stomp+ssl://h:1", {"ssl_verify": 1}, ["ssl_verify must be a bool"]),
        ("ssl://h:1", {}, ["unknown scheme"]),
        ("failover:(stomp+tls://h:1)", {}, ["scheme 'stomp+tls'", "stomp+ssl"]),
    ],
)
def test_tls_option_errors_name_the_option(
    url: str, options: dict[str, Any], needles: list[str]
) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        connect(url, **options)
    for needle in needles:
        assert needle in str(info.value)


def test_key_password_is_never_echoed() -> None:
    with pytest.raises(ValueError) as info:
        parse_url("stomp+ssl://h:1", ssl_key_password="line\nbreak-s3cr3t")
    assert "ssl_key_password" in str(info.value) and "s3cr3t" not in str(info.value)


# -- against the tls broker ---------------------------------------------------------------------


@pytest.mark.usefixtures("tls_broker")
def test_round_trip_over_tls(closing: list[Any]) -> None:
    t = connect(f"{TLS}?{FAST}", ssl_ca_file=str(CERTS / "ca.pem"))
    closing.append(t)
    assert isinstance(t, StompTransport)
    assert t.broker == TLS and t.url == TLS and t.dialect == "activemq"
    link = t._connector.current
    assert link is not None
    sock = link._conn.transport.socket
    assert sock.version() in ("TLSv1.2", "TLSv1.3")  # the bytes really go through TLS
    assert sock.getpeercert()["subject"] == ((("commonName", "heartwire test broker"),),)
    topic = f"{uid()}.rt"
    got: list[Message] = []
    t.subscribe(topic, got.append)
    time.sleep(0.2)  # SUBSCRIBE frames are not acknowledged: let the broker register them
    body = b"\x00binary over tls\xff" * 100
    t.publish(topic, body, {"x-app": "tls"})
    wait_for(lambda: got, 5, "the message over TLS")
    assert got[0].body == body and got[0].headers["x-app"] == "tls"


@pytest.mark.usefixtures("tls_broker")
def test_monitor_detects_failure_and_resume_over_tls(closing: list[Any]) -> None:
    ca = str(CERTS / "ca.pem")
    # The monitor's connection inside a failover list whose first broker is down.
    mon_t = connect(f"failover:(stomp://{B.HOST}:1,{TLS})?{FAST}", ssl_ca_file=ca)
    closing.append(mon_t)
    assert mon_t.broker == TLS
    key = b"tls-and-hmac"
    topic = f"{uid()}.svc"
    failed = threading.Event()
    resumed: list[float] = []

    class Rec(hw.SubscriberListener):
        def on_failed(self, event: hw.Failed) -> None:
            failed.set()

        def on_resumed(self, event: hw.Resumed) -> None:
            resumed.append(time.monotonic())

    mon = hw.HeartbeatMonitor(mon_t, topic, period=PERIOD, key=key, listeners=[Rec()], **_GRACE)
    closing.append(mon)
    mon.start()
    pub_t = connect(f"{TLS}?{FAST}", ssl_ca_file=ca)
    closing.append(pub_t)
    pub = hw.HeartbeatPublisher(pub_t, topic, period=PERIOD, key=key)
    closing.append(pub)
    pub.start()
    wait_for(lambda: topic in mon and mon.status(topic).state == hw.State.ALIVE, 10, "alive")
    pub.stop()
    assert failed.wait(10), f"{topic} was not failed within 10 s of its publisher's stop"
    assert mon.status(topic).state == hw.State.FAILED
    pub.start()
    wait_for(lambda: mon.status(topic).state == hw.State.ALIVE, 10, f"{topic} resumed")
    assert resumed and mon.stats()["rejected"] == {}


@pytest.mark.usefixtures("tls_broker")
@pytest.mark.parametrize(
    ("ca_name", "needle"),
    [
        ("other-ca.pem", "certificate verification failed"),
        (None, "certificate verification failed"),
    ],
)
def test_wrong_ca_fails_with_a_clear_reason(ca_name: str | None, needle: str) -> None:
    options: dict[str, Any] = {}
    if ca_name:
        options["ssl_ca_file"] = str(CERTS / ca_name)  # else: the system CAs
    t0 = time.monotonic()
    with pytest.raises(ConnectFailed) as info:
        connect(f"{TLS}?connect_timeout=3&reconnect_period=0", **options)
    assert time.monotonic() - t0 < 15
    assert list(info.value.reasons) == [TLS]
    reason = info.value.reasons[TLS]
    assert needle in reason and "self-signed certificate in certificate chain" in reason
    assert needle in str(info.value)


@pytest.mark.usefixtures("tls_broker")
def test_unverified_tls_encrypts_without_a_ca(closing: list[Any]) -> None:
    t = connect(f"{TLS}?{FAST}&ssl_verify=false")
    closing.append(t)
    assert t.connected and t.broker == TLS


@pytest.mark.usefixtures("tls_broker")
def test_tls_to_a_plain_stomp_port_says_so(closing: list[Any]) -> None:
    B.ensure("activemq")
    with pytest.raises(ConnectFailed) as info:
        connect(f"stomp+ssl://{B.HOST}:{B.PORTS['activemq']}?connect_timeout=3", ssl_verify=False)
    assert "TLS handshake failed" in str(info.value)


@pytest.mark.usefixtures("tls_broker")
def test_client_certificate(closing: list[Any]) -> None:
    ca = str(CERTS / "ca.pem")
    with pytest.raises(ConnectFailed) as info:
        connect(f"{MUTUAL}?connect_timeout=3", ssl_ca_file=ca)
    assert "refused the client certificate" in info.value.reasons[MUTUAL]
    t = connect(f"{MUTUAL}?{FAST}", ssl_ca_file=ca, ssl_cert_file=str(CERTS / "client.pem"))
    closing.append(t)
    topic = f"{uid()}.mutual"
    got: list[Message] = []
    t.subscribe(topic, got.append)
    time.sleep(0.2)
    t.publish(topic, b"hello")
    wait_for(lambda: got, 5, "the message over mutual TLS")
    assert got[0].body == b"hello"


@pytest.mark.usefixtures("tls_broker")
def test_encrypted_client_key(tmp_path: Path, closing: list[Any]) -> None:
    # The client key alone, encrypted with a password, and the certificate in its own file.
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    client = str(CERTS / "client.pem")
    for args in (
        ["x509", "-in", client, "-out", str(cert)],
        ["pkey", "-in", client, "-aes256", "-passout", "pass:kp-s3cr3t", "-out", str(key)],
    ):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)
    assert "ENCRYPTED" in key.read_text()
    files = {"ssl_ca_file": str(CERTS / "ca.pem"), "ssl_cert_file": str(cert)}
    with pytest.raises(ConnectFailed) as info:
        connect(
            f"{MUTUAL}?connect_timeout=3",
            ssl_key_file=str(key),
            ssl_key_password="wrong-pw",
            **files,
        )
    reason = info.value.reasons[MUTUAL]
    assert "TLS set-up failed" in reason and "wrong-pw" not in str(info.value)
    t = connect(f"{MUTUAL}?{FAST}", ssl_key_file=str(key), ssl_key_password="kp-s3cr3t", **files)
    closing.append(t)
    assert t.connected and "kp-s3cr3t" not in repr(t.options)


@pytest.mark.usefixtures("tls_broker")
def test_reconnect_over_tls_restores_the_subscription(closing: list[Any]) -> None:
    ca = str(CERTS / "ca.pem")
    t = connect(f"{TLS}?{FAST}", ssl_ca_file=ca)
    closing.append(t)
    topic = f"{uid()}.re"
    got: list[Message] = []
    t.subscribe(topic, got.append)
    first = t._connector.current
    assert first is not None
    first.abort("test: connection torn down")  # as a dropped socket would
    wait_for(lambda: t.connected and t._connector.current is not first, 10, "a new TLS connection")
    assert t._connector.current._conn.transport.socket.version() in ("TLSv1.2", "TLSv1.3")

    def published_and_delivered() -> list[Message]:
        t.publish(topic, b"after the reconnect")
        return got

    wait_for(published_and_delivered, 10, "a delivery after the reconnect", step=0.1)
    assert got[0].body == b"after the reconnect"
