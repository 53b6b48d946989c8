"""The cargo benches, short, as context (run from the parent)."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from runner import ROOT


def run_cargo() -> dict[str, Any]:
    env = dict(os.environ, CARGO_TARGET_DIR=os.environ.get("CARGO_TARGET_DIR", "/tmp/bench-target"))
    out: dict[str, Any] = {}
    for label, args in (
        ("footprint", ["--bench", "footprint"]),
        ("core", ["--bench", "core", "--", "--warm-up-time", "1", "--measurement-time", "2"]),
    ):
        t = time.monotonic()
        print(f"  - cargo bench {' '.join(args)} ...", end="", flush=True)
        done = subprocess.run(
            ["cargo", "bench", *args], capture_output=True, text=True, cwd=ROOT, env=env
        )
        print(f" {time.monotonic() - t:.1f} s", flush=True)
        lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
        keep = [
            ln.strip()
            for ln in lines
            if ln.startswith(("footprint:", "register:", "RSS:", "heap_bytes", "beats_1M"))
            or ln.startswith(("expiries_1M", "wheel_1M"))
            or "thrpt:" in ln
            or ln.strip().startswith("time:")
        ]
        out[label] = {"rc": done.returncode, "lines": keep or lines[-20:]}
    return out
