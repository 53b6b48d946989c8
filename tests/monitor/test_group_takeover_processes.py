"""Monitor group takeover with real processes on each real broker (issue 18's scenario, sized
for CI; the 20 000-topic run is ``benches/group_takeover.py``).

Three member processes (``tests/monitor/group_helper.py``) of a 16-shard group watch
``<group>.>`` (topics named after the run's group: runs sharing a broker never hear each
other's beats; period 1 s, STOMP heart-beat 1 s); one publisher process beats 2000 topics.
Then, in order:
20 topics stop beating at a known time; the member owning the most shards is killed (kill -9);
another is stopped (SIGSTOP) for 10 s; the killed one is started again. Asserted from the
members' event files: no live topic ever failed; each stopped topic failed; every shard is
owned again after the kill; shards rebalance after the restart; a stopped topic is never
reported anew as a first failure after a handover (the new owner adopts its outage).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import heartwire as hw
from heartwire.groups import ShardLayout, declare_rabbitmq
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

SHARDS = 16
TOPICS = 2000
DEAD = 20
ROOT = Path(__file__).resolve().parents[2]


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def _wait(what: str, cond: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class Run:
    dir: Path
    url: str
    group: str
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)

    def spawn(self, role: str, name: str, *extra: str) -> None:
        env = dict(os.environ)
        # the heartwire this process imported (a clean clone's python/ has no compiled core:
        # CI installs it), and the repository for tests.monitor.group_helper
        where = os.path.dirname(os.path.dirname(hw.__file__))
        env["PYTHONPATH"] = os.pathsep.join([where, str(ROOT)])
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.monitor.group_helper",
                role,
                "--url",
                self.url,
                "--group",
                self.group,
                "--shards",
                str(SHARDS),
                "--out",
                str(self.dir / f"{name}.jsonl"),
                "--name",
                name,
                *extra,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / f"{name}.err", "ab"),  # noqa: SIM115
        )

    def owned(self, name: str) -> set[int]:
        rows = [r for r in _read(self.dir / f"{name}.jsonl") if r["event"] == "owned"]
        return set(rows[-1]["shards"]) if rows else set()

    def owners(self, names: list[str]) -> dict[str, set[int]]:
        return {n: self.owned(n) for n in names}

    def events(self, name: str) -> list[dict[str, Any]]:
        return _read(self.dir / f"{name}.jsonl")

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.terminate()
                    p.wait(10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    p.kill()
                    p.wait()


MEMBERS = ["a", "b", "c"]
SHARE = math.ceil(SHARDS / len(MEMBERS))


def _all_owned(run: Run, names: list[str]) -> bool:
    sets = run.owners(names).values()
    return sum(len(s) for s in sets) == SHARDS and set().union(*sets) == set(range(SHARDS))


def _scenario(run: Run, topics: int = TOPICS, dead_n: int = DEAD, period: float = 1.0) -> None:
    """The scenario of the module docs (``topics`` beating every ``period`` seconds, the
    first ``dead_n`` stopped); times in ``run.marks``, written to ``marks.json``."""
    p = ["--period", str(period)]
    for name in MEMBERS:
        run.spawn("member", name, *p)
    _wait("three members to start", lambda: all(run.events(n) for n in MEMBERS), 30)
    run.spawn(
        "publisher",
        "pub",
        *p,
        "--topics",
        str(topics),
        "--dead",
        str(dead_n),
        "--stop-file",
        str(run.dir / "stop"),
    )
    _wait(
        f"the 16 shards owned, at most {SHARE} by any member",
        lambda: (
            _all_owned(run, MEMBERS) and max(len(s) for s in run.owners(MEMBERS).values()) <= SHARE
        ),
        45 * period,
    )
    time.sleep(3 * period)  # every topic heard by its owner
    (run.dir / "stop").touch()
    _wait(
        "the publisher to stop the dead topics",
        lambda: any(r["event"] == "stopped" for r in run.events("pub")),
        10,
    )
    run.marks["stopped"] = next(r["at"] for r in run.events("pub") if r["event"] == "stopped")
    dead = {f"{run.group}.t{i}" for i in range(dead_n)}
    _wait(
        "every stopped topic to fail",
        lambda: (
            dead <= {r["topic"] for n in MEMBERS for r in run.events(n) if r["event"] == "failed"}
        ),
        15 * period,
    )
    # The member's snapshots carry an outage a quarter period at most after its failure
    # (docs/groups.md): a kill sooner would hand it over as not yet FAILED.
    time.sleep(0.5 * period)
    owners = run.owners(MEMBERS)
    victim = max(MEMBERS, key=lambda n: len(owners[n]))
    run.marks["killed_shards"] = len(owners[victim])
    run.marks["kill"] = time.time()
    run.procs[victim].kill()
    run.procs[victim].wait()
    survivors = [n for n in MEMBERS if n != victim]
    _wait("the survivors to own every shard", lambda: _all_owned(run, survivors), 20)
    time.sleep(
        4 * period
    )  # the dead topics taken over fail again on their new owners (period + grace)
    owners = run.owners(survivors)
    hung = max(survivors, key=lambda n: len(owners[n]))
    os.kill(run.procs[hung].pid, signal.SIGSTOP)
    run.marks["stop"] = time.time()
    try:
        time.sleep(10)
    finally:
        os.kill(run.procs[hung].pid, signal.SIGCONT)
    run.marks["cont"] = time.time()
    # The broker moves the hung member's shards to the other one on missed heart-beats. On
    # ActiveMQ, with the hung member's socket full of beats, it may not drop it within the 10 s
    # (docs/groups.md): then the member, woken, carries on with its shards (its local-pause
    # guard keeps it from failing anything at the wake-up).
    # (Whether the hung member kept shards is noted at this one look: a woken member can lose
    # them a moment later, when the broker drops its stale connection.)
    _wait("the survivors to own every shard", lambda: _all_owned(run, survivors), 20)
    run.marks["hung_kept"] = float(bool(run.owned(hung)))
    run.spawn("member", victim, *p)
    run.marks["restart"] = time.time()
    _wait(
        f"a rebalance after the restart: each member owns 1 to {SHARE} shards",
        lambda: (
            _all_owned(run, MEMBERS)
            and all(1 <= len(s) <= SHARE for s in run.owners(MEMBERS).values())
        ),
        60 * period,
    )
    time.sleep(3 * period)
    run.marks["end"] = time.time()
    (run.dir / "marks.json").write_text(json.dumps(run.marks))


@pytest.fixture(scope="module", params=["activemq", "rabbitmq"])
def takeover(
    request: pytest.FixtureRequest,
    brokers: None,  # noqa: F811  (the session fixture)
    tmp_path_factory: Any,
) -> Iterator[Run]:
    broker = request.param
    group = f"hwt{uuid.uuid4().hex[:8]}"
    if broker == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(ShardLayout(group, SHARDS), f"{group}.>", expires=300)
    run = Run(tmp_path_factory.mktemp(f"group-{broker}"), B.url(broker) + "?heartbeat=1", group)
    try:
        _scenario(run)
    except BaseException:
        run.close()
        for f in sorted(run.dir.iterdir()):
            if f.suffix == ".err" and f.stat().st_size:
                print(f.name, f.read_text()[-3000:], file=sys.stderr)
        raise
    run.close()
    yield run


def measure(run: Run, dead_n: int = DEAD) -> dict[str, float | None]:
    """Takeover times from a run's files, seconds: kill -9 -> the first of the victim's shards
    delivered to a survivor (``kill_first``), -> every shard owned again (``kill_all``), -> the
    first failure of a stopped topic of the victim's shards reported by a survivor
    (``kill_failed``); SIGSTOP -> the first of the hung member's shards delivered to the other
    (``hung_first``: None if only after SIGCONT, ``cont`` seconds after the stop)."""

    def owned_at(name: str, t: float) -> set[int]:
        last: set[int] = set()
        for r in run.events(name):
            if r["event"] == "owned" and r["at"] <= t:
                last = set(r["shards"])
        return last

    m = run.marks
    kill, stop = m["kill"], m["stop"]
    victim = max(MEMBERS, key=lambda n: len(owned_at(n, kill - 0.01)))
    vs = owned_at(victim, kill - 0.01)
    surv = [n for n in MEMBERS if n != victim]
    moves = sorted(
        r["at"]
        for n in surv
        for r in run.events(n)
        if r["event"] == "owned" and r["at"] > kill and set(r["shards"]) & vs
    )
    all_at = next(
        (t for t in moves if set().union(*(owned_at(n, t) for n in surv)) == set(range(SHARDS))),
        None,
    )
    dead = {
        f"{run.group}.t{i}"
        for i in range(dead_n)
        if ShardLayout("x", SHARDS).shard_of(f"{run.group}.t{i}") in vs
    }
    failed = [
        r["at"]
        for n in surv
        for r in run.events(n)
        if r["event"] == "failed" and r["topic"] in dead and r["at"] > kill
    ]
    hung = max(surv, key=lambda n: len(owned_at(n, stop - 0.01)))
    other = next(n for n in surv if n != hung)
    hs = owned_at(hung, stop - 0.01)
    hmoves = [
        r["at"]
        for r in run.events(other)
        if r["event"] == "owned" and r["at"] > stop and set(r["shards"]) & hs
    ]
    return {
        "kill_shards": float(len(vs)),
        "kill_first": moves[0] - kill if moves else None,
        "kill_all": None if all_at is None else all_at - kill,
        "kill_failed": min(failed) - kill if failed else None,
        "hung_first": min(hmoves) - stop if hmoves and min(hmoves) < m["cont"] else None,
        "hung_any": min(hmoves) - stop if hmoves else None,
        "cont": m["cont"] - stop,
    }


def _failed(run: Run) -> list[dict[str, Any]]:
    """Every failed event of the members until the scenario's end (the teardown's are not)."""
    return [
        dict(r, member=n)
        for n in MEMBERS
        for r in run.events(n)
        if r["event"] == "failed" and r["at"] <= run.marks["end"]
    ]


def test_no_live_topic_fails_and_every_stopped_topic_does(takeover: Run) -> None:
    dead = {f"{takeover.group}.t{i}" for i in range(DEAD)}
    failed = _failed(takeover)
    live_failed = sorted({r["topic"] for r in failed} - dead)
    assert live_failed == [], f"live topics failed: {live_failed[:20]}"
    assert {r["topic"] for r in failed} == dead
    # After the kill every stopped topic is still failing somewhere (repeats or anew).
    late = {r["topic"] for r in failed if r["at"] > takeover.marks["cont"] + 3}
    assert late == dead, f"stopped topics not reported after the handovers: {dead - late}"


def test_publisher_kept_up(takeover: Run) -> None:
    print(takeover.url, measure(takeover))  # the takeover times (pytest -s shows them)
    late = [r for r in takeover.events("pub") if r["event"] == "late"]
    assert late == [], f"the publisher fell behind its period (results unreliable): {late[:3]}"


def test_a_stopped_topic_is_not_reported_anew_after_a_handover(takeover: Run) -> None:
    firsts: dict[str, int] = {}
    for r in _failed(takeover):
        if r["missed"] == 1:
            firsts[r["topic"]] = firsts.get(r["topic"], 0) + 1
    anew = {t: n for t, n in firsts.items() if n > 1}
    assert anew == {}, f"stopped topics reported anew as a first failure: {anew}"
    # Each outage keeps its since across the handovers (members' clocks differ by a few ms;
    # a fresh start would move it by a period or more).
    since: dict[str, list[float]] = {}
    for r in _failed(takeover):
        since.setdefault(r["topic"], []).append(r["since"])
    moved = {t: max(v) - min(v) for t, v in since.items() if max(v) - min(v) > 0.5}
    assert moved == {}, f"stopped topics whose since moved at a handover (s): {moved}"
