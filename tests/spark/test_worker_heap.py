"""Freezing the long-lived heap of a reused Spark Python worker (:mod:`barrierflow.spark.worker_heap`):
it acts in every kind of Python worker Spark starts (executors' tasks and the driver-side
planning and commit workers of a Python data source) and never in the driver's own Python."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from barrierflow.spark.worker_heap import WORKER_MARKER, freeze_long_lived, in_spark_worker


def test_the_drivers_own_python_is_never_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKER_MARKER, raising=False)
    before = gc.get_freeze_count()
    freeze_long_lived()
    assert not in_spark_worker()
    assert gc.get_freeze_count() == before


@pytest.mark.spark
def test_an_executor_task_freezes_what_is_alive_at_its_start(spark: Any) -> None:
    import pyarrow as pa

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import gc

        from barrierflow.spark.worker_heap import freeze_long_lived

        for _ in batches:
            pass
        freeze_long_lived()
        yield pa.RecordBatch.from_pydict({"frozen": pa.array([gc.get_freeze_count()], type=pa.int64())})

    frozen = spark.range(1, numPartitions=1).mapInArrow(task, "frozen long")
    assert frozen.count() == 1
    assert frozen.filter("frozen <= 1000").count() == 0  # the worker's imported modules were frozen


@pytest.mark.spark
def test_the_planning_workers_of_a_python_data_source_are_spark_workers(spark: Any) -> None:
    """``schema()`` runs in the worker Spark starts to plan a Python data source (the same kind
    of worker that calls the write-ahead source's ``writer`` and its writer's ``commit``): the
    column it names says whether :func:`in_spark_worker` holds there."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Probe(DataSource):
        @classmethod
        def name(cls) -> str:
            return "barrierflow_worker_heap_probe"

        def schema(self) -> str:
            from barrierflow.spark.worker_heap import in_spark_worker

            return f"planned_in_worker_{int(in_spark_worker())} int"

        def reader(self, schema: Any) -> DataSourceReader:
            class Rows(DataSourceReader):
                def read(self, partition: Any) -> Iterator[tuple[int]]:
                    yield (1,)

            return Rows()

    spark.dataSource.register(Probe)
    assert spark.read.format("barrierflow_worker_heap_probe").load().columns == ["planned_in_worker_1"]
