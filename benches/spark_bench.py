"""Benchmark of :mod:`heartwire.spark` against its baselines, on a local SparkSession.

    python benches/spark_bench.py [--rows 5000000] [--events 10000000] [--master local[2]]
    python benches/spark_bench.py --compare-batches 10000,100000 --repeat 5

- freshness over ``--rows`` rows (timestamp ``last_seen``, a period per row): the Rust
  ``arrow_udf``, the floor of any ``arrow_udf`` on that input (an identity returning the
  period column: the cost of moving the batches to Python and back), native expressions, a
  ``pandas_udf`` doing the same with NumPy, and a plain ``@udf`` fed the timestamp column
  (one ``datetime`` per row; as pickled rows and as Spark 4's default Arrow-batched Python
  UDF);
- outages and availability over ``--events`` beats (1000 topics with a period of 1 s, beating
  every 0.8 s with jitter, about 0.5% of beats missing: each missing beat is an outage): the
  Rust gap kernel over hash partitions (``mapInArrow``, engine ``rust``) and one topic at a
  time (``groupBy(topic).applyInArrow``, ``rust-grouped``) against the native ``lag()``
  window.

Every query is run to completion into Spark's ``noop`` sink; each figure is the best of
``--repeat`` runs after one warm-up run. Inputs are generated with ``spark.range`` (freshness)
or written once to Parquet in a temporary directory (outages), so both sides read the same.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa


def _session(master: str) -> Any:
    from heartwire._spark_session import build_session

    return build_session("heartwire-bench", master, shuffle_partitions=2, driver_memory="2g")


def _best(run: Callable[[], None], repeat: int) -> float:
    run()  # warm-up: Python workers, codegen
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return min(times)


def _noop(df: Any) -> Callable[[], None]:
    return lambda: df.write.format("noop").mode("overwrite").save()


def _freshness_variants(spark: Any, rows: int, plain: bool) -> tuple[Any, dict[str, Any]]:
    """The freshness input and the columns to time on it, by name."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import arrow_udf, pandas_udf, udf
    from pyspark.sql.types import LongType

    from heartwire import spark as hs

    base = 1_700_000_000_000
    df = spark.range(rows).select(
        F.timestamp_millis(F.lit(base) - (F.col("id") * 7919) % 600_000).alias("last_seen"),
        ((F.col("id") % 4 + 1) * 1000).alias("period"),
    )
    as_of_ms = base + 1000
    as_of = dt.datetime.fromtimestamp(as_of_ms / 1000, dt.timezone.utc)

    def fresh_pandas(last: pd.Series, period: pd.Series) -> pd.DataFrame:
        last_ms = last.to_numpy(dtype="datetime64[ms]").astype(np.int64)
        p = period.to_numpy(dtype=np.int64)
        staleness = as_of_ms - last_ms
        missed = np.where(staleness < 0, 0, staleness // np.where(p > 0, p, 1))
        status = np.where(missed == 0, "alive", np.where(missed < 3, "late", "failed"))
        bad = p <= 0
        return pd.DataFrame(
            {
                "status": pd.Series(status).where(~bad, None),
                "missed": pd.Series(missed).where(~bad, None),
                "staleness_ms": pd.Series(staleness).where(~bad, None),
            }
        )

    pandas_fresh = pandas_udf(fresh_pandas, hs.FRESHNESS_TYPE)  # type: ignore[call-overload]

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

    def fresh_plain(last, period):  # type: ignore[no-untyped-def]  # no hints: a plain udf
        if period is None or period <= 0:
            return (None, None, None)
        if last is None:
            return ("pending", None, None)
        if last.tzinfo is None:
            last = last.astimezone(dt.timezone.utc)
        staleness = as_of_ms - (last - epoch) // dt.timedelta(milliseconds=1)
        missed = max(0, staleness // period)
        status = "alive" if missed == 0 else "late" if missed < 3 else "failed"
        return (status, missed, staleness)

    # Spark 4 runs a plain @udf as an Arrow-batched UDF by default (still one Python call and
    # one datetime per row); useArrow=False is the classic pickled-rows path.
    plain_pickled = udf(fresh_plain, hs.FRESHNESS_TYPE, useArrow=False)
    plain_arrow = udf(fresh_plain, hs.FRESHNESS_TYPE, useArrow=True)

    def identity(last: pa.Array, period: pa.Array) -> pa.Array:
        return period

    # the floor of any arrow_udf here: the same two columns to Python and one long column back,
    # no work (the JVM <-> Python Arrow transfer and the row joining around it)
    floor = arrow_udf(identity, LongType())

    variants: dict[str, Any] = {
        "rust arrow_udf": hs.freshness("last_seen", "period", as_of, 3, engine="rust"),
        "arrow_udf floor (identity)": floor("last_seen", "period"),
        "native": hs.freshness("last_seen", "period", as_of, 3, engine="native"),
        "pandas_udf": pandas_fresh("last_seen", "period"),
    }
    if plain:
        variants["plain @udf, pickled rows"] = plain_pickled("last_seen", "period")
        variants["plain @udf, Arrow-batched"] = plain_arrow("last_seen", "period")
    return df, variants


def bench_freshness(spark: Any, rows: int, repeat: int, plain: bool) -> dict[str, float]:
    df, variants = _freshness_variants(spark, rows, plain)
    out: dict[str, float] = {}
    for name, col in variants.items():
        out[name] = _best(_noop(df.select(col.alias("f"))), repeat)
        print(f"freshness {rows:,} rows  {name:<26} {out[name]:8.2f} s", flush=True)
    return out


def compare_batches(spark: Any, rows: int, repeat: int, sizes: list[int]) -> dict[str, Any]:
    """The Rust UDF, the arrow_udf floor and native freshness under each Arrow batch size,
    interleaved (every round runs each size once) so that a busy machine weighs on all alike;
    best and median of ``repeat`` rounds after a warm-up round."""
    df, variants = _freshness_variants(spark, rows, plain=False)
    names = ["rust arrow_udf", "arrow_udf floor (identity)", "native"]
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    times: dict[tuple[int, str], list[float]] = {(n, v): [] for n in sizes for v in names}
    for round_ in range(repeat + 1):
        for size in sizes:
            spark.conf.set(key, str(size))
            for name in names:
                t = time.perf_counter()
                _noop(df.select(variants[name].alias("f")))()
                if round_:
                    times[size, name].append(time.perf_counter() - t)
    out: dict[str, Any] = {}
    for size in sizes:
        row = {}
        for name in names:
            ts = sorted(times[size, name])
            row[name] = {"best": ts[0], "median": ts[len(ts) // 2]}
            print(
                f"freshness {rows:,} rows  batch {size:>8,}  {name:<26} best {ts[0]:6.2f} s"
                f"  median {ts[len(ts) // 2]:6.2f} s",
                flush=True,
            )
        ratio = row["rust arrow_udf"]["best"] / row["native"]["best"]
        print(f"  rust / native (best): {ratio:.2f}x", flush=True)
        out[str(size)] = row
    return out


def bench_outages(spark: Any, events: int, repeat: int) -> dict[str, float]:
    from pyspark.sql import functions as F

    from heartwire import spark as hs

    topics = 1000
    base = 1_700_000_000_000
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="heartwire-bench-") as tmp:
        path = os.path.join(tmp, "events")
        n = F.col("id") % topics
        k = F.floor(F.col("id") / topics)
        (
            spark.range(events)
            .select(
                F.concat(F.lit("svc."), n.cast("string")).alias("topic"),
                F.timestamp_millis(F.lit(base) + k * 800 + (F.col("id") * 37) % 150).alias("ts"),
            )
            .where(F.abs(F.hash("topic", "ts")) % 200 != 0)
            .write.parquet(path)
        )
        df = spark.read.parquet(path)
        beats = df.count()
        end = base + (events // topics) * 800 + 1000
        kw: dict[str, Any] = dict(period_ms=1000, allowed_misses=1, start=base, end=end)
        for fn in (hs.outages, hs.availability):
            for engine in ("rust", "rust-grouped", "native"):
                name = f"{fn.__name__} {engine}"
                out[name] = _best(_noop(fn(df, engine=engine, **kw)), repeat)  # type: ignore[operator]
                print(f"{fn.__name__} {beats:,} beats  {engine:<13} {out[name]:8.2f} s", flush=True)
        rust_rows = hs.outages(df, engine="rust", **kw).count()
        print(f"({rust_rows:,} outages)", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benches/spark_bench.py", description=__doc__)
    ap.add_argument("--rows", type=int, default=5_000_000, help="freshness rows")
    ap.add_argument("--events", type=int, default=10_000_000, help="beats for outages")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs (best is kept)")
    ap.add_argument("--no-plain", action="store_true", help="skip the slow plain @udf")
    ap.add_argument("--only", choices=["freshness", "outages"], help="run one part")
    ap.add_argument(
        "--arrow-batch",
        type=int,
        help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default: 10000)",
    )
    ap.add_argument(
        "--compare-batches",
        metavar="N,M,...",
        help="instead: freshness only (Rust, arrow_udf floor, native) under these Arrow batch "
        "sizes, interleaved over --repeat rounds",
    )
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    sizes = []
    if args.compare_batches:
        try:
            sizes = [int(n) for n in args.compare_batches.split(",")]
        except ValueError:
            ap.error(f"--compare-batches: not a list of integers: {args.compare_batches!r}")
        if not sizes or min(sizes) < 1:
            ap.error(f"--compare-batches: sizes must be >= 1: {args.compare_batches!r}")
    spark = _session(args.master)
    if args.arrow_batch:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch))
    results: dict[str, Any] = {
        "master": args.master,
        "spark": spark.version,
        "arrow_batch": spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch"),
    }
    if sizes:
        results["compare_batches"] = compare_batches(spark, args.rows, args.repeat, sizes)
    elif args.only in (None, "freshness"):
        results["freshness"] = bench_freshness(spark, args.rows, args.repeat, not args.no_plain)
    if not sizes and args.only in (None, "outages"):
        results["outages"] = bench_outages(spark, args.events, args.repeat)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
