"""Topic patterns, connect() and the embedded in-process broker."""

from __future__ import annotations

import logging
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heartwire.transport import (
    ConnectFailed,
    Message,
    Subscription,
    Transport,
    TransportClosed,
    connect,
)
from heartwire.transport.memory import MemoryBroker
from heartwire.transport.patterns import (
    MAX_TOPIC_LEN,
    is_wildcard,
    matcher,
    validate_pattern,
    validate_topic,
)

# -- patterns -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "svc.a", "svc.eu-west:1.db_2", "A.B.C.D.E", "0"])
def test_valid_topics_are_returned_unchanged(name: str) -> None:
    assert validate_topic(name) == name
    assert validate_pattern(name) == name
    assert not is_wildcard(name)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "must not be empty"),
        ("a..b", "empty segment"),
        (".a", "empty segment"),
        ("a.", "empty segment"),
        ("svc.*", "wildcard '\\*'"),
        ("svc.>", "wildcard '>'"),
        ("a b", "characters not allowed: ' '"),
        ("a/b", "characters not allowed: '/'"),
        ("caf\u00e9", "characters not allowed"),
        ("a.#", "characters not allowed: '#'"),
    ],
)
def test_invalid_topics_name_field_and_value(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as info:
        validate_topic(name, "topic")
    assert str(info.value).startswith("topic ")
    assert repr(name) in str(info.value)
    with pytest.raises(ValueError, match=r"^publisher_topic "):
        validate_topic(name, "publisher_topic")


@pytest.mark.parametrize("pattern", ["*", ">", "svc.*", "svc.>", "*.a.*", "*.>", "a.*.>"])
def test_valid_patterns(pattern: str) -> None:
    assert validate_pattern(pattern) == pattern
    assert is_wildcard(pattern)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("", "must not be empty"),
        ("a.>.b", "'>' before the last segment"),
        (">.a", "'>' before the last segment"),
        ("a.#", "uses '#'"),
        ("svc*", "a wildcard must be a whole segment"),
        ("svc.a>", "a wildcard must be a whole segment"),
        ("a..*", "empty segment"),
        ("a.?", "characters not allowed: '\\?'"),
    ],
)
def test_invalid_patterns_name_field_and_value(pattern: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as info:
        validate_pattern(pattern, "pattern")
    assert str(info.value).startswith(f"pattern {pattern!r} ") or pattern == ""
    assert repr(pattern) in str(info.value)


def test_non_str_names_are_type_errors_naming_the_field() -> None:
    with pytest.raises(TypeError, match=r"topic must be a str, got int 3"):
        validate_topic(3)
    with pytest.raises(TypeError, match=r"pattern must be a str, got bytes"):
        validate_pattern(b"svc.>")


def test_overlong_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="characters long"):
        validate_topic("a" * (MAX_TOPIC_LEN + 1))


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("svc.a", ["svc.a"], ["svc", "svc.a.b", "svc.ab", "xsvc.a"]),
        ("svc.*", ["svc.a", "svc.b-1"], ["svc", "svc.a.b", "other.a"]),
        ("svc.>", ["svc.a", "svc.a.b.c"], ["svc", "svcx.a", "other.a"]),
        ("*.feed", ["prices.feed", "x.feed"], ["feed", "a.b.feed", "prices.feed.x"]),
        (">", ["a", "a.b", "a.b.c"], []),
        ("*", ["a", "b"], ["a.b"]),
        ("a.*.>", ["a.b.c", "a.b.c.d"], ["a.b", "a", "b.b.c"]),
    ],
)
def test_matcher(pattern: str, yes: list[str], no: list[str]) -> None:
    m = matcher(pattern)
    assert [t for t in yes if m(t)] == yes
    assert [t for t in no if m(t)] == []


def _reference_match(pattern: str, topic: str) -> bool:
    p, t = pattern.split("."), topic.split(".")
    if p[-1] == ">":
        return len(t) >= len(p) and all(a in ("*", b) for a, b in zip(p[:-1], t, strict=False))
    return len(p) == len(t) and all(a in ("*", b) for a, b in zip(p, t, strict=False))


_segments = st.sampled_from(["a", "b", "c-1", "d:2"])


@given(
    st.lists(_segments, min_size=1, max_size=5),
    st.lists(st.one_of(_segments, st.just("*")), min_size=1, max_size=5),
    st.booleans(),
)
def test_matcher_agrees_with_a_reference(topic: list[str], pattern: list[str], tail: bool) -> None:
    pat = ".".join([*pattern, ">"] if tail else pattern)
    name = ".".join(topic)
    assert matcher(pat)(name) == _reference_match(pat, name)


