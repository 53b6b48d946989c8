"""Alerting policy as the monitor exposes it: silences (:class:`Silence`) and durations.

The policy itself lives in the core (``rust/detector/policy.rs``): it marks the failed and
resumed events where the detector emits them, so no Python runs per beat or per event. See
``docs/silences.md`` and ``docs/dependencies.md``.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field

from heartwire import _validate
from heartwire.events import real_clock_offset

__all__ = ["Silence", "parse_duration", "silence_end"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, field_name: str = "duration") -> float:
    """Seconds from ``"30s"``, ``"30m"``, ``"2h"``, ``"1d"`` (or a plain number of seconds);
    :class:`ValueError` naming ``field_name`` and the text otherwise, or if it is not > 0."""
    if not isinstance(text, str):
        raise TypeError(f"{field_name} must be a str, got {type(text).__name__} {text!r}")
    m = _DURATION.fullmatch(text.strip())
    try:
        value = float(m.group(1)) * _UNIT[m.group(2)] if m else float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(
            f"{field_name} must be a positive duration such as '30s', '30m', '2h', '1d', "
            f"got {text!r}"
        )
    return value


def silence_end(
    duration: float | _dt.timedelta | str | None, until: _dt.datetime | None, now_wall: float
) -> float:
    """When a silence asked for as ``duration`` (seconds, a ``timedelta``, or ``"30m"``) or
    ``until`` (an aware datetime), exactly one of them, ends: wall-clock seconds after
    ``now_wall``. ``ValueError``/``TypeError`` naming the argument and its value otherwise."""
    if (duration is None) == (until is None):
        raise ValueError(
            f"give exactly one of duration and until, got duration={duration!r}, until={until!r}"
        )
    if until is not None:
        if not isinstance(until, _dt.datetime):
            raise TypeError(
                f"until must be an aware datetime, got {type(until).__name__} {until!r}"
            )
        if until.tzinfo is None or until.utcoffset() is None:
            raise ValueError(f"until must be an aware datetime (with a tzinfo), got {until!r}")
        end = until.timestamp()
        if end <= now_wall:
            raise ValueError(f"until must be in the future, got {until.isoformat()}")
        return end
    if isinstance(duration, str):
        return now_wall + parse_duration(duration)
    if isinstance(duration, _dt.timedelta):
        return now_wall + _validate.seconds(
            duration.total_seconds(), "duration", shown=repr(duration)
        )
    return now_wall + _validate.seconds(duration, "duration")


@dataclass(frozen=True)
class Silence:
    """A silence: the topics matching ``pattern`` are silenced from ``start`` until ``end``
    (seconds on the monitor's clock; ``wall_start``/``wall_end``: Unix seconds, ``end_utc``:
    an aware datetime). ``id`` is for :meth:`~heartwire.monitor.HeartbeatMonitor.unsilence`;
    ``window``: the maintenance window whose occurrence it is, if any."""

    id: int
    pattern: str
    start: float
    end: float
    reason: str = ""
    #: The :class:`~heartwire.maintenance.MaintenanceWindow` id of an occurrence it registered.
    window: int | None = field(default=None, kw_only=True)
    wall_offset: float = field(
        default_factory=real_clock_offset, kw_only=True, repr=False, compare=False
    )

    @property
    def wall_start(self) -> float:
        """``start`` as Unix seconds."""
        return self.start + self.wall_offset

    @property
    def wall_end(self) -> float:
        """``end`` as Unix seconds."""
        return self.end + self.wall_offset

    @property
    def end_utc(self) -> _dt.datetime:
        """``end`` as an aware datetime in UTC."""
        return _dt.datetime.fromtimestamp(self.wall_end, tz=_dt.timezone.utc)
