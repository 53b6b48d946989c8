"""The event feed on its own (heartwire.feed.EventFeed), without a monitor around it."""

from __future__ import annotations

import threading
import time

import heartwire as hw
from heartwire.events import Failed, Received
from heartwire.feed import EventFeed
from heartwire.listeners import ListenerSet, SubscriberListener

WAIT = 5.0


class Seen(SubscriberListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []
        self.threads: set[str] = set()

    def on_failed(self, event: Failed) -> None:
        self.threads.add(threading.current_thread().name)
        self.events.append(("failed", event.topic, event.missed))


class WantsReceived(Seen):
    def on_received(self, event: Received) -> None:
        self.events.append(("received", event.topic, 0))


def _feed(
    listener: SubscriberListener, refusals: list[int]
) -> tuple[hw.ManualClock, hw.core.Detector, ListenerSet[SubscriberListener], EventFeed]:
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0, grace=0.0, max_local_pause=None)
    det.add("svc.a")
    listeners: ListenerSet[SubscriberListener] = ListenerSet(
        SubscriberListener, "svc.>", queue_size=None
    )
    listeners.add(listener)
    feed = EventFeed(
        det,
        listeners,
        pattern="svc.>",
        capacity=16,
        overflow="coalesce",
        wall_offset=0.0,
        after_batch=lambda: refusals.append(1),
    )
    return clock, det, listeners, feed


def test_events_reach_the_listeners_on_the_dispatch_thread_and_drain_waits_for_them() -> None:
    seen = Seen()
    after: list[int] = []
    clock, det, _, feed = _feed(seen, after)
    assert feed.current is None and feed.wanted() == (False, "coalesce")
    feed.sync()  # no feed open: nothing to switch
    assert feed.current is None
    feed.open()
    clock.advance(1.5)  # failed(svc.a, 1)
    clock.advance(1.0)  # failed(svc.a, 2)
    assert feed.drain(time.monotonic() + WAIT), "the dispatch thread did not deliver in time"
    assert seen.events == [("failed", "svc.a", 1), ("failed", "svc.a", 2)]
    assert seen.threads == {"heartwire-monitor[svc.>]"}
    assert not feed.dispatching  # not on the dispatch thread here
    assert after, "after_batch was not called after a delivered batch"
    stats = feed.stats()
    assert stats["dispatched"] == 2 and stats["dropped"] == 0
    assert stats["dispatch_queue_depth"] == 0 and stats["dispatch_errors"] == 0
    det.stop()
    chain = feed.detach()
    assert feed.current is None and len(chain) == 1
    feed.finish(chain, WAIT)
    assert chain[0].finished and chain[0].queue.closed
    assert chain[0].dispatcher is not None and not chain[0].dispatcher.alive


def test_sync_switches_the_feed_when_listeners_want_received_and_repeats_nothing() -> None:
    seen = Seen()
    clock, det, listeners, feed = _feed(seen, [])
    feed.open()
    first = feed.current
    assert first is not None and not first.received
    clock.advance(1.5)  # failed(svc.a, 1), on the first feed
    assert feed.drain(time.monotonic() + WAIT), "the first feed did not deliver in time"
    wants = WantsReceived()
    listeners.add(wants)
    feed.sync()
    second = feed.current
    assert second is not None and second is not first and second.received
    assert first.queue.closed
    feed.sync()  # nothing changed: no new switch
    assert feed.current is second
    det.beat("svc.a")
    assert feed.drain(time.monotonic() + WAIT), "the feeds did not deliver in time"
    assert seen.events == [("failed", "svc.a", 1)]
    assert wants.events == [("received", "svc.a", 0)]
    det.stop()
    feed.finish(feed.detach(), WAIT)
    assert feed.stats()["dropped"] == 0