# -- connect --------------------------------------------------------------------------------


def test_connect_defaults_to_a_new_embedded_broker() -> None:
    a, b = connect(), connect("memory://")
    assert isinstance(a, MemoryBroker) and isinstance(b, MemoryBroker)
    assert a is not b
    assert a.url == "memory://"
    assert isinstance(a, Transport)


def test_connect_named_memory_brokers_are_shared_until_closed() -> None:
    a = connect("memory://test-shared")
    assert connect("memory://test-shared") is a
    assert a.url == "memory://test-shared"
    a.close()
    b = connect("memory://test-shared")
    assert isinstance(b, MemoryBroker)
    assert b is not a and not b.closed
    b.close()


def test_connect_to_stomp_brokers_that_are_not_there_names_each() -> None:
    url = "failover:(stomp://127.0.0.1:61698,stomp://127.0.0.1:61699)?reconnect_period=0.5"
    with pytest.raises(ConnectFailed) as failed:
        connect(url)
    assert set(failed.value.reasons) == {"stomp://127.0.0.1:61698", "stomp://127.0.0.1:61699"}


@pytest.mark.parametrize("url", ["amqp://x", "memory", "http://localhost", "memory://a/b", ""])
def test_connect_rejects_unknown_urls_naming_them(url: str) -> None:
    with pytest.raises(ValueError, match=f"url {url!r}"):
        connect(url)


def test_connect_rejects_options_the_broker_does_not_take() -> None:
    with pytest.raises(TypeError, match="colour"):
        connect(colour="red")


# -- the embedded broker --------------------------------------------------------------------


def test_delivery_is_synchronous_to_every_matching_subscription_in_order() -> None:
    broker = MemoryBroker()
    got: list[tuple[str, str]] = []
    broker.subscribe("svc.>", lambda m: got.append(("all", m.destination)))
    broker.subscribe("svc.a", lambda m: got.append(("a", m.destination)))
    broker.subscribe("svc.*", lambda m: got.append(("one", m.destination)))
    broker.subscribe("other", lambda m: got.append(("other", m.destination)))
    broker.publish("svc.a", b"1")
    assert got == [("all", "svc.a"), ("a", "svc.a"), ("one", "svc.a")]
    got.clear()
    broker.publish("svc.a.b", b"2")
    assert got == [("all", "svc.a.b")]
    got.clear()
    broker.publish("nobody", b"3")
    assert got == []
    assert broker.stats() == {
        "published": 3,
        "delivered": 4,
        "unrouted": 1,
        "handler_errors": 0,
        "subscriptions": 4,
    }


def test_message_carries_destination_body_and_read_only_headers() -> None:
    broker = MemoryBroker()
    got: list[Message] = []
    broker.subscribe("svc.a", got.append)
    headers = {"expires": "123", "persistent": "true"}
    broker.publish("svc.a", bytearray(b"body"), headers)
    headers["expires"] = "changed"
    broker.publish("svc.a", b"x")
    first, second = got
    assert first == Message("svc.a", b"body", {"expires": "123", "persistent": "true"})
    assert type(first.body) is bytes
    with pytest.raises(TypeError):
        first.headers["x"] = "y"  # type: ignore[index]
    assert dict(second.headers) == {}
    assert hash(first) == hash(Message("svc.a", b"body"))


def test_publish_validates_its_arguments() -> None:
    broker = MemoryBroker()
    with pytest.raises(ValueError, match=r"topic 'svc\.\*'"):
        broker.publish("svc.*", b"x")
    with pytest.raises(ValueError, match="topic must not be empty, got ''"):
        broker.publish("", b"x")
    with pytest.raises(TypeError, match="body must be bytes, got str"):
        broker.publish("svc.a", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"pattern 'svc\.#'"):
        broker.subscribe("svc.#", print)
    with pytest.raises(TypeError, match="handler must be callable"):
        broker.subscribe("svc.a", "nope")  # type: ignore[arg-type]


def test_handler_errors_are_logged_and_counted_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = MemoryBroker()
    got: list[str] = []

    def bad(message: Message) -> None:
        raise RuntimeError("handler bug")

    bad_sub = broker.subscribe("svc.>", bad)
    broker.subscribe("svc.>", lambda m: got.append(m.destination))
    with caplog.at_level(logging.ERROR, logger="heartwire.transport.memory"):
        broker.publish("svc.a", b"1")
        broker.publish("svc.b", b"2")
    assert got == ["svc.a", "svc.b"]
    assert broker.stats()["handler_errors"] == 2
    assert bad_sub.errors == 2 and bad_sub.delivered == 2
    assert "handler bug" in caplog.text
    assert "'svc.>'" in caplog.text


