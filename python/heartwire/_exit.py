"""What is stopped at interpreter exit: running monitors and publishers, then the shared
publisher executors that drive them.

Each kind keeps a :class:`Running` set (weak: a thing dropped by its owner is not kept alive for
exit) and one exit hook stops every kind in ``rank`` order, lowest first, so a publisher is
stopped before the executor it runs on is closed. A failure to stop one thing is logged and
exit goes on.
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Running", "stop_all"]

log = logging.getLogger("heartwire")

T = TypeVar("T")

_kinds: list[Running[Any]] = []


class Running(Generic[T]):
    """The running things of one kind, each stopped with ``stop`` at exit (after the kinds of
    a lower ``rank``)."""

    def __init__(self, stop: Callable[[T], object], *, rank: int = 0) -> None:
        self._stop = stop
        self.rank = rank
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()
        _kinds.append(self)

    def add(self, thing: T) -> None:
        self._live.add(thing)

    def discard(self, thing: T) -> None:
        self._live.discard(thing)

    def __contains__(self, thing: object) -> bool:
        return thing in self._live

    def stop_all(self) -> None:
        """Stop every thing of this kind still running (what the exit hook runs for it)."""
        for thing in list(self._live):
            try:
                self._stop(thing)
            except Exception:  # exit must go on
                log.exception("stopping %r at exit failed", thing)


@atexit.register
def stop_all() -> None:
    """Stop everything registered, kind by kind in rank order."""
    for kind in sorted(_kinds, key=lambda k: k.rank):
        kind.stop_all()
