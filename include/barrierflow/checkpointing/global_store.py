"""The global checkpoint store: the one owner of ``global/`` and ``_cutoffs.json``.

Layout (see :mod:`barrierflow.checkpointing.global_manifest`) under the pipeline's store root::

    global/chk-<n>/_triggered.json     GlobalTrigger: the pipeline coordinator triggered n (first)
    global/chk-<n>/_metadata.json      GlobalManifest: n is complete (last; add-if-absent)
    global/chk-<n>/_failed.json        GlobalFailure: n failed, expired or was abandoned
    _pipeline.json                     attempt and abandoned global ids (the root CheckpointStore)
    _cutoffs.json                      the attempt cutoffs of the restores, a JSON list of AttemptCutoffRecord

A log in the style of Spark's ``HDFSMetadataLog``: :meth:`GlobalCheckpointStore.add_manifest`
returns False when checkpoint ``n`` already has a global manifest (nothing is written, put-if-absent),
and :meth:`GlobalCheckpointStore.write_manifest` refuses a second writer, as
:meth:`barrierflow.checkpointing.store.CheckpointStore.write_manifest` does for stage manifests.
Every read goes through typed models; no caller parses ``global/chk-<n>/...`` keys itself.

A pipeline of one stage has no ``global/`` records: :class:`SingleStageCuts` derives the same read
view from its stage store (a completed checkpoint ``n`` *is* the cut ``n``), so every operation
over cuts works on both shapes and nothing on disk moves.

Stores written by earlier releases (compatibility): they kept the attempt cutoffs as
``_fences.json`` (same JSON list). :meth:`GlobalCheckpointStore.cutoffs` reads ``_cutoffs.json``
if it exists, else ``_fences.json``; :meth:`GlobalCheckpointStore.add_cutoff` always writes
``_cutoffs.json`` (the legacy list with the new record appended), which from then on is the one
read. The legacy file is left in place, never written and never deleted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

from barrierflow.checkpointing.errors import GlobalManifestExistsError
from barrierflow.checkpointing.global_manifest import (
    GlobalFailure,
    GlobalManifest,
    GlobalTrigger,
    StageSnapshot,
    global_key,
    stage_prefix,
)
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError
from barrierflow.storage import ObjectInfo, ObjectNotFoundError, ObjectStore

_GLOBAL = re.compile(r"^global/chk-(\d+)/(_metadata|_triggered|_failed)\.json$")
_GLOBAL_DIR = re.compile(r"^global/chk-(\d+)/")
CUTOFFS_KEY = "_cutoffs.json"
#: Where releases before the rename kept the attempt cutoffs; read when ``_cutoffs.json`` is absent.
LEGACY_CUTOFFS_KEY = "_fences.json"
RecordKind = Literal["_metadata", "_triggered", "_failed"]
CutStatus = Literal["completed", "failed", "in flight or abandoned", "unknown"]


@dataclass(frozen=True)
class AttemptCutoffRecord:
    """One restore's attempt cutoffs: the new ``attempt``, the global checkpoint ``restored``
    (0: the initial cut) and, per stage fed by channels, the offset of the restored barrier
    record per input partition (see :mod:`barrierflow.barriers.cutoffs`)."""

    attempt: int
    restored: int
    stages: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "restored": self.restored,
                "stages": {s: dict(sorted(o.items())) for s, o in sorted(self.stages.items())}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptCutoffRecord:
        return cls(int(data["attempt"]), int(data.get("restored", 0)),
                   {str(s): {str(p): int(o) for p, o in offsets.items()}
                    for s, offsets in dict(data.get("stages", {})).items()})


class CutLog(Protocol):
    """What operations read of a pipeline's cuts (global checkpoints), whatever its shape."""

    @property
    def uri(self) -> str: ...

    def completed_ids(self) -> list[int]: ...

    def location(self, checkpoint_id: int) -> str: ...

    def get(self, checkpoint_id: int) -> GlobalManifest: ...

    def completed(self) -> list[GlobalManifest]: ...

    def all_manifests(self) -> list[GlobalManifest]: ...

    def readable_manifests(self) -> tuple[list[GlobalManifest], list[tuple[str, str]]]: ...

    def trigger_time(self, checkpoint_id: int) -> datetime | None: ...

    def failures(self) -> list[GlobalFailure]: ...

    def status(self, checkpoint_id: int) -> CutStatus: ...

    def abandoned(self) -> list[int]: ...

    def attempt(self) -> int: ...

    def cutoffs(self) -> list[AttemptCutoffRecord]: ...


