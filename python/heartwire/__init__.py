"""heartwire: heartbeat and liveness monitoring for message-driven services.

Services publish a heartbeat to a topic every period (:class:`HeartbeatPublisher`); whoever depends
on them watches one topic or a wildcard of millions (:class:`HeartbeatMonitor`) and is told through
listener classes when a heartbeat is missed, how many times in a row, and when it comes back.

This namespace is the user API: publishers, monitors, their listeners and events, :func:`connect`
and the transport errors, asyncio's event streams (:class:`EventStream`), reliable delivery
(:class:`ReliableSender`, :class:`Consumer`, :class:`Transaction`, :class:`AlertListener`),
health checks (:mod:`heartwire.checks`) and :class:`ManualClock` for tests. :mod:`heartwire.core`
holds the native core's types for driving the detector directly
(:class:`~heartwire.core.Detector`, :class:`~heartwire.core.EventQueue`, ...); everything else
is internal, importable from its own module but free to change.
"""

from typing import Any

from heartwire import checks, core
from heartwire._core import ManualClock
from heartwire._core import __version__ as __version__
from heartwire.aio import EventStream, StreamEvent
from heartwire.alerts import AlertListener
from heartwire.checks import CheckFailed
from heartwire.control import send_silence, send_unsilence
from heartwire.events import (
    CaughtUp,
    Disconnected,
    EventBatch,
    ExceptionEvent,
    Failed,
    Flapping,
    Lagging,
    LocalPause,
    Received,
    Reconnected,
    Resumed,
    Sent,
    Started,
    State,
    Stopped,
    TopicStatus,
)
from heartwire.listeners import PublisherListener, SubscriberListener
from heartwire.maintenance import MaintenanceWindow
from heartwire.monitor import HeartbeatMonitor, HeartbeatSubscriber
from heartwire.policy import Silence
from heartwire.publisher import HeartbeatPublisher
from heartwire.reliable import (
    Consumer,
    DeliveryRefused,
    FlushAck,
    ReceivedMessage,
    ReliableSender,
    SenderListener,
    Transaction,
    TransactionFailed,
)
from heartwire.transport import (
    ConnectFailed,
    SendTimeout,
    Transport,
    TransportClosed,
    connect,
)

__all__ = [
    "AlertListener",
    "CaughtUp",
    "CheckFailed",
    "ConnectFailed",
    "Consumer",
    "DeliveryRefused",
    "Disconnected",
    "EventBatch",
    "EventStream",
    "ExceptionEvent",
    "Failed",
    "Flapping",
    "FlushAck",
    "HeartbeatMonitor",
    "HeartbeatPublisher",
    "HeartbeatSubscriber",
    "Lagging",
    "LocalPause",
    "MaintenanceWindow",
    "ManualClock",
    "PublisherListener",
    "Received",
    "ReceivedMessage",
    "Reconnected",
    "ReliableSender",
    "Resumed",
    "SendTimeout",
    "SenderListener",
    "Sent",
    "Silence",
    "Started",
    "State",
    "Stopped",
    "StreamEvent",
    "SubscriberListener",
    "TopicStatus",
    "Transaction",
    "TransactionFailed",
    "Transport",
    "TransportClosed",
    "checks",
    "connect",
    "core",
    "send_silence",
    "send_unsilence",
]

# Where the names this namespace used to hold live now, for a precise AttributeError.
_MOVED = {
    "MAX_NAME_LEN": "heartwire.core",
    "MAX_TOPICS": "heartwire.core",
    "DedupWindow": "heartwire.core",
    "Detector": "heartwire.core",
    "Dispatcher": "heartwire.core",
    "Event": "heartwire.core",
    "EventQueue": "heartwire.core",
    "Phi": "heartwire.core",
    "Beat": "heartwire.beat",
    "BeatCodec": "heartwire.beat",
    "DecodeError": "heartwire.beat",
    "KeepAliveMonitor": "heartwire.transport",
    "MemoryBroker": "heartwire.transport.memory",
    "Message": "heartwire.transport",
    "Subscription": "heartwire.transport",
}
# Names that left this namespace under a new name: where they live now, and as what.
_MOVED_AS = {
    "Scheduler": ("heartwire.core", "DeadlineQueue"),
    "PublisherScheduler": ("heartwire.executor", "PublisherExecutor"),
    "shared_scheduler": ("heartwire.executor", "shared_executor"),
}
_RENAMED = {"AlertPublisher": "AlertListener", "DeliveryError": "DeliveryRefused"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        raise AttributeError(
            f"heartwire.{name} is not part of the top-level API; import it from {_MOVED[name]}"
        )
    if name in _MOVED_AS:
        module, new = _MOVED_AS[name]
        raise AttributeError(
            f"heartwire.{name} is not part of the top-level API; it was renamed {new}: "
            f"import {new} from {module}"
        )
    if name in _RENAMED:
        raise AttributeError(f"heartwire.{name} was renamed heartwire.{_RENAMED[name]}")
    raise AttributeError(f"module 'heartwire' has no attribute {name!r}")
