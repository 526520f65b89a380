"""The checkpoint store: manifests, failure records and content-addressed shared files.

Layout under the store's root URI (``checkpoint.storage`` of the spec)::

    _pipeline.json                     {"pipeline": name, "attempt": n, "abandoned": [ids]}
    shared/<sha256[:2]>/<sha256>       every file any checkpoint references, by content
    chk-<n>/_metadata.json             the manifest, written last (checkpoint completed)
    chk-<n>/_failed.json               why checkpoint n failed (best effort)
    _writers/chk-<n>.fence-<F>         the fencing number of manifest n's writer (empty)

Manifests are a log in the spirit of Spark's ``HDFSMetadataLog``: :meth:`CheckpointStore.add_manifest`
adds ``chk-<n>/_metadata.json`` with ``put_if_absent`` and never overwrites it (one job per
pipeline writes, guarded by the job lease). The one change a manifest may see later is its
promotion to a savepoint (:meth:`CheckpointStore.promote`), which rewrites ``kind`` only.

Fencing of checkpoint completion (see :mod:`barrierflow.lease`). A job's store carries
its :class:`~barrierflow.lease.FenceToken` (``fence``). :meth:`CheckpointStore.write_manifest`
(1) checks the fence, (2) writes ``_writers/chk-<n>.fence-<F>`` (the writer's fencing
number; outside ``chk-<n>/``, so it is no evidence of a completed checkpoint), (3) adds the
manifest. A restore records its own fence G and restored checkpoint T in ``_pipeline.json``
(``restores``). Invariant: *a manifest n > T whose writer's fence is below G is never a
completed checkpoint* (:meth:`CheckpointStore.checkpoint_ids` treats it as
abandoned). Proof for the gap between check and write: a stale writer F < G whose check passed
before G existed and whose manifest lands after the restore listed the store writes n > T
(T was the latest the restore saw, or older) with marker F < G, which the reader rule
abandons; its sinks' commits are refused separately by the ledger's decision records. A
manifest written before the restore listed is an ordinary completed checkpoint the restore
saw. The marker is written before the manifest, so a manifest is never visible without it.

A file is uploaded once: a checkpoint whose file's sha256 is already in ``shared/`` only
references it (incremental checkpoints). Shared files are deleted only by retention, which
counts references from retained manifests.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from barrierflow.checkpointing.manifest import CheckpointKind, FailureRecord, Manifest
from barrierflow.errors import CheckpointCorruptError, CheckpointError, CheckpointNotFoundError
from barrierflow.storage import ObjectNotFoundError, ObjectStore, open_store

if TYPE_CHECKING:
    from barrierflow.lease import FenceToken
    from barrierflow.spec.models import StageSpec

log = logging.getLogger(__name__)
_ANY_CHK = re.compile(r"^chk-(\d+)/")
_LEDGER_TXN = re.compile(r"^ledger/[^/]+/txn-(\d+)\.json$")
_CHK = re.compile(r"^chk-(\d+)/(_metadata|_failed)\.json$")
_WRITER = re.compile(r"^_writers/chk-(\d+)\.fence-(\d+)$")


def shared_key(sha256: str) -> str:
    return f"shared/{sha256[:2]}/{sha256}"


def manifest_key(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}/_metadata.json"


def failure_key(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}/_failed.json"


def freshness_key(checkpoint_id: int) -> str:
    """Where the freshness of checkpoint n's commits is stored beside it (written once its sinks
    committed, after the manifest; deleted with the checkpoint)."""
    return f"chk-{checkpoint_id}/_freshness.json"


class CheckpointStore:
    def __init__(self, objects: ObjectStore, pipeline: str) -> None:
        self.objects = objects
        self.pipeline = pipeline
        #: The lease holder's fencing token; None for readers and tools that write no manifest.
        self.fence: FenceToken | None = None

    @classmethod
    def for_spec(cls, spec: StageSpec, objects: ObjectStore | None = None) -> CheckpointStore:
        return cls(objects or open_store(spec.checkpoint.storage), spec.name)

    @property
    def uri(self) -> str:
        return self.objects.uri

    # -- shared files -------------------------------------------------------------------
    def shared_digests(self) -> set[str]:
        return {info.key.rsplit("/", 1)[-1] for info in self.objects.list("shared/")}

    def put_shared(self, sha256: str, local_path: str) -> None:
        """Store the file whose content hash is ``sha256`` under ``shared/``; the hash goes with
        the upload, so a store that checks it (S3) refuses a file that changed since it was hashed."""
        self.objects.put_file(shared_key(sha256), local_path, sha256=sha256)

    # -- manifests ----------------------------------------------------------------------
    def add_manifest(self, manifest: Manifest) -> bool:
        """Add the manifest of a checkpoint if it has none; False (nothing written) if it has.
        The write itself is atomic (a reader sees the whole manifest or none)."""
        return self.objects.put_if_absent(manifest_key(manifest.checkpoint_id),
                                          manifest.model_dump_json(indent=2).encode())

    def write_manifest(self, manifest: Manifest) -> None:
        """Complete a checkpoint: add its manifest (the last step).

        Raises:
            FencedOffError: the job's lease was taken over; nothing was written.
            CheckpointError: checkpoint n already has a manifest; it is never overwritten.
        """
        if self.fence is not None:
            self.fence.check(f"completing checkpoint {manifest.checkpoint_id}")
            self.objects.put_bytes(f"_writers/chk-{manifest.checkpoint_id}.fence-{self.fence.fence}", b"")
        if not self.add_manifest(manifest):
            raise CheckpointError(
                f"checkpoint {manifest.checkpoint_id} of pipeline {self.pipeline} already has a manifest at "
                f"{self.objects.describe(manifest_key(manifest.checkpoint_id))}; manifests are never overwritten "
                "(is a second job writing to this checkpoint store?)")

    def put_freshness(self, checkpoint_id: int, sinks: dict[str, dict[str, object]]) -> None:
        """Store the freshness of checkpoint ``checkpoint_id``'s commits: per sink ``seconds``
        (commit time minus the oldest arrival it made visible) and the times it is made of."""
        self.objects.put_bytes(freshness_key(checkpoint_id), json.dumps({"sinks": sinks}).encode())

    def freshness_record(self, checkpoint_id: int) -> dict[str, dict[str, Any]]:
        """Each sink's stored freshness record of checkpoint ``checkpoint_id`` (what
        :meth:`put_freshness` stored; empty: none stored, or unreadable, which is logged: it is
        report data)."""
        key = freshness_key(checkpoint_id)
        try:
            sinks = json.loads(self.objects.get_bytes(key))["sinks"]
            return {str(sink): dict(figure) for sink, figure in sinks.items()}
        except ObjectNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("the freshness record %s is unreadable (%s); the checkpoint's freshness is not shown",
                        self.objects.describe(key), exc)
            return {}

    def freshness(self, checkpoint_id: int) -> dict[str, float]:
        """Each sink's stored freshness of checkpoint ``checkpoint_id`` in seconds (see
        :meth:`freshness_record`)."""
        try:
            return {sink: float(figure["seconds"]) for sink, figure in self.freshness_record(checkpoint_id).items()}
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("the freshness record of checkpoint %d is unreadable (%s); its freshness is not shown",
                        checkpoint_id, exc)
            return {}

    def promote(self, checkpoint_id: int, kind: CheckpointKind) -> Manifest:
        """Rewrite the manifest of ``checkpoint_id`` with ``kind`` (savepoint promotion), the
        only field that may change after completion. Returns the new manifest."""
        promoted = self.get(checkpoint_id).model_copy(update={"kind": kind})
        self.objects.put_bytes(manifest_key(checkpoint_id), promoted.model_dump_json(indent=2).encode())
        return promoted

    def record_failure(self, record: FailureRecord) -> None:
        self.objects.put_bytes(failure_key(record.checkpoint_id), record.model_dump_json(indent=2).encode())

    def _ids(self) -> tuple[list[int], list[int]]:
        completed, failed = [], []
        for info in self.objects.list("chk-"):
            match = _CHK.match(info.key)
            if match:
                (completed if match.group(2) == "_metadata" else failed).append(int(match.group(1)))
        restores = self._restores()
        if restores:  # only pipelines restored under a store lease have stale writers to rule out
            writers = {int(m.group(1)): int(m.group(2)) for info in self.objects.list("_writers/")
                       if (m := _WRITER.match(info.key))}
            completed = [i for i in completed if not self._fenced_out(i, writers.get(i), restores)]
        return sorted(completed), sorted(failed)

    @staticmethod
    def _fenced_out(checkpoint_id: int, writer: int | None, restores: list[tuple[int, int]]) -> bool:
        """Whether manifest ``checkpoint_id`` (written under fence ``writer``) lies beyond a
        restore that a higher fence made: a stale driver's late write (module docstring)."""
        return writer is not None and any(checkpoint_id > restored and writer < fence for fence, restored in restores)

    def _restores(self) -> list[tuple[int, int]]:
        raw = self._pipeline_doc().get("restores", [])
        return [(int(r["fence"]), int(r["restored"])) for r in raw]  # type: ignore[union-attr]

    def highest_used_id(self) -> int:
        """The largest checkpoint id anything in the store uses (0 if none): any ``chk-<n>/``
        object, with or without a readable manifest, abandoned or not, and any ledger
        transaction. A new checkpoint id must be larger, so it never reuses a directory or
        overwrites a transaction of a corrupt or abandoned checkpoint."""
        highest = 0
        for prefix, pattern in (("chk-", _ANY_CHK), ("ledger/", _LEDGER_TXN)):
            for info in self.objects.list(prefix):
                match = pattern.match(info.key)
                if match:
                    highest = max(highest, int(match.group(1)))
        return highest

    def checkpoint_ids(self, include_abandoned: bool = False) -> list[int]:
        """Ids of checkpoints with a manifest (completed), ascending. Checkpoints newer than
        a restored one are *abandoned* (their timeline was discarded) and left out."""
        ids = self._ids()[0]
        if include_abandoned:
            return ids
        abandoned = set(self.abandoned())
        return [i for i in ids if i not in abandoned]

    def get(self, checkpoint_id: int) -> Manifest:
        """The manifest of ``checkpoint_id``.

        Raises:
            CheckpointNotFoundError: no manifest (never completed, or deleted).
            CheckpointCorruptError: the manifest is not valid JSON or not the schema.
        """
        key = manifest_key(checkpoint_id)
        try:
            raw = self.objects.get_bytes(key)
        except ObjectNotFoundError:
            failed = self.objects.exists(failure_key(checkpoint_id))
            hint = f" (it failed: see chk-{checkpoint_id}/_failed.json)" if failed else ""
            raise CheckpointNotFoundError(
                f"checkpoint {checkpoint_id} of pipeline {self.pipeline} has no manifest at "
                f"{self.objects.describe(key)}{hint}; list completed ones with "
                "'barrierflow checkpoints list SPEC'"
            ) from None
        try:
            return Manifest.model_validate_json(raw)
        except ValidationError as exc:
            raise CheckpointCorruptError(
                f"manifest {self.objects.describe(key)} is corrupt or truncated: "
                f"{exc.errors()[0]['msg'] if exc.errors() else exc}"
            ) from None

    def completed(self) -> list[Manifest]:
        """Every readable completed manifest, ascending by id (corrupt ones are skipped
        with a warning; ``barrierflow verify`` reports them)."""
        out = []
        for cid in self.checkpoint_ids():
            try:
                out.append(self.get(cid))
            except (CheckpointCorruptError, CheckpointNotFoundError) as exc:
                log.warning("skipping checkpoint %s: %s", cid, exc)
        return out

    def latest(self) -> Manifest | None:
        done = self.completed()
        return done[-1] if done else None

    def failures(self) -> list[FailureRecord]:
        out = []
        for cid in self._ids()[1]:
            try:
                out.append(FailureRecord.model_validate_json(self.objects.get_bytes(failure_key(cid))))
            except (ObjectNotFoundError, ValidationError):
                continue
        return out

    # -- attempts -----------------------------------------------------------------------
    def _pipeline_doc(self) -> dict[str, object]:
        try:
            return dict(json.loads(self.objects.get_bytes("_pipeline.json")))
        except ObjectNotFoundError:
            return {"pipeline": self.pipeline, "attempt": 0, "abandoned": []}

    def attempt(self) -> int:
        """How many times the pipeline was restored (0 before the first restore)."""
        return int(self._pipeline_doc()["attempt"])  # type: ignore[call-overload]

    def attempt_fence(self) -> int | None:
        """The fencing number of the restore that began the current attempt (None: no restore
        under a store lease began it); write-ahead batches of this attempt carry a fence >= it."""
        doc = self._pipeline_doc()
        fences = [int(r["fence"]) for r in doc.get("restores", [])  # type: ignore[union-attr]
                  if int(r.get("attempt", -1)) == int(doc["attempt"])]  # type: ignore[call-overload]
        return fences[-1] if fences else None

    def abandoned(self) -> list[int]:
        return [int(i) for i in self._pipeline_doc().get("abandoned", [])]  # type: ignore[union-attr]

    def abandon(self, checkpoint_ids: list[int]) -> None:
        """Leave ``checkpoint_ids`` out of the timeline, in the current attempt (a new savepoint
        made from an older checkpoint: what lies between belongs to no timeline it continues)."""
        doc = self._pipeline_doc()
        gone = sorted(set(self.abandoned()) | set(checkpoint_ids))
        if gone == self.abandoned():
            return
        if self.fence is not None:
            self.fence.check("abandoning checkpoints")
        self.objects.put_bytes("_pipeline.json", json.dumps({**doc, "abandoned": gone}).encode())

    def begin_attempt(self, abandoned: list[int], restored: int | None = None) -> int:
        """Record a restore: increase the attempt number and abandon the given checkpoints.
        With the restorer's fence (:attr:`fence`) and the ``restored`` checkpoint, manifests a
        stale driver adds beyond it later are abandoned too (module docstring)."""
        doc = self._pipeline_doc()
        attempt = int(doc["attempt"]) + 1  # type: ignore[call-overload]
        gone = sorted(set(self.abandoned()) | set(abandoned))
        restores = list(doc.get("restores", []))  # type: ignore[call-overload]
        if self.fence is not None and restored is not None:
            self.fence.check(f"beginning attempt {attempt}")
            restores.append({"fence": self.fence.fence, "restored": restored, "attempt": attempt})
        body: dict[str, object] = {"pipeline": self.pipeline, "attempt": attempt, "abandoned": gone}
        if restores:
            body["restores"] = restores
        self.objects.put_bytes("_pipeline.json", json.dumps(body).encode())
        return attempt
