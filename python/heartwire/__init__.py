"""heartwire: heartbeat and liveness monitoring for message-driven services.

Services publish a heartbeat to a topic every period (:class:`HeartbeatPublisher`); whoever depends
on them watches one topic or a wildcard of millions (:class:`HeartbeatMonitor`) and is told through
listener classes when a heartbeat is missed, how many times in a row, and when it comes back.

The native core (:mod:`heartwire._core`) tracks missed periods on a hierarchical timer wheel and
hands events to Python through bounded queues; :func:`connect` gives the transport (the embedded
in-process broker by default).
"""

from heartwire import checks
from heartwire._core import (
    MAX_NAME_LEN,
    MAX_TOPICS,
    DedupWindow,
    Detector,
    Event,
    EventQueue,
    ManualClock,
    Phi,
    Scheduler,
    __version__,
)
from heartwire.beat import Beat, BeatCodec, DecodeError
from heartwire.checks import CheckFailed
from heartwire.dispatch import Dispatcher
from heartwire.events import (
    CaughtUp,
    Disconnected,
    EventBatch,
    ExceptionEvent,
    Failed,
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
from heartwire.monitor import HeartbeatMonitor, HeartbeatSubscriber
from heartwire.publisher import HeartbeatPublisher
from heartwire.reliable import (
    AlertListener,
    Consumer,
    DeliveryRefused,
    FlushAck,
    ReceivedMessage,
    ReliableSender,
    SenderListener,
    Transaction,
    TransactionFailed,
)
from heartwire.scheduling import PublisherScheduler, shared_scheduler
from heartwire.transport import (
    ConnectFailed,
    KeepAliveMonitor,
    Message,
    SendTimeout,
    Subscription,
    Transport,
    TransportClosed,
    connect,
)
from heartwire.transport.memory import MemoryBroker

__all__ = [
    "MAX_NAME_LEN",
    "MAX_TOPICS",
    "AlertListener",
    "Beat",
    "BeatCodec",
    "CaughtUp",
    "CheckFailed",
    "ConnectFailed",
    "Consumer",
    "DecodeError",
    "DedupWindow",
    "DeliveryRefused",
    "Detector",
    "Disconnected",
    "Dispatcher",
    "Event",
    "EventBatch",
    "EventQueue",
    "ExceptionEvent",
    "Failed",
    "FlushAck",
    "HeartbeatMonitor",
    "HeartbeatPublisher",
    "HeartbeatSubscriber",
    "KeepAliveMonitor",
    "Lagging",
    "LocalPause",
    "ManualClock",
    "MemoryBroker",
    "Message",
    "Phi",
    "PublisherListener",
    "PublisherScheduler",
    "Received",
    "ReceivedMessage",
    "Reconnected",
    "ReliableSender",
    "Resumed",
    "Scheduler",
    "SendTimeout",
    "SenderListener",
    "Sent",
    "Started",
    "State",
    "Stopped",
    "SubscriberListener",
    "Subscription",
    "TopicStatus",
    "Transaction",
    "TransactionFailed",
    "Transport",
    "TransportClosed",
    "__version__",
    "checks",
    "connect",
    "shared_scheduler",
]
