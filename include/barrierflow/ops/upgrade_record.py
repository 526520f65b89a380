"""The persisted steps of one ``barrierflow upgrade``: a small state machine in the checkpoint store.

An upgrade is recorded as ``_upgrade.json`` in the root of the pipeline's checkpoint store (next
to ``_pipeline.json`` and the savepoints it works on), rewritten whole (atomically) at each step::

    report -> rewritten -> canary-running -> canary-passed
                                          \\-> rolling-back -> rolled-back

* ``report``: the change was checked against the source savepoint S (``source_savepoint``) and
  is one ``upgrade`` makes; ``savepoint`` is the id the rewrite will record (planned up front,
  so a rewrite killed after its manifest was written is found, not made twice).
* ``rewritten``: the savepoint the new spec restores from exists (S itself when nothing needed a
  rewrite).
* ``canary-running``: the new spec was (or is being) restored from it as a new attempt and runs
  its canary; its sinks pre-commit epochs but commit none.
* ``canary-passed`` (final): every canary checkpoint passed verification; the canary's
  pre-committed epochs are committed (again, idempotently, by every rerun).
* ``rolling-back`` -> ``rolled-back`` (final): the canary failed (``failure`` names the check);
  the old spec is restored from S as a new attempt, which aborts the canary's pre-committed epochs.

Rerunning the same command continues from the recorded step (:mod:`barrierflow.ops.upgrade`).
While an upgrade is unfinished (any step but the two final ones), ``barrierflow run`` of the
pipeline refuses (:func:`refuse_unfinished`): a plain start of the new spec would commit the
canary's epochs before they were verified.

Readers that only show the record (the Checkpoints page) use :func:`recorded_upgrade`: it never
raises for a record that does not parse, it says so (:class:`RecordedUpgrade`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from barrierflow.errors import UserInputError
from barrierflow.storage import ObjectNotFoundError, ObjectStore

__all__ = ["RECORD_KEY", "RecordedUpgrade", "UpgradeInProgressError", "UpgradeRecord", "UpgradeStep",
           "UpgradeVerdict", "read_record", "recorded_upgrade", "refuse_unfinished", "spec_digest", "write_record"]

#: Where the record lives, relative to the pipeline's checkpoint store.
RECORD_KEY = "_upgrade.json"


class UpgradeStep(StrEnum):
    REPORT = "report"
    REWRITTEN = "rewritten"
    CANARY_RUNNING = "canary-running"
    CANARY_PASSED = "canary-passed"
    ROLLING_BACK = "rolling-back"
    ROLLED_BACK = "rolled-back"

    @property
    def final(self) -> bool:
        return self in (UpgradeStep.CANARY_PASSED, UpgradeStep.ROLLED_BACK)


class UpgradeVerdict(StrEnum):
    """What the compatibility report said of a recorded upgrade (an incompatible one is refused
    before anything is recorded)."""

    COMPATIBLE = "compatible"
    NEEDS_REWRITE = "needs rewrite"


class UpgradeInProgressError(UserInputError):
    """An upgrade of the pipeline is unfinished: only rerunning its command continues it."""


class UpgradeRecord(BaseModel):
    """One upgrade's progress (module docstring).

    Attributes:
        spec, new_spec: the command's two spec paths (as given).
        new_spec_sha256: the new spec file's content digest: a rerun with a changed NEW_SPEC
            after a final step is a new upgrade.
        source_savepoint: S, never modified.
        savepoint: the savepoint the new spec restores from (planned id until ``rewritten``).
        rescaled: stage -> [old, new] partitions.
        added: the stages the new spec adds (their part of the new cut starts empty).
        dropped: the stages dropped with their state (``--drop-stage``).
        canary_checkpoints: how many completed checkpoints the canary must pass.
        canary_attempts: how many times a canary was started (a rerun after a crash restarts it).
        verified: the canary checkpoints that passed verification, in order.
        failure: why the canary failed (the failed check and its message), else "".
        attempt: the attempt the last restore began.
    """

    pipeline: str
    spec: str
    new_spec: str
    new_spec_sha256: str
    step: UpgradeStep
    source_savepoint: int
    savepoint: int
    rescaled: dict[str, list[int]] = Field(default_factory=dict)
    added: list[str] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list)
    canary_checkpoints: int = 3
    canary_attempts: int = 0
    verified: list[int] = Field(default_factory=list)
    failure: str = ""
    attempt: int | None = None
    updated: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def verdict(self) -> UpgradeVerdict:
        """``needs rewrite`` when the upgrade restores a new (rewritten) savepoint or rescales,
        else ``compatible`` (S itself is restored)."""
        rewritten = self.rescaled or self.savepoint != self.source_savepoint
        return UpgradeVerdict.NEEDS_REWRITE if rewritten else UpgradeVerdict.COMPATIBLE

    def as_dict(self) -> dict[str, Any]:
        """The record's fields (JSON types) and its derived ``verdict``."""
        return {**self.model_dump(mode="json"), "verdict": self.verdict.value}


