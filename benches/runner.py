"""Running scenarios in child processes of their own (``suite.py --child NAME --params JSON``),
and the thread-count ladders that stop where a baseline breaks.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from measure import proc_cpu_s, system_threads

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def child_cmd(name: str, params: dict[str, Any]) -> list[str]:
    return [sys.executable, str(HERE / "suite.py"), "--child", name, "--params", json.dumps(params)]


def parse_child(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    raise ValueError("no result line")


def run_child(name: str, timeout: float = 300.0, **params: Any) -> dict[str, Any]:
    """Run one scenario in a child process; on a timeout, say what CPU it was burning."""
    t = time.monotonic()
    label = f"{name} {json.dumps(params, separators=(',', ':'))}"
    print(f"  - {label} ...", end="", flush=True)
    proc = subprocess.Popen(
        child_cmd(name, params), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    samples: list[tuple[float, float]] = []

    def sample() -> None:
        while proc.poll() is None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                samples.append((time.monotonic(), proc_cpu_s(proc.pid)))
            time.sleep(1.0)

    threading.Thread(target=sample, daemon=True).start()
    result: dict[str, Any] | None = None
    try:
        out, err = proc.communicate(timeout=timeout)
        try:
            result = parse_child(out) if proc.returncode == 0 else None
        except ValueError:
            result = None
        error = None if result is not None else (err or out)[-2000:]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        recent = [x for x in samples if x[0] >= samples[-1][0] - 10] if samples else []
        cpu = None
        if len(recent) >= 2:
            cpu = 100 * (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])
        error = f"did not finish in {timeout:.0f} s"
        if cpu is not None:
            error += f" (burning {cpu:.0f}% of a core at the end)"
        print(f" {time.monotonic() - t:.1f} s: {error}", flush=True)
        return {"error": error, "timeout": True, "cpu_pct_at_end": cpu, "params": params}
    print(f" {time.monotonic() - t:.1f} s" + ("" if error is None else " FAILED"), flush=True)
    if error is not None:
        print("    " + error.strip().replace("\n", "\n    "), flush=True)
        return {"error": error, "params": params}
    assert result is not None
    result["elapsed_s"] = time.monotonic() - t
    return result


def broken(r: dict[str, Any]) -> str | None:
    """Why a thread-per-X run is broken (None if it kept up)."""
    if "error" in r:
        return str(r["error"]).strip().splitlines()[-1]
    if r["wall_s"] > 1.5 * r["params"]["window"]:
        window = r["params"]["window"]
        return f"a {window:g} s window took {r['wall_s']:.0f} s (main thread starved)"
    if "failed_expected" in r and r["failed_events"] > 1.5 * r["failed_expected"] + 5:
        return f"{r['failed_events']} failures reported for {r['failed_expected']:.0f} real ones"
    period = r["params"]["period"]
    if "sends_per_s" in r and r["sends_per_s"] < 0.9 * r["n"] / period:
        return f"{r['sends_per_s']:.0f} sends/s instead of {r['n'] / period:.0f}"
    d = r.get("lateness") or r.get("jitter") or {}
    p99 = d.get("p99_ms")
    if p99 is not None and p99 > 100 * period:  # late by more than a tenth of the period
        return f"p99 {p99:.0f} ms late: over a tenth of the period"
    return None


def ladder(
    name: str, counts: list[int], pid_max: int, params: dict[str, Any], until_broken: bool = True
) -> dict[str, Any]:
    """Run ``name`` at growing thread counts until it breaks (``until_broken``; else until a run
    fails or times out) or would crowd the machine."""
    headroom = pid_max - system_threads() - 8192
    steps: list[dict[str, Any]] = []
    for n in counts:
        if n > headroom:
            steps.append({"n": n, "skipped": f"only {headroom} threads of headroom (pid_max)"})
            break
        timeout = 20 + params.get("period", 1.0) + params["warmup"] + 2 * params["window"] + n / 500
        r = run_child(name, timeout=timeout, n=n, **params)
        r.setdefault("n", n)
        r["params"] = {**params, "n": n}
        why = broken(r)
        r["broken"] = why
        steps.append(r)
        if why and (until_broken or "error" in r):
            break
    return {"pid_max": pid_max, "headroom": headroom, "ladder": steps}
