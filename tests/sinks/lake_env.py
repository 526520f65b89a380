"""Shared set-up of the lakehouse table sink tests (no Spark): write-ahead batches inside the
table's location, a ledger and cut records on a local checkpoint store."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger

PIPELINE = "lakep"


def rows(keys: list[int], region: str = "eu") -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.int64()), "region": pa.array([region] * len(keys), pa.string()),
                     "total": pa.array([k * 10 for k in keys], pa.int64())})


def ledger(tmp_path: Path) -> TransactionLedger:
    return TransactionLedger(LocalObjectStore(tmp_path / "store"), PIPELINE)


def stage(staging_uri: str, batch: int, table: pa.Table, files: int = 1) -> None:
    write_ahead_batch(staging_uri, batch, table, files=files)


REPO = Path(__file__).resolve().parents[2]


def commit(sink: Any, checkpoint: int, batch: int, table: pa.Table) -> None:
    """Write ``table`` ahead as micro-batch ``batch``, then run checkpoint ``checkpoint``'s two
    phases on ``sink`` (pre-commit up to that batch, then the commit on completion)."""
    stage(sink.write_ahead.uri, batch, table)
    sink.pre_commit_epoch(checkpoint, batch)
    sink.notify_checkpoint_complete(checkpoint, batch)


def iceberg_pipeline_spec(tmp_path: Path) -> Path:
    """A spec file of pipeline :data:`PIPELINE` whose sink ``ice`` is the Iceberg table
    ``lake.totals`` that ``test_iceberg_sink.make_sink(tmp_path)`` writes (same work dir, store)."""
    spec = {"version": 1, "name": PIPELINE, "work_dir": str(tmp_path / "work"),
            "sources": [{"name": "events", "type": "generator"}],
            "transformation": {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                               "output_mode": "update"},
            "sinks": [{"name": "ice", "type": "iceberg", "table": "lake.totals"}],
            "checkpoint": {"storage": f"file://{tmp_path / 'store'}"}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def kill_after_the_table_commit(module: str, tmp_path: Path, checkpoint: int) -> None:
    """In another process, ``module.make_sink(tmp_path, attempt=checkpoint - 1)`` pre-commits and
    commits checkpoint ``checkpoint`` (micro-batch ``checkpoint``) and is SIGKILLed by the crash
    point between the table commit and the ledger record; asserts it died there."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from {module} import make_sink
        sink = make_sink(Path({str(tmp_path)!r}), attempt={checkpoint - 1})
        sink.pre_commit_epoch({checkpoint}, {checkpoint})
        sink.notify_checkpoint_complete({checkpoint}, {checkpoint})
        raise SystemExit("not reached: the crash point should have killed this process")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "BARRIERFLOW_CRASH_AT": "mid_sink_commit"})
    assert proc.returncode == -9, proc.stderr[-2000:]
