"""heartwire against what users would otherwise run (issue 7): every figure, one command.

::

    .venv/bin/python benches/suite.py            # the full suite (~10-12 min), writes results.md
    .venv/bin/python benches/suite.py --quick    # a smoke run (about a minute), prints only
    .venv/bin/python benches/suite.py --only beats,tick --quick

Each scenario runs in a child process of its own (clean RSS, CPU time and threads), and each
heartwire figure is measured in the same run as its baseline (interleaved round by round where
the measurement is short, one after the other where it is a steady-state window), so figures are
read as ratios; absolute numbers are context from a shared, noisy machine. See benches/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# Each scenario module registers its child scenario (``--child NAME``) on import.
import scenarios.beats  # noqa: E402
import scenarios.handoff  # noqa: E402
import scenarios.publishers  # noqa: E402
import scenarios.rss  # noqa: E402
import scenarios.steady  # noqa: E402
import scenarios.threads  # noqa: E402
import scenarios.tick  # noqa: E402, F401
from render import figures, machine, threads_table, write_markdown  # noqa: E402
from runner import ladder, run_child  # noqa: E402
from scenarios import SCENARIOS  # noqa: E402
from scenarios.cargo import run_cargo  # noqa: E402
from scenarios.e2e import E2E_READERS, run_e2e  # noqa: E402
from scenarios.spark import run_spark  # noqa: E402

# ----- planning ----------------------------------------------------------------------------------


def beats_at(n: int, rounds: int, calls: int, monitor: bool, asy: bool, phi: bool) -> dict:
    return dict(n=n, rounds=rounds, single_calls=calls, monitor=monitor, asyncio_=asy, phi=phi)


def plan(quick: bool) -> dict[str, Any]:
    if quick:  # a smoke run: every scenario once, small windows, no 100k beats, no ladders
        return {
            "beats": [
                beats_at(10_000, 1, 10_000, True, True, True),
                beats_at(1_000_000, 1, 50_000, False, False, False),
            ],
            "tick": dict(n=1_000_000, rounds=1, rearm=False, monitor=True),
            "rss": ["hw_detector", "heap"],
            "steady": dict(impls=["heartwire", "heap"], warmup=2.2, window=2.0),
            "threads": dict(ladder=[1000], warmup=1.0, window=1.5),
            "handoff": dict(warmup=1.0, window=1.5),
            "publishers": dict(n=10_000, ladder=[1000], warmup=1.0, window=1.5),
            "e2e": dict(
                brokers=["activemq", "rabbitmq"], readers=list(E2E_READERS), total=50_000, repeat=1
            ),
            # Spark's start-up alone takes most of a minute here: only with --only spark.
            "spark": dict(rows=200_000, events=200_000),
        }
    return {
        "beats": [
            beats_at(10_000, 5, 10_000, True, True, True),
            beats_at(100_000, 5, 100_000, True, True, False),
            beats_at(1_000_000, 5, 100_000, True, True, False),
        ],
        "tick": dict(n=1_000_000, rounds=2, rearm=True, monitor=True),
        "rss": ["hw_detector", "hw_monitor", "heap", "asyncio"],
        "steady": dict(impls=["heartwire", "heap", "asyncio", "null"], warmup=3.0, window=10.0),
        "threads": dict(ladder=[1000, 2000, 5000, 7500, 10_000, 20_000], warmup=2.0, window=3.0),
        "handoff": dict(warmup=2.0, window=6.0),
        "publishers": dict(n=10_000, ladder=[1000, 5000, 10_000], warmup=2.0, window=6.0),
        "e2e": dict(
            brokers=["activemq", "rabbitmq"], readers=list(E2E_READERS), total=200_000, repeat=2
        ),
        "spark": dict(rows=1_000_000, events=1_000_000),
    }


ALL = [
    "beats",
    "tick",
    "rss",
    "steady",
    "threads",
    "handoff",
    "publishers",
    "e2e",
    "spark",
    "cargo",
]


def run_all(quick: bool, only: list[str], cargo: bool) -> dict[str, Any]:
    p = plan(quick)
    res: dict[str, Any] = {}
    if "beats" in only:
        print("beats/s from Python", flush=True)
        res["beats"] = [run_child("beats", **params) for params in p["beats"]]
    if "tick" in only:
        print("a tick with 1M expiries", flush=True)
        res["tick"] = run_child("tick", **p["tick"])
    if "rss" in only:
        print("RSS per topic at 1M", flush=True)
        res["rss"] = {k: run_child("rss", kind=k, n=1_000_000) for k in p["rss"]}
    if "steady" in only:
        print("steady state: 100k topics at 1 Hz, 1% failing", flush=True)
        s = p["steady"]
        res["steady"] = {
            impl: run_child(
                "steady",
                impl=impl,
                n=100_000,
                fail_every=100,
                period=1.0,
                tick_s=0.01,
                warmup=s["warmup"],
                window=s["window"],
            )
            for impl in s["impls"]
        }
    # pid_max bounds every thread on this (shared) machine: leave room for everyone else.
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    if "threads" in only:
        print("thread per subscriber: where it breaks", flush=True)
        t = p["threads"]
        res["threads"] = ladder(
            "threads",
            t["ladder"],
            pid_max,
            dict(period=1.0, fail_every=100, warmup=t["warmup"], window=t["window"]),
        )
    if "handoff" in only:
        print("listener hand-off", flush=True)
        h = p["handoff"]
        res["handoff"] = {
            f"{impl}{'+slow' if slow else ''}": run_child(
                "handoff", impl=impl, slow=slow, rate=1000, warmup=h["warmup"], window=h["window"]
            )
            for impl in ("heartwire", "queue")
            for slow in (False, True)
        }
    if "publishers" in only:
        print("10 000 publishers at 1 Hz; thread per publisher: where it breaks", flush=True)
        q = p["publishers"]
        params = dict(period=1.0, warmup=q["warmup"], window=q["window"])
        res["publishers"] = {
            "heartwire": run_child("publishers", impl="heartwire", n=q["n"], **params),
            "threads": ladder(
                "publishers", q["ladder"], pid_max, dict(impl="threads", **params), False
            ),
        }
    if "e2e" in only:
        print("end to end over STOMP: a flood, per-beat receive CPU", flush=True)
        res["e2e"] = run_e2e(**p["e2e"])
    if "spark" in only and (not quick or only == ["spark"]):
        print("Spark freshness and outages (benches/spark_bench.py)", flush=True)
        res["spark"] = run_spark(**p["spark"])
    if "cargo" in only and cargo:
        print("cargo benches (core, footprint)", flush=True)
        res["cargo"] = run_cargo()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run, about a minute")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {ALL}")
    ap.add_argument("--no-cargo", action="store_true", help="skip the cargo benches")
    ap.add_argument("--json", help="write the raw results here (full run: benches/results.json)")
    ap.add_argument("--write", help="write the results table here (full run: benches/results.md)")
    ap.add_argument("--from-json", help="render the table from a saved results.json, run nothing")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        result = SCENARIOS[args.child](**json.loads(args.params or "{}"))
        print(json.dumps(result), flush=True)
        # No interpreter shutdown: thousands of baseline threads may still hold up the GIL.
        os._exit(0)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = set(only) - set(ALL)
    if unknown:
        ap.error(f"unknown scenario(s): {sorted(unknown)}; expected some of {ALL}")
    full = not args.quick and set(only) == set(ALL)
    cargo = not args.quick and not args.no_cargo
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        full = False
    else:
        started = datetime.datetime.now(datetime.timezone.utc)
        t0 = time.monotonic()
        res = run_all(args.quick, only, cargo)
        res["meta"] = {
            "date": started.strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["benches/suite.py", *sys.argv[1:]]),
            "quick": args.quick,
            "wall_s": time.monotonic() - t0,
            "machine": machine(),
        }
    table = figures(res)
    print()
    print(table.markdown())
    tt = threads_table(res)
    if tt:
        print()
        print(tt)
    print(f"\n{res['meta']['wall_s']:.0f} s in all")
    json_path = args.json or (str(HERE / "results.json") if full else None)
    if json_path:
        Path(json_path).write_text(json.dumps(res, indent=1) + "\n")
    md_path = args.write or (str(HERE / "results.md") if full else None)
    if md_path:
        write_markdown(Path(md_path), res, table.markdown(), tt)
        print(f"wrote {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
