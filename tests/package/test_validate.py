"""heartwire._validate: the one copy of the argument checks (their callers' tests hold the texts
each argument shows; these hold the rules)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest

from heartwire import _validate


@pytest.mark.parametrize(
    ("value", "kwargs", "error", "message"),
    [
        (0, {}, ValueError, "t must be a finite number of seconds > 0, got 0"),
        (math.inf, {}, ValueError, "t must be a finite number of seconds > 0, got inf"),
        (10**400, {}, ValueError, "t must be a finite number of seconds > 0, got 1000"),
        (-1, {"allow_zero": True}, ValueError, "t must be a finite number of seconds >= 0, got -1"),
        (0.0005, {"minimum": 0.001}, ValueError, "t must be a finite number of seconds >= 0.001"),
        (
            math.nan,
            {"allow_inf": True},
            ValueError,
            "t must be a number of seconds > 0 (inf allowed)",
        ),
        (
            math.nan,
            {"allow_negative": True},
            ValueError,
            "t must be a finite number of seconds, got",
        ),
        (
            -1,
            {"shown": "'-1' (text)"},
            ValueError,
            "t must be a finite number of seconds > 0, got '-1' (text)",
        ),
        (True, {}, TypeError, "t must be a number of seconds, got bool True"),
        (
            "1",
            {"allow_none": True},
            TypeError,
            "t must be a number of seconds or None, got str '1'",
        ),
        (None, {}, TypeError, "t must be a number of seconds, got NoneType None"),
    ],
)
def test_seconds_refuses_naming_field_and_value(
    value: object, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        _validate.seconds(value, "t", **kwargs)
    assert str(info.value).startswith(message), str(info.value)


def test_seconds_accepts_and_returns_floats() -> None:
    assert _validate.seconds(2, "t") == 2.0 and type(_validate.seconds(2, "t")) is float
    assert _validate.seconds(Fraction(1, 4), "t") == 0.25
    assert _validate.seconds(None, "t", allow_none=True) is None
    assert _validate.seconds(0, "t", allow_zero=True) == 0.0
    assert _validate.seconds(math.inf, "t", allow_inf=True) == math.inf
    assert _validate.seconds(-3.5, "t", allow_negative=True) == -3.5
    assert _validate.seconds(0.001, "t", minimum=0.001) == 0.001


def test_count() -> None:
    assert _validate.count(3, "n", 1) == 3
    assert _validate.count(None, "n", 1, allow_none=True) is None
    with pytest.raises(ValueError, match=r"^n must be >= 1, got 0$"):
        _validate.count(0, "n", 1)
    with pytest.raises(ValueError, match=r"^port must be an int from 0 to 65535, got 70000$"):
        _validate.count(70000, "port", 0, maximum=65535)
    with pytest.raises(TypeError, match=r"^n must be an int, got float 2\.0$"):
        _validate.count(2.0, "n", 1)
    with pytest.raises(TypeError, match=r"^n must be an int or None, got bool False$"):
        _validate.count(False, "n", 0, allow_none=True)


def test_choice() -> None:
    assert _validate.choice("b", "mode", ("a", "b")) == "b"
    with pytest.raises(ValueError, match=r"^mode must be one of 'a', 'b', got 'c'$"):
        _validate.choice("c", "mode", ("a", "b"))
    with pytest.raises(ValueError, match=r"^mode must be one of 'a', 'b', got \['a'\]$"):
        _validate.choice(["a"], "mode", ("a", "b"))
