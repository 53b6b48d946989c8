"""The CLI's numeric options, through the real entry point (``python -m heartwire``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run_cli(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)  # the heartwire this test process imports (installed, in CI)
    try:
        return subprocess.run(
            [sys.executable, "-m", "heartwire", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"heartwire {' '.join(args)} still running after {timeout} s: {exc}")


@pytest.mark.parametrize("command", [["publish", "svc.a"], ["watch", "svc.>"]])
@pytest.mark.parametrize("option", ["--duration", "--period"])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-1", "x"])
def test_time_options_must_be_finite_and_positive(
    command: list[str], option: str, value: str
) -> None:
    # Issue 14 (round 3): `--duration inf` reached Event.wait(inf): OverflowError traceback.
    proc = run_cli(*command, f"{option}={value}")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    assert f"argument {option}:" in proc.stderr, proc.stderr[-500:]
    assert value in proc.stderr
    assert "Traceback" not in proc.stderr


def test_max_beat_age_inf_still_means_no_bound() -> None:
    # `--max-beat-age inf` is the documented "no bound" (math.inf), not a bad number.
    proc = run_cli("watch", "svc.>", "--key", "k", "--max-beat-age", "inf", "--duration", "0.2")
    assert proc.returncode == 0, proc.stderr[-500:]
    proc = run_cli("watch", "svc.>", "--max-beat-age", "nan", "--duration", "0.2")
    assert proc.returncode == 2 and "argument --max-beat-age:" in proc.stderr, proc.stderr[-500:]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fail", "svc.a", "--reason", ""], "--reason must be 1 to 256 characters, got 0"),
        (["fail", "svc.a", "--reason", "x" * 257], "--reason must be 1 to 256 characters, got 257"),
        (["fail", "svc.>", "--reason", "x"], "beat.topic"),
        (["fail", "svc.a", "--reason", "x", "--period", "0"], "argument --period:"),
        (["fail", "svc.a"], "the following arguments are required: --reason"),
    ],
)
def test_fail_refuses_bad_input_with_exit_2_naming_it(args: list[str], message: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    assert message in proc.stderr, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr


def test_fail_sends_one_down_beat() -> None:
    proc = run_cli("fail", "svc.a", "--reason", "disk full")  # memory://: nobody listens
    assert proc.returncode == 0, proc.stderr[-500:]
    assert proc.stdout.strip() == '{"event": "down", "topic": "svc.a", "reason": "disk full"}'
