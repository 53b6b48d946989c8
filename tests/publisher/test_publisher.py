"""Heartbeat publishers on the shared executor: exact beats under a manual clock, a real-clock
run with bounded waits, and ten thousand publishers on a handful of threads."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import heartwire as hw
from heartwire import checks
from heartwire import publisher as publisher_module
from heartwire.beat import Beat, BeatCodec, DecodeError
from heartwire.checks import CheckFailed
from heartwire.events import ExceptionEvent, Sent, Started, Stopped
from heartwire.executor import PublisherExecutor, shared_executor
from heartwire.listeners import PublisherListener, SubscriberListener
from heartwire.publisher import HeartbeatPublisher
from heartwire.transport import Message, TransportClosed
from heartwire.transport.memory import MemoryBroker
from tests.brokers import brokers  # noqa: F401  (the session fixture)


class Recorder(PublisherListener):
    """Every event, in order (thread safe)."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._lock = threading.Lock()

    def _add(self, event: Any) -> None:
        with self._lock:
            self.events.append(event)

    def on_started(self, event: Started) -> None:
        self._add(event)

    def on_stopped(self, event: Stopped) -> None:
        self._add(event)

    def on_sent(self, event: Sent) -> None:
        self._add(event)

    def on_exception(self, event: ExceptionEvent) -> None:
        self._add(event)

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]

    def exceptions(self) -> list[ExceptionEvent]:
        return [e for e in self.events if isinstance(e, ExceptionEvent)]


@dataclass
class Rig:
    clock: hw.ManualClock
    broker: MemoryBroker
    messages: list[Message]
    pubs: list[HeartbeatPublisher] = field(default_factory=list)

    @property
    def sched(self) -> PublisherExecutor:
        return shared_executor(self.clock)

    def make(self, topic: str = "svc.a", period: float = 1.0, **kw: Any) -> HeartbeatPublisher:
        pub = HeartbeatPublisher(self.broker, topic, period, clock=self.clock, **kw)
        self.pubs.append(pub)
        return pub

    def step(self, seconds: float = 1.0, times: int = 1) -> None:
        """Advance the clock, then wait until every beat due has gone out."""
        for _ in range(times):
            self.clock.advance(seconds)
            assert self.sched.drain(timeout=10.0), "publishers did not catch up within 10 s"

    def beats(self, key: bytes | None = None) -> list[Beat]:
        codec = BeatCodec(key)
        return [codec.decode(m.body, m.destination) for m in self.messages]


@pytest.fixture
def rig() -> Iterator[Rig]:
    broker = MemoryBroker()
    messages: list[Message] = []
    broker.subscribe(">", messages.append)
    r = Rig(hw.ManualClock(), broker, messages)
    yield r
    for pub in r.pubs:
        pub.stop()


# -- beats under a manual clock -------------------------------------------------------------


def test_first_beat_at_start_then_one_per_period_with_exact_seq(rig: Rig) -> None:
    pub = rig.make("svc.a", 1.0).start()
    assert rig.sched.drain()
    assert (pub.sent, pub.seq) == (1, 1)
    rig.step(1.0, times=3)
    assert (pub.sent, pub.seq) == (4, 4)
    rig.step(0.5)  # half a period: nothing due
    assert pub.sent == 4
    assert pub.next_beat == 4.0
    beats = rig.beats()
    assert [b.seq for b in beats] == [1, 2, 3, 4]
    assert {b.topic for b in beats} == {"svc.a"}
    assert {b.boot_id for b in beats} == {pub.boot_id}
    assert {b.period for b in beats} == {1.0}
    assert all(abs(b.sent_at - time.time()) < 60 for b in beats if b.sent_at is not None)
    assert len(pub.boot_id) == 32 and int(pub.boot_id, 16) >= 0


def test_periods_below_one_and_beat_times(rig: Rig) -> None:
    pub = rig.make("svc.fast", 0.25).start()
    rig.step(0.0)
    rig.step(0.25, times=8)
    assert pub.sent == 9
    assert pub.next_beat == 2.25


def test_falling_behind_skips_missed_beats_instead_of_bursting(rig: Rig) -> None:
    pub = rig.make("svc.a", 1.0).start()
    rig.step(0.0)
    rig.step(10.0)  # ten periods at once: one late beat, then the next slot after now
    assert pub.sent == 2
    assert pub.next_beat == 11.0
    rig.step(1.0)
    assert pub.sent == 3


def test_events_in_order(rig: Rig) -> None:
    rec = Recorder()
    pub = rig.make("svc.a", listeners=[rec]).start()
    rig.step(0.0)
    rig.step(1.0, times=2)
    pub.stop()
    assert rec.kinds() == ["Started", "Sent", "Sent", "Sent", "Stopped"]
    assert rec.events[0] == Started("svc.a")
    assert rec.events[-1] == Stopped("svc.a")
    sent = [e for e in rec.events if isinstance(e, Sent)]
    assert [e.seq for e in sent] == [1, 2, 3]
    assert [e.at for e in sent] == [b.sent_at for b in rig.beats()]
    assert all(e.topic == "svc.a" for e in sent)


def test_pause_and_resume(rig: Rig) -> None:
    pub = rig.make("svc.a").start()
    rig.step(0.0)
    pub.pause()
    pub.pause()  # idempotent
    assert pub.paused and pub.running and pub.next_beat is None
    rig.step(1.0, times=3)
    assert pub.sent == 1
    pub.resume()  # a beat at once, then every period from now
    pub.resume()
    assert not pub.paused
    rig.step(0.0)
    assert pub.sent == 2
    assert pub.next_beat == 4.0
    rig.step(1.0)
    assert pub.sent == 3
    assert [b.seq for b in rig.beats()] == [1, 2, 3]
    pub.stop()
    pub.resume()  # nothing to resume once stopped
    assert not pub.running


