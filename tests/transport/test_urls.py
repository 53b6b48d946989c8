"""STOMP URL and option parsing: forms, defaults, precise errors, passwords never shown."""

from __future__ import annotations

import pytest

import heartwire.transport as transport
from heartwire.transport.dialect import ACTIVEMQ, RABBITMQ, detect
from heartwire.transport.urls import (
    DEFAULT_PORT,
    OPTIONS,
    BrokerAddress,
    StompOptions,
    parse_url,
    redact,
)


def test_single_broker_defaults() -> None:
    o = parse_url("stomp://127.0.0.1:61613")
    assert o.brokers == (BrokerAddress("127.0.0.1", 61613),)
    assert not o.failover
    assert o.url == "stomp://127.0.0.1:61613"
    assert (o.vhost, o.dialect, o.login, o.passcode) == ("/", "auto", None, None)
    assert o.reconnect_period == 0.0 and o.failover_check_count == 1
    assert parse_url("stomp://mq.example").brokers[0].port == DEFAULT_PORT
    assert parse_url("STOMP://h:1/").brokers[0] == BrokerAddress("h", 1)


def test_failover_list_and_query_options() -> None:
    o = parse_url(
        "failover:(stomp://a:61613, stomp://b:61614)?reconnect_interval=1&reconnect_period=0"
        "&request_blocking_time=30&failover_check_count=3&failover_check_timeout=0.5"
    )
    assert o.failover
    assert [str(b) for b in o.brokers] == ["stomp://a:61613", "stomp://b:61614"]
    assert o.url == "failover:(stomp://a:61613,stomp://b:61614)"
    assert o.reconnect_interval == 1.0 and o.reconnect_period == 0.0
    assert o.request_blocking_time == 30.0
    assert o.failover_check_count == 3 and o.failover_check_timeout == 0.5
    assert parse_url("failover://(stomp://a:1)").brokers == (BrokerAddress("a", 1),)


def test_keywords_override_query() -> None:
    o = parse_url("stomp://h:1?heartbeat=2&vhost=%2Fprod", heartbeat=0.5, login="u")
    assert o.heartbeat == 0.5 and o.vhost == "/prod" and o.login == "u"
    o = parse_url("stomp://h:1", dialect="RabbitMQ", keepalive_interval=0, keepalive_allowed=5)
    assert o.dialect == "rabbitmq" and o.keepalive_interval == 0 and o.keepalive_allowed == 5


def test_credentials_from_url_and_options() -> None:
    o = parse_url("failover:(stomp://alice:s%40cret@a:1,stomp://b:2)", login="bob", passcode="pw")
    a, b = o.brokers
    assert o.credentials(a) == ("alice", "s@cret")
    assert o.credentials(b) == ("bob", "pw")
    assert "s@cret" not in repr(o) and "pw" not in repr(o) and "cret" not in str(a)


