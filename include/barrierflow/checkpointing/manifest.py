"""The checkpoint manifest: ``chk-<n>/_metadata.json`` in the checkpoint store.

Written last and atomically: a checkpoint directory without it is incomplete and is never
restored. The format is documented in docs/manifest.md; ``format_version`` changes when a
field changes meaning or disappears (adding optional fields keeps the version).

Versions:

* 1 — the time from planning to committing the barrier batch was called ``alignment_ms``.
* 2 — that field is ``barrier_batch_ms`` (it is the barrier's time inside the stage, not an
  alignment time; alignment of several inputs comes with pipelines of several stages).
  Version-1 manifests are still read: they are upgraded in memory, the stored file is never
  rewritten.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

MANIFEST_FORMAT = "barrierflow-checkpoint"
MANIFEST_VERSION = 2
#: manifest format versions this barrierflow reads
READABLE_VERSIONS = (1, 2)


class CheckpointKind(enum.StrEnum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


class ManifestFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="path inside the Spark checkpoint directory")
    sha256: str
    size: int
    uploaded: bool = Field(description="true if this checkpoint uploaded it (not shared with an earlier one)")


class ChannelStateEntry(BaseModel):
    """Records of ``partition`` in ``[start, end)`` are part of the checkpoint as channel
    state (they arrived after the snapshot cut the partition, before its barrier); ``records``
    counts data records. ``back_edge``: the partition belongs to a channel closing a cycle."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str
    start: int
    end: int
    records: int
    back_edge: bool = False


class AlignmentSummary(BaseModel):
    """How a stage fed by channels aligned the barriers of this checkpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["aligned", "unaligned", "aligned-timed-out"]
    alignment_ms: float = Field(description="first barrier to last barrier, or to the switch to unaligned")
    barrier_offsets: dict[str, int] = Field(description="input partition -> offset of its barrier record")
    channel_state: list[ChannelStateEntry] = Field(default_factory=list)
    channel_state_records: int = 0
    barrier_checkpoint_id: int | None = Field(
        None, description="the checkpoint whose barrier records lie at barrier_offsets, when it is not this one "
                          "(a savepoint rewritten offline by 'barrierflow upgrade' under a new id)")

    def barrier_id(self, checkpoint_id: int) -> int:
        """The checkpoint id the barrier records at :attr:`barrier_offsets` carry, for the
        manifest of checkpoint ``checkpoint_id``."""
        return self.barrier_checkpoint_id if self.barrier_checkpoint_id is not None else checkpoint_id

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> AlignmentSummary:
        """From the alignment record the stage's source wrote (barriers/alignment/record.py)."""
        return cls(mode=record["mode"], alignment_ms=record["alignment_ms"],
                   barrier_offsets=record["barrier_offsets"],
                   channel_state=[ChannelStateEntry(**r) for r in record["channel_state"]],
                   channel_state_records=record["channel_state_records"])


class PartitionWatermark(BaseModel):
    """One source partition at a checkpoint's barrier (event time and watermark alignment)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    watermark: AwareDatetime | None = Field(
        description="newest event time up to the barrier minus the watermark delay (None: unknown)")
    idle: bool = Field(False, description="idle when the barrier batch was planned (event_time.idle_timeout)")
    paused: bool = Field(False, description="paused by watermark alignment in the barrier batch")
    pauses: int = Field(0, description="times paused by watermark alignment since the source reader started")
    paused_seconds: float = Field(0.0, description="seconds paused since the source reader started")


class EventTimeSummary(BaseModel):
    """Per-partition watermarks, idleness and alignment at the barrier, and Spark's late rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    watermark_delay_seconds: float
    alignment_group: str | None = Field(None, description="event_time.alignment.group (None: alignment off)")
    max_drift_seconds: float | None = None
    partitions: dict[str, dict[str, PartitionWatermark]] = Field(description="source name -> partition -> state")
    rows_dropped_by_watermark: int | None = Field(
        description="Spark's numRowsDroppedByWatermark summed over the epoch's batches (None: not all known)")
    rows_dropped_total: int = Field(0, description="summed over every batch of this run of the job so far")


