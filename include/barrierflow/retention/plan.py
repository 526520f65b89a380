"""Planning and applying one retention run (``barrierflow retain``).

:func:`retain` is the one function that does it::

    announce the run (_retention/running.json; see barrierflow.checkpointing.reservations)
    kept      <- savepoints + the completed checkpoints the policy keeps (policy.py)
    delete    every object under chk-<n>/ of the other completed checkpoints (abandoned
              ones included), the manifest first, so an interrupted run leaves an
              incomplete directory, never a manifest whose files are gone
    delete    incomplete checkpoints (chk-<n>/ without a readable manifest) whose failure
              record is older than checkpoint.timeout, or older than the newest completed
              checkpoint (nothing in flight ever writes into chk-<n>/ before its manifest)
    delete    shared files referenced neither by a kept manifest nor by a live in-flight
              reservation (reference counting over the kept set)
    delete    ledger transactions that are finished (COMMITTED/ABORTED) and belong to a
              checkpoint older than the oldest kept non-savepoint checkpoint, except the
              savepoints' own, the newest committed one per sink, and committed ones whose
              output lies beyond a kept checkpoint's barrier offsets (a restore of it
              replays their batches with the output suppressed: barriers/replay_plan.py)
    delete    reservations of checkpoints that completed, failed or expired (older than
              checkpoint.timeout)
    record the finished run (last.json), withdraw running.json
    delete    in the job's local work directory (if it exists on this machine): old
              offsets/commits entries and state files of the local Spark checkpoint that
              Spark can never need again, the spark-checkpoint.replaced copy of a restore
              once the job has moved on, and stale snapshots/chk-<n> snapshot directories
              (barrierflow.retention.local); done after running.json is withdrawn, so uploads
              never wait for local deletions

A dry run only plans: it changes nothing, not even running.json, and reports the same
counts and bytes a real run started at that moment would.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from barrierflow.checkpointing.manifest import CheckpointKind, FailureRecord, Manifest
from barrierflow.checkpointing.reservations import begin_run, end_run, reservation_key, reservations
from barrierflow.checkpointing.store import CheckpointStore, failure_key, manifest_key
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError
from barrierflow.retention.local import (
    LocalRetentionPlan,
    apply_local_retention,
    min_batches_to_retain,
    plan_local_retention,
)
from barrierflow.retention.policy import RetentionPolicy, choose_retained
from barrierflow.sinks.cut import PREFIX as CUT_RECORDS
from barrierflow.sinks.cut import cut_record_id
from barrierflow.spec.models import StageSpec
from barrierflow.storage import ObjectInfo, ObjectNotFoundError
from barrierflow.transactions.ledger import TransactionLedger, TxnState, transaction_key
from barrierflow.verification.report import load_report
from barrierflow.workdir.layout import JobLayout

log = logging.getLogger(__name__)
_DIR = re.compile(r"^chk-(\d+)/")


@dataclass
class RetainedIds:
    """What every retention run decides about checkpoint ids, a stage's run
    (:class:`RetentionPlan`) and a pipeline's cuts alike: the ids ``kept`` by the policy, the
    ``savepoints`` (always kept), and the ``checkpoints`` and ``incomplete`` ones it deletes."""

    pipeline: str
    policy: RetentionPolicy
    dry_run: bool
    kept: list[int] = field(default_factory=list)
    savepoints: list[int] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    incomplete: list[int] = field(default_factory=list)

    def ids_dict(self, **deleted: Any) -> dict[str, Any]:
        """The head of ``retain``'s JSON: pipeline, policy, dry run, kept, savepoints and the
        deleted ids; the keyword arguments are what the run adds to its ``deleted`` part."""
        return {"pipeline": self.pipeline, "policy": self.policy.value, "dry_run": self.dry_run,
                "kept": self.kept, "savepoints": self.savepoints,
                "deleted": {"checkpoints": self.checkpoints, "incomplete": self.incomplete, **deleted}}


@dataclass
class RetentionPlan(RetainedIds):
    """What a retention run deletes (or, in a dry run, would delete)."""

    shared: list[str] = field(default_factory=list)
    ledger: list[str] = field(default_factory=list)
    reservations: list[int] = field(default_factory=list)
    #: store keys in deletion order, with their sizes, per category
    keys: dict[str, list[ObjectInfo]] = field(default_factory=dict)
    #: the job's local work directory (None: not planned)
    local: LocalRetentionPlan | None = None

    @property
    def bytes(self) -> dict[str, int]:
        return {category: sum(i.size for i in infos) for category, infos in self.keys.items()}

    @property
    def bytes_freed(self) -> int:
        return sum(self.bytes.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.ids_dict(shared_files=len(self.shared), ledger_entries=len(self.ledger),
                            reservations=self.reservations),
            "objects": sum(len(v) for v in self.keys.values()),
            "bytes": self.bytes, "bytes_freed": self.bytes_freed,
            "local": self.local.as_dict() if self.local is not None else None,
        }


def policy_of(spec: StageSpec) -> RetentionPolicy:
    prefer = spec.verification.prefer_verified if spec.verification else True
    return RetentionPolicy.PREFER_VERIFIED if prefer else RetentionPolicy.NEWEST


def plan_retention(spec: StageSpec, store: CheckpointStore, *, dry_run: bool = True,
                   now: datetime | None = None, layout: JobLayout | None = None,
                   keep: set[int] | None = None, keep_from: int | None = None) -> RetentionPlan:
    """Decide what to delete (see the module docstring); reads only. ``bytes``/``bytes_freed``
    count the checkpoint store; the work directory's numbers are in ``local``. ``keep``: the
    completed checkpoints to keep besides savepoints, decided by the caller instead of the
    policy (a multi-stage pipeline keeps whole global checkpoints: retention/global_plan.py);
    ``keep_from``: with ``keep``, every checkpoint whose id is at least this one is kept too
    (a stage's part of a global checkpoint that may still be in flight)."""
    moment = now or datetime.now(UTC)
    timeout = timedelta(seconds=spec.checkpoint.timeout)
    objects = store.objects
    plan = RetentionPlan(spec.name, policy_of(spec), dry_run)
    live_reservations = reservations(objects)  # read first: see reservations.py, step R2
    by_dir: dict[int, list[ObjectInfo]] = defaultdict(list)
    for info in objects.list("chk-"):
        match = _DIR.match(info.key)
        if match:
            by_dir[int(match.group(1))].append(info)
    manifests: dict[int, Manifest] = {}
    for cid, infos in by_dir.items():
        if any(i.key == manifest_key(cid) for i in infos):
            try:
                manifests[cid] = store.get(cid)
            except (CheckpointCorruptError, CheckpointNotFoundError) as exc:
                log.warning("checkpoint %d is incomplete: %s", cid, exc)
    abandoned = set(store.abandoned())
    savepoints = sorted(c for c, m in manifests.items() if m.kind is CheckpointKind.SAVEPOINT)
    timeline = sorted(c for c in manifests if c not in abandoned and c not in savepoints)
    verdicts: dict[int, bool | None] = {}
    if plan.policy is RetentionPolicy.PREFER_VERIFIED and keep is None:
        for cid in timeline:
            report = load_report(objects, cid)
            verdicts[cid] = report.passed if report else None
    kept = (choose_retained(timeline, spec.checkpoint.retained, plan.policy, verdicts) if keep is None
            else {c for c in timeline if c in keep or (keep_from is not None and c >= keep_from)})
    plan.kept, plan.savepoints = sorted(kept), savepoints
    keep_all = kept | set(savepoints)
    newest_completed = max(manifests, default=-1)

    def ordered(cid: int) -> list[ObjectInfo]:  # the manifest first
        return sorted(by_dir[cid], key=lambda i: (i.key != manifest_key(cid), i.key))

    plan.checkpoints = sorted(c for c in manifests if c not in keep_all)
    plan.keys["checkpoints"] = [i for c in plan.checkpoints for i in ordered(c)]
    # A table sink's cut record goes with its checkpoint, after it (a run killed in between
    # leaves a record without a checkpoint, which the next run deletes): every record of a
    # checkpoint not kept, up to the newest completed (a newer one belongs to a checkpoint
    # whose manifest this listing may have missed).
    plan.keys["checkpoints"] += [i for i in objects.list(CUT_RECORDS)
                                 if (cid := cut_record_id(i.key)) is not None and cid not in keep_all
                                 and cid <= newest_completed]
    for cid in sorted(set(by_dir) - set(manifests)):
        failed_at = _failure_time(store, cid)
        if cid < newest_completed or (failed_at is not None and moment - failed_at > timeout):
            plan.incomplete.append(cid)
    plan.keys["incomplete"] = [i for c in plan.incomplete for i in ordered(c)]

    live, stale = [], []
    for r in live_reservations:
        finished = r.checkpoint_id in manifests or objects.exists(failure_key(r.checkpoint_id))
        (stale if finished or moment - r.created_at > timeout else live).append(r)
    plan.reservations = sorted(r.checkpoint_id for r in stale)
    referenced = {f.sha256 for c in keep_all for f in manifests[c].files}
    referenced |= {d for r in live for d in r.digests}
    shared = objects.list("shared/")
    plan.keys["shared"] = [i for i in shared if i.key.rsplit("/", 1)[-1] not in referenced]
    plan.shared = [i.key.rsplit("/", 1)[-1] for i in plan.keys["shared"]]

    restore_points = [manifests[c].barrier_offsets.get(spec.source.name, {}) for c in keep_all if c in manifests]
    plan.keys["ledger"] = _ledger_to_delete(store, kept, set(savepoints), restore_points)
    plan.ledger = [i.key for i in plan.keys["ledger"]]
    plan.keys["reservations"] = [i for i in objects.list("_inflight/")
                                 if i.key in {reservation_key(c) for c in plan.reservations}]

    # The local work directory builds on the newest completed checkpoint of the current
    # timeline (what the job's coordinator continues from) and the newest one kept here.
    current = [c for c in manifests if c not in abandoned]
    references = {max(ids) for ids in (current, [c for c in keep_all if c not in abandoned]) if ids}
    recorded = {c for c, infos in by_dir.items()
                if any(i.key in (manifest_key(c), failure_key(c)) for i in infos)}
    plan.local = plan_local_retention(
        layout or JobLayout.for_spec(spec), [manifests[c] for c in sorted(references)], recorded,
        min_batches=min_batches_to_retain(spec.spark.conf), attempt=store.attempt(), timeout=timeout, now=moment)
    return plan


def _failure_time(store: CheckpointStore, checkpoint_id: int) -> datetime | None:
    try:
        return FailureRecord.model_validate_json(store.objects.get_bytes(failure_key(checkpoint_id))).failure_time
    except (ObjectNotFoundError, ValidationError):
        return None


def _ledger_to_delete(store: CheckpointStore, kept: set[int], savepoints: set[int],
                      restore_points: list[dict[str, int]]) -> list[ObjectInfo]:
    """Finished transactions of epochs older than the oldest kept checkpoint, except the
    newest committed one per sink, the savepoints' own, and committed ones whose output lies
    beyond a kept checkpoint's barrier offsets (``restore_points``): a restore of that
    checkpoint replays their batches and needs them to suppress the output."""
    from barrierflow.barriers.replay_plan import output_beyond

    if not kept:
        return []
    oldest = min(kept)
    txns = TransactionLedger(store.objects, store.pipeline).list()
    newest_committed: dict[str, int] = {}
    for t in txns:
        if t.state is TxnState.COMMITTED:
            newest_committed[t.sink] = max(newest_committed.get(t.sink, -1), t.checkpoint_id)
    doomed = {transaction_key(t.sink, t.checkpoint_id) for t in txns
              if t.finished and t.checkpoint_id < oldest and t.checkpoint_id not in savepoints
              and newest_committed.get(t.sink) != t.checkpoint_id
              and not (t.state is TxnState.COMMITTED and any(output_beyond(t, p) for p in restore_points))}
    return [i for i in store.objects.list("ledger/") if i.key in doomed]


def apply_retention(store: CheckpointStore, plan: RetentionPlan) -> None:
    """Delete the plan's objects in its order: checkpoints, incomplete ones, shared files,
    ledger entries, reservations (each deletion is idempotent; a rerun finishes a crashed
    run)."""
    for category in ("checkpoints", "incomplete", "shared", "ledger", "reservations"):
        for info in plan.keys.get(category, []):
            store.objects.delete(info.key)
    log.info("retention of %s: deleted %d checkpoints, %d incomplete, %d shared files, %d ledger entries; "
             "%d bytes freed", plan.pipeline, len(plan.checkpoints), len(plan.incomplete), len(plan.shared),
             len(plan.ledger), plan.bytes_freed)


def retain(spec: StageSpec, store: CheckpointStore | None = None, *, dry_run: bool = False,
           now: Callable[[], datetime] = lambda: datetime.now(UTC),
           forget: Callable[[set[str]], None] | None = None, layout: JobLayout | None = None,
           keep: set[int] | None = None, keep_from: int | None = None, run_id: str | None = None) -> RetentionPlan:
    """One retention run (module docstring). ``forget`` (e.g. an in-process uploader's
    :meth:`~barrierflow.checkpointing.uploader.SnapshotUploader.forget`) is told the
    deleted shared digests. ``layout``: the job's work directory (default: the spec's).
    ``keep``, ``keep_from``: see :func:`plan_retention`. ``run_id``: the id ``running.json``
    announces the run under (default: a random one).

    Raises:
        LocalRetentionError: planned files of the work directory could not be deleted
            (the checkpoint store's part of the run is complete).
    """
    store = store or CheckpointStore.for_spec(spec)
    if dry_run:
        return plan_retention(spec, store, dry_run=True, now=now(), layout=layout, keep=keep, keep_from=keep_from)
    run = begin_run(store.objects, now(), run_id=run_id)
    try:
        plan = plan_retention(spec, store, dry_run=False, now=now(), layout=layout, keep=keep, keep_from=keep_from)
        apply_retention(store, plan)
    finally:
        end_run(store.objects, run, now())
    if forget is not None:
        forget(set(plan.shared))
    if plan.local is not None:
        apply_local_retention(plan.local)
    return plan


__all__ = ["RetentionPlan", "apply_retention", "plan_retention", "policy_of", "retain"]
