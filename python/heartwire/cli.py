"""The ``heartwire`` command."""

from __future__ import annotations

import argparse
import sys


def _positive(kind: type) -> object:
    def parse(text: str) -> object:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="heartwire", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="a simulated fleet with a live status view")
    demo.add_argument("--topics", type=_positive(int), default=300, help="services (default 300)")
    demo.add_argument("--period", type=_positive(float), default=0.2, help="beat period, s")
    demo.add_argument("--duration", type=_positive(float), default=10.0, help="run time, s")
    demo.add_argument("--seed", type=int, default=7, help="chaos seed")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from heartwire.demo import run_demo

        report = run_demo(args.topics, args.period, args.duration, args.seed)
        print("\n".join(["", "summary:", *("  " + line for line in report.lines())]))
        return 0 if report.outages_detected > 0 or report.outages_caused == 0 else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
