"""Errors reading Spark's checkpoint folder."""

from __future__ import annotations

from barrierflow.errors import CheckpointError


class SparkLogError(CheckpointError):
    """A file of Spark's offset or commit log is not in a format this barrierflow reads."""
