"""The monitor's API: arguments, signatures, bad beats, lifecycle, listeners at run time."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import heartwire as hw
from heartwire import monitor as monitor_module
from heartwire.beat import Beat, BeatCodec
from heartwire.events import ExceptionEvent, Failed, Received, Resumed, State
from heartwire.listeners import PublisherListener, SubscriberListener
from heartwire.monitor import HeartbeatMonitor, HeartbeatSubscriber
from heartwire.transport import Message, connect
from tests.monitor.test_monitor_semantics import ReceivedRecorder, Recorder, Rig, make_rig, ms


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from make_rig()


_EARLIER: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _earlier_monitor_threads() -> None:
    """Monitor threads alive before the test (another file's monitors) are not this test's."""
    _EARLIER.clear()
    _EARLIER.update(t for t in threading.enumerate() if t.name.startswith("heartwire-monitor"))


def monitor_threads() -> list[threading.Thread]:
    """The monitor threads started by this test and still alive."""
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith("heartwire-monitor") and t not in _EARLIER
    ]


# -- bad arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"period": 0}, ValueError, r"period .*got 0"),
        ({"period": -1.5}, ValueError, r"period .*got -1\.5"),
        ({"period": math.nan}, ValueError, r"period .*got nan"),
        ({"period": math.inf}, ValueError, r"period .*got inf"),
        ({"period": "1"}, TypeError, r"period .*str '1'"),
        ({"allowed_misses": 0}, ValueError, r"allowed_misses must be >= 1, got 0"),
        ({"allowed_misses": 1.5}, TypeError, r"allowed_misses .*1\.5"),
        ({"pattern": ""}, ValueError, r"pattern must not be empty, got ''"),
        ({"pattern": "svc.#"}, ValueError, r"pattern 'svc\.#'"),
        ({"pattern": "svc.>.x"}, ValueError, r"pattern 'svc\.>\.x'"),
        ({"pattern": "svc.a*"}, ValueError, r"pattern 'svc\.a\*'"),
        ({"pattern": "svc..a"}, ValueError, r"pattern 'svc\.\.a'"),
        ({"pattern": None}, TypeError, r"pattern must be a str"),
        ({"overflow": "drop"}, ValueError, r"overflow .*'drop'"),
        ({"capacity": 0}, ValueError, r"capacity must be >= 1, got 0"),
        ({"tick": 0.0}, ValueError, r"tick .*got 0\.0"),
        ({"max_topics": -1}, ValueError, r"max_topics must be >= 0, got -1"),
        ({"clock": 1.0}, TypeError, r"clock must be a ManualClock"),
        ({"listeners": [object()]}, TypeError, r"SubscriberListener.*object"),
        ({"listeners": [PublisherListener()]}, TypeError, r"PublisherListener"),
        ({"key": b""}, ValueError, r"key must not be empty"),
        ({"broker": "memory://"}, TypeError, r"broker must be a Transport"),
        ({"grace": -0.1}, ValueError, r"grace must be .*>= 0, got -0\.1"),
        ({"grace": math.nan}, ValueError, r"grace .*got nan"),
        ({"grace": "0"}, TypeError, r"grace .*str '0'"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(
    kwargs: dict[str, Any], exc: type[Exception], message: str
) -> None:
    args: dict[str, Any] = {"broker": None, "pattern": "svc.>"}
    args.update(kwargs)
    with pytest.raises(exc, match=message):
        HeartbeatMonitor(**args)


def test_bad_expect_arguments(rig: Rig) -> None:
    with pytest.raises(ValueError, match=r"period .*got nan"):
        rig.mon.expect("svc.a", period=math.nan)
    with pytest.raises(ValueError, match=r"allowed_misses must be >= 1, got 0"):
        rig.mon.expect("svc.a", allowed_misses=0)
    with pytest.raises(ValueError, match=r"grace .*got -1"):
        rig.mon.expect("svc.a", grace=-1)
    with pytest.raises(ValueError, match=r"topic 'svc\.\*'"):
        rig.mon.expect("svc.*")
    with pytest.raises(ValueError, match=r"topic must not be empty, got ''"):
        rig.mon.expect("")
    with pytest.raises(ValueError, match=r"'other\.a' does not match .*'svc\.>'"):
        rig.mon.expect("other.a")
    assert len(rig.mon) == 0


def test_subscriber_takes_a_topic_not_a_pattern() -> None:
    with pytest.raises(ValueError, match=r"topic 'svc\.>'"):
        HeartbeatSubscriber(None, "svc.>")
    with pytest.raises(ValueError, match=r"period .*got -1"):
        HeartbeatSubscriber(None, "svc.a", period=-1)


# -- signatures and bad beats ------------------------------------------------------------------


def test_signed_beats_accepted_unsigned_and_forged_rejected_and_counted() -> None:
    for r in make_rig(key="s3cret"):
        r.mon.expect("svc.a")
        r.mon.start()
        r.take()
        good, forged = BeatCodec(key="s3cret"), BeatCodec(key="wrong")
        r.broker.publish("svc.a", good.encode(Beat("svc.a", seq=1)))
        assert ms(r.mon.status("svc.a").last_seen) == 0
        r.clock.advance(0.5)
        r.broker.publish("svc.a", BeatCodec().encode(Beat("svc.a", seq=2)))  # unsigned
        r.broker.publish("svc.a", forged.encode(Beat("svc.a", seq=3)))
        r.broker.publish("svc.a", b"svc.a HEARTBEAT")  # legacy beats carry no signature
        r.broker.publish("svc.new", BeatCodec().encode(Beat("svc.new")))
        r.broker.publish("svc.new", forged.encode(Beat("svc.new")))
        assert ms(r.mon.status("svc.a").last_seen) == 0  # none recorded
        assert "svc.new" not in r.mon  # nor learned
        assert r.take() == [
            ("exception", "unsigned"),
            ("exception", "bad_signature"),
            ("exception", "unsigned"),
            ("exception", "unsigned"),
            ("exception", "bad_signature"),
        ]
        stats = r.mon.stats()
        assert stats["rejected"] == {"unsigned": 3, "bad_signature": 2}
        assert stats["beats"] == 1
        r.broker.publish("svc.a", good.encode(Beat("svc.a", seq=4)))
        assert ms(r.mon.status("svc.a").last_seen) == 500


def test_bad_beats_are_counted_by_reason_and_the_monitor_keeps_running(rig: Rig) -> None:
    rig.mon.start()
    rig.take()
    rig.broker.publish("svc.a", b"garbage")
    rig.broker.publish("svc.a", b"\xff\xfe")
    rig.broker.publish("svc.a", b"{" + b" " * 70_000 + b"}")
    rig.broker.publish("svc.a", b'{"v":1,"topic":"svc.a","seq":-1}')
    rig.broker.publish("svc.a", b'{"v":1,"topic":"svc.b"}')  # names another topic
    rig.broker.publish("svc.a", b"[1, 2]")
    assert rig.mon.drain()  # on_exception reaches listeners on their own threads
    events = rig.rec.events[:]
    assert [e.reason for e in events] == [
        "bad_json",
        "not_utf8",
        "too_large",
        "bad_field",
        "topic_mismatch",
        "bad_json",
    ]
    for e in events:
        assert isinstance(e, ExceptionEvent)
        assert e.source == "svc.>"
        assert e.error is not None
        assert "'svc.a'" in e.detail
    assert rig.mon.stats()["rejected"] == {
        "bad_json": 2,
        "not_utf8": 1,
        "too_large": 1,
        "bad_field": 1,
        "topic_mismatch": 1,
    }
    assert len(rig.mon) == 0
    assert rig.broker.stats()["handler_errors"] == 0  # nothing raised into the broker
    rig.send("svc.a", seq=1)
    assert rig.mon.status("svc.a").state is State.ALIVE


def test_max_topics_refuses_learned_topics_but_not_expected_ones() -> None:
    for r in make_rig(max_topics=2):
        r.mon.expect("svc.a")
        r.mon.start()
        r.take()
        r.send("svc.b")
        r.send("svc.c")  # a third topic: refused
        r.send("svc.c")
        assert "svc.c" not in r.mon
        assert r.take() == [("exception", "too_many_topics")] * 2
        r.mon.expect("svc.d")  # expected topics are always added
        r.send("svc.d")
        r.send("svc.a")
        assert len(r.mon) == 3
        stats = r.mon.stats()
        assert stats["rejected"] == {"too_many_topics": 2}
        assert stats["learned"] == 1


# -- beats from other sources ------------------------------------------------------------------


def test_beat_apis_learn_topics_matching_the_pattern(rig: Rig) -> None:
    assert not rig.mon.beat("svc.a")  # not running: not recorded, not learned
    assert "svc.a" not in rig.mon
    rig.mon.start()
    rig.take()
    assert rig.mon.beat("svc.a", seq=3)
    assert not rig.mon.beat("other.a")  # outside the pattern
    assert rig.take() == [("exception", "pattern_mismatch")]
    with pytest.raises(ValueError, match=r"topic 'svc\.\*'"):
        rig.mon.beat("svc.*")
    assert rig.mon.beat_many(["svc.a", "svc.b", "svc.c"]) == 3
    assert rig.mon.beat_many(iter(["svc.b", "svc.d"])) == 2
    h = rig.mon.handle("svc.c")
    assert h is not None and rig.mon.handle("svc.zzz") is None
    assert rig.mon.beat_handles([h, h]) == 2
    assert sorted(s.topic for s in rig.mon.statuses()) == ["svc.a", "svc.b", "svc.c", "svc.d"]
    assert rig.mon.stats()["learned"] == 4


def test_beat_many_takes_numpy_and_arrow(rig: Rig) -> None:
    np = pytest.importorskip("numpy")
    pa = pytest.importorskip("pyarrow")
    rig.mon.start()
    assert rig.mon.beat_many(np.array(["svc.a", "svc.b"])) == 2
    assert rig.mon.beat_many(pa.array(["svc.a", "svc.c", None])) == 2
    assert len(rig.mon) == 3


def test_remove_forgets_a_topic_until_heard_again(rig: Rig) -> None:
    rig.mon.start()
    rig.send("svc.a")
    assert rig.mon.remove("svc.a")
    assert not rig.mon.remove("svc.a")
    with pytest.raises(KeyError):
        rig.mon.status("svc.a")
    rig.send("svc.a")
    assert rig.mon.status("svc.a").state is State.ALIVE


# -- lifecycle ---------------------------------------------------------------------------------


def test_stop_is_idempotent_cancels_the_subscription_and_ends_the_thread() -> None:
    clock = hw.ManualClock()
    broker = connect()
    rec = Recorder()
    mon = HeartbeatMonitor(broker, "svc.>", clock=clock, listeners=[rec])
    assert not mon.running
    assert mon.start() is mon
    mon.start()  # already running: nothing
    assert mon.running
    assert len(monitor_threads()) == 1
    assert len(broker.subscriptions()) == 1
    mon.expect("svc.a")
    clock.advance(1.5)  # a failed event, not yet drained ...
    mon.stop()  # ... is delivered before on_stopped
    mon.stop()
    assert not mon.running
    assert [type(e).__name__ for e in rec.events] == ["Started", "Failed", "Stopped"]
    assert broker.subscriptions() == []
    assert monitor_threads() == []
    broker.publish("svc.a", BeatCodec().encode(Beat("svc.a")))  # nobody listens any more
    assert mon.status("svc.a").state is State.STOPPED
    assert mon.drain(0.1)
    # and it can be started again
    mon.start()  # a restart keeps what is known (issue 14 item 6): still FAILED, not PENDING
    assert mon.status("svc.a").state is State.FAILED
    mon.stop()
    assert [type(e).__name__ for e in rec.events][-2:] == ["Started", "Stopped"]


def test_context_manager_and_atexit_stop_running_monitors() -> None:
    broker = connect()
    with HeartbeatMonitor(broker, "svc.>", clock=hw.ManualClock()) as mon:
        assert mon.running
    assert not mon.running
    left = HeartbeatMonitor(broker, "svc.>", clock=hw.ManualClock()).start()
    assert left in monitor_module._running
    monitor_module._running.stop_all()  # what the atexit hook runs
    assert not left.running
    assert left not in monitor_module._running
    assert monitor_threads() == []


def test_pause_and_resume_need_a_running_monitor() -> None:
    mon = HeartbeatMonitor(None, "svc.>", clock=hw.ManualClock())
    with pytest.raises(RuntimeError, match=r"'svc\.>' is not running"):
        mon.pause()
    with pytest.raises(RuntimeError, match="not running"):
        mon.resume()


def test_a_failing_broker_subscription_leaves_the_monitor_stopped() -> None:
    broker = connect()
    broker.close()
    mon = HeartbeatMonitor(broker, "svc.>", clock=hw.ManualClock())
    with pytest.raises(hw.transport.TransportClosed):
        mon.start()
    assert not mon.running
    assert monitor_threads() == []


def test_status_snapshots(rig: Rig) -> None:
    rig.mon.expect("svc.a", period=2.0, allowed_misses=2)
    rig.mon.start()
    rig.clock.advance(0.5)
    rig.send("svc.a")
    st = rig.mon.status("svc.a")
    assert (st.topic, st.state, st.missed, ms(st.last_seen)) == ("svc.a", State.ALIVE, 0, 500)
    assert (st.period, st.allowed_misses, st.failed_since, ms(st.next_deadline)) == (
        2.0,
        2,
        None,
        2500,  # one period after the last beat
    )
    assert rig.mon.counts()["ALIVE"] == 1
    assert rig.mon.now() == rig.clock.now()
    with pytest.raises(KeyError):
        rig.mon.status("svc.nope")


# -- listeners at run time ---------------------------------------------------------------------


def test_a_raising_listener_does_not_stop_the_others(rig: Rig) -> None:
    class Boom(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            raise RuntimeError("boom")

    rig.mon.add_listener(Boom())
    other = Recorder()
    rig.mon.add_listener(other)
    rig.mon.expect("svc.a")
    rig.mon.start()
    rig.advance(2.5)
    assert rig.mon.drain()
    kinds = [type(e).__name__ for e in other.events]
    # Boom's error reports reach `other` through its own queue, beside the events themselves
    assert [k for k in kinds if k != "ExceptionEvent"] == ["Started", "Failed", "Failed"]
    assert kinds.count("ExceptionEvent") == 2
    assert {e.reason for e in other.events if isinstance(e, ExceptionEvent)} == {"listener_error"}
    assert rig.mon.stats()["listener_errors"] == 2
    assert rig.mon.stats()["dispatch_errors"] == 0


def test_received_only_for_listeners_that_want_it_added_and_removed_at_run_time(rig: Rig) -> None:
    rig.mon.expect("svc.a")
    rig.mon.start()
    rig.send("svc.a", seq=1)
    rig.take()
    assert not rig.mon._feed.current.received  # type: ignore[union-attr]
    wants = ReceivedRecorder()
    rig.mon.add_listener(wants)
    rig.advance(1.5)  # failed at 1.0
    rig.send("svc.a", seq=2)
    assert rig.mon.drain()
    assert [type(e).__name__ for e in wants.events] == ["Failed", "Resumed", "Received"]
    assert [type(e).__name__ for e in rig.rec.events] == ["Resumed"]  # failed: taken above
    assert rig.mon.remove_listener(wants)
    assert not rig.mon.remove_listener(wants)
    rig.rec.events.clear()
    rig.send("svc.a", seq=3)
    rig.clock.advance(1.5)
    assert rig.mon.drain()
    assert not rig.mon._feed.current.received  # type: ignore[union-attr]
    assert [type(e).__name__ for e in wants.events] == ["Failed", "Resumed", "Received"]
    assert [type(e).__name__ for e in rig.rec.events] == ["Failed"]


def test_switching_feeds_while_events_flow_loses_and_repeats_nothing() -> None:
    clock = hw.ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", period=0.01, clock=clock, capacity=1 << 20, grace=0.0)
    seen: dict[str, list[int]] = {}

    class Counter(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            seen.setdefault(event.topic, []).append(event.missed)

    class WantsReceived(SubscriberListener):
        def on_received(self, event: Received) -> None:
            pass

    mon.add_listener(Counter())
    for i in range(50):
        mon.expect(f"svc.{i}")
    mon.start()
    stop = threading.Event()
    switched = threading.Event()
    waits_timed_out = 0

    def tick() -> None:  # 400 periods; every 40th waits for a feed switch, so they interleave
        nonlocal waits_timed_out
        for i in range(400):
            clock.advance(0.01)
            if i % 40 == 0:
                waits_timed_out += not switched.wait(5.0)
                switched.clear()
        stop.set()

    ticker = threading.Thread(target=tick)
    ticker.start()
    switches = 0
    try:
        extra = WantsReceived()
        while not stop.is_set():
            mon.add_listener(extra)
            mon.beat("svc.0")
            mon.remove_listener(extra)
            switches += 2
            switched.set()
    finally:
        ticker.join()
    assert waits_timed_out == 0, "the switching loop stalled for 5 s"
    assert switches >= 20
    clock.advance(0.001)
    assert mon.drain(10)
    mon.stop()
    assert len(seen) == 50
    for topic, counts in seen.items():
        if topic == "svc.0":
            continue  # its beats resumed it: counts restart
        assert counts == list(range(1, 401)), topic
    assert mon.stats()["dropped"] == 0


def test_async_listener_runs_on_the_loop_it_was_added_from() -> None:
    clock = hw.ManualClock()
    broker = connect()
    got: list[tuple[str, int, asyncio.AbstractEventLoop]] = []

    class Async(SubscriberListener):
        async def on_resumed(self, event: Resumed) -> None:
            got.append((event.topic, event.missed, asyncio.get_running_loop()))

    async def main() -> asyncio.AbstractEventLoop:
        mon = HeartbeatMonitor(broker, "svc.>", clock=clock)
        mon.add_listener(Async())
        mon.expect("svc.a")
        with mon:
            clock.advance(2.5)
            broker.publish("svc.a", BeatCodec().encode(Beat("svc.a")))
            await asyncio.to_thread(mon.drain)
            for _ in range(200):
                if got:
                    break
                await asyncio.sleep(0.01)
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert got == [("svc.a", 2, loop)]


def test_drain_from_a_listener_returns_at_once(rig: Rig) -> None:
    results: list[bool] = []

    class Drains(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            results.append(rig.mon.drain(5.0))

    rig.mon.add_listener(Drains())
    rig.mon.expect("svc.a")
    rig.mon.start()
    rig.advance(1.5)
    assert results == [False]


def test_a_beat_arriving_while_stopped_changes_nothing() -> None:
    # Not recorded while stopped, so it must not re-tune its topic either.
    clock = hw.ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", clock=clock)
    mon.start()
    mon.handle_message(Message("svc.a", BeatCodec().encode(Beat("svc.a", 1, "b", None, 1.0))))
    mon.stop()
    mon.handle_message(Message("svc.a", BeatCodec().encode(Beat("svc.a", 2, "b", None, 50.0))))
    status = mon.status("svc.a")
    assert (status.period, mon.stats()["beats"]) == (1.0, 1)


class _RefusingBroker:
    def subscribe(self, pattern: str, handler: object) -> object:
        raise ConnectionError(f"cannot subscribe to {pattern}")


def test_start_undoes_itself_when_the_broker_refuses_the_subscription() -> None:
    mon = hw.HeartbeatMonitor(_RefusingBroker(), "svc.>", tick=0.001)  # type: ignore[arg-type]
    mon.expect("svc.a")
    with pytest.raises(ConnectionError, match="cannot subscribe to"):
        mon.start()
    assert not mon.running
    assert not mon.detector.running
    assert mon._feed.current is None
    mon.stop()  # nothing to stop


def test_a_beat_racing_its_topics_removal_leaves_no_history_to_the_slots_next_topic() -> None:
    # R3 N5: _record looks the handle up, then _newer writes the boot it took into the replay
    # history of the handle's slot. A remove + a new topic reusing the slot in between put the
    # old topic's boot into the new topic's history: its own beats were then refused as
    # replays. The interleaving is played in order here (the lookup's handle held across).
    key = b"k" * 32
    clock = hw.ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", clock=clock, key=key, max_beat_age=math.inf)
    mon.start()
    codec = BeatCodec(key)
    mon.handle_message(Message("svc.a", codec.encode(Beat("svc.a", 1, "boot-x", 1000.0, 1.0))))
    old = mon.handle("svc.a")
    assert old is not None
    assert mon.remove("svc.a")
    assert mon.drain(5.0)
    new = mon.expect("svc.b")
    assert new & 0xFFFF_FFFF == old & 0xFFFF_FFFF and new != old, "the slot was not reused"
    # The racing beat of svc.a, looked up before the removal, is recorded now: the intake
    # keeps boots per full handle (slot and generation), so it cannot reach svc.b's history.
    assert not mon._intake.record("svc.a", 9, "boot-x", 1001.0, 1.0) or "svc.a" in mon
    mon.remove("svc.a")
    # svc.b's publisher happens to use the same boot id (or a replayed old one: the same).
    mon.handle_message(Message("svc.b", codec.encode(Beat("svc.b", 2, "boot-x", 1002.0, 1.0))))
    assert mon.stats()["rejected"] == {}
    assert mon.status("svc.b").last_seen is not None
    mon.stop()
