"""Throttled logging: a problem that recurs on every event must not flood the log.

Two rules, by what the caller counts:

- :func:`worth_logging`: the caller numbers the occurrences (a listener's errors, a handler's,
  stale beats); each of the first ten is logged, then one in a thousand.
- :class:`Throttle`: occurrences with no count of their own (a thread that cannot start, a
  refused value); the first is logged at once, then at most one per ``every`` seconds, saying how
  many were not.
"""

from __future__ import annotations

import logging
import math
import threading
import time

__all__ = ["LOG_EVERY", "Throttle", "worth_logging"]

#: Seconds between two log lines of one :class:`Throttle` (the counts go on in between).
LOG_EVERY = 60.0


def worth_logging(n: int) -> bool:
    """Whether the ``n``-th occurrence (from 1) of a problem is logged: the first ten, then
    every 1000th."""
    return n <= 10 or n % 1000 == 0


class Throttle:
    """Logs to ``log`` at ``level`` at most once per ``every`` seconds (real time), adding how
    many calls were not logged since. Thread-safe; the log call is made outside its lock."""

    def __init__(
        self, log: logging.Logger, level: int = logging.WARNING, every: float = LOG_EVERY
    ) -> None:
        self._log = log
        self._level = level
        self._every = every
        self._last = -math.inf
        self._skipped = 0
        self._lock = threading.Lock()

    def __call__(self, msg: str, *args: object, exc_info: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self._every:
                self._skipped += 1
                return
            self._last = now
            skipped, self._skipped = self._skipped, 0
        if skipped:
            msg += " (and %d more like it not logged)"
            args = (*args, skipped)
        self._log.log(self._level, msg, *args, exc_info=exc_info)
