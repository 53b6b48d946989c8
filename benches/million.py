"""1 M topics beating once a minute over RabbitMQ, learned by a HeartbeatMonitor (issue 15).

::

    .venv/bin/python benches/million.py                      # 1 M topics, 60 s period, 150 s
    .venv/bin/python benches/million.py --readers raw,monitor  # with the raw-socket baseline
    .venv/bin/python benches/million.py --n 100000 --period 6 --duration 15 --no-write  # small

A raw-socket publisher (``wire.py``) beats ``--n`` topics once a ``--period``, spread evenly
(1 M a minute: 16.7 k beats/s), for ``--duration`` seconds (two and a half periods by default),
and each reader in turn (one at a time, in its own process) counts from the first beat:
``monitor`` is ``HeartbeatMonitor(connect(...), "<prefix>.>", period)`` learning every topic from
its first beat (no ``expect``); ``raw`` is the raw-socket reader, the baseline. Reported per
reader: beats sent and counted, false failures (live topics reported failed: named by a ``failed``
event whose outage began before the end of the schedule plus the grace, 10 % of the period;
every topic beats until then), topics learned, peak RSS (``VmHWM``), CPU, p99 transit (exact,
raw and stomppy), p99 lag (from counts, see ``rabbit_steps.py``) and the publisher's own lag.
Goals (monitor): every beat counted, no false failure, RSS <= 256 MB. Writes
``benches/million.json`` and a section of ``benches/results.md`` (``million:begin``/``end``).
"""

from __future__ import annotations

import argparse
import datetime
import secrets
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import rabbit_steps as rs  # noqa: E402
import wire  # noqa: E402

RSS_GOAL_MB = 256.0


def fmt(x: float | None, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def row(r: dict[str, Any]) -> str:
    label = rs.LABELS[r["reader"]]
    if "error" in r:
        return f"| {label} | | | | | | | | | | **error**: {r['error'][:150]} |"
    ff = "n/a" if r["false_failures"] is None else str(r["false_failures"])
    learned = r.get("learned", r.get("topics"))
    exact = f"{fmt(r['transit']['p99_ms'])} ms" if r["transit"]["n"] else "n/a"
    pub = r["publisher_lag"]["p99_ms"]
    held = " (held back)" if pub is not None and pub > 50 * r["period"] else ""
    return (
        f"| {label} | {r['sent']} | {r['counted']} ({r['counted_pct']:.2f}%) | {ff} | "
        f"{'' if learned is None else learned} | {r['hwm_mb']:.0f} MB | "
        f"{r['reader_cpu_pct']:.0f}% ({fmt(r['cpu_us_per_beat'])} µs/beat) | "
        f"{exact} | {fmt(r['lag_est']['p99_ms'])} ms | {fmt(pub)} ms{held} | "
        f"{goals(r)} |"
    )


def goals(r: dict[str, Any]) -> str:
    if r["reader"] != "monitor":
        return ""
    marks = [
        ("every beat counted", r["counted"] >= r["sent"]),
        ("no false failure", not r["false_failures"]),
        (f"RSS <= {RSS_GOAL_MB:.0f} MB", r["hwm_mb"] <= RSS_GOAL_MB),
    ]
    return "; ".join(f"{what}: {'met' if ok else '**missed**'}" for what, ok in marks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="topics")
    ap.add_argument("--period", type=float, default=60.0, help="seconds between a topic's beats")
    ap.add_argument("--duration", type=float, default=150.0, help="seconds of beats")
    ap.add_argument("--readers", default="monitor", help="some of raw, stomppy, monitor")
    ap.add_argument(
        "--settle", type=float, default=5.0, help="seconds to count after the end (< period/10)"
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=61623, help="RabbitMQ's STOMP port")
    ap.add_argument("--ready-budget", type=float, default=8.0, help="seconds to start up")
    ap.add_argument("--sample", type=float, default=0.02, help="reader sampling interval, s")
    ap.add_argument("--json", default=None, help="raw results (default benches/million.json)")
    ap.add_argument("--write", default=str(HERE / "results.md"), help="markdown file to update")
    ap.add_argument("--no-write", action="store_true", help="print only (and no default JSON)")
    args = ap.parse_args()
    readers = [x.strip() for x in args.readers.split(",") if x.strip()]
    if any(r not in rs.READERS for r in readers) or args.n < 1 or args.period <= 0:
        ap.error(f"bad --readers/--n/--period: {readers}, {args.n}, {args.period}")
    # Counting stops before the first legitimate failure (the end of the schedule plus the
    # grace, a tenth of the period): every failure seen is then a false one.
    args.settle = min(args.settle, 0.08 * args.period)
    wire.check_body()
    run_id = secrets.token_hex(3)
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    runs = []
    for reader in readers:
        print(f"  - {reader}: {args.n} topics, {args.duration:g} s ...", end="", flush=True)
        r = rs.one_run(
            reader,
            args.n,
            host=args.host,
            port=args.port,
            run_id=run_id,
            warmup=0.0,
            window=args.duration,
            settle=args.settle,
            grace=0.1 * args.period,
            ready_budget=args.ready_budget,
            sample=args.sample,
            broker_pid=wire.find_broker_pid("rabbit"),
            period=args.period,
        )
        runs.append(r)
        if "error" in r:
            print(f" ERROR {r['error'][:300]}", flush=True)
        else:
            print(
                f" counted {r['counted']} of {r['sent']}, false failures {r['false_failures']}, "
                f"peak RSS {r['hwm_mb']:.0f} MB",
                flush=True,
            )
    wall = time.monotonic() - t_start
    command = " ".join(["benches/million.py", *sys.argv[1:]])
    rate = args.n / args.period
    md = [
        f"## {args.n} topics at one beat per {args.period:g} s over RabbitMQ, learned "
        "(`benches/million.py`)",
        "",
        f"Command: `.venv/bin/python {command}`, {started:%Y-%m-%d %H:%M} UTC, {wall:.0f} s; "
        f"{rate:.0f} beats/s for {args.duration:g} s.  ",
        rs.machine_line(),
        "",
        "| reader | sent | counted | false failures | topics learned | peak RSS | CPU | "
        "p99 transit | p99 lag (est.) | publisher lag p99 | goals |",
        "| --- |" + " ---: |" * 9 + " --- |",
        *[row(r) for r in runs],
        "",
        "Counted: by the end of the schedule plus the settle time. False failures: topics named "
        "by a `failed` event whose outage began before the end of the schedule plus the grace "
        "(live topics reported failed). Publisher lag held back: over 5 % of the period, the "
        "broker did not take the beats when due (RabbitMQ's flow control pushes back from a "
        "reader's growing queue). Peak RSS: the "
        "reader process's `VmHWM`. p99 transit: receive time minus `sent` (raw and stomp.py); p99 "
        "lag: from counts, sampled (see `rabbit_steps.py`).",
    ]
    res = {
        "meta": {"command": command, "date": f"{started:%Y-%m-%d %H:%M UTC}", "wall_s": wall},
        "args": vars(args),
        "runs": runs,
    }
    rs.save(args, "\n".join(md), res, "million", "million")
    return 0


if __name__ == "__main__":
    sys.exit(main())
