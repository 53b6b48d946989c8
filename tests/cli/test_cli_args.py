"""The CLI's numeric options, through the real entry point (``python -m heartwire``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

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


SECRET = "s3cret-key-value"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["silence", "svc.>", "--key", SECRET], "one of the arguments --for --until is required"),
        (["silence", "svc.>", "--for", "30x", "--key", SECRET], "--for must be a positive"),
        (["silence", "svc.>", "--for", "0s", "--key", SECRET], "--for must be a positive"),
        (["silence", "svc.>", "--until", "tomorrow", "--key", SECRET], "--until: not an ISO"),
        (["silence", "svc.>", "--until", "2020-01-01", "--key", SECRET], "--until must be in"),
        (["silence", "svc.>", "--for", "31d", "--key", SECRET], "--for must be at most 30d"),
        (["silence", "svc.>", "--until", "2099-01-01", "--key", SECRET], "at most 30 days ahead"),
        (["silence", "svc.>", "--for", "1m", "--until", "2099-01-01"], "not allowed with"),
        (["silence", "svc..>", "--for", "1m", "--key", SECRET], "pattern 'svc..>'"),
        (["silence", "svc.>", "--for", "1m", "--reason", "x" * 257, "--key", SECRET], "reason"),
        (["silence", "svc.>", "--for", "1m"], "a key is required: --key, --key-file"),
        (["silence", "svc.>", "--for", "1m", "--key", SECRET, "--key-file", "f"], "not allowed"),
        (["silence", "svc.>", "--for", "1m", "--key-file", "/no/such/file"], "--key-file: cannot"),
        (["silence", "svc.>", "--for", "1m", "--key", SECRET, "--destination", "a.>"], "a.>"),
        (
            ["silence", "svc.>", "--for", "1m", "--key", SECRET, "--broker", "stomp://u:pw@x"],
            "could not connect to stomp://x:61613",
        ),
        (["unsilence", "--key", SECRET], "the following arguments are required: ID"),
        (["unsilence", "ok", "bad id!", "--key", SECRET], "id must be 1 to 64"),
    ],
)
def test_silence_and_unsilence_refuse_bad_input_with_exit_2_naming_it_never_the_key(
    args: list[str], message: str
) -> None:
    env_key = os.environ.pop("HEARTWIRE_KEY", None)
    try:
        proc = run_cli(*args)
    finally:
        if env_key is not None:
            os.environ["HEARTWIRE_KEY"] = env_key
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    assert message in proc.stderr, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
    assert SECRET not in proc.stderr + proc.stdout
    assert ":pw@" not in proc.stderr


def test_silence_prints_the_id_to_unsilence_with(tmp_path: Any) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(SECRET + "\n")
    proc = run_cli(
        "silence", "svc.db.>", "--for", "30m", "--reason", "upgrade", "--key-file", str(key_file)
    )  # fmt: skip  (memory://: nobody listens)
    assert proc.returncode == 0, proc.stderr[-500:]
    out = json.loads(proc.stdout)
    assert sorted(out) == ["destination", "event", "id", "pattern", "reason", "until", "until_iso"]
    assert (out["event"], out["pattern"], out["reason"]) == ("silence", "svc.db.>", "upgrade")
    assert out["destination"] == "_hw.control"
    assert 1790 < out["until"] - time.time() <= 1800
    proc = run_cli("unsilence", out["id"], "other", "--key", SECRET)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == [out["id"], "other"]
    empty = tmp_path / "empty"
    empty.write_text("\n")
    proc = run_cli("silence", "svc.>", "--for", "1m", "--key-file", str(empty))
    assert proc.returncode == 2 and "holds no key" in proc.stderr, proc.stderr[-500:]


@pytest.mark.parametrize("command", ["watch", "status"])
def test_control_topic_option_is_checked(command: str) -> None:
    proc = run_cli(command, "svc.>", "--key", SECRET, "--control", "a.>", "--duration", "0.2")
    assert proc.returncode == 2 and "argument --control: topic 'a.>'" in proc.stderr, proc.stderr
    proc = run_cli(command, "svc.>", "--key", SECRET, "--control", "svc.x", "--duration", "0.2")
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "control topic 'svc.x' matches the monitor's pattern 'svc.>'" in proc.stderr
    assert SECRET not in proc.stderr
