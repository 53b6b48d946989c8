"""Listener base classes and ListenerSet: type checks, error isolation, coroutines."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from heartwire.events import (
    ExceptionEvent,
    Failed,
    Received,
    Sent,
    Started,
    State,
    Stopped,
    TopicStatus,
)
from heartwire.listeners import ListenerSet, PublisherListener, SubscriberListener


class Recorder(SubscriberListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def on_failed(self, event: Failed) -> None:
        self.calls.append(("failed", event))

    def on_exception(self, event: ExceptionEvent) -> None:
        self.calls.append(("exception", event))


class Boom(SubscriberListener):
    def on_failed(self, event: Failed) -> None:
        raise RuntimeError("boom")


FAILED = Failed("svc.a", 1, 1.0, 1.0)


def test_events_are_frozen() -> None:
    ev = Received("svc.a", 3, 0.01, 2.0)
    with pytest.raises(AttributeError):
        ev.seq = 4  # type: ignore[misc]
    assert ev == Received("svc.a", 3, 0.01, 2.0)
    assert ExceptionEvent("m", "bad_json", None).detail == ""


def test_state_values_are_the_core_strings() -> None:
    assert [s.value for s in State] == [
        "PENDING",
        "ALIVE",
        "FAILED",
        "PAUSED",
        "STOPPED",
        "REMOVED",
    ]
    assert State("ALIVE") is State.ALIVE
    assert State.ALIVE == "ALIVE"
    assert str(State.FAILED) == "FAILED"


def test_topic_status_from_core() -> None:
    import heartwire as hw

    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock)
    det.add("svc.a", period=0.5)
    clock.advance(0.6)
    st = TopicStatus.from_core(det.status("svc.a"))
    assert st.topic == "svc.a"
    assert st.state is State.FAILED
    assert (st.missed, st.last_seen, st.period, st.allowed_misses) == (1, None, 0.5, 1)
    assert st.failed_since == pytest.approx(0.5)
    assert st.phi is None


@pytest.mark.parametrize("bad", [object(), Recorder, "listener", PublisherListener()])
def test_non_listener_is_a_type_error_naming_the_type(bad: object) -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    with pytest.raises(TypeError, match="SubscriberListener") as info:
        ls.add(bad)  # type: ignore[arg-type]
    assert type(bad).__qualname__ in str(info.value)
    assert len(ls) == 0


def test_emit_calls_every_listener_in_order() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    a, b = Recorder(), Recorder()
    ls.add(a)
    ls.add(b)
    ls.add(a)  # already there: no second registration
    assert len(ls) == 2
    ls.emit("on_failed", FAILED)
    ls.emit("on_resumed", FAILED)  # nobody overrides it: nothing happens
    assert a.calls == [("failed", FAILED)] == b.calls


def test_wants_reports_overridden_methods_only() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    assert not ls.wants("on_failed")
    ls.add(SubscriberListener())
    assert not ls.wants("on_failed")
    assert not ls.wants("on_received")
    r = Recorder()
    ls.add(r)
    assert ls.wants("on_failed")
    assert not ls.wants("on_received")

    class WantsReceived(SubscriberListener):
        async def on_received(self, event: Received) -> None:
            pass

    w = WantsReceived()
    ls.add(w)
    assert ls.wants("on_received")
    assert ls.remove(w)
    assert not ls.wants("on_received")


def test_raising_listener_does_not_stop_the_others_and_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    first, boom, last = Recorder(), Boom(), Recorder()
    for listener in (first, boom, last):
        ls.add(listener)
    with caplog.at_level(logging.ERROR, logger="heartwire.listeners"):
        ls.emit("on_failed", FAILED)  # never raises
    assert ls.errors == 1
    assert "Boom.on_failed" in caplog.text
    for r in (first, last):
        kinds = [k for k, _ in r.calls]
        assert "failed" in kinds
        [(_, report)] = [c for c in r.calls if c[0] == "exception"]
        assert isinstance(report, ExceptionEvent)
        assert (report.source, report.reason) == ("svc.>", "listener_error")
        assert isinstance(report.error, RuntimeError)
        assert "Boom.on_failed" in report.detail
    # the report went to listeners both before and after the failing one, in call order
    assert [k for k, _ in first.calls] == ["failed", "exception"]
    assert [k for k, _ in last.calls] == ["exception", "failed"]


def test_a_raising_on_exception_is_logged_but_does_not_cascade() -> None:
    class BadReporter(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            raise ValueError("first")

        def on_exception(self, event: ExceptionEvent) -> None:
            raise ValueError("second")

    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    a, b = BadReporter(), BadReporter()
    ls.add(a)
    ls.add(b)
    ls.emit("on_failed", FAILED)
    # a.on_failed, b.on_exception (report), b.on_failed, a.on_exception (report)
    assert ls.errors == 4


def test_remove_at_run_time_even_from_inside_a_listener() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    later = Recorder()

    class RemovesLater(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            ls.remove(later)

    ls.add(RemovesLater())
    ls.add(later)
    ls.emit("on_failed", FAILED)  # this emit already began with `later` in the set
    assert len(later.calls) == 1
    ls.emit("on_failed", FAILED)
    assert len(later.calls) == 1
    assert not ls.remove(later)
    assert later not in ls
    assert len(ls) == 1


def test_add_and_remove_from_other_threads_while_emitting() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    keep = Recorder()
    ls.add(keep)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            r = Recorder()
            ls.add(r)
            ls.remove(r)

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(2000):
            ls.emit("on_failed", FAILED)
    finally:
        stop.set()
        t.join()
    assert len(keep.calls) == 2000
    assert ls.listeners == [keep]


def test_coroutine_method_runs_on_the_loop_it_was_registered_from() -> None:
    ls: ListenerSet[PublisherListener] = ListenerSet(PublisherListener, "svc.a")
    seen: list[tuple[Sent, asyncio.AbstractEventLoop, int]] = []

    class Async(PublisherListener):
        async def on_sent(self, event: Sent) -> None:
            seen.append((event, asyncio.get_running_loop(), threading.get_ident()))

    async def main() -> tuple[asyncio.AbstractEventLoop, int]:
        loop = asyncio.get_running_loop()
        ls.add(Async())  # captures this loop
        ev = Sent("svc.a", 1, 123.0)
        t = threading.Thread(target=ls.emit, args=("on_sent", ev))  # emitted from another thread
        t.start()
        await asyncio.to_thread(t.join)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        return loop, threading.get_ident()

    loop, ident = asyncio.run(main())
    [(ev, ran_on, thread)] = seen
    assert ev == Sent("svc.a", 1, 123.0)
    assert ran_on is loop
    assert thread == ident


def test_coroutine_errors_are_reported_to_the_others() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    rec = Recorder()

    class AsyncBoom(SubscriberListener):
        async def on_failed(self, event: Failed) -> None:
            raise KeyError("async boom")

    async def main() -> None:
        ls.add(AsyncBoom())
        ls.add(rec)
        ls.emit("on_failed", FAILED)
        for _ in range(100):
            if any(k == "exception" for k, _ in rec.calls):
                return
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert ls.errors == 1
    [report] = [e for k, e in rec.calls if k == "exception"]
    assert isinstance(report, ExceptionEvent)
    assert report.reason == "listener_error"
    assert isinstance(report.error, KeyError)


def test_coroutine_method_without_a_loop_is_reported_as_an_error() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    rec = Recorder()

    class Async(SubscriberListener):
        async def on_failed(self, event: Failed) -> None:
            raise AssertionError("must not run")

    ls.add(Async())  # no loop running here
    ls.add(rec)
    ls.emit("on_failed", FAILED)
    assert ls.errors == 1
    [report] = [e for k, e in rec.calls if k == "exception"]
    assert isinstance(report, ExceptionEvent)
    assert "no event loop" in str(report.error)


def test_coroutine_method_on_an_explicit_loop() -> None:
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    done = threading.Event()
    where: list[asyncio.AbstractEventLoop] = []

    class Async(SubscriberListener):
        async def on_failed(self, event: Failed) -> None:
            where.append(asyncio.get_running_loop())
            done.set()

    try:
        ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
        ls.add(Async(), loop=loop)
        ls.emit("on_failed", FAILED)
        assert done.wait(5)
        assert where == [loop]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()


def test_listener_methods_set_on_the_instance_count_as_overrides() -> None:
    got: list[Started] = []
    listener = SubscriberListener()
    listener.on_started = got.append  # type: ignore[method-assign]
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    ls.add(listener)
    assert ls.wants("on_started")
    ls.emit("on_started", Started("svc.>"))
    assert got == [Started("svc.>")]


# -- emit_last with listeners called in the emitting thread (no queues) ----------------------


class InFlight(SubscriberListener):
    """Its first ``on_failed`` starts ``emit_last("on_stopped")`` on another thread and gives
    it ``wait`` seconds before returning: a call in flight while the last event is emitted."""

    def __init__(self, ls: ListenerSet[SubscriberListener], wait: float = 0.5) -> None:
        self.ls = ls
        self.wait = wait
        self.lock = threading.Lock()
        self.seen: list[str] = []
        self.stopper: threading.Thread | None = None

    def on_failed(self, event: Failed) -> None:
        if self.stopper is None:  # the first call only
            self.stopper = threading.Thread(
                target=self.ls.emit_last, args=("on_stopped", Stopped("svc.>")), daemon=True
            )
            self.stopper.start()
            self.stopper.join(self.wait)  # emit_last must wait for this call to end
        with self.lock:
            self.seen.append("failed")

    def on_stopped(self, event: Stopped) -> None:
        with self.lock:
            self.seen.append("stopped")


def test_emit_last_waits_for_a_call_in_flight_on_another_thread() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    listener = InFlight(ls)
    ls.add(listener)
    ls.emit("on_failed", FAILED)  # emit_last runs on another thread while this call is on
    assert listener.stopper is not None
    listener.stopper.join(5.0)
    assert not listener.stopper.is_alive(), "emit_last never returned"
    assert listener.seen == ["failed", "stopped"]
    ls.emit("on_failed", FAILED)  # after the last event: refused and counted
    assert listener.seen == ["failed", "stopped"] and ls.late == 1


def test_emit_last_whose_wait_times_out_hands_the_last_event_to_the_call_in_flight() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    listener = InFlight(ls, wait=5.0)
    ls.add(listener)
    original = ls.emit_last
    ls.emit_last = lambda m, e: original(m, e, timeout=0.0)  # type: ignore[method-assign]
    ls.emit("on_failed", FAILED)
    # emit_last did not wait: the emit in flight delivered on_stopped once its call ended.
    assert listener.seen == ["failed", "stopped"]
    ls.unseal()
    ls.emit("on_failed", FAILED)
    assert listener.seen == ["failed", "stopped", "failed"]


def test_a_listener_that_emits_the_last_event_from_its_own_call_does_not_wait_for_itself() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>")
    seen: list[str] = []

    class StopsItself(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            seen.append("failed")
            ls.emit_last("on_stopped", Stopped("svc.>"))

        def on_stopped(self, event: Stopped) -> None:
            seen.append("stopped")

    class After(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            seen.append("after.failed")

    ls.add(StopsItself())
    ls.add(After())
    done = threading.Thread(target=ls.emit, args=("on_failed", FAILED), daemon=True)
    done.start()
    done.join(5.0)
    assert not done.is_alive(), "emit_last from a listener's own call deadlocked"
    # The rest of that emit comes after on_stopped: refused, counted.
    assert seen == ["failed", "stopped"] and ls.late == 1
