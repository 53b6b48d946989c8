"""What a monitor counts for its Prometheus export beyond the core's counters: topics grouped
by the first segments of their names (a bounded number of groups), ``failed`` and ``resumed``
events by group, and the downtime histogram (from ``resumed`` events) by group.

:class:`EventTally` is fed each batch the monitor's event feed delivers (on the dispatch
thread, a batch at a time, aggregated by prefix in the core: no Python step per beat or per
event). :mod:`heartwire.metrics` reads it at each scrape.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from heartwire import _validate

if TYPE_CHECKING:
    from heartwire._core import EventBatch as CoreBatch

__all__ = ["DOWNTIME_BOUNDS", "OTHER", "EventTally", "Groups"]

#: The ``group`` label of every prefix past a monitor's ``max_groups``.
OTHER = "other"

#: Upper bounds (seconds, inclusive) of the downtime histogram's buckets; ``+Inf`` follows.
DOWNTIME_BOUNDS: tuple[float, ...] = (
    1.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
    86400.0,
)


def prefix(topic: str, depth: int) -> str:
    """The first ``depth`` ``.``-separated segments of ``topic`` (all of it if it has fewer),
    as the core's ``Detector.counts_by_prefix`` cuts them."""
    return ".".join(topic.split(".", depth)[:depth])


class Groups:
    """Topic name -> ``group`` label: the first ``depth`` segments of the name, the first
    ``max_groups`` such prefixes seen keeping their own label and every later one
    :data:`OTHER`, so a label never takes more than ``max_groups + 1`` values whatever the
    topics. A prefix keeps its label once given (series stay stable across scrapes); prefixes
    first seen together (at one scrape) are taken in name order. Thread-safe.

    Only the prefixes with a label of their own are remembered (at most ``max_groups``): the
    others are :data:`OTHER` by being absent, so memory stays bounded whatever prefixes come
    and go."""

    def __init__(self, depth: int = 1, max_groups: int = 100) -> None:
        self.depth: int = _validate.count(depth, "group_depth", 1)
        self.max_groups: int = _validate.count(max_groups, "max_groups", 0)
        self._own: set[str] = set()  # prefixes with a label of their own, never more
        self._lock = threading.Lock()

    def label(self, prefix: str) -> str:
        """The label of a prefix (given one of its own now if it is new and there is room)."""
        own = self._own
        # Read without the lock: a prefix is added to the set (under the lock) and never
        # taken out, so "in" and "full" once true stay true.
        if prefix in own:
            return prefix
        if len(own) >= self.max_groups:
            return OTHER
        with self._lock:
            if prefix in own:
                return prefix
            if len(own) < self.max_groups:
                own.add(prefix)
                return prefix
            return OTHER

    def owns(self, prefix: str) -> bool:
        """Whether ``prefix`` has a label of its own (given by :meth:`label`)."""
        return prefix in self._own

    def of(self, topic: str) -> str:
        """The label of ``topic``'s group."""
        return self.label(prefix(topic, self.depth))


class EventTally:
    """``failed`` and ``resumed`` events and the downtime of each outage, by group, as the
    monitor's feed delivered them (what listeners see: with the ``"coalesce"`` or a drop
    overflow policy, events the queue let go are not here; the core's totals,
    ``stats()["failed"]``, count every one)."""

    def __init__(self, groups: Groups) -> None:
        self.groups = groups
        self._lock = threading.Lock()
        self._failed: dict[str, int] = {}
        self._resumed: dict[str, int] = {}
        # group -> per-bucket counts (not cumulative, +Inf last) and the sum of downtimes
        self._downtime: dict[str, tuple[list[int], list[float]]] = {}

    def add(self, batch: CoreBatch) -> None:
        """Count a batch of core events (the dispatch thread, after each delivered batch).
        Aggregated by prefix in the core (``EventBatch.outages_by_prefix``): the Python work
        is per prefix in the batch, not per event, so a million topics failing at once cost
        one native pass."""
        by_prefix = batch.outages_by_prefix(self.groups.depth, DOWNTIME_BOUNDS)
        if not by_prefix:
            return
        label = self.groups.label
        with self._lock:
            failed, resumed, hist = self._failed, self._resumed, self._downtime
            for prefix in sorted(by_prefix):  # new groups labelled in name order
                n_failed, n_resumed, buckets, total = by_prefix[prefix]
                group = label(prefix)
                if n_failed:
                    failed[group] = failed.get(group, 0) + n_failed
                if n_resumed:
                    resumed[group] = resumed.get(group, 0) + n_resumed
                    entry = hist.get(group)
                    if entry is None:
                        entry = hist[group] = ([0] * (len(DOWNTIME_BOUNDS) + 1), [0.0])
                    counts = entry[0]
                    for i, n in enumerate(buckets):
                        counts[i] += n
                    entry[1][0] += total

    def snapshot(
        self,
    ) -> tuple[dict[str, int], dict[str, int], dict[str, tuple[list[int], float]]]:
        """``(failed, resumed, downtime)`` by group; downtime: ``(per-bucket counts with +Inf
        last, sum of seconds)``. Copies, taken under the tally's lock."""
        with self._lock:
            return (
                dict(self._failed),
                dict(self._resumed),
                {g: (list(c), s[0]) for g, (c, s) in self._downtime.items()},
            )
