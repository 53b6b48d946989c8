"""The native core, for driving the detector directly.

:class:`~heartwire.HeartbeatMonitor` and :class:`~heartwire.HeartbeatPublisher` are built on
these types; use them yourself when beats come from elsewhere than a broker (a batch of ids, a
log, a simulation) or when you want the detector's raw events::

    from heartwire import core

    clock = core.ManualClock()                    # or no clock: the real one and a driver thread
    det = core.Detector(clock=clock, period=1.0, allowed_misses=2)
    events = det.subscribe(capacity=65536)        # an EventQueue; overflow="coalesce" by default
    det.add("prices.feed")
    det.beat("prices.feed")
    clock.advance(2.5)                            # every event due by now has been produced
    for ev in events.try_pop():                   # Event(kind, topic, missed, at, ...)
        print(ev.kind, ev.topic, ev.missed, ev.at)
    core.Dispatcher(events, print).start()        # or hand batches to a thread of their own

What is here:

- :class:`Detector`: topics, beats (by name, by handle, in batches) and missed periods on the
  timer wheel; :class:`Phi` configures a topic's phi-accrual mode; :class:`TopicStatus` is the
  detector's snapshot of one topic (the monitor's own is :class:`heartwire.TopicStatus`).
- :class:`EventQueue`: a bounded queue of :class:`Event` objects (or columnar
  :class:`EventBatch` es) for one consumer, with its overflow policy;
  :class:`Dispatcher` pops one on a thread of its own and hands the batches to a handler.
- :class:`ManualClock`: a clock that moves only when told (``advance``), for tests and
  simulations; it drives detectors and deadline queues alike (also :class:`heartwire.ManualClock`).
- :class:`DeadlineQueue`: deadlines per integer key on the timer wheel; it runs nothing itself
  (the publishers' executor, :mod:`heartwire.executor`, keeps its tasks' deadlines in one).
- :class:`DedupWindow`: the last ``capacity`` distinct message ids (reliable consumers' window).
- The Spark kernels over Arrow arrays (:mod:`heartwire.spark` calls them):
  :func:`freshness_kernel`, :func:`outages_kernel`, :func:`availability_kernel`,
  :func:`partition_kernel`.
- :data:`MAX_TOPICS` and :data:`MAX_NAME_LEN`: the detector's limits.

Each type's docstring (and ``heartwire/_core.pyi``) gives its arguments and semantics;
``docs/concepts.md`` the detector's rules. The rest of :mod:`heartwire._core` (the native intake,
frame reader and decoder) is the monitor's plumbing and not meant to be used on its own.
"""

from heartwire._core import (
    MAX_NAME_LEN,
    MAX_TOPICS,
    DeadlineQueue,
    DedupWindow,
    Detector,
    Event,
    EventBatch,
    EventQueue,
    ManualClock,
    Phi,
    TopicStatus,
    availability_kernel,
    freshness_kernel,
    outages_kernel,
    partition_kernel,
)
from heartwire.dispatch import Dispatcher

__all__ = [
    "MAX_NAME_LEN",
    "MAX_TOPICS",
    "DeadlineQueue",
    "DedupWindow",
    "Detector",
    "Dispatcher",
    "Event",
    "EventBatch",
    "EventQueue",
    "ManualClock",
    "Phi",
    "TopicStatus",
    "availability_kernel",
    "freshness_kernel",
    "outages_kernel",
    "partition_kernel",
]
