"""The events publishers and monitors hand to their listeners, and a topic's status.

Every event is a small frozen dataclass. Times are seconds: ``Sent.at`` is wall time
(:func:`time.time`); the monitor's events (``Received``, ``Failed``, ``Resumed``,
``LocalPause``) and the
:class:`TopicStatus` times are on the monitor's clock (the core's monotonic clock, or a
:class:`~heartwire._core.ManualClock`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from heartwire import _core

__all__ = [
    "Disconnected",
    "ExceptionEvent",
    "Failed",
    "ListenerEvent",
    "LocalPause",
    "Received",
    "Reconnected",
    "Resumed",
    "Sent",
    "Started",
    "State",
    "Stopped",
    "TopicStatus",
]


@dataclass(frozen=True)
class Started:
    """A publisher or monitor started; ``source``: its topic (publisher) or pattern (monitor)."""

    source: str


@dataclass(frozen=True)
class Stopped:
    """A publisher or monitor stopped (``source`` as for :class:`Started`)."""

    source: str


@dataclass(frozen=True)
class Sent:
    """A publisher sent beat number ``seq`` on ``topic`` at wall time ``at``."""

    topic: str
    seq: int
    at: float


@dataclass(frozen=True)
class Received:
    """A beat for ``topic`` was recorded at ``at`` (monitor clock).

    ``seq`` is the publisher's sequence number and ``latency`` the receiver's wall time minus the
    publisher's send time, when the beat carried them (``None`` otherwise).
    """

    topic: str
    seq: int | None
    latency: float | None
    at: float


@dataclass(frozen=True)
class Failed:
    """``topic`` has missed ``missed`` periods in a row (at least ``allowed_misses``).

    ``since`` is the deadline at which it was declared failed; ``at`` is the deadline of this
    missed period. Fires again at every further missed period with the growing count.
    """

    topic: str
    missed: int
    since: float
    at: float


@dataclass(frozen=True)
class Resumed:
    """``topic`` was heard again at ``at`` after ``missed`` missed periods and ``downtime`` seconds
    (the beat's time minus the failure's ``since``)."""

    topic: str
    missed: int
    downtime: float
    at: float


@dataclass(frozen=True)
class LocalPause:
    """The monitor itself was not running for ``duration`` seconds, up to ``at`` (its clock).

    A stopped process, a suspended machine or a starved host: longer than the monitor's
    ``max_local_pause``. Deadlines that fell inside the pause were not counted as missed: each
    topic got a full period (plus grace) from the wake-up, and beats recorded meanwhile with
    their true times counted as heard. So topics that really stopped are reported one period
    (plus grace) after ``at``, and no healthy topic is failed for the monitor's own stall.
    """

    duration: float
    at: float


@dataclass(frozen=True)
class Disconnected:
    """The transport lost its connection to ``broker`` (``reason`` says how); it is reconnecting.

    Only transports with connections (STOMP) send it. A monitor's failed/resumed events keep
    their meaning through the outage: topics not heard meanwhile fail as usual.
    """

    broker: str
    reason: str


@dataclass(frozen=True)
class Reconnected:
    """The transport is connected again, to ``broker``, with every subscription restored."""

    broker: str


@dataclass(frozen=True)
class ExceptionEvent:
    """Something went wrong that the publisher or monitor survived.

    ``reason`` is a short stable code (``"bad_json"``, ``"unsigned"``, ``"check_failed"``,
    ``"send_failed"``, ``"listener_error"``, ...); ``error`` the exception, if there was one.
    """

    source: str
    reason: str
    error: BaseException | None
    detail: str = ""


ListenerEvent = Union[
    Started,
    Stopped,
    Sent,
    Received,
    Failed,
    Resumed,
    LocalPause,
    Disconnected,
    Reconnected,
    ExceptionEvent,
]


class State(str, Enum):
    """A topic's state on the monitoring side (the values are the core's strings)."""

    PENDING = "PENDING"
    """Expected, nothing heard yet."""
    ALIVE = "ALIVE"
    FAILED = "FAILED"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    REMOVED = "REMOVED"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TopicStatus:
    """A snapshot of one monitored topic; times are on the monitor's clock.

    ``missed`` counts consecutive missed periods, ``last_seen`` is the last beat's time (``None``
    if never heard), ``failed_since`` the deadline at which the current failure began (``None``
    unless ``FAILED``), ``next_deadline`` when the next missed period would be counted (``None``
    when not armed), ``phi`` the phi-accrual suspicion level for topics in phi mode (``None``
    otherwise), ``grace`` the seconds of slack added to every deadline (the n-th after the last
    beat is ``last_seen + n * period + grace``; not used in phi mode).
    """

    topic: str
    state: State
    missed: int
    last_seen: float | None
    period: float
    allowed_misses: int
    failed_since: float | None
    next_deadline: float | None
    phi: float | None = None
    grace: float = 0.0

    @classmethod
    def from_core(cls, status: _core.TopicStatus) -> TopicStatus:
        """Build from the native core's :class:`~heartwire._core.TopicStatus`."""
        return cls(
            topic=status.topic,
            state=State(status.state),
            missed=status.missed,
            last_seen=status.last_seen,
            period=status.period,
            allowed_misses=status.allowed_misses,
            failed_since=status.failed_since,
            next_deadline=status.next_deadline,
            phi=status.phi,
            grace=status.grace,
        )
