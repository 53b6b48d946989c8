"""The one SparkSession builder of the repository: ``heartwire report``, ``benches/spark_bench.py``
and the tests' ``spark`` fixture start their sessions here, with the settings they share.

PySpark is imported when a session is built, not when this module is: it stays as lazy as it is
in :mod:`heartwire.report`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from heartwire import _validate


def build_session(
    app_name: str,
    master: str = "local[2]",
    *,
    shuffle_partitions: int | None = None,
    parallelism: int | None = None,
    driver_memory: str | None = None,
    log_level: str = "ERROR",
    force_python: bool = False,
) -> Any:
    """A SparkSession on ``master`` (``getOrCreate``: one already running is returned as it is).

    Always: the web UI and the console progress bar off, the session time zone UTC, and the
    Python workers running this interpreter (``PYSPARK_PYTHON``), so that they import the same
    :mod:`heartwire`: unless ``PYSPARK_PYTHON`` is set already, or always with
    ``force_python`` (which also sets ``PYSPARK_DRIVER_PYTHON``).

    ``shuffle_partitions`` (``spark.sql.shuffle.partitions``), ``parallelism``
    (``spark.default.parallelism``) and ``driver_memory`` (``spark.driver.memory``, e.g.
    ``"2g"``) are Spark's defaults when None. ``log_level`` is Spark's own log level from then
    on (``"ERROR"``, ``"FATAL"``, ...). Spark's errors (no Java, an unreachable master) are
    raised as they are.
    """
    shuffle_partitions = _validate.count(
        shuffle_partitions, "shuffle_partitions", 1, allow_none=True
    )
    parallelism = _validate.count(parallelism, "parallelism", 1, allow_none=True)
    if force_python:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if parallelism is not None:
        builder = builder.config("spark.default.parallelism", str(parallelism))
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