class Manifest(BaseModel):
    """One completed checkpoint. Every time is timezone-aware UTC."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["barrierflow-checkpoint"] = MANIFEST_FORMAT
    format_version: Literal[2] = MANIFEST_VERSION
    pipeline: str
    checkpoint_id: int
    kind: CheckpointKind = CheckpointKind.CHECKPOINT
    status: Literal["COMPLETED"] = "COMPLETED"
    attempt: int
    spark_batch_id: int = Field(description="the barrier batch V; restore resumes at V+1")
    first_batch_id: int = Field(description="first batch of the epoch this checkpoint closes")
    state_version: int = Field(description="state store version loaded by batch V+1 (= V+1)")
    barrier_offsets: dict[str, dict[str, int]] = Field(
        description="source name -> partition -> next offset (exclusive) at the barrier"
    )
    max_event_time: dict[str, dict[str, AwareDatetime | None]] = Field(
        description="source name -> partition -> newest event time up to the barrier (None: unknown)"
    )
    trigger_time: AwareDatetime
    barrier_time: AwareDatetime = Field(description="when Spark committed the barrier batch")
    completion_time: AwareDatetime
    barrier_batch_ms: float = Field(
        description="barrier batch planned -> committed: the barrier's time in the stage")
    sync_ms: float
    async_ms: float
    total_ms: float = Field(description="trigger -> completion")
    full_bytes: int
    incremental_bytes: int
    files: list[ManifestFile]
    state_bases: dict[str, int] = Field(default_factory=dict)
    sink_handles: list[dict[str, Any]] = Field(default_factory=list)
    spark_version: str = ""
    alignment: AlignmentSummary | None = Field(
        None, description="stages of a multi-stage pipeline fed by channels: mode, alignment time, channel state")
    event_time: EventTimeSummary | None = Field(
        None, description="only for pipelines with event_time (added in barrierflow 0.x, format 2)")

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Read a version-1 manifest as version 2 (``alignment_ms`` -> ``barrier_batch_ms``)."""
        if isinstance(data, dict) and data.get("format_version") == 1:
            data = {k: v for k, v in data.items() if k != "alignment_ms"} | {
                "format_version": MANIFEST_VERSION, "barrier_batch_ms": data.get("alignment_ms", 0.0)}
        return data

    def file(self, path: str) -> ManifestFile | None:
        return next((f for f in self.files if f.path == path), None)

    @property
    def starts_empty(self) -> bool:
        """Whether this is the first checkpoint of a stage that ``barrierflow upgrade`` added to
        a pipeline: no Spark checkpoint (no files, barrier batch -1), so a restore gives the
        stage an empty Spark checkpoint and its query starts on empty state."""
        return self.spark_batch_id < 0 and not self.files


class FailureReason(enum.StrEnum):
    """Why a checkpoint did not complete; each carries its explanation."""

    EXPIRED = "EXPIRED"
    SNAPSHOT_FAILED = "SNAPSHOT_FAILED"
    UPLOAD_FAILED = "UPLOAD_FAILED"
    PRECOMMIT_FAILED = "PRECOMMIT_FAILED"
    MANIFEST_FAILED = "MANIFEST_FAILED"
    JOB_STOPPED = "JOB_STOPPED"

    @property
    def explanation(self) -> str:
        return {
            "EXPIRED": "the checkpoint did not complete within checkpoint.timeout",
            "SNAPSHOT_FAILED": "the synchronous phase could not link the files of the barrier batch",
            "UPLOAD_FAILED": "the asynchronous phase could not store a file in the checkpoint store",
            "PRECOMMIT_FAILED": "a sink could not pre-commit the epoch's transaction",
            "MANIFEST_FAILED": "the manifest could not be written to the checkpoint store",
            "JOB_STOPPED": "the job stopped before the checkpoint completed",
        }[self.value]


class FailureRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = 1
    pipeline: str
    checkpoint_id: int
    status: Literal["FAILED"] = "FAILED"
    reason: FailureReason
    message: str
    trigger_time: AwareDatetime
    failure_time: AwareDatetime
    spark_batch_id: int | None = None


def utc_iso(moment: datetime) -> str:
    return moment.isoformat()
