"""The global checkpoint of a multi-stage pipeline: one consistent cut over every stage.

Layout under the pipeline's checkpoint store (``checkpoint.storage``)::

    stages/<stage>/...                     each stage's own checkpoint store (chk-<n>/_metadata.json, shared/)
    global/chk-<n>/_triggered.json         the pipeline coordinator triggered n (written first)
    global/chk-<n>/_metadata.json          the global manifest: n is complete (written last)
    global/chk-<n>/_failed.json            n failed (a stage's snapshot failed, n expired, or a restore
                                           abandoned it unfinished)
    _pipeline.json                         the pipeline's attempt and abandoned global ids (as for one stage)
    _cutoffs.json                          attempt cutoffs of the restores (barriers/cutoffs.py; stores of
                                           earlier releases: _fences.json, still read, see global_store.py)

Global checkpoint ``n`` is complete exactly when its global manifest exists; the coordinator
writes it only after every stage's manifest ``n`` exists, and names each one. A stage manifest
without a global manifest is never restored as part of a global cut.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

GLOBAL_FORMAT = "barrierflow-global-checkpoint"
GLOBAL_VERSION = 1


def stage_prefix(stage: str) -> str:
    return f"stages/{stage}/"


def global_key(checkpoint_id: int, what: str) -> str:
    """``what``: ``_metadata``, ``_triggered`` or ``_failed``."""
    return f"global/chk-{checkpoint_id}/{what}.json"


class StageSnapshot(BaseModel):
    """One stage's part of a global checkpoint (from its manifest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    manifest: str = Field(description="key of the stage's manifest in the pipeline's store")
    spark_batch_id: int
    mode: str | None = Field(None, description="alignment mode; None for stages without channel inputs")
    alignment_ms: float = 0.0
    sync_ms: float
    async_ms: float
    channel_state_records: int = 0


class GlobalManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["barrierflow-global-checkpoint"] = GLOBAL_FORMAT
    format_version: Literal[1] = GLOBAL_VERSION
    pipeline: str
    checkpoint_id: int
    attempt: int
    status: Literal["COMPLETED"] = "COMPLETED"
    trigger_time: AwareDatetime
    completion_time: AwareDatetime
    total_ms: float = Field(description="trigger -> global manifest written")
    stages: dict[str, StageSnapshot]


class GlobalTrigger(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = 1
    pipeline: str
    checkpoint_id: int
    attempt: int
    trigger_time: AwareDatetime


class GlobalFailure(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = 1
    pipeline: str
    checkpoint_id: int
    status: Literal["FAILED"] = "FAILED"
    reason: Literal["STAGE_FAILED", "EXPIRED", "ABANDONED"]
    message: str
    failure_time: AwareDatetime
