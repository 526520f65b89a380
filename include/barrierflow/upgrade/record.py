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

Rerunning the same command continues from the recorded step (:mod:`barrierflow.upgrade.steps`).
While an upgrade is unfinished (any step but the two final ones), ``barrierflow run`` of the
pipeline refuses (:func:`refuse_unfinished`): a plain start of the new spec would commit the
canary's epochs before they were verified.

**History.** ``_upgrade.json`` holds the current upgrade only: the next upgrade replaces it. So
that every upgrade of a pipeline stays known, each one's record is also kept, when it reaches a
final step, as its own object under ``_upgrades/`` (:data:`HISTORY_PREFIX`)::

    _upgrades/<started, UTC, %Y%m%dT%H%M%S%fZ>-<source savepoint>-<new spec sha256[:12]>.json

one object per upgrade (:func:`history_key`), written whole (atomically) by :func:`write_record`
before ``_upgrade.json`` gets the final step. There is no shared object to append to (object
stores such as S3 have no append, and a read-modify-write of one list loses an entry when two
writers race): the key names the upgrade (when it started, from which savepoint, to which new
spec), so no other upgrade ever writes it, and a listing of the prefix is the history, sorted
oldest first by key. The only rewrite of an entry is by the same upgrade: a rerun after a crash
between the entry's write and ``_upgrade.json``'s repeats the final step and writes the entry
again with that step's record. Retention never touches ``_upgrades/`` or ``_upgrade.json`` (it
deletes under ``chk-``, ``global/chk-``, ``shared/``, ``ledger/``, ``_inflight/`` and its own
``_retention/`` only), and the savepoints an upgrade names are savepoints, which it always keeps.

Readers that only show the records (the Checkpoints page) use :func:`recorded_upgrades`: every
upgrade, newest first, the current unfinished one (if any) first; it never raises for a record
that does not parse, it says so in that entry (:class:`RecordedUpgrade`) and shows the others.
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

__all__ = ["HISTORY_PREFIX", "RECORD_KEY", "RecordedUpgrade", "UpgradeInProgressError", "UpgradeRecord",
           "UpgradeStep", "UpgradeVerdict", "history_key", "read_record", "recorded_upgrades", "refuse_unfinished",
           "spec_digest", "write_record"]

#: Where the current upgrade's record lives, relative to the pipeline's checkpoint store.
RECORD_KEY = "_upgrade.json"
#: Where every finished upgrade's record is kept, one object per upgrade (module docstring).
HISTORY_PREFIX = "_upgrades/"


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
        value_columns: stage -> what its aggregation's value-column rewrite adds and drops.
        rebuilt: the stages whose state is rebuilt from their input (replayed to the savepoint).
        assumed: the stages whose state the compatibility report could not decide (``unknown``:
            no recorded fingerprint, and Spark's state metadata cannot tell), taken as compatible on the
            user's word (``--assume-compatible``); the new savepoint records their fingerprint, marked assumed.
        canary_checkpoints: how many completed checkpoints the canary must pass.
        canary_attempts: how many times a canary was started (a rerun after a crash restarts it).
        verified: the canary checkpoints that passed verification, in order.
        deep_verification: one line of what their deep verification checked (``passed deep
            verification``, or ``no expectation suite: deep verification skipped ...``); "" until
            a canary ran.
        canary_compare: whether the canary also compares its output with a batch recomputation
            (``--no-canary-compare`` turns it off).
        comparison: the canary's stream-vs-batch comparison (``ran``, ``verdict``, ``outputs``:
            :func:`barrierflow.upgrade.canary.comparison_summary`); empty until it was made.
        failure: why the canary failed (the failed check and its message), else "".
        attempt: the attempt the last restore began.
        started: when the upgrade was first recorded (set by :func:`write_record`; None only in a
            record written before upgrades were kept, until its next step).
        updated: when the step was recorded.
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
    value_columns: dict[str, str] = Field(default_factory=dict)
    rebuilt: list[str] = Field(default_factory=list)
    assumed: list[str] = Field(default_factory=list)
    canary_checkpoints: int = 3
    canary_attempts: int = 0
    verified: list[int] = Field(default_factory=list)
    deep_verification: str = ""
    canary_compare: bool = True
    comparison: dict[str, Any] = Field(default_factory=dict)
    failure: str = ""
    attempt: int | None = None
    started: datetime | None = None
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


