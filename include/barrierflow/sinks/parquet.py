"""The Parquet file sink (local ``file://`` or ``s3://``): exactly-once through 2PC.

Layout under the sink's ``path``::

    part-<batch:012d>-a<attempt>-<n:05d>.parquet    committed output (what readers see)
    _staging/batch=<batch>/...           write-ahead micro-batches (see :mod:`barrierflow.sinks.write_ahead`)

Per epoch n (two-phase commit, :class:`~barrierflow.transactions.two_phase.TwoPhaseCommitSink`):
pre-commit has nothing to do externally (the write-ahead batches are already durable and
invisible); commit moves each write-ahead file of the epoch's batches to its deterministic final
name, so a repeated or resumed commit is a no-op (the name holds the transaction's attempt:
after a restore, batch ids are reused and must not overwrite earlier committed output);
abort leaves write-ahead data to the next epoch or to the restore that discards it. Readers only
ever see ``part-*.parquet`` in the root; names starting with ``_`` are ignored by Spark and pyarrow.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SinkError, UserInputError
from barrierflow.spec.models import ParquetSinkSpec
from barrierflow.storage import open_store
from barrierflow.transactions.ledger import Transaction
from barrierflow.transactions.two_phase import TwoPhaseCommitSink, mid_commit_crash_point
from barrierflow.transactions.write_ahead import WriteAheadBatches

if TYPE_CHECKING:
    from barrierflow.spec.models import StageSpec

log = logging.getLogger(__name__)
STAGING = "_staging"


def write_ahead_uri(path: str) -> str:
    return f"{path.rstrip('/')}/{STAGING}"


def final_key(batch_id: int, attempt: int, index: int) -> str:
    return f"part-{batch_id:012d}-a{attempt}-{index:05d}.parquet"


class ParquetFileSink(TwoPhaseCommitSink):
    sink_type = "parquet"

    def __init__(self, *, path: str, **kwargs: Any) -> None:
        super().__init__(write_ahead=WriteAheadBatches(write_ahead_uri(path)), **kwargs)
        self.path = path
        self.output = open_store(path)

    def begin_transaction(self, txn_id: str, checkpoint_id: int, batches: list[int]) -> dict[str, Any]:
        return {"path": self.path, "staging": self.write_ahead.uri}

    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        return {"files": {str(b): [f["key"] for f in self.write_ahead.listing(b)["files"]] for b in txn.batches}}

    def commit(self, txn: Transaction) -> None:
        step = 0
        for batch in txn.batches:
            keys = txn.handle.get("files", {}).get(str(batch), [])
            for index, key in enumerate(keys):
                target = final_key(batch, txn.attempt, index)
                if self.write_ahead.store.exists(key):
                    self._publish(key, target)
                    step += 1
                    mid_commit_crash_point(self.name, step)
                elif not self.output.exists(target):
                    raise SinkError(
                        f"write-ahead file {self.write_ahead.store.describe(key)} of batch {batch} is missing and was "
                        f"never published to {self.output.describe(target)}; restore a checkpoint before batch {batch}"
                    )

    def _publish(self, key: str, target: str) -> None:
        src = f"{STAGING}/{key}"
        self.output.move(src, target)

    def abort(self, txn: Transaction) -> None:
        return None


def read_committed(uri: str) -> Any:
    """The committed output as one pyarrow Table, or None (readers never see write-ahead files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = open_store(uri)
    tables = [pq.read_table(io.BytesIO(store.get_bytes(o.key)))
              for o in store.list("part-") if o.key.endswith(".parquet")]
    return pa.concat_tables(tables) if tables else None


_PART = re.compile(r"^part-(\d{12})-a(\d+)-(\d{5})\.parquet$")


@dataclass(frozen=True)
class CommittedPart:
    """One published output file: its key in the sink's root, Spark batch id and attempt."""

    key: str
    batch_id: int
    attempt: int


def parquet_sink(spec: StageSpec) -> ParquetSinkSpec:
    """The spec's Parquet sink (its first, when it writes several). Raises UserInputError
    naming the sink types and the fix."""
    sink = next((s for s in spec.sinks if isinstance(s, ParquetSinkSpec)), None)
    if sink is None:
        kinds = " and a ".join(repr(s.type) for s in spec.sinks)
        raise UserInputError(
            f"pipeline {spec.name!r} writes to a {kinds} sink: the batch side (rollups, the stream-vs-batch "
            "comparison, data quality of the output) reads a Parquet lake; give the pipeline a "
            "'type: parquet' sink")
    return sink


def committed_parts(output_uri: str) -> list[CommittedPart]:
    """The published output files under ``output_uri``, ascending by batch id, attempt and index."""
    parts = []
    for info in open_store(output_uri).list("part-"):
        match = _PART.match(info.key)
        if match:
            parts.append(CommittedPart(info.key, int(match.group(1)), int(match.group(2))))
    return sorted(parts, key=lambda p: (p.batch_id, p.attempt, p.key))


def rollups_uri(spec: StageSpec) -> str:
    """``batch.rollups``, else ``rollups`` beside the sink's folder."""
    if spec.batch.rollups:
        return spec.batch.rollups
    return rollups_beside(parquet_sink(spec).path)


def rollups_beside(output_uri: str) -> str:
    """``rollups`` beside the folder ``output_uri`` (``<output>-rollups`` for a top-level folder)."""
    path = output_uri.rstrip("/")
    parent, _, _ = path.rpartition("/")
    if parent in ("file:/", "file:", "s3:/", "s3:") or not parent:
        return f"{path}-rollups"
    return f"{parent}/rollups"
