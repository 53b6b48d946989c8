"""AlertListener: a monitor's state changes as reliable JSON alerts.

::

    sender = hw.ReliableSender(broker, "/topic/heartwire.alerts")
    monitor.add_listener(hw.AlertListener(sender))

Every ``failed``, ``resumed``, ``local_pause``, ``lagging`` and ``caught_up`` event of the
monitor becomes one message
through ``sender`` (kept until the broker has it, re-sent across reconnections), so a consumer
with a durable subscription to the destination learns of a failure even if it was offline when
it happened. The body is a JSON object, its times on the wall clock (Unix seconds, and ISO 8601
in UTC), with the monitor's own clock reading beside them (exact for intervals; it means
nothing outside the monitor's host)::

    {"alert": "failed", "topic": "svc.a", "missed": 3,
     "since": 1795500012.0, "since_iso": "2026-11-24T06:40:12.000000Z", "since_monotonic": 12.0,
     "at": 1795500013.0, "at_iso": "2026-11-24T06:40:13.000000Z", "at_monotonic": 13.0,
     "source": "risk-monitor"}

(``resumed`` has ``downtime`` instead of ``since``; ``local_pause`` has ``duration`` and no
topic; ``lagging`` has ``lag``, ``caught_up`` ``duration`` and ``max_lag``, neither a topic).
Headers: ``content-type: application/json`` and ``hw-alert: <kind>``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from heartwire.events import CaughtUp, Failed, Lagging, LocalPause, Resumed, wall_fields
from heartwire.listeners import SubscriberListener

__all__ = ["AlertListener"]

log = logging.getLogger("heartwire.reliable")


class AlertListener(SubscriberListener):
    """A monitor listener publishing each state change through a reliable ``sender``;
    ``source`` (optional) names the monitor in every alert. ``published`` and ``failed`` count
    alerts sent and alerts that could not be handed to the sender (logged)."""

    def __init__(self, sender: Any, source: str = "") -> None:
        if not callable(getattr(sender, "send", None)):
            raise TypeError(f"sender must be a ReliableSender, got {type(sender).__name__}")
        self.sender = sender
        self.source = source
        self.published = 0
        self.failed = 0
        #: The message ids of the alerts sent, oldest first (the last 1000).
        self.message_ids: list[str] = []

    def on_failed(self, event: Failed) -> None:
        self._publish("failed", event)

    def on_resumed(self, event: Resumed) -> None:
        self._publish("resumed", event)

    def on_local_pause(self, event: LocalPause) -> None:
        self._publish("local_pause", event)

    def on_lagging(self, event: Lagging) -> None:
        self._publish("lagging", event)

    def on_caught_up(self, event: CaughtUp) -> None:
        self._publish("caught_up", event)

    def _publish(self, kind: str, event: Any) -> None:
        alert: dict[str, Any] = {"alert": kind, **wall_fields(event)}
        if self.source:
            alert["source"] = self.source
        body = json.dumps(alert, sort_keys=True)
        try:
            mid = self.sender.send(body, {"content-type": "application/json", "hw-alert": kind})
        except Exception:
            self.failed += 1
            log.exception("could not publish a %s alert", kind)
            return
        self.published += 1
        self.message_ids = [*self.message_ids[-999:], mid]
