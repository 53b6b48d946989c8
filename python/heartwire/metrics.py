"""Prometheus export of a monitor's :meth:`~heartwire.HeartbeatMonitor.metrics`.

Optional: needs ``prometheus_client`` (``pip install 'heartwire[metrics]'``), imported only when
:func:`serve` or :func:`collector` is called. Values are read from the monitor at each scrape::

    from heartwire.metrics import serve
    server = serve(mon, port=9464)   # http://host:9464/metrics
    ...
    server.close()

``heartwire watch --metrics-port PORT`` does the same from the command line. Every series has
the label ``pattern`` (the monitor's); see :data:`SERIES` for the names.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from heartwire import _validate

if TYPE_CHECKING:
    from heartwire.monitor import HeartbeatMonitor

__all__ = ["SERIES", "MetricsServer", "MetricsUnavailable", "collector", "require", "serve"]

#: Every exported series: name, type, help.
SERIES: dict[str, tuple[str, str]] = {
    "heartwire_topics": ("gauge", "Topics watched, by state"),
    "heartwire_max_topics": ("gauge", "Cap on topics (beats of new topics past it are refused)"),
    "heartwire_beats_total": ("counter", "Beats recorded"),
    "heartwire_learned_total": ("counter", "Topics learned from beats"),
    "heartwire_failed_total": ("counter", "Failed events produced"),
    "heartwire_resumed_total": ("counter", "Resumed events produced"),
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


def collector(monitor: HeartbeatMonitor) -> Any:
    """A ``prometheus_client`` collector reading ``monitor.metrics()`` at every scrape."""
    require()
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import Collector

    def family(name: str, labels: list[str]) -> Any:
        kind, doc = SERIES[name]
        if kind == "counter":
            return CounterMetricFamily(name.removesuffix("_total"), doc, labels=labels)
        return GaugeMetricFamily(name, doc, labels=labels)

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
            ):
                f = family(f"heartwire_{key}_total", ["pattern"])
                f.add_metric([p], m[key])
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


def serve(monitor: HeartbeatMonitor, port: int, addr: str = "0.0.0.0") -> MetricsServer:
    """Serve ``monitor``'s metrics at ``http://addr:port/metrics`` on a daemon thread (``port``
    0: any free port, see :attr:`MetricsServer.port`). Raises :class:`MetricsUnavailable`
    without ``prometheus_client``, ``OSError`` if the port is taken."""
    port = _validate.count(port, "port", 0, maximum=65535)
    prom = require()
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(collector(monitor))
    server, thread = prom.start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(server, thread)