def completed_cut(cuts: CutLog, pipeline: str, checkpoint_id: int | None, *, noun: str = "global checkpoint") -> int:
    """``checkpoint_id`` if it is a completed cut of ``cuts``'s current timeline (None: the newest).

    Raises:
        CheckpointNotFoundError: none completed, or ``checkpoint_id`` did not (or was abandoned
            by a restore); the message names the pipeline, the store and the completed ones.
    """
    from barrierflow.errors import CheckpointNotFoundError

    ids = cuts.completed_ids()
    if checkpoint_id is None:
        if not ids:
            raise CheckpointNotFoundError(f"pipeline {pipeline} has no completed {noun} in {cuts.uri}; run it first")
        return ids[-1]
    if checkpoint_id not in ids:
        raise CheckpointNotFoundError(f"{noun} {checkpoint_id} of pipeline {pipeline} is not complete (or was "
                                      f"abandoned by a restore); completed: {ids}")
    return checkpoint_id


class GlobalCheckpointStore:
    """The global records of a pipeline of several stages; see the module docstring.

    ``root`` is the pipeline-level :class:`CheckpointStore` on the same objects (``_pipeline.json``:
    attempt, abandoned ids)."""

    def __init__(self, objects: ObjectStore, pipeline: str) -> None:
        self.objects = objects
        self.pipeline = pipeline
        self.root = CheckpointStore(objects, pipeline)

    @property
    def uri(self) -> str:
        return self.objects.uri

    def location(self, checkpoint_id: int) -> str:
        """Where cut ``checkpoint_id`` is recorded, as messages name it: its global manifest
        (which names every stage's manifest)."""
        return self.objects.describe(global_key(checkpoint_id, "_metadata"))

    # -- ids ------------------------------------------------------------------------------
    def record_ids(self) -> dict[RecordKind, set[int]]:
        """Every global id with a record of each kind (abandoned ones included)."""
        ids: dict[RecordKind, set[int]] = {"_metadata": set(), "_triggered": set(), "_failed": set()}
        for info in self.objects.list("global/"):
            match = _GLOBAL.match(info.key)
            if match:
                ids[match.group(2)].add(int(match.group(1)))  # type: ignore[index]
        return ids

    def ids(self, kind: RecordKind) -> list[int]:
        """Ids with a ``kind`` record, ascending (abandoned ones included)."""
        return sorted(self.record_ids()[kind])

    def completed_ids(self) -> list[int]:
        """Completed global checkpoints of the current timeline (not abandoned by a restore), ascending."""
        abandoned = set(self.abandoned())
        return [i for i in self.ids("_metadata") if i not in abandoned]

    def unfinished_ids(self) -> list[int]:
        """Triggered global checkpoints with neither a manifest nor a failure record."""
        ids = self.record_ids()
        return sorted(ids["_triggered"] - ids["_metadata"] - ids["_failed"])

    def highest_used_id(self) -> int:
        """The largest id any global record uses (0: none); a new global checkpoint id must be larger."""
        ids = self.record_ids()
        return max(ids["_metadata"] | ids["_triggered"] | ids["_failed"], default=0)

    def has_records(self) -> bool:
        """Whether any global record or attempt cutoff (either file name) exists (the pipeline ran before)."""
        return (bool(self.objects.list("global/")) or self.objects.exists(CUTOFFS_KEY)
                or self.objects.exists(LEGACY_CUTOFFS_KEY))

    def exists(self, checkpoint_id: int) -> bool:
        """Whether ``checkpoint_id`` has any object under ``global/chk-<n>/`` (it was triggered)."""
        return bool(self.objects.list(f"global/chk-{checkpoint_id}/"))

    def objects_by_id(self) -> dict[int, list[ObjectInfo]]:
        """Every object under ``global/chk-<n>/`` (records of any kind), by global id; for
        retention, which deletes a global checkpoint's directory whole."""
        dirs: dict[int, list[ObjectInfo]] = {}
        for info in self.objects.list("global/chk-"):
            match = _GLOBAL_DIR.match(info.key)
            if match:
                dirs.setdefault(int(match.group(1)), []).append(info)
        return dirs

    @staticmethod
    def is_manifest_key(key: str) -> bool:
        """Whether ``key`` is the global manifest of some ``global/chk-<n>/``."""
        match = _GLOBAL.match(key)
        return match is not None and match.group(2) == "_metadata"

    # -- reading --------------------------------------------------------------------------
    def _read(self, key: str, model: type[BaseModel]) -> Any:
        """``key`` parsed as ``model``; None if it does not exist. Raises CheckpointCorruptError naming it."""
        try:
            raw = self.objects.get_bytes(key)
        except ObjectNotFoundError:
            return None
        try:
            return model.model_validate_json(raw)
        except (ValidationError, ValueError) as exc:
            raise CheckpointCorruptError(
                f"{self.objects.uri}/{key} is not a valid {model.__name__} ({str(exc).splitlines()[0]}); move it "
                "aside (or restore it from a backup) to read the other global checkpoints") from None

    def status(self, checkpoint_id: int) -> CutStatus:
        """What became of ``checkpoint_id``, from which records exist (manifest first, then failure)."""
        if self.objects.exists(global_key(checkpoint_id, "_metadata")):
            return "completed"
        if self.objects.exists(global_key(checkpoint_id, "_failed")):
            return "failed"
        if self.objects.exists(global_key(checkpoint_id, "_triggered")):
            return "in flight or abandoned"
        return "unknown"

    def get(self, checkpoint_id: int) -> GlobalManifest:
        """The global manifest of ``checkpoint_id``.

        Raises:
            CheckpointNotFoundError: it has none (the message says whether it failed or is unfinished).
            CheckpointCorruptError: it does not parse.
        """
        manifest = self._read(global_key(checkpoint_id, "_metadata"), GlobalManifest)
        if manifest is None:
            raise CheckpointNotFoundError(
                f"global checkpoint {checkpoint_id} of pipeline {self.pipeline} is not complete "
                f"({self.status(checkpoint_id)}); list the completed ones with 'barrierflow checkpoints list'")
        return manifest  # type: ignore[no-any-return]

    def completed(self) -> list[GlobalManifest]:
        """Every completed global manifest of the current timeline, ascending."""
        return [self.get(i) for i in self.completed_ids()]

    def all_manifests(self) -> list[GlobalManifest]:
        """Every global manifest, abandoned ones included, ascending."""
        return [self.get(i) for i in self.ids("_metadata")]

    def readable_manifests(self) -> tuple[list[GlobalManifest], list[tuple[str, str]]]:
        """Every global manifest that reads, abandoned ones included, ascending, and ``(file
        URI, why)`` of each one that does not (one deleted meanwhile is left out silently)."""
        return _readable(self.ids("_metadata"), self.get,
                         lambda cid: self.objects.describe(global_key(cid, "_metadata")))

    def failures(self) -> list[GlobalFailure]:
        """Every global failure record, ascending by id. Raises CheckpointCorruptError."""
        return [f for i in self.ids("_failed") if (f := self._read(global_key(i, "_failed"), GlobalFailure))]

    def trigger(self, checkpoint_id: int) -> GlobalTrigger | None:
        """The trigger record of ``checkpoint_id`` (None: none). Raises CheckpointCorruptError."""
        return self._read(global_key(checkpoint_id, "_triggered"), GlobalTrigger)  # type: ignore[no-any-return]

    def trigger_time(self, checkpoint_id: int) -> datetime | None:
        """When cut ``checkpoint_id`` was triggered (its trigger record; None: none)."""
        record = self.trigger(checkpoint_id)
        return record.trigger_time if record is not None else None

    def abandoned(self) -> list[int]:
        """Global ids a restore abandoned (``_pipeline.json``)."""
        return self.root.abandoned()

    def attempt(self) -> int:
        """The pipeline's current attempt (0 before the first restore)."""
        return self.root.attempt()

    # -- writing --------------------------------------------------------------------------
    def record_trigger(self, trigger: GlobalTrigger) -> None:
        """Record that the pipeline coordinator triggered ``trigger.checkpoint_id`` (the first record)."""
        self.objects.put_bytes(global_key(trigger.checkpoint_id, "_triggered"), trigger.model_dump_json().encode())

    def add_manifest(self, manifest: GlobalManifest) -> bool:
        """Add the global manifest of a checkpoint if it has none; False (nothing written) if it has."""
        return self.objects.put_if_absent(global_key(manifest.checkpoint_id, "_metadata"),
                                          manifest.model_dump_json(indent=2).encode())

    def write_manifest(self, manifest: GlobalManifest) -> None:
        """Complete global checkpoint ``n`` (the last step).

        Raises:
            GlobalManifestExistsError: ``n`` already has a global manifest; it is never overwritten.
        """
        if not self.add_manifest(manifest):
            raise GlobalManifestExistsError(
                f"global checkpoint {manifest.checkpoint_id} of pipeline {self.pipeline} already has a manifest at "
                f"{self.objects.describe(global_key(manifest.checkpoint_id, '_metadata'))}; global manifests are "
                "never overwritten (is a second pipeline coordinator writing to this checkpoint store?)")

    def record_cut(self, checkpoint_id: int, parts: Mapping[str, tuple[CheckpointStore, Manifest]]
                   ) -> GlobalManifest:
        """Record cut ``checkpoint_id`` made outside a run (an upgrade's new savepoint): every
        stage's manifest (``stage name -> (its store, its manifest)``, all of that id), then the
        global manifest naming them, last: before it the stage manifests belong to no cut.

        Raises:
            GlobalManifestExistsError, CheckpointError: the cut (or a stage's checkpoint) of that
                id already has a manifest.
        """
        for store, manifest in parts.values():
            store.write_manifest(manifest)
        completed = datetime.now(UTC)
        cut = GlobalManifest(pipeline=self.pipeline, checkpoint_id=checkpoint_id, attempt=self.attempt(),
                             trigger_time=completed, completion_time=completed, total_ms=0.0,
                             stages={name: stage_snapshot(stage_prefix(name), manifest)
                                     for name, (_, manifest) in parts.items()})
        self.write_manifest(cut)
        return cut

    def record_failure(self, failure: GlobalFailure) -> None:
        """Record that ``failure.checkpoint_id`` failed, expired or was abandoned unfinished."""
        self.objects.put_bytes(global_key(failure.checkpoint_id, "_failed"), failure.model_dump_json(indent=2).encode())

    # -- attempts and cutoffs -------------------------------------------------------------
    def cutoffs(self) -> list[AttemptCutoffRecord]:
        """Every restore's attempt cutoffs, oldest first: ``_cutoffs.json`` if it exists, else
        the legacy ``_fences.json`` of an earlier release, else none (module docstring).

        Raises:
            CheckpointCorruptError: the file read does not parse (the message names it).
        """
        for key in (CUTOFFS_KEY, LEGACY_CUTOFFS_KEY):
            try:
                raw = self.objects.get_bytes(key)
            except ObjectNotFoundError:
                continue
            try:
                return [AttemptCutoffRecord.from_json(item) for item in json.loads(raw)]
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise CheckpointCorruptError(
                    f"{self.objects.uri}/{key} is not a list of attempt cutoffs ({exc}); restore it from a backup: "
                    "without it a downstream stage cannot tell which channel records an older attempt wrote") from None
        return []

    def add_cutoff(self, record: AttemptCutoffRecord) -> None:
        """Append ``record`` to the attempt cutoffs and write them whole to ``_cutoffs.json``
        (read as :meth:`cutoffs` does, legacy file included, then rewritten: one restore at a
        time writes it, under the pipeline's lease). Raises CheckpointCorruptError (see :meth:`cutoffs`)."""
        cutoffs = [*self.cutoffs(), record]
        self.objects.put_bytes(CUTOFFS_KEY, json.dumps([c.to_json() for c in cutoffs], indent=2).encode())

    def stage_cutoffs(self, stage: str) -> list[dict[str, Any]]:
        """The cutoffs of ``stage`` as its channel source takes them (``{"attempt", "offsets"}``)."""
        return [{"attempt": c.attempt, "offsets": c.stages[stage]} for c in self.cutoffs() if stage in c.stages]


