"""End to end over STOMP (run from the parent, not a child scenario): a raw-socket publisher
floods a broker and each reader of ``wire.py`` counts the beats.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from runner import HERE, ROOT, parse_child


def broker_up(name: str = "activemq") -> tuple[bool, str]:
    status = subprocess.run(
        [str(ROOT / "scripts" / "brokers"), "status", name],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return status.returncode == 0, status.stdout.strip()


E2E_BROKERS = {"activemq": 61613, "rabbitmq": 61623}


E2E_READERS = {"raw": "raw socket", "stomppy": "stomp.py", "monitor": "HeartbeatMonitor"}


def wire_cmd(what: str, params: dict[str, Any]) -> list[str]:
    return [sys.executable, str(HERE / "wire.py"), what, json.dumps(params)]


def e2e_once(broker: str, impl: str, total: int, topics: int) -> dict[str, Any]:
    """One reader (``wire.py read``) counting a flood of ``total`` beats over ``topics`` topics
    from a raw-socket publisher (``wire.py publish``, as fast as the broker takes them)."""
    import secrets

    host, port = "127.0.0.1", E2E_BROKERS[broker]
    # ActiveMQ keeps a destination per topic: the same 1000 names each run. RabbitMQ: a fresh
    # prefix, so no run sees another's beats.
    prefix = "svc.e2e" if broker == "activemq" else f"flood{secrets.token_hex(3)}"
    rounds = max(1, total // topics)
    total = rounds * topics
    params = dict(impl=impl, host=host, port=port, prefix=prefix, n=topics, expected=total)
    params.update(until=time.time() + 240, dialect=broker, period=60.0, idle=3.0, sample=0.01)
    recv = subprocess.Popen(
        wire_cmd("read", params), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert recv.stdout is not None
    line = recv.stdout.readline()
    if "READY" not in line:
        recv.kill()
        _, err = recv.communicate()
        return {"impl": impl, "broker": broker, "error": f"reader did not start: {err[-500:]}"}
    pub_params = dict(host=host, port=port, prefix=prefix, n=topics, period=60.0, rounds=rounds)
    send = subprocess.run(
        wire_cmd("publish", {**pub_params, "flood": True}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    out, err = recv.communicate(timeout=300)
    try:
        r = parse_child(out)
        p = parse_child(send.stdout)
    except ValueError:
        return {"impl": impl, "broker": broker, "error": (send.stderr or err or out)[-1000:]}
    ts, cs, cpus, _ = r.pop("samples")
    first = next((i for i, c in enumerate(cs) if c), None)
    last = max(range(len(cs)), key=lambda i: (cs[i], -i))  # first sample at the final count
    result = {"impl": impl, "broker": broker, "sent": p["sent"], "sender_rate": p["rate"]}
    result.update({k: r[k] for k in ("counted", "rss_max", "errors") if k in r})
    if first is not None and last > first and cs[last] > cs[first]:
        beats = cs[last] - cs[first]
        result["rate"] = beats / (ts[last] - ts[first])
        result["cpu_us_per_msg"] = 1e6 * (cpus[last] - cpus[first]) / beats
    return result


def run_e2e(brokers: list[str], readers: list[str], total: int, repeat: int) -> dict[str, Any]:
    """Per-beat receive CPU on a flood: each reader counts what a raw-socket publisher pushes
    (``total`` beats over 1000 topics) through each broker, one reader at a time, ``repeat``
    rounds. ActiveMQ is shared with the integration tests, which kill and restart it: a run
    that failed is retried once, after waiting for the broker."""
    out: dict[str, Any] = {"total": total, "brokers": {}}
    for broker in brokers:
        up, status = broker_up(broker)
        if not up:
            out["brokers"][broker] = {"skipped": f"{broker} is not running ({status!r})"}
            continue
        results: list[dict[str, Any]] = []
        for _ in range(repeat):
            for impl in readers:
                print(f"  - flood over {broker}: {impl} ({total} beats) ...", end="", flush=True)
                for attempt in range(2):
                    result = e2e_once(broker, impl, total, 1000)
                    if "rate" in result:
                        break
                    if attempt == 0:
                        for _ in range(60):
                            if broker_up(broker)[0]:
                                break
                            time.sleep(1.0)
                        time.sleep(2.0)
                results.append(result)
                if "rate" in result:
                    print(
                        f" {result['rate']:.0f} msg/s, {result['cpu_us_per_msg']:.1f} us CPU/msg"
                        f" ({result['counted']} of {result['sent']})",
                        flush=True,
                    )
                else:
                    print(f" FAILED {str(result.get('error'))[:300]}", flush=True)
        out["brokers"][broker] = {"runs": results}
    return out
