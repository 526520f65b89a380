"""The tests' hand-written Spark checkpoint: the library's synthetic one (no Spark needed)."""

from tests.support.synthetic_checkpoint import SyntheticSparkCheckpoint as FakeSparkCheckpoint

__all__ = ["FakeSparkCheckpoint"]
