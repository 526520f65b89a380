"""Choosing the checkpoints to verify and running the checks on them.

Candidates are the completed checkpoints of the current timeline (abandoned ones only when
asked for by id) and every *damaged* one: a ``chk-<n>/`` directory holding files other than
a failure record but no manifest, or a checkpoint whose sink transaction is COMMITTED in the
ledger (a commit happens only after the manifest was written) yet has no manifest. A plain
failed checkpoint (only ``_failed.json``) never completed and is not a candidate.

Each result is stored as ``chk-<n>/_verification.json`` (see :mod:`.report`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.reservations import reservations
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError, SourceError, UserInputError
from barrierflow.spec.models import StageSpec
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.verification.report import VerificationReport, store_report
from barrierflow.verification.source_range import RetainedStarts, retained_starts
from barrierflow.verification.structural import verify_structure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
_DIR = re.compile(r"^chk-(\d+)/(.+)$")
_NOT_EVIDENCE = {"_failed.json"}


def damaged_ids(store: CheckpointStore) -> list[int]:
    """Checkpoints that look as if they completed but have no manifest (module docstring)."""
    files: dict[int, set[str]] = {}
    for info in store.objects.list("chk-"):
        match = _DIR.match(info.key)
        if match:
            files.setdefault(int(match.group(1)), set()).add(match.group(2))
    damaged = {cid for cid, names in files.items() if "_metadata.json" not in names and names - _NOT_EVIDENCE}
    in_flight = {r.checkpoint_id for r in reservations(store.objects)}
    for txn in TransactionLedger(store.objects, store.pipeline).list():
        names = files.get(txn.checkpoint_id, set())
        if txn.state is TxnState.COMMITTED and "_metadata.json" not in names and txn.checkpoint_id not in in_flight:
            damaged.add(txn.checkpoint_id)
    return sorted(damaged)


def candidate_ids(store: CheckpointStore) -> list[int]:
    """Completed checkpoints of the current timeline and damaged ones, ascending."""
    abandoned = set(store.abandoned())
    return sorted((set(store.checkpoint_ids()) | set(damaged_ids(store))) - abandoned)


def _previous(store: CheckpointStore, checkpoint_id: int, cache: dict[int, Manifest | None]) -> Manifest | None:
    """The nearest earlier readable completed checkpoint of the current timeline."""
    for cid in reversed([i for i in store.checkpoint_ids() if i < checkpoint_id]):
        if cid not in cache:
            try:
                cache[cid] = store.get(cid)
            except (CheckpointCorruptError, CheckpointNotFoundError):
                cache[cid] = None
        if cache[cid] is not None:
            return cache[cid]
    return None


def select_ids(store: CheckpointStore, checkpoint_id: int | None = None, latest: int | None = None) -> list[int]:
    """The checkpoints ``verify`` looks at: one id, the newest ``latest``, or all candidates."""
    if checkpoint_id is not None:
        if not store.objects.list(f"chk-{checkpoint_id}/") and checkpoint_id not in damaged_ids(store):
            raise CheckpointNotFoundError(f"checkpoint {checkpoint_id} of pipeline {store.pipeline} does not exist "
                                          f"in {store.uri}; list them with 'barrierflow checkpoints list SPEC'")
        return [checkpoint_id]
    ids = candidate_ids(store)
    if latest is not None:
        if latest < 1:
            raise UserInputError("--latest must be a positive whole number")
        ids = ids[-latest:]
    return ids


def verify_checkpoints(
    spec: StageSpec,
    store: CheckpointStore,
    ids: list[int],
    *,
    deep: bool = False,
    spark: SparkSession | None = None,
    store_results: bool = True,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    starts: RetainedStarts | SourceError | None = None,
) -> list[VerificationReport]:
    """Verify ``ids`` (structural, plus deep when asked and the structure passed), store each
    result beside its checkpoint and return them in the order of ``ids``.

    Concurrent retention: verification starts only when no retention run is in progress,
    and a checkpoint that failed because a retention run deleted it meanwhile (its manifest
    was read but is gone now, or nothing of it is left) is left out (logged), not reported
    as damaged. ``starts``: the sources' retained ranges, or why they cannot be asked (the
    range check is then skipped); None asks the sources once."""
    from barrierflow.checkpointing.reservations import RetentionRunWatch

    RetentionRunWatch(store.objects, poll=0.5).wait_out_retention()
    cache: dict[int, Manifest | None] = {}
    reports = []
    for cid in ids:
        started = now()
        if starts is None:
            try:
                starts = retained_starts(spec)
            except SourceError as exc:
                starts = exc
        manifest, checks = verify_structure(store, cid, previous=_previous(store, cid, cache), starts=starts)
        if deep and manifest is not None and all(c.passed for c in checks):
            from barrierflow.verification.deep import deep_checks

            checks += deep_checks(spec, store, manifest, spark=spark)
        report = VerificationReport(pipeline=store.pipeline, checkpoint_id=cid, deep=deep, started=started,
                                    finished=now(), checks=checks)
        if not report.passed and _deleted_meanwhile(store, cid, read_manifest=manifest is not None):
            log.info("checkpoint %d was deleted (by retention) while it was being verified: left out", cid)
            continue
        if store_results:
            try:
                store_report(store.objects, report)
            except Exception as exc:  # a read-only store still gets its report printed
                log.warning("could not store the verification result of checkpoint %d: %s", cid, exc)
        log.info("checkpoint %d: %s", cid, report.reason())
        reports.append(report)
    return reports


def _deleted_meanwhile(store: CheckpointStore, checkpoint_id: int, *, read_manifest: bool) -> bool:
    if read_manifest:
        return not store.objects.exists(manifest_key(checkpoint_id))
    return checkpoint_id not in candidate_ids(store)


def verification_summary(pipeline: str, storage: str, reports: list[VerificationReport]) -> dict[str, Any]:
    """The JSON document of ``barrierflow verify --json`` (also what the scheduled verification
    DAG returns): ``{"pipeline", "storage", "verified": <count>, "failed": [<checkpoint id>, ...],
    "reports": [<VerificationReport as JSON>, ...]}``, ``reports`` in the order given."""
    return {"pipeline": pipeline, "storage": storage, "verified": len(reports),
            "failed": [r.checkpoint_id for r in reports if not r.passed],
            "reports": [r.model_dump(mode="json") for r in reports]}
