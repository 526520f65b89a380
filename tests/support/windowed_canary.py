"""A windowed pipeline for the upgrade canary's stream-vs-batch comparison: generator -> per-key
100 ms event-time windows (count, value sum; append) -> Parquet, with a state expectation suite.

Its specs differ only in how many records each generator partition has: a run of
:data:`FIRST` records per partition stops the pipeline at a known offset (every spec of one
folder names the same stores, as an upgrade keeps them), and the specs the upgrade and the runs
after it use read on to :data:`RECORDS`, so the canary has input whose windows close while it
runs, whatever the machine's speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from barrierflow.transforms.context import TransformContext
    from pyspark.sql import DataFrame

NAME, PARTITIONS, KEYS, FIRST, RECORDS = "windowcanary", 2, 4, 300, 700
HEALTHY = "barrierflow.transforms.aggregations:keyed_window_counts"
#: Doubles the emitted value sums of a streaming run only: its state (count and sum per window
#: and key) is the healthy one, so deep verification passes; its output is not.
DOUBLED_WHEN_STREAMING = "tests.support.windowed_canary:window_counts_doubled_when_streaming"


def window_counts_doubled_when_streaming(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """:func:`~barrierflow.transforms.aggregations.keyed_window_counts` whose streaming output has
    twice the value sum (a bug only the stream has; the batch recomputation runs it unbounded)."""
    from barrierflow.transforms.aggregations import keyed_window_counts
    from pyspark.sql import functions as F

    streaming = df.isStreaming
    out = keyed_window_counts(df, ctx)
    return out.withColumn("value_sum", F.col("value_sum") * 2) if streaming else out


def windowed_spec(folder: Path, file: str, *, records: int = RECORDS, function: str = HEALTHY,
                  batch: int = 50) -> Path:
    """Write ``folder/file``: ``PARTITIONS`` x ``records`` generator records 1 ms of event time
    apart (``batch`` per batch and partition, ``KEYS`` keys), ``function`` over 100 ms windows
    with a 50 ms watermark delay, Parquet at ``folder/out``; the state suite fails a window count
    above 100."""
    suite = folder / "suite.json"
    suite.write_text(json.dumps({"name": "windows", "expectations": [
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "value_count", "min_value": 1, "max_value": 100}}]}))
    data = {
        "version": 1, "name": NAME, "work_dir": str(folder / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": 0,
                     "max_records_per_batch": batch, "records_per_partition": records, "keys": KEYS,
                     "event_time_step_ms": 1.0, "event_time_start": "2026-01-01T00:00:00+00:00"}],
        "transformation": {"function": function, "output_mode": "append", "options": {"window": "100 milliseconds"}},
        "event_time": {"column": "event_time", "watermark_delay": "50ms"},
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{folder / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{folder / 'checkpoints'}", "interval": "300ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
        "verification": {"expectations": str(suite)},
    }
    path = folder / file
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
