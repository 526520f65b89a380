"""Structural verification: can this checkpoint's manifest and files restore the job?

Checks, in order (names as they appear in the result document):

``manifest``        ``chk-<n>/_metadata.json`` exists and is a manifest of this schema and
                    format version (a ``chk-<n>/`` directory with files but no readable
                    manifest is a failed checkpoint).
``required-files``  the manifest lists ``metadata``, ``offsets/V`` and ``commits/V`` of its
                    barrier batch V (Spark cannot resume at V+1 without them); nothing for
                    the first checkpoint of a stage an upgrade added (``Manifest.starts_empty``).
``file``            every listed file is in ``shared/`` with the manifest's size and sha256
                    (one failed check per bad file, naming it; one passed ``files`` check).
``state-files``     per state store directory with a recorded base (``state_bases``,
                    e.g. ``state/0/3``), the manifest lists every file Spark loads state
                    version V+1 from (:mod:`barrierflow.spark.state_files`): HDFS-backed,
                    ``<base>.snapshot`` and ``<base+1..V+1>.delta``; RocksDB, ``<base>.zip``,
                    the ``SSTs/``/``logs/`` files its metadata names (read from the store)
                    and ``<base+1..V+1>.changelog``.
``offsets-log``     the barrier offsets equal the source offsets in the stored ``offsets/V``.
``offsets-monotonic`` per source partition, no barrier offset is below the one of the
                    previous completed checkpoint of the same timeline.
``source-retention`` every barrier offset is still inside the source's retained range
                    (Kafka: >= the partition's beginning offset); skipped if the source
                    cannot be asked.
``ledger``          every sink handle of the manifest has a ledger transaction for this
                    checkpoint that is PRECOMMITTED or COMMITTED (not missing, OPEN or
                    ABORTED).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key, shared_key
from barrierflow.errors import CheckpointCorruptError, CheckpointError, CheckpointNotFoundError, SourceError
from barrierflow.spark import offset_log, state_files
from barrierflow.storage import ObjectNotFoundError
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.verification.report import CheckResult
from barrierflow.verification.source_range import RetainedStarts

log = logging.getLogger(__name__)


def check_manifest(store: CheckpointStore, checkpoint_id: int) -> tuple[Manifest | None, CheckResult]:
    key = manifest_key(checkpoint_id)
    try:
        manifest = store.get(checkpoint_id)
    except CheckpointNotFoundError:
        present = [i.key for i in store.objects.list(f"chk-{checkpoint_id}/")]
        return None, CheckResult.fail(
            "manifest", f"chk-{checkpoint_id}/ has {present or 'no files'} but no _metadata.json: no manifest (it "
            "was deleted or never written), so the checkpoint cannot be restored", key)
    except CheckpointCorruptError as exc:
        return None, CheckResult.fail("manifest", f"unreadable manifest (truncated or not this schema): {exc}", key)
    if manifest.checkpoint_id != checkpoint_id or manifest.pipeline != store.pipeline:
        return None, CheckResult.fail(
            "manifest", f"the manifest is of checkpoint {manifest.checkpoint_id} of pipeline {manifest.pipeline}, "
            f"not of checkpoint {checkpoint_id} of {store.pipeline}", key)
    return manifest, CheckResult.ok(
        "manifest", f"format {manifest.format} version {manifest.format_version}, {len(manifest.files)} files", key)


def check_required_files(manifest: Manifest) -> CheckResult:
    batch = manifest.spark_batch_id
    if manifest.starts_empty:
        return CheckResult.ok("required-files", "none: a stage added by an upgrade, which starts on empty state")
    missing = [p for p in ("metadata", f"offsets/{batch}", f"commits/{batch}") if manifest.file(p) is None]
    if missing:
        return CheckResult.fail("required-files", f"the manifest does not list {missing}; Spark cannot resume "
                                f"at batch {batch + 1} without them", missing[0])
    return CheckResult.ok("required-files", f"metadata, offsets/{batch} and commits/{batch} listed")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_files(store: CheckpointStore, manifest: Manifest, *, hash_contents: bool = True) -> list[CheckResult]:
    """One failed ``file`` check per missing or altered file; else one passed ``files``.

    With ``hash_contents=False`` only presence and size are checked (a quick re-check of a
    checkpoint whose stored verification passed)."""
    problems: list[CheckResult] = []
    verdicts: dict[str, str | None] = {}  # digest -> problem (None: fine); each object once
    for entry in manifest.files:
        if entry.sha256 not in verdicts:
            key = shared_key(entry.sha256)
            size = store.objects.size(key)
            if size is None:
                verdicts[entry.sha256] = f"missing from the store ({store.objects.describe(key)})"
            elif size != entry.size:
                verdicts[entry.sha256] = f"size {size} bytes in the store, the manifest says {entry.size}"
            elif hash_contents and _digest(store.objects.get_bytes(key)) != entry.sha256:
                verdicts[entry.sha256] = f"sha256 mismatch: the stored object {key} was altered"
            else:
                verdicts[entry.sha256] = None
        problem = verdicts[entry.sha256]
        if problem is not None:
            problems.append(CheckResult.fail("file", f"{entry.path}: {problem}", entry.path))
    if problems:
        return problems
    what = "sizes and sha256 match" if hash_contents else "sizes match"
    return [CheckResult.ok("files", f"{len(manifest.files)} files present, {what}")]


def check_state_files(store: CheckpointStore, manifest: Manifest) -> CheckResult:
    """``state-files`` (module docstring): one failed check naming the first missing files."""
    target = manifest.state_version
    missing: list[str] = []
    checked = 0
    paths = [f.path for f in manifest.files]
    for key, base in sorted(manifest.state_bases.items()):
        names = {p[len(key) + 1:] for p in paths if p.startswith(key + "/")}
        checked += 1
        if state_files.is_rocksdb_listing(names):
            need = [f"{v}.changelog" for v in range(base + 1, target + 1)]
            if base:
                need.insert(0, f"{base}.zip")
                entry = manifest.file(f"{key}/{base}.zip")
                if entry is not None:
                    try:
                        data = store.objects.get_bytes(shared_key(entry.sha256))
                        need += state_files.rocksdb_immutable_files(data, f"{key}/{base}.zip")
                    except ObjectNotFoundError:
                        pass  # reported by the file checks
                    except CheckpointError as exc:
                        return CheckResult.fail("state-files", str(exc), f"{key}/{base}.zip")
        else:
            need = state_files.chain_files(base, target)
        missing += [f"{key}/{n}" for n in need if n not in names]
    if missing:
        return CheckResult.fail("state-files", f"the manifest does not list {len(missing)} file(s) Spark needs to "
                                f"load state version {target}: {', '.join(missing[:5])}", missing[0])
    return CheckResult.ok("state-files", f"{checked} state partition(s) list every file that loads version {target}")


def _offsets_in_log(store: CheckpointStore, manifest: Manifest) -> list[dict[str, Any] | None] | None:
    entry = manifest.file(f"offsets/{manifest.spark_batch_id}")
    if entry is None:
        return None
    try:
        raw = store.objects.get_bytes(shared_key(entry.sha256))
    except ObjectNotFoundError:
        return None
    if _digest(raw) != entry.sha256:
        return None
    return offset_log.parse_offset_lines(raw.decode("utf-8").splitlines()[2:])


def check_offsets_log(store: CheckpointStore, manifest: Manifest) -> CheckResult:
    path = f"offsets/{manifest.spark_batch_id}"
    logged = _offsets_in_log(store, manifest)
    if logged is None:
        return CheckResult.skip("offsets-log", f"{path} is not readable (see the file checks)", path)
    found = [SourceOffset.from_json(o).partitions for o in logged if o]
    expected = list(manifest.barrier_offsets.values())
    if found != expected:
        return CheckResult.fail("offsets-log", f"the barrier offsets {manifest.barrier_offsets} differ from "
                                f"the source offsets {found} in {path}", path)
    return CheckResult.ok("offsets-log", f"barrier offsets match {path}", path)


def check_monotonic(manifest: Manifest, previous: Manifest | None) -> CheckResult:
    if previous is None:
        return CheckResult.ok("offsets-monotonic", "no earlier checkpoint to compare with")
    backwards = [
        f"{source}[{part}]: {offset} < {previous.barrier_offsets[source][part]}"
        for source, parts in manifest.barrier_offsets.items()
        for part, offset in parts.items()
        if part in previous.barrier_offsets.get(source, {}) and offset < previous.barrier_offsets[source][part]
    ]
    if backwards:
        return CheckResult.fail("offsets-monotonic", f"barrier offsets went back since checkpoint "
                                f"{previous.checkpoint_id}: {', '.join(backwards)}")
    return CheckResult.ok("offsets-monotonic", f"no barrier offset below checkpoint {previous.checkpoint_id}'s")


def check_source_retention(manifest: Manifest, starts: RetainedStarts | SourceError) -> CheckResult:
    if isinstance(starts, SourceError):
        return CheckResult.skip("source-retention", f"the source could not be asked: {starts}")
    expired = []
    for source, parts in manifest.barrier_offsets.items():
        oldest = starts.get(source)
        if oldest is None:
            continue
        expired += [f"{source}[{p}]: {o} < beginning offset {oldest[p]}"
                    for p, o in parts.items() if p in oldest and o < oldest[p]]
    if expired:
        return CheckResult.fail("source-retention", "records after the barrier were already deleted by the "
                                f"source's retention, so a restore would skip them: {', '.join(expired)}")
    kinds = ", ".join(f"{s}: {'any offset' if starts.get(s) is None else 'beginning offsets'}"
                      for s in manifest.barrier_offsets)
    return CheckResult.ok("source-retention", f"every barrier offset is retained ({kinds or 'no sources'})")


def check_ledger(ledger: TransactionLedger, manifest: Manifest) -> CheckResult:
    bad = []
    for handle in manifest.sink_handles:
        sink = handle.get("sink")
        if not isinstance(sink, str) or "transaction_id" not in handle:
            continue  # a sink without transactions (no ledger entry expected)
        txn = ledger.get(sink, manifest.checkpoint_id)
        if txn is None:
            bad.append(f"sink {sink}: no ledger transaction for checkpoint {manifest.checkpoint_id}")
        elif txn.state not in (TxnState.PRECOMMITTED, TxnState.COMMITTED):
            bad.append(f"sink {sink}: transaction {txn.transaction_id} is {txn.state.value}")
    if bad:
        return CheckResult.fail("ledger", "; ".join(bad), f"ledger/{manifest.checkpoint_id}")
    return CheckResult.ok("ledger", f"{len(manifest.sink_handles)} sink handle(s) consistent with the ledger")


def verify_structure(
    store: CheckpointStore,
    checkpoint_id: int,
    *,
    previous: Manifest | None,
    starts: RetainedStarts | SourceError,
) -> tuple[Manifest | None, list[CheckResult]]:
    """Every structural check of ``checkpoint_id`` (see the module docstring).

    ``previous`` is the previous completed checkpoint of the same timeline (monotonicity);
    ``starts`` the sources' retained ranges, or the error asking for them raised."""
    manifest, first = check_manifest(store, checkpoint_id)
    if manifest is None:
        return None, [first]
    checks = [first, check_required_files(manifest)]
    checks += check_files(store, manifest)
    checks.append(check_state_files(store, manifest))
    checks.append(check_offsets_log(store, manifest))
    checks.append(check_monotonic(manifest, previous))
    checks.append(check_source_retention(manifest, starts))
    checks.append(check_ledger(TransactionLedger(store.objects, store.pipeline), manifest))
    return manifest, checks


def structurally_intact(store: CheckpointStore, checkpoint_id: int, *, hash_contents: bool = True) -> tuple[bool, str]:
    """The re-check of a checkpoint verified earlier: readable manifest, every file present
    with its size and (``hash_contents``) its sha256 — a flipped byte keeps the size."""
    manifest, first = check_manifest(store, checkpoint_id)
    if manifest is None:
        return False, first.message
    problems = [c for c in check_files(store, manifest, hash_contents=hash_contents) if not c.passed]
    if problems:
        return False, "; ".join(c.message for c in problems)
    return True, "intact"
