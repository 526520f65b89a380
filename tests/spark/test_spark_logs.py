"""Spark's offset and commit logs are read with their version line checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.spark import SparkLogError, commit_log, offset_log

from tests.checkpointing.fake_spark import FakeSparkCheckpoint


def test_logs_of_the_supported_version_are_read(tmp_path: Path) -> None:
    spark = FakeSparkCheckpoint(tmp_path / "spark")
    spark.run_batch(0, {"0": 5}, barrier=0)
    spark.run_batch(1, {"0": 9}, barrier=1)
    assert commit_log.committed_batches(spark.root) == [0, 1] == offset_log.planned_batches(spark.root)
    assert offset_log.read_offsets(spark.root, 1) == [{"partitions": {"0": 9}, "barrier": 1}]
    assert offset_log.first_source_partitions(spark.root, 1) == {"0": 9}
    assert offset_log.first_source_partitions(spark.root, 7) is None  # never planned
    assert offset_log.read_offset_metadata(spark.root, 1)["batchWatermarkMs"] == 0
    commit_log.check_version(spark.root, 1)


@pytest.mark.parametrize(("first_line", "why"), [("v2", "newer than v1"), ("{}", "does not start with a log version")])
def test_an_unknown_version_line_is_refused(tmp_path: Path, first_line: str, why: str) -> None:
    spark = FakeSparkCheckpoint(tmp_path / "spark")
    spark.run_batch(0, {"0": 5}, barrier=0)
    path = spark.root / "offsets" / "0"
    path.write_text(first_line + "\n" + path.read_text().split("\n", 1)[1])
    with pytest.raises(SparkLogError, match=why):
        offset_log.read_offsets(spark.root, 0)
    (spark.root / "commits" / "0").write_text(first_line + '\n{"nextBatchWatermarkMs":0}')
    with pytest.raises(SparkLogError, match=why):
        commit_log.check_version(spark.root, 0)
