"""Draw docs/img/timeline.svg, the concepts page's timeline, from what a monitor really does.

The scenario of docs/concepts.md's example (one topic, ``period=1.0``, ``grace=0.0``,
``allowed_misses=1``, expected at 0, a beat at 0.5, silence until a beat at 3.0) runs on a
:class:`~heartwire.ManualClock`; the states, beats, deadlines and events drawn are the ones its
listener received and its status reported, so the picture cannot drift from the code
(tests/package/test_docs_site.py checks the file is what this script draws now).

    PYTHONPATH=python python scripts/docs_timeline.py    # rewrites docs/img/timeline.svg
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import heartwire as hw

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "timeline.svg"
END = 4.5  # seconds shown
WIDTH, LEFT, RIGHT = 760, 90, 70
COLORS = {"PENDING": "#9e9e9e", "ALIVE": "#43a047", "FAILED": "#e53935"}


@dataclass(frozen=True)
class Story:
    """What the monitor did: state spans, beat times, missed deadlines, events (at, label)."""

    spans: list[tuple[float, float, str]]
    beats: list[float]
    deadlines: list[float]
    next_deadline: float
    events: list[tuple[float, str, str]]


class _Record(hw.SubscriberListener):
    def __init__(self) -> None:
        self.seen: list[hw.Received | hw.Failed | hw.Resumed] = []

    def on_received(self, event: hw.Received) -> None:
        self.seen.append(event)

    def on_failed(self, event: hw.Failed) -> None:
        self.seen.append(event)

    def on_resumed(self, event: hw.Resumed) -> None:
        self.seen.append(event)


def run() -> Story:
    """The concepts page's scenario, on a manual clock."""
    clock = hw.ManualClock()
    rec = _Record()
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, grace=0.0, clock=clock, listeners=[rec])
    mon.expect("svc.a")
    mon.start()
    clock.advance(0.5)
    mon.beat("svc.a")
    clock.advance(2.5)
    mon.beat("svc.a")
    assert mon.drain(10.0), "the listener did not get the events within 10 s"
    next_deadline = mon.status("svc.a").next_deadline
    mon.stop()
    assert next_deadline is not None
    spans: list[tuple[float, float, str]] = []
    state, since = "PENDING", 0.0
    beats, deadlines, events = [], [], []
    for ev in rec.seen:
        if isinstance(ev, hw.Received):
            beats.append(ev.at)
            new = "ALIVE" if state == "PENDING" else state
        elif isinstance(ev, hw.Failed):
            deadlines.append(ev.at)
            events.append((ev.at, "failed", f"missed={ev.missed} since={ev.since:g}"))
            new = "FAILED"
        else:
            events.append((ev.at, "resumed", f"missed={ev.missed} downtime={ev.downtime:g}"))
            new = "ALIVE"
        if new != state:
            spans.append((since, ev.at, state))
            state, since = new, ev.at
    spans.append((since, END, state))
    return Story(spans, beats, deadlines, next_deadline, events)


def _x(t: float) -> float:
    return round(LEFT + (WIDTH - LEFT - RIGHT) * t / END, 1)


def draw(story: Story) -> str:
    """The SVG text (deterministic: the same story gives the same bytes)."""
    height = 250
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12" '
        'role="img" aria-label="svc.a: states, beats, deadlines and events over 4 seconds">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        '<text x="10" y="40">state</text>',
        '<text x="10" y="82">beats</text>',
        '<text x="10" y="124">deadlines</text>',
        '<text x="10" y="166">events</text>',
    ]
    for start, end, state in story.spans:
        x0, x1 = _x(start), _x(end)
        out.append(
            f'<rect x="{x0}" y="24" width="{round(x1 - x0, 1)}" height="24" '
            f'fill="{COLORS[state]}"/>'
        )
        out.append(
            f'<text x="{round((x0 + x1) / 2, 1)}" y="40" fill="white" '
            f'text-anchor="middle">{state}</text>'
        )
    for t in story.beats:
        out.append(
            f'<line x1="{_x(t)}" y1="68" x2="{_x(t)}" y2="90" stroke="black" stroke-width="3"/>'
        )
        out.append(f'<text x="{_x(t) + 5}" y="82">beat {t:g}</text>')
    for t in [*story.deadlines, story.next_deadline]:
        missed = t in story.deadlines
        out.append(
            f'<line x1="{_x(t)}" y1="20" x2="{_x(t)}" y2="200" stroke="#555" '
            'stroke-dasharray="4 3"/>'
        )
        label = "missed" if missed else "next deadline"
        out.append(f'<text x="{_x(t) + 4}" y="124">{t:g}: {label}</text>')
    for i, (t, kind, detail) in enumerate(story.events):
        y = 160 + 16 * i
        color = COLORS["FAILED"] if kind == "failed" else COLORS["ALIVE"]
        out.append(f'<circle cx="{_x(t)}" cy="{y - 4}" r="5" fill="{color}"/>')
        out.append(f'<text x="{_x(t) + 9}" y="{y}">{escape(kind)} {escape(detail)}</text>')
    axis = 225
    out.append(f'<line x1="{LEFT}" y1="{axis}" x2="{_x(END)}" y2="{axis}" stroke="black"/>')
    for s in range(int(END) + 1):
        out.append(f'<line x1="{_x(s)}" y1="{axis}" x2="{_x(s)}" y2="{axis + 5}" stroke="black"/>')
        out.append(f'<text x="{_x(s)}" y="{axis + 18}" text-anchor="middle">{s} s</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(draw(run()))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
