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
