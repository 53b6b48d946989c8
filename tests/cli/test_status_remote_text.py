"""Review of issue 17 (status view): a down beat's reason is remote input drawn by rich."""

from __future__ import annotations

import io

import pytest

from heartwire.status import RecentEvents, status_snapshot
from tests.brokers import brokers, url  # noqa: F401  (brokers: the session fixture)
from tests.monitor.test_monitor_semantics import make_rig

rich = pytest.importorskip("rich")


def _draw(reason: str) -> str:
    from rich.console import Console

    from heartwire.status_view import render

    for r in make_rig():
        recent = RecentEvents()
        r.mon.add_listener(recent)
        r.mon.start()
        r.send("svc.db", period=1.0)
        r.send("svc.db", period=1.0, state="down", reason=reason)
        r.take()
        out = io.StringIO()
        console = Console(file=out, force_terminal=True, width=200, color_system="truecolor")
        console.print(render(status_snapshot(r.mon, recent=recent)))
        return out.getvalue()
    raise AssertionError("no rig")


def test_a_reason_with_rich_markup_does_not_break_the_view() -> None:
    """'[/]' is a valid 1-256 character reason; rich parses it as a closing tag."""
    text = _draw("disk full [/] see runbook")
    assert "disk full [/] see runbook" in text


def test_a_reason_is_drawn_as_text_not_markup() -> None:
    text = _draw("[link=https://evil.example]click[/link][blink]x")
    assert "[link=https://evil.example]" in text


def test_a_reason_cannot_write_terminal_escapes() -> None:
    """ESC (0x1b) reaches the terminal: an OSC title change / cursor moves from a sender."""
    text = _draw("ok\x1b]0;pwned\x07\x1b[2J")
    assert "\x1b]0;pwned" not in text and "\x1b[2J" not in text


def _drawn(snap: object) -> str:
    from rich.console import Console

    from heartwire.status_view import render

    out = io.StringIO()
    Console(file=out, force_terminal=True, width=400, color_system="truecolor").print(
        render(snap)  # type: ignore[arg-type]
    )
    return out.getvalue()


HOSTILE = "a\x1b[2Jb\u202ec\u2028d\x85e\x00f[/]"
SHOWN = "a\\x1b[2Jb\\u202ec\\u2028d\\x85e\\x00f[/]"


def test_topic_names_silence_reasons_and_disconnect_text_are_drawn_escaped() -> None:
    """Every remote text: a down beat's reason, a silence's reason (it may come in a signed
    control message), a disconnect's text (a broker's ERROR frame). Topic names are checked
    at intake ('.'-separated letters, digits, '_', '-', ':'), and drawn through the same rule."""
    from heartwire.events import Disconnected

    for r in make_rig():
        recent = RecentEvents()
        r.mon.add_listener(recent)
        r.mon.start()
        topic = "svc.db"
        r.send(topic, period=1.0)
        r.send(topic, period=1.0, state="down", reason=HOSTILE)
        r.take()
        r.mon.silence("svc.>", duration=60.0, reason=HOSTILE)
        r.mon.depends("svc.child", on=topic)
        recent.on_disconnected(Disconnected(broker="tcp://h", reason=HOSTILE))
        snap = status_snapshot(r.mon, recent=recent)
        assert any(row.parent == topic for row in snap.suppressions)
        text = _drawn(snap)
        for bad in ("\x1b[2J", "\u202e", "\u2028", "\x85", "\x00"):
            assert bad not in text, repr(bad)
        # Drawn escaped, each in full ([/] as it is, not markup): the reason in the recent
        # failed event, the silence's reason, the disconnect's text.
        assert text.count(SHOWN) == 3, text
        assert f": {SHOWN}" in text and f"tcp://h: {SHOWN}" in text
        return
    raise AssertionError("no rig")


def test_terminal_safe_escapes_what_is_not_printable_and_keeps_the_rest() -> None:
    from heartwire._text import terminal_safe

    assert terminal_safe("disk full [/] é 日本 🎉") == "disk full [/] é 日本 🎉"
    assert terminal_safe("\x1b]0;t\x07\t\n\x7f") == "\\x1b]0;t\\x07\\x09\\x0a\\x7f"
    assert terminal_safe("\u202a\u2066\u200b\u2029") == "\\u202a\\u2066\\u200b\\u2029"
    assert terminal_safe("\ud800") == "\\ud800"  # a lone surrogate (the decoder escapes them)
    assert terminal_safe("\U000e0001") == "\\U000e0001"  # a tag character (format)


@pytest.mark.usefixtures("brokers")
def test_the_title_shows_the_broker_url_without_its_password() -> None:
    """``--broker stomp://user:password@host`` is drawn in the title: its password is not."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import heartwire as hw

    login = url("rabbitmq").replace("stomp://", "stomp://guest:guest@")
    env = dict(os.environ, PYTHONPATH=str(Path(hw.__file__).resolve().parents[1]))
    argv = [sys.executable, "-m", "heartwire", "status", "svc.>", "--broker", login]
    argv += ["--period", "1", "--refresh", "0.2", "--duration", "0.5"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "on stomp://guest:***@127.0.0.1:61623" in proc.stdout, proc.stdout[:2000]
    assert "guest:guest" not in proc.stdout