def stage_snapshot(stage_prefix: str, manifest: Manifest) -> StageSnapshot:
    """A stage's part of a cut, from its manifest (``stage_prefix``: where its store is below the root)."""
    alignment = manifest.alignment
    return StageSnapshot(
        manifest=stage_prefix + manifest_key(manifest.checkpoint_id), spark_batch_id=manifest.spark_batch_id,
        mode=alignment.mode if alignment else None, alignment_ms=alignment.alignment_ms if alignment else 0.0,
        sync_ms=manifest.sync_ms, async_ms=manifest.async_ms,
        channel_state_records=alignment.channel_state_records if alignment else 0)


class SingleStageCuts:
    """The cuts of a pipeline of one stage, derived from its stage store: checkpoint ``n`` is
    cut ``n``. The stage store stays the one place such a pipeline writes (:meth:`record_cut`
    writes the stage's manifest)."""

    def __init__(self, stage: str, store: CheckpointStore) -> None:
        self.stage = stage
        self.store = store

    @property
    def pipeline(self) -> str:
        return self.store.pipeline

    @property
    def uri(self) -> str:
        return self.store.uri

    def location(self, checkpoint_id: int) -> str:
        """Where cut ``checkpoint_id`` is recorded, as messages name it: the stage's manifest
        (its checkpoints are the cuts)."""
        return self.store.objects.describe(manifest_key(checkpoint_id))

    def completed_ids(self) -> list[int]:
        return self.store.checkpoint_ids()

    def highest_used_id(self) -> int:
        """The largest checkpoint id the stage store uses (0: none)."""
        return self.store.highest_used_id()

    def record_cut(self, checkpoint_id: int, parts: Mapping[str, tuple[CheckpointStore, Manifest]]
                   ) -> GlobalManifest:
        """Record cut ``checkpoint_id`` made outside a run, as
        :meth:`GlobalCheckpointStore.record_cut` does: here the stage's own manifest is the cut
        (``parts`` holds this stage only).

        Raises:
            CheckpointError: checkpoint ``checkpoint_id`` already has a manifest.
            ValueError: ``parts`` is not exactly this pipeline's one stage.
        """
        if set(parts) != {self.stage}:
            raise ValueError(f"a cut of pipeline {self.pipeline} has one part, of stage {self.stage}; "
                             f"given {sorted(parts)}")
        store, manifest = parts[self.stage]
        store.write_manifest(manifest)
        return self.cut_of(manifest)

    def cut_of(self, manifest: Manifest) -> GlobalManifest:
        """Cut ``n`` as a global manifest, derived from the stage's manifest ``n``."""
        return GlobalManifest(pipeline=manifest.pipeline, checkpoint_id=manifest.checkpoint_id,
                              attempt=manifest.attempt, trigger_time=manifest.trigger_time,
                              completion_time=manifest.completion_time, total_ms=manifest.total_ms,
                              stages={self.stage: stage_snapshot("", manifest)})

    def get(self, checkpoint_id: int) -> GlobalManifest:
        return self.cut_of(self.store.get(checkpoint_id))

    def completed(self) -> list[GlobalManifest]:
        return [self.cut_of(m) for m in self.store.completed()]

    def all_manifests(self) -> list[GlobalManifest]:
        """Every cut with a manifest (the store lists abandoned checkpoints too), ascending."""
        return self.completed()

    def readable_manifests(self) -> tuple[list[GlobalManifest], list[tuple[str, str]]]:
        """As :meth:`GlobalCheckpointStore.readable_manifests`, over the stage's ``chk-<n>``."""
        return _readable(self.store.checkpoint_ids(), self.get,
                         lambda cid: self.store.objects.describe(manifest_key(cid)))

    def trigger_time(self, checkpoint_id: int) -> datetime | None:
        """When checkpoint ``checkpoint_id`` was triggered: its failure record's time (None: none)."""
        return next((f.trigger_time for f in self.store.failures() if f.checkpoint_id == checkpoint_id), None)

    def failures(self) -> list[GlobalFailure]:
        return [GlobalFailure(pipeline=f.pipeline, checkpoint_id=f.checkpoint_id, reason="STAGE_FAILED",
                              message=f"{f.reason.value}: {f.message}" if f.message else f.reason.value,
                              failure_time=f.failure_time)
                for f in self.store.failures()]

    def status(self, checkpoint_id: int) -> CutStatus:
        if checkpoint_id in self.store.checkpoint_ids():
            return "completed"
        if any(f.checkpoint_id == checkpoint_id for f in self.store.failures()):
            return "failed"
        return "unknown"

    def abandoned(self) -> list[int]:
        return self.store.abandoned()

    def attempt(self) -> int:
        return self.store.attempt()

    def cutoffs(self) -> list[AttemptCutoffRecord]:
        return []  # one stage reads no channel: no attempt cutoffs


def _readable(ids: list[int], get: Callable[[int], GlobalManifest], file: Callable[[int], str]
              ) -> tuple[list[GlobalManifest], list[tuple[str, str]]]:
    manifests: list[GlobalManifest] = []
    unreadable: list[tuple[str, str]] = []
    for cid in ids:
        try:
            manifests.append(get(cid))
        except CheckpointCorruptError as exc:
            unreadable.append((file(cid), str(exc)))
        except CheckpointNotFoundError:  # deleted since it was listed (retention)
            continue
    return manifests, unreadable