def test_start_and_stop_are_idempotent_and_restart_works(rig: Rig) -> None:
    rec = Recorder()
    pub = rig.make("svc.a", listeners=[rec])
    pub.stop()  # never started: nothing happens
    assert pub.start() is pub
    assert pub.start() is pub
    rig.step(0.0)
    pub.stop()
    pub.stop()
    assert not pub.running
    rig.step(1.0, times=2)
    assert pub.sent == 1
    pub.start()  # again, same boot id, seq goes on
    rig.step(0.0)
    pub.stop()
    assert [b.seq for b in rig.beats()] == [1, 2]
    assert len({b.boot_id for b in rig.beats()}) == 1
    assert rec.kinds() == ["Started", "Sent", "Stopped", "Started", "Sent", "Stopped"]


def test_context_manager_and_repr(rig: Rig) -> None:
    with rig.make("svc.ctx", 2.0) as pub:
        assert pub.running
        rig.step(0.0)
        assert "svc.ctx" in repr(pub) and "running" in repr(pub) and "sent=1" in repr(pub)
    assert not pub.running
    assert "stopped" in repr(pub)


def test_two_publishers_with_the_same_key_reused(rig: Rig) -> None:
    a = rig.make("svc.a").start()
    rig.step(0.0)
    a.stop()
    b = rig.make("svc.b").start()  # takes a's executor key
    rig.step(0.0)
    rig.step(1.0, times=2)
    assert (a.sent, b.sent) == (1, 3)
    assert [m.destination for m in rig.messages] == ["svc.a", "svc.b", "svc.b", "svc.b"]


def test_many_publishers_stay_in_deadline_order(rig: Rig) -> None:
    pubs = [rig.make(f"svc.{i}", period=1.0 + i / 10).start() for i in range(5)]
    rig.step(0.0)
    rig.step(0.5, times=8)  # t = 4.0
    expected = [1 + math.floor(4.0 / (1.0 + i / 10)) for i in range(5)]
    assert [p.sent for p in pubs] == expected


# -- payload, headers, signatures -----------------------------------------------------------


def test_payload_value_and_callable_evaluated_per_beat(rig: Rig) -> None:
    calls = iter(range(100))
    rig.make("svc.v", payload={"region": "eu"}).start()
    rig.make("svc.c", payload=lambda: {"n": next(calls)}).start()
    rig.step(0.0)
    rig.step(1.0, times=2)
    by_topic: dict[str, list[Any]] = {}
    for beat in rig.beats():
        by_topic.setdefault(beat.topic, []).append(beat.payload)
    assert by_topic == {"svc.v": [{"region": "eu"}] * 3, "svc.c": [{"n": 0}, {"n": 1}, {"n": 2}]}


def test_payload_failures_send_nothing_and_are_reported(rig: Rig) -> None:
    rec = Recorder()
    bad = iter([ValueError("no stats yet"), {"x": object()}, {"ok": 1}])

    def payload() -> Any:
        item = next(bad)
        if isinstance(item, Exception):
            raise item
        return item

    pub = rig.make("svc.p", payload=payload, listeners=[rec]).start()
    rig.step(0.0)
    rig.step(1.0, times=2)
    assert [e.reason for e in rec.exceptions()] == ["payload_failed", "encode_failed"]
    assert isinstance(rec.exceptions()[0].error, ValueError)
    assert "not JSON-serializable" in rec.exceptions()[1].detail
    assert [b.payload for b in rig.beats()] == [{"ok": 1}]
    assert rig.beats()[0].seq == 1  # nothing went on the wire before
    assert pub.stats()["other_failures"] == 2


def test_ttl_and_persistent_headers_reach_the_broker(rig: Rig) -> None:
    rig.make("svc.ttl", ttl=30.0, persistent=True).start()
    rig.make("svc.plain").start()
    rig.step(0.0)
    by_topic = {m.destination: m for m in rig.messages}
    headers = by_topic["svc.ttl"].headers
    assert headers["persistent"] == "true"
    sent_at = BeatCodec().decode(by_topic["svc.ttl"].body).sent_at
    assert sent_at is not None
    assert int(headers["expires"]) == int((sent_at + 30.0) * 1000)
    assert abs(int(headers["expires"]) / 1000 - (time.time() + 30.0)) < 60
    assert dict(by_topic["svc.plain"].headers) == {}


def test_signed_beats(rig: Rig) -> None:
    rig.make("svc.s", key="secret").start()
    rig.step(0.0)
    (beat,) = rig.beats(key=b"secret")
    assert beat.seq == 1
    with pytest.raises(DecodeError) as info:
        BeatCodec(b"other").decode(rig.messages[0].body)
    assert info.value.reason == "bad_signature"


# -- dependent publishers -------------------------------------------------------------------


def test_dependent_publisher_failing_check_sends_down_then_recovers(rig: Rig) -> None:
    state: dict[str, Any] = {"result": True}

    def dependency() -> Any:
        result = state["result"]
        if isinstance(result, Exception):
            raise result
        return result

    rec = Recorder()
    pub = rig.make("svc.dep", dependency=dependency, listeners=[rec]).start()
    rig.step(0.0)
    assert pub.sent == 1
    state["result"] = CheckFailed("tcp db:5432: Connection refused")
    rig.step(1.0)
    state["result"] = False
    rig.step(1.0)
    state["result"] = RuntimeError("driver bug")
    rig.step(1.0)
    assert (pub.sent, pub.stats()["down_sent"]) == (1, 3)  # a down beat for each failed check
    reports = rec.exceptions()
    assert [e.reason for e in reports] == ["check_failed"] * 3
    assert all(e.source == "svc.dep" for e in reports)
    assert reports[0].detail == "tcp db:5432: Connection refused"
    assert isinstance(reports[0].error, CheckFailed)
    assert reports[1].error is None and "returned False" in reports[1].detail
    assert isinstance(reports[2].error, RuntimeError) and "driver bug" in reports[2].detail
    state["result"] = None  # None means healthy
    rig.step(1.0)
    state["result"] = "ok"
    rig.step(1.0)
    assert pub.sent == 3
    beats = rig.beats()
    name = dependency.__qualname__
    assert [(b.seq, b.state, b.reason) for b in beats] == [
        (1, "up", None),
        (2, "down", "tcp db:5432: Connection refused"),  # a CheckFailed's own reason
        (3, "down", f"{name} returned False"),
        # Another exception's text stays local (it may hold a secret): its type only.
        (4, "down", f"{name}: RuntimeError"),
        (5, "up", None),
        (6, "up", None),
    ]
    assert all(b.payload is None for b in beats)
    assert pub.stats()["check_failures"] == 3
    assert pub.stats()["down_sent"] == 3
    assert rec.kinds() == ["Started", "Sent", *["ExceptionEvent"] * 3, "Sent", "Sent"]


