"""The two-phase-commit sink template (Flink's TwoPhaseCommitSinkFunction, per epoch).

Subclasses implement the external effect of one transaction; the fixed entry points below
drive them and keep the ledger (:mod:`barrierflow.transactions.ledger`) in step:

* :meth:`pre_commit_epoch` — at the barrier of checkpoint n (asynchronous phase, before the
  manifest). Step 1: abort transactions of failed checkpoints still open, releasing their
  batches. Step 2: collect the write-ahead batches <= V_n that no live transaction holds; record
  the transaction OPEN with each batch's end offsets (for a faithful replay after a restore
  to an older checkpoint). Step 3: :meth:`pre_commit` it (durable, invisible). Step 4: record it
  PRECOMMITTED. Returns the handle stored in the manifest.
* :meth:`notify_checkpoint_complete` — after manifest n is stored: :meth:`commit` every
  PRECOMMITTED transaction of a checkpoint <= n, record COMMITTED, delete its write-ahead batches.
  A commit that fails with a sink, storage or OS error is tried again (recovering) with
  bounded exponential backoff (:mod:`barrierflow.transactions.retry`), never skipped; once the
  retries are used up a :class:`SinkError` naming the sink, the transaction and the fix is
  raised and the transaction stays PRECOMMITTED for ``reconcile`` or the next start.
* :meth:`notify_checkpoint_aborted` — checkpoint n failed: :meth:`abort` its transaction
  (OPEN or PRECOMMITTED) and release its batches to the next epoch. Unlike Flink, which must
  keep a pre-committed transaction because the data lives only inside it, barrierflow can
  redo the epoch from its write-ahead batches, so it never keeps an external transaction (and
  its locks, for PostgreSQL) open waiting for a later checkpoint.
* :meth:`restore` — the job restarts from checkpoint T (batch V_T): recover-and-commit every
  PRECOMMITTED transaction of a checkpoint <= T, recover-and-abort every other unfinished one,
  abort orphans the external system still holds, discard write-ahead batches > V_T and whatever
  a committed transaction left in the write-ahead area (a crash between its commit and the clean-up).

Batches of committed transactions of the current attempt are never taken into a new
transaction again (a crash may leave them in the write-ahead area). After a restore (a new attempt) batch ids
are reused by the replay, so earlier attempts' committed batches no longer count; their
output is kept out by the replay plan instead.

Fencing (a stalled old driver that wakes up after a restore). Each sink carries the lease
holder's :class:`~barrierflow.lease.FenceToken` (``fence``; None without a store
lease). Protocol, for a transaction X of epoch n:

* P (pre-commit): check the fence, then open X with ``put_if_absent`` (never two openers).
* C (commit) / A (abort): check the fence, then *decide* X: create its decision record
  (COMMIT or ABORT, with the fence) with ``put_if_absent``; only then touch the external
  system (publish files, ``COMMIT PREPARED``/``ROLLBACK PREPARED``, the Kafka transaction).
  If a decision already stands, follow it (a commit never follows an abort of the same X,
  nor the reverse); a holder that is no longer current raises
  :class:`~barrierflow.lease.FencedOffError` instead and does nothing.

Invariant: *every transaction is committed or aborted in the external system only as its one
decision says, and a driver whose lease was taken over decides nothing once the new holder's
fence exists at its check.* Proof of the gap between check and decision: the only write that
can pass a check and land after the new holder G took the lease is one decision record (the
stale driver stops at its next check). If G (a restore) decided X first, the stale record
collides and the stale driver raises without touching the sink. If the stale record came
first, X was decided before G decided anything about it and G follows it: a COMMIT is only
ever decided for an epoch whose manifest was stored, so a restore of the latest checkpoint
commits X anyway (same outcome); a restore to an older checkpoint finds X committed and
keeps it out of the replay like any epoch committed before the restore (the replay plan).
Write-ahead batches: the write-ahead writer checks the fence before each micro-batch, and its file list records
the writer's fence. A stale driver that stalled inside a write-ahead write can still finish it after
the takeover and replace a write-ahead batch of the new attempt in the shared write-ahead prefix; the
pre-commit therefore refuses (:class:`SinkError`, the checkpoint fails) a batch whose file list
was written under a fence below ``attempt_fence`` (the fence of the restore that began this
attempt: no batch of this attempt is written ahead under a lower one), instead of committing it.
PostgreSQL: a prepared transaction of X is only ever finished by its decision, so a stale
``COMMIT PREPARED`` of an epoch the restore aborted cannot happen; Kafka: the producer's
transactional id is fenced by the broker as well (a newer ``init_transactions``).

``commit`` and ``abort`` must be idempotent: they may run again after a crash mid-way.
Subclasses may also list external in-doubt transactions the ledger does not know
(:meth:`external_orphans`), e.g. prepared PostgreSQL transactions of a crashed pre-commit.
"""