def spec_digest(path: str | Path) -> str:
    """The sha256 of a spec file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_record(objects: ObjectStore) -> UpgradeRecord | None:
    """The pipeline's upgrade record, or None when it was never upgraded."""
    try:
        raw = objects.get_bytes(RECORD_KEY)
    except ObjectNotFoundError:
        return None
    return UpgradeRecord.model_validate(json.loads(raw))


@dataclass(frozen=True)
class RecordedUpgrade:
    """What a pipeline's store says about its upgrade, for display: ``record`` (None: no
    upgrade recorded, or the record does not parse) and ``problem`` (why the record could not be
    read, else "")."""

    record: UpgradeRecord | None
    problem: str = ""

    def as_dict(self) -> dict[str, Any]:
        """``{"upgrades": [record...], "problem": str | None}``: zero or one upgrade (the record
        holds the latest one), each as :meth:`UpgradeRecord.as_dict`."""
        return {"upgrades": [self.record.as_dict()] if self.record else [], "problem": self.problem or None}


def recorded_upgrade(objects: ObjectStore) -> RecordedUpgrade:
    """The upgrade recorded in ``objects`` (a pipeline's checkpoint store), never raising for a
    record that is not valid JSON or not an :class:`UpgradeRecord`: then ``problem`` names it
    and the fix. Read-only.

    Raises:
        StorageError: the store cannot be read.
    """
    try:
        return RecordedUpgrade(read_record(objects))
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError and pydantic's ValidationError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return RecordedUpgrade(None, f"{RECORD_KEY} in the checkpoint store does not parse ({first}); the "
                                     "upgrade's steps are unknown: rerun its 'barrierflow upgrade SPEC --to "
                                     "NEW_SPEC', or remove the record if no upgrade is under way")


def write_record(objects: ObjectStore, record: UpgradeRecord, step: UpgradeStep, **changes: Any) -> UpgradeRecord:
    """Record ``step`` (and ``changes``) and return the new record; the write replaces the
    whole object at once, so a reader sees the old step or the new one."""
    updated = record.model_copy(update={**changes, "step": step, "updated": datetime.now(UTC)})
    objects.put_bytes(RECORD_KEY, updated.model_dump_json(indent=2).encode())
    return updated


def refuse_unfinished(objects: ObjectStore, pipeline: str) -> None:
    """Raise :class:`UpgradeInProgressError` while an upgrade of ``pipeline`` is unfinished."""
    record = read_record(objects)
    if record is None or record.step.final:
        return
    raise UpgradeInProgressError(
        f"pipeline {pipeline} has an unfinished upgrade to {record.new_spec} (step {record.step.value}, from "
        f"savepoint {record.source_savepoint}); a plain run could commit output of its canary before it was "
        f"verified. Continue it with 'barrierflow upgrade {record.spec} --to {record.new_spec}': it ends with the "
        "new spec verified or the old one restored.")
