"""Argument checks shared by the package: each error names the argument and the value refused.

A value of the wrong type raises :class:`TypeError` (``"period must be a number of seconds, got
str '1'"``); one of the right type but out of range raises :class:`ValueError` (``"period must be
a finite number of seconds > 0, got 0"``). ``bool`` is never a number here: ``True`` is not one
second. Any :class:`numbers.Real` is a number (numpy's scalars too) and any
:class:`numbers.Integral` an int; the checks return plain ``float`` / ``int``.

``field`` is the name shown, e.g. ``"period"``, ``"beat.period"`` or ``"option heartbeat"``;
``shown`` (where taken) replaces ``repr(value)`` in a ValueError's text, for a value that came
from elsewhere in another form (a URL's query text, redacted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Literal, TypeVar, overload

__all__ = ["choice", "count", "seconds"]

T = TypeVar("T")


def _got(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


@overload
def seconds(
    value: object,
    field: str,
    *,
    allow_none: Literal[False] = False,
    allow_zero: bool = False,
    allow_inf: bool = False,
    allow_negative: bool = False,
    minimum: float | None = None,
    shown: str | None = None,
) -> float: ...
@overload
def seconds(
    value: object,
    field: str,
    *,
    allow_none: bool,
    allow_zero: bool = False,
    allow_inf: bool = False,
    allow_negative: bool = False,
    minimum: float | None = None,
    shown: str | None = None,
) -> float | None: ...
def seconds(
    value: object,
    field: str,
    *,
    allow_none: bool = False,
    allow_zero: bool = False,
    allow_inf: bool = False,
    allow_negative: bool = False,
    minimum: float | None = None,
    shown: str | None = None,
) -> float | None:
    """``value`` as a number of seconds: finite (unless ``allow_inf``) and > 0 (>= 0 with
    ``allow_zero``, >= ``minimum`` when given, any sign with ``allow_negative``), or ``None``
    when ``allow_none``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        none = " or None" if allow_none else ""
        raise TypeError(f"{field} must be a number of seconds{none}, got {_got(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond a float's range
        number = math.inf
    if allow_negative:
        ok, bound = True, ""
    elif minimum is not None:
        ok, bound = number >= minimum, f" >= {minimum:g}"
    elif allow_zero:
        ok, bound = number >= 0, " >= 0"
    else:
        ok, bound = number > 0, " > 0"
    if allow_inf:
        ok = ok and not math.isnan(number)
        what = f"a number of seconds{bound} (inf allowed)"
    else:
        ok = ok and math.isfinite(number)
        what = f"a finite number of seconds{bound}"
    if not ok:
        got = repr(value) if shown is None else shown
        raise ValueError(f"{field} must be {what}, got {got}")
    return number


@overload
def count(
    value: object,
    field: str,
    minimum: int,
    *,
    maximum: int | None = None,
    allow_none: Literal[False] = False,
    shown: str | None = None,
) -> int: ...
@overload
def count(
    value: object,
    field: str,
    minimum: int,
    *,
    maximum: int | None = None,
    allow_none: bool,
    shown: str | None = None,
) -> int | None: ...
def count(
    value: object,
    field: str,
    minimum: int,
    *,
    maximum: int | None = None,
    allow_none: bool = False,
    shown: str | None = None,
) -> int | None:
    """``value`` as an int >= ``minimum`` (and <= ``maximum`` when given), or ``None`` when
    ``allow_none``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral):
        none = " or None" if allow_none else ""
        raise TypeError(f"{field} must be an int{none}, got {_got(value)}")
    number = int(value)
    got = repr(value) if shown is None else shown
    if maximum is not None and not minimum <= number <= maximum:
        raise ValueError(f"{field} must be an int from {minimum} to {maximum}, got {got}")
    if number < minimum:
        raise ValueError(f"{field} must be >= {minimum}, got {got}")
    return number


def choice(value: object, field: str, options: Iterable[T]) -> T:
    """``value`` if it is one of ``options`` (compared with ``==``), else a ValueError that
    lists them."""
    options = tuple(options)
    for option in options:
        if value == option:
            return option
    listed = ", ".join(map(repr, options))
    raise ValueError(f"{field} must be one of {listed}, got {value!r}")