def test_stock_check_as_dependency(rig: Rig, tmp_path: Any) -> None:
    marker = tmp_path / "ready"
    rec = Recorder()
    pub = rig.make("svc.file", dependency=checks.path(marker), listeners=[rec]).start()
    rig.step(0.0)
    assert pub.sent == 0
    assert rec.exceptions()[0].detail == f"path {str(marker)!r} does not exist"
    marker.write_text("")
    rig.step(1.0)
    assert pub.sent == 1


def test_a_slow_check_delays_only_its_own_publisher(rig: Rig) -> None:
    release = threading.Event()
    entered = threading.Event()

    def slow() -> bool:
        entered.set()
        return release.wait(10)

    slow_pub = rig.make("svc.slow", dependency=slow).start()
    fast_pub = rig.make("svc.fast").start()
    rig.clock.advance(0.0)
    assert entered.wait(5)
    deadline = time.monotonic() + 5
    while fast_pub.sent < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert (fast_pub.sent, slow_pub.sent) == (1, 0)  # the slow check is still running
    assert not rig.sched.drain(timeout=0.05)  # drain waits for blocking tasks too
    release.set()
    assert rig.sched.drain(timeout=5)
    assert (fast_pub.sent, slow_pub.sent) == (1, 1)
    rig.step(1.0)
    assert (fast_pub.sent, slow_pub.sent) == (2, 2)


def test_slow_checks_run_in_parallel_on_the_check_threads(rig: Rig) -> None:
    barrier = threading.Barrier(3, timeout=5)
    pubs = [rig.make(f"svc.b{i}", dependency=barrier.wait).start() for i in range(3)]
    rig.step(0.0)  # would time out (and fail the checks) if the checks ran one at a time
    assert [p.sent for p in pubs] == [1, 1, 1]
    assert rig.sched.stats()["check_threads"] >= 3


# -- send failures --------------------------------------------------------------------------


class FlakyBroker(MemoryBroker):
    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.timeouts: list[Any] = []

    def publish(self, topic: str, body: Any, headers: Any = None, *, timeout: Any = None) -> None:
        self.timeouts.append(timeout)
        if self.failing:
            raise ConnectionError("broker down")
        super().publish(topic, body, headers)


def test_send_failures_are_reported_and_the_schedule_goes_on() -> None:
    clock = hw.ManualClock()
    broker = FlakyBroker()
    got: list[Message] = []
    broker.subscribe(">", got.append)
    rec = Recorder()
    with HeartbeatPublisher(broker, "svc.f", 1.0, clock=clock, listeners=[rec]) as pub:
        sched = shared_executor(clock)
        assert sched.drain()
        broker.failing = True
        for _ in range(2):
            clock.advance(1.0)
            assert sched.drain()
        broker.failing = False
        clock.advance(1.0)
        assert sched.drain()
        assert pub.next_beat == 4.0
    assert pub.sent == 2
    assert pub.stats()["send_failures"] == 2
    failures = [e for e in rec.exceptions() if e.reason == "send_failed"]
    assert len(failures) == 2
    assert isinstance(failures[0].error, ConnectionError)
    assert "broker down" in failures[0].detail
    # Failed sends used seq numbers 2 and 3: the monitor sees the gap.
    assert [BeatCodec().decode(m.body).seq for m in got] == [1, 4]
    # A beat never waits for a reconnect: it would hold the shared scheduler thread.
    assert broker.timeouts == [0, 0, 0, 0]


def test_a_closed_broker_is_a_send_failure_not_a_crash() -> None:
    clock = hw.ManualClock()
    broker = MemoryBroker()
    rec = Recorder()
    with HeartbeatPublisher(broker, "svc.x", 1.0, clock=clock, listeners=[rec]) as pub:
        broker.close()
        clock.advance(0.0)
        assert shared_executor(clock).drain()
        clock.advance(1.0)
        assert shared_executor(clock).drain()
    assert pub.sent == 0
    assert [type(e.error) for e in rec.exceptions()] == [TransportClosed, TransportClosed]


# -- listeners ------------------------------------------------------------------------------


def test_listeners_added_and_removed_at_run_time_and_failing_ones_isolated(rig: Rig) -> None:
    class Boom(PublisherListener):
        def on_sent(self, event: Sent) -> None:
            raise RuntimeError("listener bug")

    rec = Recorder()
    pub = rig.make("svc.l").start()
    rig.step(0.0)
    pub.add_listener(rec)
    pub.add_listener(Boom())
    rig.step(1.0)
    assert pub.remove_listener(rec)
    assert not pub.remove_listener(rec)
    rig.step(1.0)
    assert pub.sent == 3  # the failing listener did not stop the beats
    kinds = rec.kinds()
    assert kinds[0] == "Sent"
    assert rec.exceptions()[0].reason == "listener_error"
    assert pub.stats()["listener_errors"] == 2


def test_non_listeners_are_rejected(rig: Rig) -> None:
    with pytest.raises(TypeError, match="PublisherListener"):
        rig.make("svc.a", listeners=[object()])
    with pytest.raises(TypeError, match="PublisherListener"):
        rig.make("svc.a", listeners=[SubscriberListener()])
    pub = rig.make("svc.a")
    with pytest.raises(TypeError, match="PublisherListener"):
        pub.add_listener(print)  # type: ignore[arg-type]