def test_cancel_stops_delivery_and_is_idempotent() -> None:
    broker = MemoryBroker()
    got: list[str] = []
    sub = broker.subscribe("svc.*", lambda m: got.append(m.destination))
    exact = broker.subscribe("svc.a", lambda m: got.append("exact"))
    assert isinstance(sub, Subscription)
    broker.publish("svc.a", b"")
    sub.cancel()
    sub.cancel()
    broker.publish("svc.a", b"")
    exact.cancel()
    broker.publish("svc.a", b"")
    assert got == ["svc.a", "exact", "exact"]
    assert not sub.active
    assert broker.stats()["subscriptions"] == 0
    assert broker.subscriptions() == []


def test_handlers_may_subscribe_cancel_and_publish_while_being_delivered() -> None:
    broker = MemoryBroker()
    got: list[str] = []
    subs: list[Subscription] = []

    def first(message: Message) -> None:
        got.append("first:" + message.destination)
        subs[1].cancel()  # the later one must not be called for this message
        if message.destination == "svc.a":
            broker.subscribe("svc.>", lambda m: got.append("new:" + m.destination))
            broker.publish("svc.b", b"")

    subs.append(broker.subscribe("svc.>", first))
    subs.append(broker.subscribe("svc.>", lambda m: got.append("second:" + m.destination)))
    broker.publish("svc.a", b"")
    assert got == ["first:svc.a", "first:svc.b", "new:svc.b"]


def test_route_cache_follows_subscription_changes() -> None:
    broker = MemoryBroker()
    got: list[str] = []
    broker.publish("svc.a", b"")  # caches the empty route
    broker.subscribe("svc.*", lambda m: got.append("wild"))
    broker.publish("svc.a", b"")
    broker.subscribe("svc.a", lambda m: got.append("exact"))
    broker.publish("svc.a", b"")
    assert got == ["wild", "wild", "exact"]


def test_close_is_idempotent_and_later_use_raises_clearly() -> None:
    broker = MemoryBroker()
    sub = broker.subscribe("svc.a", print)
    with broker:
        pass
    broker.close()
    assert broker.closed and not sub.active
    with pytest.raises(TransportClosed, match=r"publish to 'svc\.a' on 'memory://': .*closed"):
        broker.publish("svc.a", b"")
    with pytest.raises(TransportClosed, match="closed"):
        broker.subscribe("svc.a", print)
    sub.cancel()  # still fine
    assert "closed" in repr(broker)


def test_concurrent_publishers_and_subscribers_count_exactly() -> None:
    broker = MemoryBroker()
    threads_n, per_thread = 4, 2000
    lock = threading.Lock()
    seen: dict[str, int] = {}

    def count(message: Message) -> None:
        with lock:
            seen[message.destination] = seen.get(message.destination, 0) + 1

    def boom(message: Message) -> None:
        if message.body == b"0":
            raise ValueError("every tenth")

    broker.subscribe(">", count)
    broker.subscribe("t.*", boom)
    start = threading.Barrier(threads_n + 1)
    stop_churn = threading.Event()

    def publisher(i: int) -> None:
        start.wait()
        for n in range(per_thread):
            broker.publish(f"t.{i}", str(n % 10).encode())

    def churn() -> None:  # subscribe/cancel concurrently: copy-on-write must keep counts exact
        start.wait()
        while not stop_churn.is_set():
            broker.subscribe("t.>", lambda m: None).cancel()

    workers = [threading.Thread(target=publisher, args=(i,)) for i in range(threads_n)]
    churner = threading.Thread(target=churn)
    for t in [*workers, churner]:
        t.start()
    logging.getLogger("heartwire.transport.memory").disabled = True
    try:
        for t in workers:
            t.join(30)
        stop_churn.set()
        churner.join(30)
    finally:
        logging.getLogger("heartwire.transport.memory").disabled = False
    total = threads_n * per_thread
    assert seen == {f"t.{i}": per_thread for i in range(threads_n)}
    stats = broker.stats()
    assert stats["published"] == total
    assert stats["handler_errors"] == total // 10
    # ">" and "t.*" got every message; churned "t.>" subscriptions got some.
    assert stats["delivered"] >= 2 * total
    assert stats["subscriptions"] == 2
    assert stats["unrouted"] == 0