def test_ipv6_host() -> None:
    b = parse_url("stomp://[::1]:61613").brokers[0]
    assert (b.host, b.port, str(b)) == ("::1", 61613, "stomp://[::1]:61613")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("stomp://h:0", ["'0'", "1 to 65535"]),
        ("stomp://h:99999", ["'99999'"]),
        ("stomp://h:abc", ["'abc'"]),
        ("stomp://h:", ["empty port"]),
        ("stomp://:61613", ["no host"]),
        ("stomp://h:1/queue", ["path"]),
        ("tcp://h:1", ["unknown scheme"]),
        ("failover:stomp://a:1,stomp://b:2", ["parentheses"]),
        ("failover:(stomp://a:1,stomp://b:2", ["closing parenthesis"]),
        ("failover:(stomp://a:1,,stomp://b:2)", ["empty entry"]),
        ("failover:()", ["empty entry"]),
        ("failover:(stomp://a:1?heartbeat=1)", ["own options"]),
        ("failover:(tcp://a:1)", ["scheme 'tcp'"]),
        ("failover:(stomp://a:1,stomp://A:1)", ["twice"]),
        ("failover:(stomp://a:1)x", ["after the broker list"]),
        ("stomp://h:1?heartbeat=1&heartbeat=2", ["heartbeat", "twice"]),
        ("stomp://h:1?nonsense", ["options"]),
        ("stomp://[::1:1", ["IPv6"]),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        transport.connect(url)
    message = str(info.value)
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"reconnect_interval": "soon"}, ["reconnect_interval='soon'", "seconds"]),
        ({"reconnect_interval": -1}, ["option reconnect_interval must be", ">= 0, got -1"]),
        ({"request_blocking_time": "nan"}, ["request_blocking_time", "got 'nan'"]),
        ({"heartbeat": "inf"}, ["option heartbeat must be a finite", "got 'inf'"]),
        ({"connect_timeout": 0}, ["connect_timeout must be", "> 0, got 0"]),
        ({"failover_check_count": "0"}, ["failover_check_count must be >= 1, got 0"]),
        ({"failover_check_count": "2.5"}, ["failover_check_count='2.5'", "whole number"]),
        ({"keepalive_allowed": 0}, ["keepalive_allowed must be >= 1, got 0"]),
        ({"keepalive_interval": 0.001}, ["keepalive_interval=0.001"]),
        ({"dialect": "artemis"}, ["dialect='artemis'", "activemq", "rabbitmq"]),
        ({"colour": "red"}, ["unknown option colour", "'red'", "reconnect_interval"]),
        ({"vhost": "a\nb"}, ["vhost", "line breaks"]),
    ],
)
def test_bad_options_name_option_and_value(options: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        parse_url("stomp://h:1", **options)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_bad_option_in_query_names_it() -> None:
    with pytest.raises(ValueError, match=r"option reconnect_period='x' is not a number"):
        parse_url("failover:(stomp://a:1,stomp://b:2)?reconnect_period=x")


@pytest.mark.parametrize(
    ("options", "exc"),
    [
        ({"reconnect_interval": True}, TypeError),
        ({"failover_check_count": 1.0}, TypeError),
        ({"login": 5}, TypeError),
        ({"passcode": 5}, TypeError),
    ],
)
def test_option_types(options: dict[str, object], exc: type[Exception]) -> None:
    with pytest.raises(exc, match=next(iter(options))):
        parse_url("stomp://h:1", **options)


def test_passwords_never_echoed() -> None:
    secret = "hunter2-very-secret"
    cases: list[tuple[str, dict[str, object]]] = [
        (f"stomp://bob:{secret}@h:0", {}),
        (f"failover:(stomp://bob:{secret}@a:1,stomp://b:x)", {}),
        (f"failover:(stomp://bob:{secret}@a:1)?reconnect_interval=z", {}),
        (f"tcp://bob:{secret}@h:1", {}),
        ("stomp://h:1", {"passcode": secret + "\n"}),
        ("stomp://h:1", {"passcode": 12345}),
        ("stomp://h:1", {"passkey": secret}),
    ]
    for url, options in cases:
        with pytest.raises((ValueError, TypeError)) as info:
            transport.connect(url, **options)
        assert secret not in str(info.value), str(info.value)
        assert "12345" not in str(info.value)
    assert redact(f"failover:(stomp://u:{secret}@a:1,stomp://v:p@b:2)") == (
        "failover:(stomp://u:***@a:1,stomp://v:***@b:2)"
    )


def test_every_option_has_a_default() -> None:
    fields = set(StompOptions.__dataclass_fields__)
    assert set(OPTIONS) <= fields


def test_dialect_translation() -> None:
    assert ACTIVEMQ.subscription("svc.>") == "/topic/svc.>"
    assert ACTIVEMQ.subscription("svc.*.x") == "/topic/svc.*.x"
    assert RABBITMQ.subscription("svc.>") == "/topic/svc.#"
    assert RABBITMQ.subscription("svc.*") == "/topic/svc.*"
    assert RABBITMQ.subscription("a.b") == "/topic/a.b"
    assert ACTIVEMQ.destination("svc.a") == RABBITMQ.destination("svc.a") == "/topic/svc.a"
    assert RABBITMQ.topic("/topic/svc.a") == "svc.a"
    assert RABBITMQ.topic("/exchange/amq.topic/svc.a") == "svc.a"
    assert ACTIVEMQ.topic("/queue/q") == "/queue/q"
    assert detect("ActiveMQ/5.17.2") is ACTIVEMQ
    assert detect("RabbitMQ/3.10.8") is RABBITMQ
    assert detect("ActiveMQ-Artemis/2.30") is None and detect(None) is None
    headers = RABBITMQ.send_headers({"expires": "1", "persistent": "true"})
    assert headers == {"expires": "1", "persistent": "true", "expiration": "0"}
    assert ACTIVEMQ.send_headers({"expires": "1"}) == {"expires": "1"}
