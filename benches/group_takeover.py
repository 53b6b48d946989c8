"""Monitor group takeover at scale, outside CI (issue 18): the scenario of
``tests/monitor/test_group_takeover_processes.py`` (3 member processes of a 16-shard group, one
publisher process, some topics stopped, kill -9 the member owning the most shards, SIGSTOP
another for 10 s, restart the first) with more topics, on one broker, and the takeover times:

    PYTHONPATH=python:. python benches/group_takeover.py --broker rabbitmq --topics 20000 \\
        --dead 100 --period 5

Prints one JSON object: the times of ``measure`` (seconds; ``kill_first``: kill -9 to the first
of the victim's shards delivered to a survivor; ``kill_all``: to every shard owned again;
``kill_failed``: to the first failure of a stopped topic taken over; ``hung_first``: SIGSTOP to
the first of the hung member's shards on the other member, None if only after SIGCONT), the
live topics that failed (0 expected), the stopped topics never reported and the first
failures (``missed`` 1) of stopped topics reported again after a handover (0 expected). One Python
publisher process sends every beat: ``--period`` must leave it time (20 000 topics: 5 s).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from pathlib import Path

from heartwire.groups import ShardLayout, declare_rabbitmq
from tests import brokers as B
from tests.monitor import test_group_takeover_processes as T


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", choices=("activemq", "rabbitmq"), default="rabbitmq")
    parser.add_argument("--topics", type=int, default=20_000)
    parser.add_argument("--dead", type=int, default=100)
    parser.add_argument("--period", type=float, default=5.0)
    args = parser.parse_args()
    group = f"hwbench{uuid.uuid4().hex[:8]}"
    if args.broker == "rabbitmq":
        declare_rabbitmq(ShardLayout(group, T.SHARDS), f"{group}.>", expires=600)
    run = T.Run(
        Path(tempfile.mkdtemp(prefix="group-bench-")), B.url(args.broker) + "?heartbeat=1", group
    )
    try:
        T._scenario(run, args.topics, args.dead, args.period)
    finally:
        run.close()
    dead = {f"{group}.t{i}" for i in range(args.dead)}
    failed = {r["topic"] for r in T._failed(run)}
    firsts = [r["topic"] for r in T._failed(run) if r["missed"] == 1 and r["topic"] in dead]
    late = [r for r in run.events("pub") if r["event"] == "late"]
    print(
        json.dumps(
            {
                "broker": args.broker,
                "topics": args.topics,
                "dead": args.dead,
                "period": args.period,
                **T.measure(run, args.dead),
                "live_failed": len(failed - dead),
                "dead_never_reported": len(dead - failed),
                "dead_reported_anew": len(firsts) - len(set(firsts)),
                "publisher_late_rounds": len(late),
                "files": str(run.dir),
            }
        )
    )


if __name__ == "__main__":
    main()
