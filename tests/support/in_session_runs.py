"""Running a pipeline spec in the test process, on the session's shared SparkSession."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: The Spark setting a run sets for its pipeline (``spark.shuffle_partitions``) on the shared session.
SHUFFLE = "spark.sql.shuffle.partitions"


def write_spec(path: Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as the YAML spec file ``path``; returns ``path``."""
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def run_spec(spark: Any, path: Path, **limits: Any) -> Any:
    """Run the single-stage spec ``path`` in this process with ``limits`` (``checkpoints``,
    ``until_exhausted``, ``duration``...) and return its result; the session's shuffle partitions
    are put back afterwards, so the next test's session is as it found it."""
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.spec import load_spec

    before = spark.conf.get(SHUFFLE)
    try:
        return StreamingJob(load_spec(path), spark=spark, spec_path=str(path)).run(**limits)
    finally:
        spark.conf.set(SHUFFLE, before)