# -- arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"topic": "svc.*"}, ValueError, r"topic 'svc\.\*'"),
        ({"topic": "svc.>"}, ValueError, r"topic 'svc\.>'"),
        ({"topic": ""}, ValueError, "topic must not be empty"),
        ({"topic": "a b"}, ValueError, "topic 'a b'"),
        ({"topic": 5}, TypeError, "topic must be a str, got int 5"),
        ({"period": 0}, ValueError, "period must be a finite number of seconds >= 0.001, got 0"),
        ({"period": -1.0}, ValueError, "period must be a finite .* >= 0.001, got -1.0"),
        ({"period": math.nan}, ValueError, "period must be a finite .* >= 0.001, got nan"),
        ({"period": math.inf}, ValueError, "period must be a finite .* >= 0.001, got inf"),
        ({"period": 0.0001}, ValueError, "period must be a finite .* >= 0.001, got 0.0001"),
        ({"period": "1"}, TypeError, "period must be a number of seconds, got str '1'"),
        ({"period": True}, TypeError, "period must be a number of seconds, got bool"),
        ({"ttl": 0}, ValueError, "ttl must be a finite number of seconds > 0, got 0"),
        ({"ttl": math.nan}, ValueError, "ttl must be a finite number of seconds > 0, got nan"),
        ({"timeout": 0}, ValueError, "timeout must be a finite number of seconds > 0, got 0"),
        ({"timeout": math.inf}, ValueError, "timeout must be a finite .* > 0, got inf"),
        ({"timeout": "1"}, TypeError, "timeout must be a number of seconds, got str '1'"),
        ({"persistent": "yes"}, TypeError, "persistent must be a bool, got str"),
        ({"dependency": "db:5432"}, TypeError, "dependency must be callable or None, got str"),
        ({"payload": {"x": {1, 2}}}, ValueError, "payload must be JSON-serializable"),
        ({"payload": math.nan}, ValueError, "payload must be JSON-serializable, got nan"),
        ({"key": b""}, ValueError, "key must not be empty"),
        ({"clock": 1.0}, TypeError, "clock must be a ManualClock or None, got float"),
        ({"broker": "memory://"}, TypeError, "broker must be a transport with a publish method"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(
    kwargs: dict[str, Any], error: type, match: str
) -> None:
    args: dict[str, Any] = {"broker": MemoryBroker(), "topic": "svc.a", **kwargs}
    with pytest.raises(error, match=match):
        HeartbeatPublisher(**args)


# -- the real clock -------------------------------------------------------------------------


def _wait_until(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_real_clock_publisher_sends_every_period() -> None:
    broker = MemoryBroker()
    got: list[Message] = []
    broker.subscribe("svc.real", got.append)
    rec = Recorder()
    start = time.monotonic()
    with HeartbeatPublisher(broker, "svc.real", 0.05, listeners=[rec]) as pub:
        assert _wait_until(lambda: pub.sent >= 3, timeout=5.0), f"only {pub.sent} beats in 5 s"
        elapsed = time.monotonic() - start
    assert elapsed >= 0.1 - 0.02  # three beats need two periods
    seqs = [BeatCodec().decode(m.body).seq for m in got]
    assert seqs == list(range(1, len(seqs) + 1))
    # stop() joins no thread: an on_stopped queued behind a delivery under way on a check
    # thread reaches the listener just after (seen under load)
    assert _wait_until(lambda: rec.kinds()[-1] == "Stopped", timeout=5.0), rec.kinds()
    assert rec.kinds()[0] == "Started" and rec.kinds().count("Stopped") == 1


def test_real_clock_dependent_publisher_runs_its_check_off_the_scheduler_thread() -> None:
    broker = MemoryBroker()
    threads: set[str] = set()

    def check() -> bool:
        threads.add(threading.current_thread().name)
        return True

    with HeartbeatPublisher(broker, "svc.dep", 0.02, dependency=check) as pub:
        assert _wait_until(lambda: pub.sent >= 3, timeout=5.0)
    assert threads and all("-check-" in name for name in threads)


# -- scale ----------------------------------------------------------------------------------


def test_ten_thousand_publishers_use_a_handful_of_threads() -> None:
    clock = hw.ManualClock()
    broker = MemoryBroker()
    counts = {"n": 0}

    def count(message: Message) -> None:
        counts["n"] += 1

    broker.subscribe("fleet.>", count)
    before = threading.active_count()
    pubs = [HeartbeatPublisher(broker, f"fleet.{i}", 1.0, clock=clock) for i in range(10_000)]
    sched = shared_executor(clock)
    try:
        for pub in pubs:
            pub.start()
        assert sched.drain(timeout=60)
        assert counts["n"] == 10_000
        assert threading.active_count() <= before + 2
        for _ in range(2):
            clock.advance(1.0)
            assert sched.drain(timeout=60)
        assert counts["n"] == 30_000
        assert {p.seq for p in pubs} == {3}
        assert sched.stats()["tasks"] == 10_000
        assert threading.active_count() <= before + 2
    finally:
        for pub in pubs:
            pub.stop()
    assert sched.stats()["tasks"] == 0


def test_real_clock_thousands_of_publishers_share_one_thread() -> None:
    broker = MemoryBroker()
    before = threading.active_count()
    pubs = [HeartbeatPublisher(broker, f"many.{i}", 0.2) for i in range(3000)]
    try:
        for pub in pubs:
            pub.start()
        assert _wait_until(lambda: min(p.sent for p in pubs) >= 2, timeout=20.0)
        assert threading.active_count() <= before + 2
    finally:
        for pub in pubs:
            pub.stop()


# -- shutdown -------------------------------------------------------------------------------


def test_the_exit_hook_stops_running_publishers(rig: Rig) -> None:
    rec = Recorder()
    running = rig.make("svc.run", listeners=[rec]).start()
    stopped = rig.make("svc.stopped")
    publisher_module._running.stop_all()  # what the exit hook runs for publishers
    assert not running.running and not stopped.running
    assert rig.sched.drain()  # events queued behind a delivery under way come after stop()
    kinds = rec.kinds()  # the first beat is due at once and may have gone out
    assert kinds in (["Started", "Stopped"], ["Started", "Sent", "Stopped"])


def test_at_interpreter_exit_running_publishers_are_stopped() -> None:
    script = textwrap.dedent(
        """
        import time
        from heartwire.listeners import PublisherListener
        from heartwire.publisher import HeartbeatPublisher
        from heartwire.transport import connect

        class L(PublisherListener):
            def on_stopped(self, event):
                print("stopped", event.source, flush=True)

        pub = HeartbeatPublisher(connect(), "svc.exit", 0.01, listeners=[L()]).start()
        while pub.sent < 2:
            time.sleep(0.01)
        print("sent", pub.sent >= 2, flush=True)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["sent True", "stopped svc.exit"]


def test_executor_rejects_drain_from_its_own_thread_and_bad_arguments() -> None:
    clock = hw.ManualClock()
    sched = PublisherExecutor(clock)
    errors: list[BaseException] = []

    def task(deadline: float) -> None:
        try:
            sched.drain()
        except RuntimeError as exc:
            errors.append(exc)

    key = sched.add(task)
    sched.schedule(key, 0.0)
    assert sched.drain()
    assert "wait for itself" in str(errors[0])
    sched.remove(key)
    sched.remove(key)  # idempotent
    with pytest.raises(KeyError):
        sched.schedule(key, 1.0)
    with pytest.raises(TypeError, match="clock must be a ManualClock or None"):
        PublisherExecutor(clock=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="check_threads must be >= 1, got 0"):
        PublisherExecutor(check_threads=0)
    sched.close()
    sched.close()
    with pytest.raises(RuntimeError, match="closed"):
        sched.add(task)


def test_a_raising_task_is_logged_and_the_executor_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = hw.ManualClock()
    sched = PublisherExecutor(clock)
    ran: list[float] = []

    def bad(deadline: float) -> None:
        raise RuntimeError("task bug")

    bad_key = sched.add(bad)
    good_key = sched.add(ran.append)
    sched.schedule(bad_key, 0.0)
    sched.schedule(good_key, 0.5)
    clock.advance(1.0)
    assert sched.drain()
    assert ran == [0.5]
    assert sched.stats()["errors"] == 1
    assert "task bug" in caplog.text
    sched.close()


def test_beats_decode_as_json_with_every_field(rig: Rig) -> None:
    rig.make("svc.j", 2.5, payload=[1, "two"]).start()
    rig.step(0.0)
    obj = json.loads(rig.messages[0].body)
    assert obj["v"] == 1 and obj["topic"] == "svc.j" and obj["seq"] == 1
    assert obj["period"] == 2.5 and obj["payload"] == [1, "two"]
    assert isinstance(obj["boot"], str) and isinstance(obj["sent"], float)


# -- hung checks and slow payloads (issue 14, items 16 and 17) ------------------------------


class SilentServer:
    """A real TCP server that accepts connections and never says a word (a database whose
    driver, with no connect timeout, waits for the server's greeting forever)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.address = self._listener.getsockname()
        self.conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.conns.append(conn)

    def driver_connect(self) -> socket.socket:
        """Like a driver's connect() with no timeout: blocks until the server greets."""
        conn = socket.create_connection(self.address)
        if not conn.recv(1):
            conn.close()
            raise ConnectionError("server closed the connection")
        return conn

    def accepted(self) -> int:
        with self._lock:
            return len(self.conns)

    def close(self) -> None:
        """Close every connection: the hung drivers' recv() returns, their threads end."""
        self._listener.close()
        with self._lock:
            for conn in self.conns:
                conn.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    srv = SilentServer()
    yield srv
    srv.close()


def test_four_hung_checks_do_not_silence_a_healthy_dependent_publisher(
    silent_server: SilentServer,
) -> None:
    broker = MemoryBroker()
    recs = [Recorder() for _ in range(4)]
    hung = [
        HeartbeatPublisher(
            broker,
            f"svc.hung{i}",
            0.1,
            dependency=checks.sql(silent_server.driver_connect),
            listeners=[recs[i]],
        )
        for i in range(4)
    ]
    ok = HeartbeatPublisher(broker, "svc.ok", 0.1, dependency=lambda: True)
    try:
        for pub in hung:
            pub.start()
        assert _wait_until(lambda: silent_server.accepted() == 4, 5.0), "the 4 checks never hung"
        ok.start()
        started = time.monotonic()
        got = _wait_until(lambda: ok.sent >= 10, 1.5)
        assert got, f"healthy publisher sent {ok.sent} beats in 1.5 s (15 due) behind 4 hung checks"
        # Each hung check is a failed check, reason "timed out", and holds its one thread only:
        # its publisher starts no second check while the first is still running.
        assert _wait_until(lambda: all(r.exceptions() for r in recs), 2.0)
        for rec in recs:
            event = rec.exceptions()[0]
            assert event.reason == "check_failed" and "timed out" in event.detail, event
        assert silent_server.accepted() == 4
        assert [p.sent for p in hung] == [0, 0, 0, 0]
        stats = shared_executor().stats()
        assert stats["abandoned"] >= 4
        # Threads: one held by each hung check, the pool's 4, and the ones it may add while
        # jobs wait behind the hung ones (at most a check and an event delivery per publisher).
        assert stats["check_threads"] <= 4 + 4 + 2 * 5
        assert time.monotonic() - started < 5
    finally:
        for pub in (*hung, ok):
            pub.stop()


def test_hung_checks_past_their_limit_fail_and_never_delay_other_publishers(rig: Rig) -> None:
    gate = threading.Event()
    calls = {"n": 0}
    lock = threading.Lock()

    def hung() -> bool:
        with lock:
            calls["n"] += 1
        return gate.wait(20)

    recs = [Recorder() for _ in range(6)]  # more hung checks than the pool's 4 threads
    hung_pubs = [rig.make(f"svc.hung{i}", dependency=hung, listeners=[recs[i]]) for i in range(6)]
    ok = rig.make("svc.ok", dependency=lambda: True)
    try:
        for pub in hung_pubs:
            pub.start()
        ok.start()
        rig.clock.advance(0.0)
        assert _wait_until(lambda: ok.sent == 1, 5.0), f"ok sent {ok.sent} beats behind hung checks"
        assert _wait_until(lambda: calls["n"] == 6, 5.0), f"{calls['n']} of 6 checks started"
        assert not rig.sched.drain(timeout=0.05)  # hung checks within their limit: still due
        # The limit (here the period, 1 s) passes: each hung check is a failed check, once.
        rig.step(1.0)
        assert ok.sent == 2
        for rec in recs:
            assert [(e.reason, "timed out" in e.detail) for e in rec.exceptions()] == [
                ("check_failed", True)
            ]
        # Still hung at the next beat: another failed check, and no second check started.
        rig.step(1.0)
        assert ok.sent == 3 and calls["n"] == 6
        assert all(len(rec.exceptions()) == 2 for rec in recs)
        assert all(p.stats()["check_failures"] == 2 for p in hung_pubs)
        assert rig.sched.stats()["abandoned"] == 6
        assert rig.sched.stats()["check_threads"] <= 6 + 4 + 2 * 7  # (see the test above)
        # The hung checks return late: their results are stale and send nothing.
        gate.set()
        assert _wait_until(lambda: rig.sched.stats()["abandoned"] == 0, 5.0)
        assert [p.sent for p in hung_pubs] == [0] * 6
        rig.step(1.0)  # the next checks pass
        assert [p.sent for p in hung_pubs] == [1] * 6 and ok.sent == 4
    finally:
        gate.set()


def test_a_slow_payload_does_not_stall_plain_publishers(rig: Rig) -> None:
    gate = threading.Event()
    entered = threading.Event()

    def payload() -> dict[str, int]:
        entered.set()
        gate.wait(20)
        return {"x": 1}

    rec = Recorder()
    slow = rig.make("svc.slowpay", payload=payload, listeners=[rec])
    plain = rig.make("svc.plain")
    try:
        slow.start()
        plain.start()
        rig.clock.advance(0.0)
        assert entered.wait(5)
        assert _wait_until(lambda: plain.sent == 1, 2.0), "a slow payload stalled a plain publisher"
        rig.step(1.0)  # the payload's limit (the period) passes
        assert plain.sent == 2 and slow.sent == 0
        assert [(e.reason, "timed out" in e.detail) for e in rec.exceptions()] == [
            ("payload_failed", True)
        ]
        gate.set()
        assert _wait_until(lambda: rig.sched.stats()["abandoned"] == 0, 5.0)
        rig.step(1.0)
        assert (slow.sent, plain.sent) == (1, 3)
        assert rig.beats()[-1].payload == {"x": 1} or rig.beats()[-2].payload == {"x": 1}
    finally:
        gate.set()


def test_failure_details_name_user_callables_never_their_reprs(rig: Rig) -> None:
    # Issue 14, R4 F2: "timed out" and "returned False" details held repr(dependency) (or the
    # payload's): a partial's repr shows its arguments, a DSN with its password.
    import functools

    gate = threading.Event()

    def connect(dsn: str) -> bool:
        return gate.wait(20)

    class Secretive:
        def __call__(self) -> bool:
            return False

        def __repr__(self) -> str:
            return "Secretive(password='Hunter2')"

    rec = Recorder()
    dep = checks.sql(functools.partial(connect, "postgresql://app:Hunter2@db/prod"))
    hung = rig.make("svc.dsn", dependency=dep, timeout=0.25, listeners=[rec])
    false = rig.make("svc.false", dependency=Secretive(), listeners=[rec])
    pay = rig.make("svc.pay", payload=functools.partial(gate.wait, 20), timeout=0.25)
    pay.add_listener(rec)
    try:
        hung.start()
        false.start()
        pay.start()
        rig.clock.advance(0.0)
        rig.sched.drain(timeout=0.2)
        rig.step(0.25)
        details = sorted(e.detail for e in rec.exceptions())
        assert not [d for d in details if "Hunter2" in d or "0x" in d], details
        assert details == [
            "<test_failure_details_name_user_callables_never_their_reprs.<locals>.Secretive"
            " object> returned False",
            "Event.wait(...): timed out after 0.25 s",
            "sql(test_failure_details_name_user_callables_never_their_reprs.<locals>.connect(...)"
            ", 'SELECT 1'): timed out after 0.25 s",
        ]
    finally:
        gate.set()


def test_real_clock_a_hung_payload_does_not_stall_plain_publishers() -> None:
    broker = MemoryBroker()
    gate = threading.Event()
    slow = HeartbeatPublisher(broker, "svc.rslow", 0.05, payload=lambda: gate.wait(20))
    plain = HeartbeatPublisher(broker, "svc.rplain", 0.05)
    try:
        slow.start()
        plain.start()
        assert _wait_until(lambda: plain.sent >= 10, 2.0), f"plain sent {plain.sent} in 2 s"
        assert slow.sent == 0
    finally:
        gate.set()
        slow.stop()
        plain.stop()


def test_time_limit_defaults_and_an_explicit_limit(rig: Rig) -> None:
    assert rig.make("svc.t0").timeout == 1.0  # no slow work: the period
    assert rig.make("svc.t1", payload=dict).timeout == 1.0
    assert rig.make("svc.t2", dependency=checks.tcp("db", 5432, timeout=2.0)).timeout == 2.25
    assert rig.make("svc.t3", dependency=checks.tcp("db", 5432, timeout=0.1)).timeout == 1.0
    assert rig.make("svc.t4", dependency=bool, timeout=0.3).timeout == 0.3

    gate = threading.Event()
    rec = Recorder()
    pub = rig.make("svc.limit", dependency=lambda: gate.wait(20), timeout=0.25, listeners=[rec])
    try:
        pub.start()
        rig.clock.advance(0.0)
        assert not rig.sched.drain(timeout=0.05)
        rig.step(0.25)  # the limit, before the next beat is due
        assert [e.detail.split(": ", 1)[1] for e in rec.exceptions()] == ["timed out after 0.25 s"]
        assert isinstance(rec.exceptions()[0].error, CheckFailed)
        rig.step(0.75)  # the next beat: still running
        details = [e.detail.split(": ", 1)[1] for e in rec.exceptions()]
        assert details == ["timed out after 0.25 s", "timed out, still running after 1 s"]
        assert pub.sent == 0
    finally:
        gate.set()


class HangingListener(PublisherListener):
    """Records events; ``on_sent`` blocks until ``gate`` opens."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.events: list[Any] = []
        self.threads: set[str] = set()

    def on_started(self, event: Started) -> None:
        self.events.append(event)

    def on_stopped(self, event: Stopped) -> None:
        self.events.append(event)

    def on_sent(self, event: Sent) -> None:
        self.threads.add(threading.current_thread().name)
        self.gate.wait(20)
        self.events.append(event)


def test_a_hanging_listener_delays_only_its_own_publishers_events(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher_module, "EVENT_QUEUE", 3)
    gate = threading.Event()
    listener = HangingListener(gate)
    slow = rig.make("svc.heard", listeners=[listener])
    other = rig.make("svc.other", listeners=[Recorder()])
    try:
        slow.start()
        other.start()
        assert listener.events == [Started("svc.heard")]  # delivered by start() itself
        rig.clock.advance(0.0)
        assert _wait_until(lambda: other.sent == 1, 2.0), "a hanging listener stalled the others"
        for n in range(2, 7):  # the publisher itself goes on beating
            rig.clock.advance(1.0)
            assert _wait_until(lambda n=n: other.sent == slow.sent == n, 2.0)  # type: ignore[misc]
        assert slow.sent == 6 and other.sent == 6
        # 1 event being delivered (hung), 3 queued, the 2 oldest queued dropped.
        assert slow.stats()["events_dropped"] == 2
        slow.stop()  # queued behind the hung delivery: on_stopped comes last, in order
        assert listener.events == [Started("svc.heard")]
        gate.set()
        assert rig.sched.drain(timeout=5)
        assert [type(e).__name__ for e in listener.events] == ["Started", *["Sent"] * 3, "Stopped"]
        assert [e.seq for e in listener.events if isinstance(e, Sent)] == [1, 5, 6]  # 4 made room
        assert slow.stats()["events_dropped"] == 3
        assert all("-check-" in name for name in listener.threads)
    finally:
        gate.set()


def test_nothing_reaches_a_publisher_listener_after_on_stopped(rig: Rig) -> None:
    # A beat being sent on a check thread when stop() is called still emits on_sent after
    # on_stopped (the outbox kept them in that order, and emit("on_stopped") sealed nothing).
    inside = threading.Event()
    release = threading.Event()

    def hold(message: Message) -> None:  # the embedded broker delivers in the sending thread
        inside.set()
        release.wait(10.0)

    rig.broker.subscribe("svc.held", hold)
    rec = Recorder()
    pub = rig.make("svc.held", payload=lambda: {"n": 1}, listeners=[rec])  # beats on a thread
    pub.start()
    rig.clock.advance(0.0)
    assert inside.wait(5.0), "the first beat was never sent"
    pub.stop()  # the beat is still being sent
    release.set()
    assert rig.sched.drain(timeout=5.0)
    assert _wait_until(lambda: pub.sent == 1, 5.0)
    assert rec.kinds() == ["Started", "Stopped"], rec.kinds()
    assert pub._listeners.late == 1  # the late on_sent, refused and counted
    # A restart delivers again.
    pub.start()
    rig.clock.advance(0.0)
    assert _wait_until(lambda: rec.kinds()[-1] == "Sent", 5.0), rec.kinds()
    pub.stop()
    assert rec.kinds() == ["Started", "Stopped", "Started", "Sent", "Stopped"]


def test_a_full_event_queue_drops_connection_events_before_started_or_stopped(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 14, review R6: connection events share the outbox; a queue holding only them and
    # lifecycle events fell back to dropping its oldest entry: the restart's on_stopped and
    # on_started (a flapping link while one listener is slow).
    monkeypatch.setattr(publisher_module, "EVENT_QUEUE", 4)
    gate = threading.Event()
    inside = threading.Event()
    got: list[str] = []

    class SlowOnDisconnect(PublisherListener):
        def on_started(self, event: Started) -> None:
            got.append("started")

        def on_stopped(self, event: Stopped) -> None:
            got.append("stopped")

        def on_disconnected(self, event: Any) -> None:
            got.append(f"disconnected {event.reason}")
            inside.set()
            gate.wait(10.0)

    pub = rig.make("svc.flap", listeners=[SlowOnDisconnect()])
    try:
        pub.start()
        pub._connection_event("on_disconnected", hw.Disconnected("stomp://h:1", "0"))
        assert inside.wait(5.0), "the first on_disconnected was never delivered"
        pub.stop()
        pub.start()  # queued behind the slow call: stopped, started
        for n in range(1, 6):  # a flapping link fills the rest of the queue, and more
            pub._connection_event("on_disconnected", hw.Disconnected("stomp://h:1", str(n)))
        gate.set()
        pub.stop()
        assert rig.sched.drain(timeout=5.0)
        assert _wait_until(lambda: got[-1:] == ["stopped"], 5.0), got
        # The restart's pair survives the flood; the oldest connection events made room (1-3
        # for 3-5, then 4 for the final on_stopped).
        assert got == [
            "started",
            "disconnected 0",
            "stopped",
            "started",
            "disconnected 5",
            "stopped",
        ]
        assert pub.stats()["events_dropped"] == 4
    finally:
        gate.set()


def test_a_full_event_queue_drops_beats_events_never_started_or_stopped(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 14, R4 F6: drop-oldest took on_stopped and on_started (the oldest entries after a
    # stop/start behind a slow listener) before any on_sent.
    monkeypatch.setattr(publisher_module, "EVENT_QUEUE", 3)
    gate = threading.Event()
    listener = HangingListener(gate)
    pub = rig.make("svc.life", listeners=[listener])
    try:
        pub.start()
        rig.clock.advance(0.0)
        assert _wait_until(lambda: pub.sent == 1, 10.0)  # its on_sent hangs on a check thread
        pub.stop()
        pub.start()  # queued: Stopped, Started (the oldest entries)
        for n in range(2, 6):
            rig.clock.advance(1.0)
            assert _wait_until(lambda n=n: pub.sent == n, 10.0)  # type: ignore[misc]
        pub.stop()
        gate.set()
        assert rig.sched.drain(timeout=5)
        kinds = [type(e).__name__ for e in listener.events]
        # Queued behind Sent 1: Stopped, Started, then each Sent took the last room and was
        # dropped for the next one, the last for the final Stopped.
        assert kinds == ["Started", "Sent", "Stopped", "Started", "Stopped"], kinds
        assert pub.stats()["events_dropped"] == 4
    finally:
        gate.set()


@pytest.mark.usefixtures("brokers")
def test_a_publisher_listener_hung_in_on_disconnected_does_not_hold_the_transport() -> None:
    # Issue 14, R4 F1: on_disconnected / on_reconnected / reconnect_failed were called on the
    # STOMP failover thread before it reconnected, so one listener hung there kept the link
    # (every publisher on it) down, and they were unordered against the queued events.
    from tests.brokers import url, wait_for

    transport = hw.connect(
        url("activemq") + "?heartbeat=0&keepalive_interval=0&reconnect_interval=0.1"
    )
    gate = threading.Event()
    seen: list[tuple[str, str]] = []

    class Slow(PublisherListener):
        def on_disconnected(self, event: Any) -> None:
            seen.append(("disconnected", threading.current_thread().name))
            gate.wait(10)

        def on_reconnected(self, event: Any) -> None:
            seen.append(("reconnected", threading.current_thread().name))

    heard = HeartbeatPublisher(transport, "hw.test.slowconn", 0.05, listeners=[Slow()])
    other = HeartbeatPublisher(transport, "hw.test.otherconn", 0.05)
    try:
        heard.start()
        other.start()
        wait_for(lambda: other.sent >= 2, 5, "the first beats")
        link = transport.current_link
        link.abort("test: connection lost")
        lost = time.monotonic()
        wait_for(lambda: seen, 5, "on_disconnected")
        wait_for(
            lambda: transport.current_link not in (None, link) and transport.current_link.open,
            2,
            "a reconnect while a listener hangs in on_disconnected",
        )
        took = time.monotonic() - lost
        before = other.sent
        wait_for(lambda: other.sent >= before + 3, 2, "beats of the other publisher")
        assert took < 1.0, f"reconnected after {took:.2f} s"
        assert seen == [("disconnected", seen[0][1])] and "-check-" in seen[0][1], seen
        gate.set()
        wait_for(lambda: len(seen) == 2, 5, "on_reconnected, after on_disconnected returned")
        assert seen[1][0] == "reconnected" and "-check-" in seen[1][1], seen
    finally:
        gate.set()
        heard.stop()
        other.stop()
        transport.close()


def test_an_event_queued_once_the_executor_is_closed_is_delivered_not_stuck(rig: Rig) -> None:
    # Issue 14, R4 F5: submit() on a closed executor returns an abandoned job that never runs;
    # the outbox stayed "delivering" for good, so this publisher's listeners got nothing more
    # (on_stopped included), uncounted.
    class Connections(Recorder):
        def on_disconnected(self, event: Any) -> None:
            self._add(event)

    rec = Connections()
    pub = rig.make("svc.closed", listeners=[rec]).start()
    rig.step(0.0)  # the first beat (due at start) goes out before the close, not racing it
    rig.sched.close()  # (as at interpreter exit)
    pub._connection_event("on_disconnected", hw.Disconnected("stomp://h:1", "lost"))
    pub.stop()
    assert rec.kinds() == ["Started", "Sent", "Disconnected", "Stopped"]


# -- explicit failure: fail(reason) ---------------------------------------------------------


def test_fail_sends_one_down_beat_now_and_the_next_regular_beat_says_up(rig: Rig) -> None:
    rec = Recorder()
    pub = rig.make("svc.f", listeners=[rec]).start()
    rig.step(0.0)
    assert pub.fail("maintenance gone wrong") is True
    rig.step(1.0)
    beats = rig.beats()
    assert [(b.seq, b.state, b.reason) for b in beats] == [
        (1, "up", None),
        (2, "down", "maintenance gone wrong"),
        (3, "up", None),
    ]
    assert len({b.boot_id for b in beats}) == 1
    assert (pub.sent, pub.stats()["down_sent"]) == (2, 1)
    assert rec.kinds() == ["Started", "Sent", "Sent"]  # no on_sent for the down beat


def test_fail_works_unstarted_and_signs_with_the_key(rig: Rig) -> None:
    pub = rig.make("svc.k", key=b"k")
    assert pub.fail("x" * 256) is True
    [beat] = rig.beats(key=b"k")
    assert (beat.state, beat.reason, beat.seq) == ("down", "x" * 256, 1)


@pytest.mark.parametrize(
    ("reason", "error", "text"),
    [
        ("", ValueError, "reason must be 1 to 256 characters, got 0"),
        ("x" * 257, ValueError, "reason must be 1 to 256 characters, got 257"),
        (None, TypeError, "reason must be a str, got NoneType"),
        (b"db", TypeError, "reason must be a str, got bytes"),
    ],
)
def test_fail_refuses_a_bad_reason(rig: Rig, reason: Any, error: type, text: str) -> None:
    pub = rig.make("svc.b")
    with pytest.raises(error, match=re.escape(text)):
        pub.fail(reason)
    assert rig.messages == []


def test_a_check_reason_is_cut_to_the_bound(rig: Rig) -> None:
    def dependency() -> bool:
        raise CheckFailed("é" * 300)

    rig.make("svc.long", dependency=dependency).start()
    rig.step(0.0)
    [beat] = rig.beats()
    assert beat.state == "down" and beat.reason == "é" * 253 + "..."
