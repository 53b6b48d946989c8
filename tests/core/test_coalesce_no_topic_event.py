"""Review 2 probe: an event about no topic (lagging, caught_up, local_pause: topic id
NO_TOPIC = u32::MAX) parked in a coalescing queue's side table. SideTable::park sizes its
`position` vector by the key: u32::MAX + 1 entries (16 GiB) -> allocation failure (abort) or,
on an overcommitting host, a 16 GiB zero fill. Run in a child with RLIMIT_AS (never OOM the
host)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import heartwire as hw
    from heartwire._core import Detector
    clock = hw.ManualClock()
    det = Detector(clock=clock, period=1.0)
    det.start()
    q = det.subscribe(capacity=4, overflow="coalesce", received=True)
    clock.advance(120.0)
    names = [f"t.{i}" for i in range(64)]
    det.add_many(names)
    for n in names:
        det.beat(n)          # the ring (4) is full, received events parked
    det.note_intake(True, 5.0)   # 'lagging' (topic u32::MAX) -> side table
    clock.advance(2.0)
    det.note_intake(True, 7.0)
    det.note_intake(False, None)  # 'caught_up'
    kinds = []
    while True:
        b = q.try_pop_batch(1000)
        if not b:
            break
        kinds.extend(e.kind for e in b)
    det.stop()
    assert kinds.count("caught_up") == 1, kinds
    print("ok")
    """
)


def test_a_lag_event_in_a_full_coalescing_queue() -> None:
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[:200]
