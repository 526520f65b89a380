"""The tests' hand-written Spark checkpoint: the library's synthetic one (no Spark needed)."""

from barrierflow.spark.synthetic import SyntheticSparkCheckpoint as FakeSparkCheckpoint

__all__ = ["FakeSparkCheckpoint"]
