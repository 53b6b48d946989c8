"""``heartwire demo``'s arguments: bad values exit 2 naming the value, never a traceback or a
run that cannot end."""

from __future__ import annotations

import math

import pytest

from heartwire.cli import main
from heartwire.demo import run_demo


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--duration", "inf"], "argument --duration: must be a finite number > 0, got inf"),
        (["--duration=-inf"], "argument --duration: must be a finite number > 0, got -inf"),
        (["--duration", "nan"], "argument --duration: must be a finite number > 0, got nan"),
        (["--duration", "0"], "argument --duration: must be a finite number > 0, got 0"),
        (["--period", "inf"], "argument --period: must be a finite number > 0, got inf"),
    ],
)
def test_demo_rejects_non_finite_and_non_positive_times_with_exit_2(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"duration": math.inf},
            ValueError,
            "duration must be a finite number of seconds > 0, got inf",
        ),
        ({"duration": 0.0}, ValueError, "duration must be a finite number of seconds > 0, got 0.0"),
        (
            {"period": math.nan},
            ValueError,
            "period must be a finite number of seconds > 0, got nan",
        ),
        ({"topics": 0}, ValueError, "topics must be >= 1, got 0"),
        ({"topics": 2.5}, TypeError, "topics must be an int, got float 2.5"),
        ({"duration": "10"}, TypeError, "duration must be a number of seconds, got str '10'"),
    ],
)
def test_run_demo_checks_its_arguments(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        run_demo(**kwargs)  # type: ignore[arg-type]
