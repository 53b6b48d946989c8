"""Spark freshness and outages through ``benches/spark_bench.py`` (run from the parent)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runner import HERE, ROOT


def run_spark(rows: int, events: int) -> dict[str, Any]:
    """Spark freshness and outages (issue 6) through ``benches/spark_bench.py`` on a local
    session: each heartwire engine against Spark's own way and a pandas UDF, best of one timed
    run after a warm-up. Skipped when pyspark is not installed."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return {"skipped": "pyspark is not installed (the spark extra)"}
    t = time.monotonic()
    print(f"  - spark_bench.py rows={rows} events={events} ...", end="", flush=True)
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(
            tempfile.NamedTemporaryFile(suffix=".json", prefix="spark-bench-")
        )
        cmd = [sys.executable, str(HERE / "spark_bench.py"), "--rows", str(rows)]
        cmd += ["--events", str(events), "--repeat", "1", "--no-plain", "--json", tmp.name]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
        except subprocess.TimeoutExpired:
            print(" did not finish in 900 s", flush=True)
            return {"error": "did not finish in 900 s"}
        print(f" {time.monotonic() - t:.1f} s", flush=True)
        if done.returncode != 0:
            return {"error": (done.stderr or done.stdout)[-2000:]}
        out: dict[str, Any] = json.loads(Path(tmp.name).read_text())
    out.update(rows=rows, events=events, elapsed_s=time.monotonic() - t)
    return out
