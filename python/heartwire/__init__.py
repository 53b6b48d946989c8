"""heartwire: heartbeat and liveness monitoring for message-driven services.

The native core (:mod:`heartwire._core`) tracks missed periods for one topic or millions on a
hierarchical timer wheel and hands events to Python through bounded queues; a
:class:`Dispatcher` delivers them to a handler in batches on its own thread.
"""

from heartwire._core import (
    MAX_NAME_LEN,
    MAX_TOPICS,
    Detector,
    Event,
    EventQueue,
    ManualClock,
    Phi,
    TopicStatus,
    __version__,
)
from heartwire.dispatch import Dispatcher

__all__ = [
    "MAX_NAME_LEN",
    "MAX_TOPICS",
    "Detector",
    "Dispatcher",
    "Event",
    "EventQueue",
    "ManualClock",
    "Phi",
    "TopicStatus",
    "__version__",
]
