"""Prometheus export of a monitor's :meth:`~heartwire.HeartbeatMonitor.metrics`.

Optional: needs ``prometheus_client`` (``pip install 'heartwire[metrics]'``), imported only when
:func:`serve` or :func:`collector` is called. Values are read from the monitor at each scrape::

    from heartwire.metrics import serve
    server = serve(mon, port=9464)   # http://host:9464/metrics
    ...
    server.close()

``heartwire watch --metrics-port PORT`` does the same from the command line. Every series has
the label ``pattern`` (the monitor's); see :data:`SERIES` for the names and
``docs/prometheus.md`` for what each is for.

Cardinality stays bounded whatever the number of topics: the series that are always exported
are per monitor, or per ``group`` (the first ``group_depth`` segments of the topic names, at
most ``max_groups`` of them plus ``"other"``: the monitor's settings). Per-topic gauges
(``heartwire_topic_*{topic}``) come only with ``per_topic=True``, for at most
``max_topic_series`` topics (FAILED ones first, then by name); the topics left out are counted
in ``heartwire_topic_series_omitted`` and logged (throttled).
"""

from __future__ import annotations

import logging
import math
import threading
from typing import TYPE_CHECKING, Any

from heartwire import _validate
from heartwire._throttle import Throttle
from heartwire.tally import DOWNTIME_BOUNDS

if TYPE_CHECKING:
    from heartwire.monitor import HeartbeatMonitor

__all__ = [
    "DEFAULT_MAX_TOPIC_SERIES",
    "PER_TOPIC",
    "SERIES",
    "MetricsServer",
    "MetricsUnavailable",
    "collector",
    "require",
    "serve",
]

log = logging.getLogger("heartwire.metrics")

#: The default bound on topics given per-topic series (``per_topic=True``).
DEFAULT_MAX_TOPIC_SERIES = 1000

#: States exported by group (a removed topic is gone: never counted).
_STATES = ("PENDING", "ALIVE", "FAILED", "PAUSED", "STOPPED")

#: Every exported series: name, type, help.
SERIES: dict[str, tuple[str, str]] = {
    "heartwire_topics": ("gauge", "Topics watched, by state"),
    "heartwire_max_topics": ("gauge", "Cap on topics (beats of new topics past it are refused)"),
    "heartwire_beats_total": ("counter", "Beats recorded"),
    "heartwire_learned_total": ("counter", "Topics learned from beats"),
    "heartwire_failed_total": (
        "counter",
        "Failed events handed out (released ones included, those held back while flapping not)",
    ),
    "heartwire_resumed_total": (
        "counter",
        "Resumed events handed out (those held back while flapping not)",
    ),
    "heartwire_local_pauses_total": ("counter", "Pauses of the monitor itself"),
    "heartwire_lagging_total": ("counter", "Episodes of the monitor's intake lagging its feed"),
    "heartwire_ingest_lag_seconds": ("gauge", "How far the monitor's intake is behind its feed"),
    "heartwire_rejected_total": ("counter", "Beats refused, by reason"),
    "heartwire_dropped_total": ("counter", "Events lost to an overflow policy, by queue"),
    "heartwire_listener_errors_total": ("counter", "Listener calls that raised"),
    "heartwire_listener_late_total": ("counter", "Events refused as they came after on_stopped"),
    "heartwire_dispatch_errors_total": ("counter", "Dispatch batches that failed"),
    "heartwire_dispatch_queue_depth": ("gauge", "Detector events waiting for the dispatcher"),
    "heartwire_listener_queue_depth": ("gauge", "Events waiting in the listener queues"),
    "heartwire_disconnects_total": ("counter", "Broker connections lost"),
    "heartwire_reconnects_total": ("counter", "Broker reconnections"),
    # the alerting policy (silences, dependencies, flapping): per monitor, no topic label
    "heartwire_silenced_total": ("counter", "Failed and resumed events marked silenced"),
    "heartwire_suppressed_total": (
        "counter",
        "Failed and resumed events marked suppressed by a failed parent",
    ),
    "heartwire_released_total": (
        "counter",
        "Failed events held back, sent when a silence ended, a parent resumed, was paused or"
        " removed, or a flap settled; and the resumed sent when a flap settles up with its"
        " alert open",
    ),
    "heartwire_flapping_held_total": (
        "counter",
        "Failed and resumed events held back while their topic flapped (the resumed that"
        " started it too)",
    ),
    "heartwire_flapping_topics": ("gauge", "Topics flapping now"),
    # signed control messages (bounded labels: 2 ops, 8 reasons)
    "heartwire_control_messages_total": ("counter", "Signed control messages taken, by op"),
    "heartwire_control_refused_total": ("counter", "Control messages refused, by reason"),
    # by group (bounded: at most max_groups + 1 values of `group`)
    "heartwire_group_topics": ("gauge", "Topics watched, by group and state"),
    "heartwire_group_failed_total": ("counter", "Failed events delivered, by group"),
    "heartwire_group_resumed_total": ("counter", "Resumed events delivered, by group"),
    "heartwire_downtime_seconds": ("histogram", "Downtime of the outages that ended, by group"),
    "heartwire_groups_overflowed": (
        "gauge",
        'Prefixes of the topics watched now counted under group="other"',
    ),
    "heartwire_beat_interval_seconds": (
        "histogram",
        "Time between a topic's beat and its previous one",
    ),
    # the monitor's own health
    "heartwire_running": ("gauge", "1 while the monitor runs"),
    "heartwire_connected": ("gauge", "1 while the monitor's broker connection is up"),
    # not `heartwire_lagging`: it would clash with the counter heartwire_lagging_total (family
    # `heartwire_lagging` in OpenMetrics, whose parser refuses the clash)
    "heartwire_ingest_lagging": ("gauge", "1 while the monitor's intake lags its feed"),
    "heartwire_local_pause_seconds_total": ("counter", "Total length of the monitor's pauses"),
}

