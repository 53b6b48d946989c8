"""``heartwire status --group`` (review of issue 18's member, findings 6-9): the shards a newer
status claims not listed under the old owner, nothing printed raw from a status, ``--wait``
bounded, refused statuses explained."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import heartwire as hw
from heartwire.beat import BeatCodec
from heartwire.cli import _shown
from heartwire.groups import MemberStatus, ShardLayout, _encode_status, status_topic
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

KEY = b"group-key"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HEARTWIRE_KEY"}
    env["PYTHONPATH"] = str(Path(hw.__file__).resolve().parents[1])
    return subprocess.run(
        [sys.executable, "-m", "heartwire", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.fixture
def sender() -> Iterator[StompTransport]:
    t = hw.connect(B.url("activemq"))
    assert isinstance(t, StompTransport)
    yield t
    t.close()


def _sending(t: StompTransport, group: str, bodies: Sequence[bytes]) -> threading.Event:
    """Publish ``bodies`` to ``group``'s status topic every 0.2 s until the event is set."""
    stop = threading.Event()

    def run() -> None:
        while True:
            for body in bodies:
                t.publish(status_topic(group), body, timeout=2)
            if stop.wait(0.2):
                return

    threading.Thread(target=run, daemon=True).start()
    return stop


# -- finding 8 --


@pytest.mark.parametrize("wait", ["1e300", "86401", "inf", "0"])
def test_status_group_refuses_a_wait_out_of_range(wait: str) -> None:
    out = _cli("--broker", "stomp://127.0.0.1:1", "--group", "g", "--wait", wait)
    assert "Traceback" not in out.stderr, out.stderr[-600:]
    assert out.returncode == 2 and "--wait" in out.stderr, (out.returncode, out.stderr[-300:])


# -- finding 9 --


@pytest.mark.usefixtures("brokers")
def test_status_group_says_when_statuses_were_refused(sender: StompTransport) -> None:
    """Statuses signed with the group's key, read with another: not "no member heard" alone,
    but how many were refused, why, and what to check."""
    lay = ShardLayout(f"hwc{uuid.uuid4().hex[:8]}", 4)
    st = MemberStatus("a", (0, 1, 2, 3), {"ALIVE": 1}, 0.5, time.time())
    stop = _sending(sender, lay.group, [_encode_status(lay, st, BeatCodec(KEY))])
    try:
        out = _cli(
            "--broker", B.url("activemq"), "--group", lay.group, "--wait", "1", "--key", "nope"
        )
    finally:
        stop.set()
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr[-300:])
    lines = out.stdout.splitlines()
    assert lines[0] == f"group {lay.group}: no member heard in 1 s", lines
    assert re.fullmatch(
        r"\d+ status messages refused \(bad_signature\): check --key / HEARTWIRE_KEY", lines[1]
    ), lines


@pytest.mark.usefixtures("brokers")
def test_status_group_counts_refusals_of_several_reasons(sender: StompTransport) -> None:
    lay = ShardLayout(f"hwc{uuid.uuid4().hex[:8]}", 4)
    st = MemberStatus("a", (0, 1, 2, 3), {"ALIVE": 1}, 0.5, time.time())
    bodies = [_encode_status(lay, st, BeatCodec(KEY)), _encode_status(lay, st, BeatCodec(None))]
    stop = _sending(sender, lay.group, bodies)
    try:
        out = _cli(
            "--broker", B.url("activemq"), "--group", lay.group, "--wait", "1", "--key", "nope"
        )
    finally:
        stop.set()
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr[-300:])
    assert re.search(
        r"^\d+ status messages refused \(\d+ bad_signature, \d+ unsigned\): check --key",
        out.stdout,
        re.M,
    ), out.stdout


# -- findings 6 and 7 --


@pytest.mark.usefixtures("brokers")
def test_status_group_lists_each_shard_under_its_newest_claimant(sender: StompTransport) -> None:
    """Heard across a handover: the old owner's last status claims shards 0-3, the new owner's
    newer one 2-3 too. The old owner is listed with 0,1 and the group's counts are each
    shard's once."""
    lay = ShardLayout(f"hwc{uuid.uuid4().hex[:8]}", 4)
    now = time.time()
    old = MemberStatus(
        "old",
        (0, 1, 2, 3),
        {"ALIVE": 4},
        0.5,
        now,
        shard_counts={0: {"ALIVE": 1}, 1: {"ALIVE": 1}, 2: {"ALIVE": 1}, 3: {"ALIVE": 1}},
    )
    new = MemberStatus(
        "new",
        (2, 3),
        {"ALIVE": 2},
        0.5,
        now + 1,
        shard_counts={2: {"ALIVE": 1}, 3: {"ALIVE": 1}},
    )
    codec = BeatCodec(KEY)
    stop = _sending(sender, lay.group, [_encode_status(lay, s, codec) for s in (old, new)])
    try:
        out = _cli(
            "--broker",
            B.url("activemq"),
            "--group",
            lay.group,
            "--key",
            KEY.decode(),
            "--wait",
            "1",
        )
    finally:
        stop.set()
    assert out.returncode == 0, (out.stdout, out.stderr[-300:])
    lines = out.stdout.splitlines()
    assert "  old: shards 0,1  ALIVE=2" in lines, out.stdout
    assert "  new: shards 2,3  ALIVE=2" in lines, out.stdout
    assert "  counts: ALIVE=4" in lines, out.stdout


@pytest.mark.usefixtures("brokers")
def test_status_group_prints_no_control_characters_from_a_status(sender: StompTransport) -> None:
    """A status whose member name forges a line and drives the terminal is refused
    (malformed); one with a count key carrying an escape keeps its known counts only."""
    lay = ShardLayout(f"hwc{uuid.uuid4().hex[:8]}", 4)
    codec = BeatCodec(None)  # a group without a key: anyone can send a status
    forged = MemberStatus("x\n  a: shards 0,1,2,3\x1b[2J", (), {}, 0.5, time.time())
    keyed = MemberStatus("b", (0, 1, 2, 3), {"ALIVE\x1b[31m": 1, "ALIVE": 3}, 0.5, time.time())
    stop = _sending(sender, lay.group, [_encode_status(lay, s, codec) for s in (forged, keyed)])
    try:
        out = _cli("--broker", B.url("activemq"), "--group", lay.group, "--wait", "1.5")
    finally:
        stop.set()
    assert out.returncode == 0, (out.stdout, out.stderr[-300:])
    assert "\x1b" not in out.stdout, out.stdout[-300:]
    lines = out.stdout.splitlines()
    assert "  a: shards 0,1,2,3" not in lines, out.stdout
    assert "  b: shards 0,1,2,3  ALIVE=3" in lines, out.stdout
    assert any(line.startswith("  refused: ") and "malformed" in line for line in lines), lines
    assert any("counts of unknown states left out" in line for line in lines), lines


def test_shown_escapes_what_is_not_printable_ascii() -> None:
    assert _shown("a-b.c:d_e ALIVE=3") == "a-b.c:d_e ALIVE=3"
    assert _shown("x\n  a\x1b[2J\u202eé") == "x\\n  a\\x1b[2J\\u202e\\xe9"
