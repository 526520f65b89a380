"""A synthetic Spark checkpoint directory, written in the exact on-disk format Spark 4 uses,
for benchmarks and tests of the checkpoint core without Spark.

Layout (what :mod:`barrierflow.spark.offset_log`, :mod:`barrierflow.spark.commit_log` and
:mod:`barrierflow.spark.state_files` read): ``offsets/V`` with the version line, the batch
metadata line and one source offset line; ``commits/V``; ``metadata``; HDFSBackedStateStore
``state/0/<partition>/<version>.delta`` files and their ``_metadata``. Batch ``V`` writes
state version ``V + 1``, as Spark does.
"""

from __future__ import annotations

import json
from pathlib import Path


class SyntheticSparkCheckpoint:
    """Writes batches into ``root`` as a one-source, one-stateful-operator query would."""

    def __init__(self, root: Path, state_partitions: int = 2) -> None:
        self.root = root
        self.state_partitions = state_partitions
        (root / "offsets").mkdir(parents=True, exist_ok=True)
        (root / "commits").mkdir(parents=True, exist_ok=True)
        (root / "metadata").write_text('{"id":"synthetic"}\n')
        for p in range(state_partitions):
            (root / "state" / "0" / str(p) / "_metadata").mkdir(parents=True, exist_ok=True)
            (root / "state" / "0" / str(p) / "_metadata" / "schema").write_bytes(b"schema")
        (root / "state" / "0" / "_metadata").mkdir(parents=True, exist_ok=True)
        (root / "state" / "0" / "_metadata" / "metadata").write_text("{}")

    def run_batch(self, batch: int, offsets: dict[str, int], barrier: int, delta_bytes: int = 100,
                  extra: dict[str, object] | None = None) -> None:
        """Plan and commit batch ``batch``: its offsets (with the keys of ``extra``), state
        version ``batch + 1``, its commit."""
        body = {"partitions": offsets, "barrier": barrier, **(extra or {})}
        (self.root / "offsets" / str(batch)).write_text(
            "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}) + "\n" + json.dumps(body)
        )
        for p in range(self.state_partitions):
            path = self.root / "state" / "0" / str(p) / f"{batch + 1}.delta"
            path.write_bytes(bytes([batch % 256, p]) * (delta_bytes // 2))
        (self.root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
