"""A hand-written Spark checkpoint directory in the exact on-disk format Spark 4 uses
(offsets/V with a version line, metadata line and one source offset line; commits/V;
HDFSBackedStateStore ``<version>.delta`` files), for coordinator tests without Spark."""

from __future__ import annotations

import json
from pathlib import Path


class FakeSparkCheckpoint:
    def __init__(self, root: Path, state_partitions: int = 2) -> None:
        self.root = root
        self.state_partitions = state_partitions
        (root / "offsets").mkdir(parents=True, exist_ok=True)
        (root / "commits").mkdir(parents=True, exist_ok=True)
        (root / "metadata").write_text('{"id":"fake"}\n')
        for p in range(state_partitions):
            (root / "state" / "0" / str(p) / "_metadata").mkdir(parents=True, exist_ok=True)
            (root / "state" / "0" / str(p) / "_metadata" / "schema").write_bytes(b"schema")
        (root / "state" / "0" / "_metadata").mkdir(parents=True, exist_ok=True)
        (root / "state" / "0" / "_metadata" / "metadata").write_text("{}")

    def run_batch(self, batch: int, offsets: dict[str, int], barrier: int, delta_bytes: int = 100) -> None:
        """Plan and commit batch ``batch``: offsets, state version batch+1, commit."""
        body = {"partitions": offsets, "barrier": barrier}
        (self.root / "offsets" / str(batch)).write_text(
            "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}) + "\n" + json.dumps(body)
        )
        for p in range(self.state_partitions):
            path = self.root / "state" / "0" / str(p) / f"{batch + 1}.delta"
            path.write_bytes(bytes([batch % 256, p]) * (delta_bytes // 2))
        (self.root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
