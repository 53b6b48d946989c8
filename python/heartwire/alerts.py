"""AlertListener: a monitor's state changes as reliable JSON alerts.

::

    sender = hw.ReliableSender(broker, "/topic/heartwire.alerts")
    monitor.add_listener(hw.AlertListener(sender))

Every ``failed``, ``resumed``, ``flapping``, ``local_pause``, ``lagging`` and ``caught_up``
event of the monitor becomes one message through ``sender`` (kept until the broker has it,
re-sent across reconnections), so a consumer with a durable subscription to the destination
learns of a failure even if it was offline when it happened. The body is a JSON object, its
times on the wall clock (Unix seconds, and ISO 8601 in UTC), with the monitor's own clock
reading beside them (exact for intervals; it means nothing outside the monitor's host)::

    {"alert": "failed", "topic": "svc.a", "missed": 3,
     "since": 1795500012.0, "since_iso": "2026-11-24T06:40:12.000000Z", "since_monotonic": 12.0,
     "at": 1795500013.0, "at_iso": "2026-11-24T06:40:13.000000Z", "at_monotonic": 13.0,
     "source": "risk-monitor"}

(``resumed`` has ``downtime`` instead of ``since``; ``flapping`` has ``flapping``, true when
the topic starts flapping and false when it settles, and ``count``; ``local_pause`` has
``duration`` and no topic; ``lagging`` has ``lag``, ``caught_up`` ``duration`` and
``max_lag``, neither a topic). Headers: ``content-type: application/json`` and
``hw-alert: <kind>``.

What is *not* published, by default: the ``failed`` and ``resumed`` events the alerting policy
marked, ``silenced`` (``mon.silence``) or ``suppressed_by`` a parent that is down
(``mon.depends``), as Alertmanager does not send silenced or inhibited alerts. Nothing is lost
by it: a topic still down when its silence ends or its parent resumes gets an unmarked
``failed`` then (published), and a ``resumed`` is marked as its outage was, so every published
``failed`` has its published ``resumed`` and no ``resumed`` comes for an outage never alerted.
``include_silenced=True`` / ``include_suppressed=True`` publish them too, marked in the body
(``"silenced": true``, ``"suppressed_by": "<parent>"``); ``flapping=False`` leaves the
``flapping`` alerts out. See ``docs/alerts.md``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from heartwire.events import (
    CaughtUp,
    Failed,
    Flapping,
    Lagging,
    LocalPause,
    Resumed,
    wall_fields,
)
from heartwire.listeners import SubscriberListener

__all__ = ["AlertListener"]

log = logging.getLogger("heartwire.reliable")


class AlertListener(SubscriberListener):
    """A monitor listener publishing each state change through a reliable ``sender``;
    ``source`` (optional) names the monitor in every alert. ``published`` and ``failed`` count
    alerts sent and alerts that could not be handed to the sender (logged).

    ``include_silenced`` and ``include_suppressed`` (default False): also publish the failed and
    resumed events marked silenced, or suppressed by a parent that is down (left out by default,
    as Alertmanager leaves out silenced and inhibited alerts; see the module docs).
    ``flapping`` (default True): publish a topic's start and end of flapping. Read when the
    listener is added to a monitor."""

    #: Marked events are left out unless the constructor says otherwise (see the class docs):
    #: instance attributes here (the base class's are class-wide), read by the listener set
    #: with ``getattr`` when the listener is added.
    include_silenced: bool = False  # type: ignore[misc]
    include_suppressed: bool = False  # type: ignore[misc]

    def __init__(
        self,
        sender: Any,
        source: str = "",
        *,
        include_silenced: bool = False,
        include_suppressed: bool = False,
        flapping: bool = True,
    ) -> None:
        if not callable(getattr(sender, "send", None)):
            raise TypeError(f"sender must be a ReliableSender, got {type(sender).__name__}")
        for name, value in (
            ("include_silenced", include_silenced),
            ("include_suppressed", include_suppressed),
            ("flapping", flapping),
        ):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
        self.sender = sender
        self.source = source
        # Instance attributes: the monitor's listener set reads them when the listener is
        # added, and leaves the marked events out of its calls and batches (no Python here).
        self.include_silenced = include_silenced
        self.include_suppressed = include_suppressed
        self.flapping = flapping
        self.published = 0
        self.failed = 0
        #: The message ids of the alerts sent, oldest first (the last 1000).
        self.message_ids: list[str] = []

    def on_failed(self, event: Failed) -> None:
        self._publish("failed", event)

    def on_resumed(self, event: Resumed) -> None:
        self._publish("resumed", event)

    def on_flapping(self, event: Flapping) -> None:
        if self.flapping:
            self._publish("flapping", event)

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