def history_key(record: UpgradeRecord) -> str:
    """The key of ``record``'s upgrade in the history (module docstring): its start (its
    ``updated`` for a record written before ``started`` was), source savepoint and the new
    spec's digest; keys sort by start."""
    started = (record.started or record.updated).astimezone(UTC)
    return (f"{HISTORY_PREFIX}{started:%Y%m%dT%H%M%S%fZ}-{record.source_savepoint}-"
            f"{record.new_spec_sha256[:12]}.json")


@dataclass(frozen=True)
class RecordedUpgrade:
    """One upgrade as a pipeline's store holds it, for display.

    Attributes:
        key: the object it was read from (``_upgrade.json`` or an entry under ``_upgrades/``).
        record: the record, or None when it does not parse.
        problem: why the record could not be read (naming the object and the fix), else "".
        current: it is ``_upgrade.json``'s record (the latest upgrade).
    """

    key: str
    record: UpgradeRecord | None
    problem: str = ""
    current: bool = False

    @property
    def in_progress(self) -> bool:
        """The current upgrade, not at a final step (``barrierflow run`` refuses meanwhile)."""
        return self.current and self.record is not None and not self.record.step.final

    def as_dict(self) -> dict[str, Any]:
        """The record's fields (:meth:`UpgradeRecord.as_dict`, None when it does not parse) with
        ``key``, ``in_progress`` and ``problem`` (None when it parsed)."""
        fields = self.record.as_dict() if self.record is not None else {}
        return {**fields, "key": self.key, "in_progress": self.in_progress, "problem": self.problem or None}


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _read(objects: ObjectStore, key: str) -> RecordedUpgrade | None:
    """The upgrade recorded at ``key`` (None: no such object); one that does not parse says so."""
    try:
        raw = objects.get_bytes(key)
    except ObjectNotFoundError:
        return None
    current = key == RECORD_KEY
    try:
        return RecordedUpgrade(key, UpgradeRecord.model_validate(json.loads(raw)), current=current)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError and pydantic's ValidationError
        fix = ("the upgrade's steps are unknown: rerun its 'barrierflow upgrade SPEC --to NEW_SPEC', or remove the "
               "record if no upgrade is under way" if current else
               "this upgrade cannot be shown (the others are): restore the object from a copy, or remove it")
        return RecordedUpgrade(key, None, f"{key} in the checkpoint store does not parse ({_first_line(exc)}); "
                                          f"{fix}", current=current)


def recorded_upgrades(objects: ObjectStore) -> list[RecordedUpgrade]:
    """Every upgrade recorded in ``objects`` (a pipeline's checkpoint store), newest first: the
    current upgrade first while it is unfinished (or its record does not parse), then the
    finished ones by start, newest first (the kept history under ``_upgrades/``, and
    ``_upgrade.json``'s own record when the history lacks it: one finished before upgrades were
    kept). Never raises for a record that is not valid JSON or not an :class:`UpgradeRecord`: that
    entry's ``problem`` names it and the fix, and the others are still listed. Read-only.

    Raises:
        StorageError: the store cannot be read.
    """
    kept = [entry for info in objects.list(HISTORY_PREFIX) if info.key.endswith(".json")
            if (entry := _read(objects, info.key)) is not None]
    finished = [(entry.key, entry) for entry in kept]
    current = _read(objects, RECORD_KEY)
    first: list[RecordedUpgrade] = []
    if current is not None:
        if current.record is None or not current.record.step.final:
            first.append(current)
        elif not any(e.key == history_key(current.record) and e.record is not None for e in kept):
            finished.append((history_key(current.record), current))  # (a kept entry that does not parse says so)
    return first + [entry for _, entry in sorted(finished, key=lambda pair: (pair[0], pair[1].current), reverse=True)]


def write_record(objects: ObjectStore, record: UpgradeRecord, step: UpgradeStep, **changes: Any) -> UpgradeRecord:
    """Record ``step`` (and ``changes``) and return the new record; the write replaces the
    whole object at once, so a reader sees the old step or the new one. The first write sets
    ``started``. A final step is first kept in the history (:func:`history_key`), then written
    to ``_upgrade.json``: a crash between the two leaves the step to be repeated by a rerun,
    which writes both again."""
    now = datetime.now(UTC)
    updated = record.model_copy(update={**changes, "step": step, "updated": now, "started": record.started or now})
    data = updated.model_dump_json(indent=2).encode()
    if step.final:
        objects.put_bytes(history_key(updated), data)
    objects.put_bytes(RECORD_KEY, data)
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
