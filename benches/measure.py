"""The suite's measuring helpers: RSS, CPU (process, thread, machine), percentiles, interleaved
timings, pacing. Used by the scenarios, in the child processes and in the parent.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Callable
from typing import Any


def rss_bytes() -> int:
    """This process's resident set size (VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return total - idle, total


def system_threads() -> int:
    """Threads (tasks) running on the whole machine."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                count += len(os.listdir(f"/proc/{entry}/task"))
    return count


def thread_ticks() -> dict[str, int]:
    """CPU clock ticks used so far by each thread of this process, by thread name (Python
    threads by their ``threading`` name, others by their OS name)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/self/task/{tid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
            fields = rest.split()
            name = names.get(int(tid)) or head.split("(", 1)[1]
            out[name] = out.get(name, 0) + int(fields[11]) + int(fields[12])
    return out


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Window:
    """A measured stretch of wall time: this process's CPU and the whole machine's load."""

    def __init__(self) -> None:
        self.wall0 = time.monotonic()
        self.cpu0 = time.process_time()
        self.m0 = machine_jiffies()
        self.t0 = thread_ticks()

    def close(self) -> dict[str, float]:
        wall = time.monotonic() - self.wall0
        cpu = time.process_time() - self.cpu0
        busy1, total1 = machine_jiffies()
        busy = (busy1 - self.m0[0]) / max(1, total1 - self.m0[1])
        tick = os.sysconf("SC_CLK_TCK")
        per_thread = {
            name: 100.0 * (ticks - self.t0.get(name, 0)) / tick / wall
            for name, ticks in thread_ticks().items()
        }
        return {
            "threads_cpu_pct": {k: round(v, 2) for k, v in per_thread.items() if v > 0},
            "wall_s": wall,
            "cpu_s": cpu,
            "cpu_pct": 100.0 * cpu / wall,  # percent of one core
            "machine_busy_pct": 100.0 * busy,  # percent of all cores, every process
        }


def sample_window(
    samples: list[float], warmup: float, window: float
) -> tuple[dict[str, Any], list[float]]:
    """Sleep ``warmup`` s, then measure a ``window`` s :class:`Window`: its figures and the
    ``samples`` appended (by other threads) during it."""
    time.sleep(warmup)
    i0 = len(samples)
    w = Window()
    time.sleep(window)
    return w.close(), samples[i0:]


def pctl(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100.0 * (len(s) - 1))))]


def dist(values: list[float]) -> dict[str, float | int | None]:
    """p50/p99/max of seconds, in milliseconds."""

    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    return {
        "n": len(values),
        "p50_ms": ms(pctl(values, 50)),
        "p99_ms": ms(pctl(values, 99)),
        "max_ms": ms(max(values) if values else None),
    }


def median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each contender, run in turn round after round (plus one warm-up)."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds + 1):
        for name, fn in contenders.items():
            gc.collect()
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            if r:
                times[name].append(dt)
    return {name: median(ts) for name, ts in times.items()}


def topic_name(i: int) -> str:
    return f"svc.region-{i % 64:02d}.host-{i:07d}"


def pace(t: float) -> None:
    """Sleep until monotonic time ``t``."""
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)