#: Per-topic series, exported only with ``per_topic=True``.
PER_TOPIC: dict[str, tuple[str, str]] = {
    "heartwire_topic_up": ("gauge", "0 while the topic is FAILED, else 1"),
    "heartwire_topic_last_beat_timestamp_seconds": (
        "gauge",
        "Unix time of the topic's last beat (absent if never heard)",
    ),
    "heartwire_topic_missed": ("gauge", "Consecutive periods the topic missed"),
    "heartwire_topic_series_omitted": (
        "gauge",
        "Topics left out of the per-topic series at this scrape (max_topic_series)",
    ),
}


class MetricsUnavailable(ImportError):
    """``prometheus_client`` is not installed."""


def require() -> Any:
    """The ``prometheus_client`` module; :class:`MetricsUnavailable` (saying what to install)
    if it is missing."""
    try:
        import prometheus_client
    except ImportError as exc:
        raise MetricsUnavailable(
            "Prometheus metrics need the prometheus_client package: "
            "pip install 'heartwire[metrics]' (or pip install prometheus_client)"
        ) from exc
    return prometheus_client


def collector(
    monitor: HeartbeatMonitor,
    *,
    per_topic: bool = False,
    max_topic_series: int = DEFAULT_MAX_TOPIC_SERIES,
) -> Any:
    """A ``prometheus_client`` collector reading ``monitor`` at every scrape. ``per_topic``:
    add the ``heartwire_topic_*{topic}`` gauges for at most ``max_topic_series`` topics."""
    if not isinstance(per_topic, bool):
        raise TypeError(f"per_topic must be a bool, got {type(per_topic).__name__}")
    max_topic_series = _validate.count(max_topic_series, "max_topic_series", 0)
    require()
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.registry import Collector
    from prometheus_client.utils import floatToGoString

    truncated = Throttle(log)

    def family(name: str, labels: list[str]) -> Any:
        kind, doc = SERIES[name] if name in SERIES else PER_TOPIC[name]
        if kind == "counter":
            return CounterMetricFamily(name.removesuffix("_total"), doc, labels=labels)
        if kind == "histogram":
            return HistogramMetricFamily(name, doc, labels=labels)
        return GaugeMetricFamily(name, doc, labels=labels)

    def buckets(bounds: Any, counts: list[int]) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs from per-bucket counts (``+Inf`` last)."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip([*bounds, math.inf], counts, strict=True):
            total += n
            out.append((floatToGoString(bound), total))
        return out

    def grouped(p: str) -> Any:
        groups = monitor.groups
        by_label: dict[str, list[int]] = {}
        by_prefix = monitor.detector.counts_by_prefix(groups.depth)
        for prefix, counts in by_prefix.items():  # by name: new groups labelled in name order
            acc = by_label.setdefault(groups.label(prefix), [0] * len(_STATES))
            for i in range(len(_STATES)):
                acc[i] += counts[i]
        topics = family("heartwire_group_topics", ["pattern", "group", "state"])
        for label in sorted(by_label):
            for state, n in zip(_STATES, by_label[label], strict=True):
                topics.add_metric([p, label, state], n)
        yield topics
        failed, resumed, downtime = monitor.tally.snapshot()
        for name, by_group in (
            ("heartwire_group_failed_total", failed),
            ("heartwire_group_resumed_total", resumed),
        ):
            f = family(name, ["pattern", "group"])
            for label in sorted(by_group):
                f.add_metric([p, label], by_group[label])
            yield f
        hist = family("heartwire_downtime_seconds", ["pattern", "group"])
        for label in sorted(downtime):
            per_bucket, total = downtime[label]
            hist.add_metric([p, label], buckets(DOWNTIME_BOUNDS, per_bucket), total)
        yield hist
        overflowed = family("heartwire_groups_overflowed", ["pattern"])
        overflowed.add_metric([p], sum(1 for prefix in by_prefix if not groups.owns(prefix)))
        yield overflowed

    def topics_series(p: str) -> Any:
        # FAILED topics first, then by name: an alert must not lose its series to the bound.
        # The core keeps only the chosen ones: a scrape costs O(max_topic_series) objects.
        statuses, total = monitor.series_topics(max_topic_series)
        omitted = max(0, total - len(statuses))
        if omitted:
            truncated(
                "metrics of %r: %d topics, per-topic series for max_topic_series=%d of them "
                "(FAILED first); %d left out",
                p,
                max_topic_series + omitted,
                max_topic_series,
                omitted,
            )
        # `group` too (no more series): inhibition rules can match a topic to its group.
        labels = ["pattern", "group", "topic"]
        up = family("heartwire_topic_up", labels)
        last = family("heartwire_topic_last_beat_timestamp_seconds", labels)
        missed = family("heartwire_topic_missed", labels)
        group_of = monitor.groups.of
        for s in sorted(statuses, key=lambda s: s.topic):
            values = [p, group_of(s.topic), s.topic]
            up.add_metric(values, 0 if s.state.name == "FAILED" else 1)
            seen = s.wall_last_seen
            if seen is not None:
                last.add_metric(values, seen)
            missed.add_metric(values, s.missed)
        yield up
        yield last
        yield missed
        left = family("heartwire_topic_series_omitted", ["pattern"])
        left.add_metric([p], omitted)
        yield left

    class MonitorCollector(Collector):
        def collect(self) -> Any:
            m = monitor.metrics()
            p = monitor.pattern
            topics = family("heartwire_topics", ["pattern", "state"])
            for state, n in sorted(m["states"].items()):
                topics.add_metric([p, state], n)
            yield topics
            if m["max_topics"] is not None:
                cap = family("heartwire_max_topics", ["pattern"])
                cap.add_metric([p], m["max_topics"])
                yield cap
            for key in (
                "beats",
                "learned",
                "failed",
                "resumed",
                "local_pauses",
                "lagging",
                "listener_errors",
                "listener_late",
                "dispatch_errors",
                "disconnects",
                "reconnects",
                "silenced",
                "suppressed",
                "released",
            ):
                f = family(f"heartwire_{key}_total", ["pattern"])
                f.add_metric([p], m[key])
                yield f
            held = family("heartwire_flapping_held_total", ["pattern"])
            held.add_metric([p], m["held"])
            yield held
            for name, label, by in (
                ("heartwire_control_messages_total", "op", m["control"]),
                ("heartwire_control_refused_total", "reason", m["control_refused"]),
            ):
                f = family(name, ["pattern", label])
                for key, n in sorted(by.items()):
                    f.add_metric([p, key], n)
                yield f
            rejected = family("heartwire_rejected_total", ["pattern", "reason"])
            for reason, n in sorted(m["rejected"].items()):
                rejected.add_metric([p, reason], n)
            yield rejected
            dropped = family("heartwire_dropped_total", ["pattern", "queue"])
            for where, n in sorted(m["dropped"].items()):
                dropped.add_metric([p, where], n)
            yield dropped
            for key in ("dispatch_queue_depth", "listener_queue_depth"):
                g = family(f"heartwire_{key}", ["pattern"])
                g.add_metric([p], m[key])
                yield g
            lag = family("heartwire_ingest_lag_seconds", ["pattern"])
            lag.add_metric([p], m["ingest_lag"])
            yield lag
            for name, value in (
                ("heartwire_running", m["running"]),
                ("heartwire_connected", m["connected"]),
                ("heartwire_ingest_lagging", m["lagging_now"]),
                ("heartwire_flapping_topics", m["flapping_now"]),
            ):
                g = family(name, ["pattern"])
                g.add_metric([p], int(value))
                yield g
            paused = family("heartwire_local_pause_seconds_total", ["pattern"])
            paused.add_metric([p], m["local_pause_seconds"])
            yield paused
            bounds, counts, total = monitor.detector.interval_histogram()
            interval = family("heartwire_beat_interval_seconds", ["pattern"])
            interval.add_metric([p], buckets(bounds, counts), total)
            yield interval
            yield from grouped(p)
            if per_topic:
                yield from topics_series(p)

    return MonitorCollector()


class MetricsServer:
    """An HTTP server answering ``/metrics``; :attr:`port` is the port it listens on."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.port: int = server.server_port

    def close(self) -> None:
        """Stop serving and free the port. Idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    monitor: HeartbeatMonitor,
    port: int,
    addr: str = "0.0.0.0",
    *,
    per_topic: bool = False,
    max_topic_series: int = DEFAULT_MAX_TOPIC_SERIES,
) -> MetricsServer:
    """Serve ``monitor``'s metrics at ``http://addr:port/metrics`` on a daemon thread (``port``
    0: any free port, see :attr:`MetricsServer.port`); ``per_topic``, ``max_topic_series`` as
    for :func:`collector`. Raises :class:`MetricsUnavailable` without ``prometheus_client``,
    ``OSError`` if the port is taken."""
    port = _validate.count(port, "port", 0, maximum=65535)
    prom = require()
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(collector(monitor, per_topic=per_topic, max_topic_series=max_topic_series))
    server, thread = prom.start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(server, thread)