from __future__ import annotations

import abc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from barrierflow.errors import SinkError, StorageError
from barrierflow.faults import crash_point
from barrierflow.lease import FenceToken
from barrierflow.spark import offset_log
from barrierflow.transactions.committer import SinkCommitter
from barrierflow.transactions.ledger import Transaction, TransactionLedger, TransactionStateError, TxnState
from barrierflow.transactions.retry import NO_RETRY, CommitRetry
from barrierflow.transactions.write_ahead import WriteAheadBatches

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """One reconciliation decision: what happens to one transaction and why."""

    sink: str
    transaction_id: str
    checkpoint_id: int | None
    state: str
    action: str  # COMMIT | ABORT | NONE
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class TwoPhaseCommitSink(SinkCommitter, abc.ABC):
    sink_type: str = "abstract"

    def __init__(self, *, name: str, pipeline: str, ledger: TransactionLedger, write_ahead: WriteAheadBatches,
                 attempt: int = 0, spark_checkpoint: str | os.PathLike[str] | None = None,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 commit_retry: CommitRetry = NO_RETRY, fence: FenceToken | None = None,
                 attempt_fence: int | None = None) -> None:
        self.name = name
        self.fence = fence
        self.attempt_fence = attempt_fence
        self.commit_retry = commit_retry
        self.spark_checkpoint = spark_checkpoint
        self.pipeline = pipeline
        self.ledger = ledger
        self.write_ahead = write_ahead
        self.attempt = attempt
        self.now = now

    # -- what a sink implements ---------------------------------------------------------
    def transaction_id(self, checkpoint_id: int) -> str:
        """Stable id encoding pipeline, sink, epoch and attempt."""
        return f"bf.{self.pipeline}.{self.name}.e{checkpoint_id}.a{self.attempt}"

    def begin_transaction(self, txn_id: str, checkpoint_id: int, batches: list[int]) -> dict[str, Any]:
        """Return the handle another process needs to finish the transaction."""
        return {"batches": batches}

    @abc.abstractmethod
    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        """Make the transaction's output durable but invisible; returns handle additions."""

    @abc.abstractmethod
    def commit(self, txn: Transaction) -> None:
        """Make the output visible. Idempotent: committing a committed transaction is a no-op."""

    @abc.abstractmethod
    def abort(self, txn: Transaction) -> None:
        """Discard the external transaction (not the write-ahead batches). Idempotent."""

    def recover_and_commit(self, txn: Transaction) -> None:
        self.commit(txn)

    def recover_and_abort(self, txn: Transaction) -> None:
        self.abort(txn)

    def external_orphans(self, known: set[str]) -> list[str]:
        """In-doubt transactions of this pipeline and sink held by the external system whose
        id is not in ``known`` (live ledger transactions)."""
        return []

    def abort_orphan(self, external_id: str) -> None:
        return None

    # -- fixed entry points -------------------------------------------------------------
    def _check_fence(self, action: str) -> None:
        if self.fence is not None:
            self.fence.check(f"{action} (sink {self.name})")

    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict[str, Any]]:
        self._check_fence(f"pre-committing epoch {checkpoint_id}")
        txns = self.ledger.list(self.name)
        for txn in txns:  # Step 1.
            if txn.state is TxnState.OPEN and txn.checkpoint_id < checkpoint_id:
                self._abort(txn, "superseded: its checkpoint failed before pre-commit")
        held = {b for t in self.ledger.list(self.name) for b in t.batches
                if t.state in (TxnState.OPEN, TxnState.PRECOMMITTED)
                or (t.state is TxnState.COMMITTED and t.attempt == self.attempt)}
        batches = [b for b in self.write_ahead.batches() if b <= barrier_batch and b not in held]  # Step 2.
        self._check_write_ahead_fences(batches)
        txn_id = self.transaction_id(checkpoint_id)
        txn = self.ledger.open(sink=self.name, sink_type=self.sink_type, transaction_id=txn_id,
                               checkpoint_id=checkpoint_id, attempt=self.attempt, batches=batches,
                               handle=self.begin_transaction(txn_id, checkpoint_id, batches),
                               batch_ends=self._batch_ends(batches), now=self.now())
        added = self.pre_commit(txn)  # Step 3.
        txn = self.ledger.transition(txn, TxnState.PRECOMMITTED, handle=added, now=self.now())  # Step 4.
        return [{"sink": self.name, "type": self.sink_type, "transaction_id": txn.transaction_id,
                 "checkpoint_id": checkpoint_id, "batches": batches, **txn.handle}]

    def _check_write_ahead_fences(self, batches: list[int]) -> None:
        """Refuse write-ahead batches a fenced-off driver wrote after this attempt began (module docstring)."""
        if self.attempt_fence is None:
            return
        for batch in batches:
            writer = self.write_ahead.listing(batch).get("fence")
            if writer is not None and int(writer) < self.attempt_fence:
                raise SinkError(
                    f"sink {self.name!r}: write-ahead batch {batch} in {self.write_ahead.uri} was written under fence "
                    f"{writer}, by a driver fenced off by the restore (fence {self.attempt_fence}) that began attempt "
                    f"{self.attempt}: it may have replaced this attempt's batch {batch}, so it is not committed. "
                    "Restore the latest checkpoint ('barrierflow restore SPEC --latest'): the restore discards the "
                    "write-ahead batches after it and they are produced again")

    def _batch_ends(self, batches: list[int]) -> dict[int, dict[str, int]]:
        """End offsets of ``batches`` from the local Spark offset log (the first source's)."""
        if self.spark_checkpoint is None:
            return {}
        ends: dict[int, dict[str, int]] = {}
        for batch in batches:
            # None: purged by Spark (the epoch can still commit, only not be replayed)
            end = offset_log.first_source_partitions(self.spark_checkpoint, batch)
            if end is not None:
                ends[batch] = end
        return ends

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        for txn in self.ledger.list(self.name):
            if txn.state is TxnState.PRECOMMITTED and txn.checkpoint_id <= checkpoint_id:
                self._commit_with_retry(txn)

    def _commit_with_retry(self, txn: Transaction) -> None:
        """Commit ``txn``; on a sink, storage or OS error wait and commit it again (recovering,
        which is idempotent) per :attr:`commit_retry`; raise :class:`SinkError` when used up."""
        delays = self.commit_retry.delays()
        started = time.monotonic()
        for attempt in range(len(delays) + 1):
            try:
                self._commit(txn, recovering=attempt > 0)
                if attempt:
                    log.warning("sink %s: committed %s (checkpoint %d) on attempt %d", self.name,
                                txn.transaction_id, txn.checkpoint_id, attempt + 1)
                return
            except (SinkError, StorageError, OSError) as exc:
                if attempt == len(delays):
                    raise SinkError(
                        f"sink {self.name!r}: could not commit transaction {txn.transaction_id} (checkpoint "
                        f"{txn.checkpoint_id}, completed) in {attempt + 1} attempt(s) over "
                        f"{time.monotonic() - started:.0f} s; last error: {exc}. The transaction stays pre-committed "
                        "and is never skipped: once the sink's system is reachable again run `barrierflow reconcile "
                        "<spec>` (or start the job again, which commits it first); raise "
                        "checkpoint.sink_commit_retries to ride out longer outages"
                    ) from exc
                log.warning("sink %s: commit of %s (checkpoint %d) failed (attempt %d of %d): %s; retrying in %.1f s",
                            self.name, txn.transaction_id, txn.checkpoint_id, attempt + 1, len(delays) + 1, exc,
                            delays[attempt])
                self.commit_retry.sleep(delays[attempt])

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        txn = self.ledger.get(self.name, checkpoint_id)
        if txn is not None and not txn.finished:
            self._abort(txn, f"checkpoint {checkpoint_id} failed; its batches go into the next epoch")

    def _decide(self, txn: Transaction, action: Literal["COMMIT", "ABORT"]) -> str:
        """Check the fence, then decide ``txn`` (module docstring); returns the decision that
        stands, which the caller carries out."""
        verb = "committing" if action == "COMMIT" else "aborting"
        self._check_fence(f"{verb} transaction {txn.transaction_id}")
        decided = self.ledger.decide(txn, action, self.fence.fence if self.fence else None, now=self.now())
        if decided["action"] != action:
            self._check_fence(f"{verb} transaction {txn.transaction_id}")  # a stale driver stops here
            log.warning("sink %s: transaction %s was decided %s (fence %s) before; following that decision",
                        self.name, txn.transaction_id, decided["action"], decided.get("fence"))
        return str(decided["action"])

    def _commit(self, txn: Transaction, *, recovering: bool) -> None:
        if self._decide(txn, "COMMIT") == "ABORT":
            self._abort_decided(txn, "decided ABORT before this commit", recovering=True)
            return
        (self.recover_and_commit if recovering else self.commit)(txn)
        self.ledger.transition(txn, TxnState.COMMITTED, now=self.now(),
                               note="recovered" if recovering else "")
        for batch in txn.batches:
            self.write_ahead.discard(batch)

    def _abort(self, txn: Transaction, note: str, *, recovering: bool = False) -> None:
        if self._decide(txn, "ABORT") == "COMMIT":
            if txn.state is TxnState.PRECOMMITTED:
                self._commit(txn, recovering=True)
                return
            raise TransactionStateError(
                f"transaction {txn.transaction_id} of sink {self.name} is {txn.state.value} but was decided COMMIT; "
                "finish it by hand (see the ledger entry) and run 'barrierflow reconcile SPEC'")
        self._abort_decided(txn, note, recovering=recovering)

    def _abort_decided(self, txn: Transaction, note: str, *, recovering: bool) -> None:
        (self.recover_and_abort if recovering else self.abort)(txn)
        self.ledger.transition(txn, TxnState.ABORTED, note=note, now=self.now())

    # -- restore and reconciliation -------------------------------------------------------
    def plan(self, target_checkpoint: int | None, *, restoring: bool) -> list[Decision]:
        """Decide each unfinished transaction given the checkpoint the job runs from.

        ``target_checkpoint`` is the restored (or latest completed) checkpoint; None means
        none completed. When not ``restoring`` the job may be running, so transactions newer
        than the target are left alone (they may still be in flight)."""
        decisions: list[Decision] = []
        live: set[str] = set()
        for txn in self.ledger.list(self.name):
            if txn.finished:
                continue
            live.add(txn.transaction_id)
            covered = target_checkpoint is not None and txn.checkpoint_id <= target_checkpoint
            if txn.state is TxnState.PRECOMMITTED and covered:
                decisions.append(Decision(self.name, txn.transaction_id, txn.checkpoint_id, txn.state.value,
                                          "COMMIT", f"checkpoint {target_checkpoint} completed and covers "
                                                    f"epoch {txn.checkpoint_id}"))
            elif restoring:
                why = ("pre-commit never finished" if txn.state is TxnState.OPEN
                       else f"epoch {txn.checkpoint_id} is newer than the restored checkpoint {target_checkpoint}")
                decisions.append(Decision(self.name, txn.transaction_id, txn.checkpoint_id, txn.state.value,
                                          "ABORT", why))
            else:
                decisions.append(Decision(self.name, txn.transaction_id, txn.checkpoint_id, txn.state.value,
                                          "NONE", "newer than the latest completed checkpoint; may be in flight"))
        for orphan in self.external_orphans(live):
            action = "ABORT" if restoring else "NONE"
            decisions.append(Decision(self.name, orphan, None, "EXTERNAL", action,
                                      "held by the external system but unknown to the ledger "
                                      "(a pre-commit crashed before it was recorded)"))
        return decisions

    def apply(self, decisions: list[Decision]) -> None:
        by_id = {t.transaction_id: t for t in self.ledger.list(self.name)}
        for decision in decisions:
            if decision.sink != self.name or decision.action == "NONE":
                continue
            txn = by_id.get(decision.transaction_id)
            if txn is None:
                self.abort_orphan(decision.transaction_id)
            elif decision.action == "COMMIT":
                self._commit(txn, recovering=True)
            else:
                self._abort(txn, f"reconciliation: {decision.reason}", recovering=True)

    def restore(self, target_checkpoint: int | None, barrier_batch: int | None) -> list[Decision]:
        """Finish every unfinished transaction for a restart from ``target_checkpoint``;
        discard write-ahead batches after ``barrier_batch`` (they will be replayed), and those at
        or before it that no transaction holds.

        Every batch a checkpoint's barrier covers was taken by its epoch's transaction at
        pre-commit, so a write-ahead batch at or before the barrier that no transaction holds
        was written by a run the restored checkpoint does not cover: the batch a stopped run
        wrote ahead after its savepoint, when that savepoint was rewritten by ``upgrade`` into
        one whose batch id is one higher (its batch read no input). Kept, a later pre-commit
        would take that stale batch (and refuse it, written under an older fence)."""
        barrier = barrier_batch if barrier_batch is not None else -1
        decisions = self.plan(target_checkpoint, restoring=True)
        self.apply(decisions)
        held: set[int] = set()
        for txn in self.ledger.list(self.name):
            held.update(txn.batches)
            if txn.state is TxnState.COMMITTED:
                for batch in txn.batches:
                    if batch <= barrier:
                        self.write_ahead.discard(batch)
        orphans = [b for b in self.write_ahead.batches() if b <= barrier and b not in held]
        for batch in orphans:
            self.write_ahead.discard(batch)
        if orphans:
            log.info("sink %s: discarded write-ahead batches %s that no transaction holds (written after the "
                     "restored checkpoint's epoch by a run it does not cover)", self.name, orphans)
        discarded = self.write_ahead.discard_after(barrier)
        if discarded:
            log.info("sink %s: discarded write-ahead batches %s (they will be replayed)", self.name, discarded)
        return decisions


def mid_commit_crash_point(sink: str, step: int) -> None:
    """A crash point inside a sink's commit, after its first step."""
    if step == 1:
        crash_point("mid_sink_commit", sink=sink)
