"""The two-stage pipeline many tests run: generator -> stage a -> channel ``ab`` -> stage b -> Parquet.

Stage ``a`` reads a bounded generator (:data:`PARTITIONS` partitions of :data:`RECORDS`
records) and writes channel ``ab`` (2 partitions, a fresh topic per call); stage ``b`` reads
``ab`` and writes Parquet through the two-phase-commit sink under ``<tmp_path>/out``.
Checkpoints go to ``<tmp_path>/chk``, the work dir is ``<tmp_path>/work``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.support.kafka_broker import KafkaEndpoint

PARTITIONS, RECORDS = 2, 150


def two_stage_spec(tmp_path: Path, endpoint: KafkaEndpoint, mode: str = "aligned") -> dict[str, Any]:
    topic = f"ab-{uuid.uuid4().hex[:8]}"
    return {
        "name": "two",
        "work_dir": str(tmp_path / "work"),
        "channels": [{"name": "ab", "topic": topic, "partitions": 2, "bootstrap": endpoint.bootstrap_servers}],
        "stages": [
            {"name": "a",
             "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": 0,
                          "max_records_per_batch": 40, "keys": 7, "records_per_partition": RECORDS}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"src_partition": "partition", "src_offset": "offset",
                                                        "key": "key", "value": "value"}}},
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "b",
             "sources": [{"type": "channel", "channel": "ab", "max_records_per_batch": 50,
                          "json_fields": {"src_partition": "long", "src_offset": "long", "key": "long",
                                          "value": "long"}}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"src_partition": "src_partition", "src_offset": "src_offset",
                                                        "value": "value"}}},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]},
        ],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "700ms", "timeout": "120s",
                       "mode": mode},
    }
