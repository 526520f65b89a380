"""The durable transaction ledger of a pipeline, kept in its checkpoint store.

One JSON document per sink transaction, ``ledger/<sink>/txn-<checkpoint_id:012d>.json``,
rewritten atomically at every state change. A transaction belongs to the epoch closed by
checkpoint ``checkpoint_id`` and covers the write-ahead micro-batches ``batches``. States::

    OPEN --pre_commit--> PRECOMMITTED --commit--> COMMITTED
      \\                       \\
       +------abort------------+--abort--> ABORTED

``handle`` holds what another process needs to finish the transaction (a PostgreSQL global
transaction id, a Kafka transactional id, write-ahead file keys). ``history`` records every
transition with its time. Illegal transitions raise :class:`TransactionStateError`;
repeating the current terminal state is a no-op (commit and abort are idempotent).

An entry is created with ``put_if_absent`` (:meth:`TransactionLedger.open`): two writers
never both open epoch n. Before anyone makes a transaction's outcome visible, its outcome is
*decided* once: ``ledger/<sink>/txn-<checkpoint_id:012d>.decision.json``
(``{"action": "COMMIT"|"ABORT", "fence", "at"}``), created with ``put_if_absent`` and never
changed (:meth:`TransactionLedger.decide`), so a commit and an abort of one transaction exclude
each other across processes and hosts; see :mod:`barrierflow.transactions.two_phase`.
"""

from __future__ import annotations

import enum
import json
import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.storage import ObjectInfo, ObjectNotFoundError, ObjectStore


class TransactionStateError(BarrierflowError):
    """A transaction was asked to move to a state it cannot reach from its current one."""


class LedgerCorruptError(UserInputError):
    """A ledger entry is not valid JSON or not the transaction schema (exit code 2): nothing
    decides that transaction until an operator looked at the sink."""


class TxnState(enum.StrEnum):
    OPEN = "OPEN"
    PRECOMMITTED = "PRECOMMITTED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


_ALLOWED = {
    TxnState.OPEN: {TxnState.PRECOMMITTED, TxnState.ABORTED},
    TxnState.PRECOMMITTED: {TxnState.COMMITTED, TxnState.ABORTED},
    TxnState.COMMITTED: set(),
    TxnState.ABORTED: set(),
}


class Transition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    state: TxnState
    at: AwareDatetime
    note: str = ""


class Transaction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = 1
    pipeline: str
    sink: str
    sink_type: str
    transaction_id: str
    checkpoint_id: int
    attempt: int
    batches: list[int]
    state: TxnState
    created_at: AwareDatetime
    updated_at: AwareDatetime
    handle: dict[str, Any] = Field(default_factory=dict)
    batch_ends: dict[int, dict[str, int]] = Field(default_factory=dict)
    history: list[Transition] = Field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state in (TxnState.COMMITTED, TxnState.ABORTED)


def transaction_key(sink: str, checkpoint_id: int) -> str:
    return f"ledger/{sink}/txn-{checkpoint_id:012d}.json"


def decision_key(sink: str, checkpoint_id: int) -> str:
    return f"ledger/{sink}/txn-{checkpoint_id:012d}.decision.json"


_KEY = re.compile(r"^ledger/([^/]+)/txn-(\d+)\.json$")


class TransactionLedger:
    def __init__(self, objects: ObjectStore, pipeline: str) -> None:
        self.objects = objects
        self.pipeline = pipeline
        #: key -> (entity tag and size when read, the transaction parsed then): :meth:`list`
        self._parsed: dict[str, tuple[str, Transaction]] = {}

    def open(self, *, sink: str, sink_type: str, transaction_id: str, checkpoint_id: int, attempt: int,
             batches: list[int], handle: dict[str, Any], batch_ends: dict[int, dict[str, int]] | None = None,
             now: datetime | None = None) -> Transaction:
        moment = now or datetime.now(UTC)
        txn = Transaction(pipeline=self.pipeline, sink=sink, sink_type=sink_type, transaction_id=transaction_id,
                          checkpoint_id=checkpoint_id, attempt=attempt, batches=sorted(batches),
                          state=TxnState.OPEN, created_at=moment, updated_at=moment, handle=handle,
                          batch_ends=batch_ends or {},
                          history=[Transition(state=TxnState.OPEN, at=moment)])
        if not self.objects.put_if_absent(transaction_key(sink, checkpoint_id), txn.model_dump_json(indent=2).encode()):
            raise TransactionStateError(
                f"transaction of sink {sink} for checkpoint {checkpoint_id} already exists at "
                f"{self.objects.describe(transaction_key(sink, checkpoint_id))}; a ledger entry is opened once "
                "(is a second driver writing to this checkpoint store?)")
        return txn

    def decide(self, txn: Transaction, action: Literal["COMMIT", "ABORT"], fence: int | None,
               now: datetime | None = None) -> dict[str, Any]:
        """Decide ``txn``'s outcome if nobody has; returns the decision that stands (this one or
        an earlier one, which may differ: the caller must follow it)."""
        key = decision_key(txn.sink, txn.checkpoint_id)
        body = {"transaction_id": txn.transaction_id, "action": action, "fence": fence,
                "at": (now or datetime.now(UTC)).isoformat()}
        if self.objects.put_if_absent(key, json.dumps(body).encode()):
            return body
        try:
            stored = dict(json.loads(self.objects.get_bytes(key)))
        except (ObjectNotFoundError, ValueError) as exc:
            raise LedgerCorruptError(
                f"decision {self.objects.describe(key)} of transaction {txn.transaction_id} exists but cannot be "
                f"read ({exc}); look the transaction up in the sink, finish it by hand, then fix or delete the "
                "decision") from None
        if stored.get("transaction_id") != txn.transaction_id:
            # A decision about an earlier transaction of the same epoch id (a reused id after
            # a crash of its opener): never the case for ids handed out by the coordinator.
            raise TransactionStateError(
                f"decision {self.objects.describe(key)} is about transaction {stored.get('transaction_id')}, not "
                f"{txn.transaction_id}")
        return stored

    def put(self, txn: Transaction) -> None:
        self.objects.put_bytes(transaction_key(txn.sink, txn.checkpoint_id), txn.model_dump_json(indent=2).encode())

    def transition(self, txn: Transaction, state: TxnState, *, note: str = "",
                   handle: dict[str, Any] | None = None, now: datetime | None = None) -> Transaction:
        """Move ``txn`` to ``state`` and store it; a repeat of a terminal state is a no-op."""
        if txn.state == state and txn.finished:
            return txn
        if state not in _ALLOWED[txn.state]:
            raise TransactionStateError(
                f"transaction {txn.transaction_id} of sink {txn.sink} is {txn.state.value}; "
                f"it cannot become {state.value}"
            )
        moment = now or datetime.now(UTC)
        updated = txn.model_copy(update={
            "state": state,
            "updated_at": moment,
            "handle": {**txn.handle, **(handle or {})},
            "history": [*txn.history, Transition(state=state, at=moment, note=note)],
        })
        self.put(updated)
        return updated

    def _read(self, key: str) -> Transaction:
        """The transaction stored at ``key``; :class:`LedgerCorruptError` naming it if unreadable."""
        raw = self.objects.get_bytes(key)
        try:
            return Transaction.model_validate_json(raw)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            raise LedgerCorruptError(
                f"ledger entry {self.objects.describe(key)} of pipeline {self.pipeline} is corrupt or truncated "
                f"({reason}); its transaction cannot be decided from it: look the transaction up in the sink "
                "(files under the write-ahead prefix, pg_prepared_xacts, the Kafka commit markers), finish it by "
                "hand, then delete the entry and run 'barrierflow reconcile SPEC' again"
            ) from None

    def get(self, sink: str, checkpoint_id: int) -> Transaction | None:
        """The transaction of ``sink`` for ``checkpoint_id``; None if there is none.

        Raises:
            LedgerCorruptError: the entry exists but cannot be read.
        """
        try:
            return self._read(transaction_key(sink, checkpoint_id))
        except ObjectNotFoundError:
            return None

    def list(self, sink: str | None = None) -> list[Transaction]:
        """Every transaction (of ``sink``), by sink and checkpoint: one listing, and a read of
        each entry the listing shows new or changed (its entity tag and size) since this
        ledger last read it. A sink lists its ledger at every checkpoint, and a run's ledger
        grows by one entry per checkpoint until retention deletes the old ones: without the
        parsed entries kept, a checkpoint's cost would grow with the run's length."""
        prefix = f"ledger/{sink}/" if sink else "ledger/"
        out = []
        listed: set[str] = set()
        for info in self.objects.list(prefix):
            if _KEY.match(info.key):
                listed.add(info.key)
                out.append(self._read_listed(info))
        for key in [k for k in list(self._parsed) if k.startswith(prefix) and k not in listed]:
            self._parsed.pop(key, None)  # list(): a snapshot, as a sink's commit thread may list too
        return sorted(out, key=lambda t: (t.sink, t.checkpoint_id))

    def _read_listed(self, info: ObjectInfo) -> Transaction:
        """The transaction of a listed entry: the one parsed before if its tag is unchanged.
        Without a tag (a backend that lists none) it is always read."""
        tag = f"{info.etag}:{info.size}" if info.etag else None
        if tag is not None and (known := self._parsed.get(info.key)) is not None and known[0] == tag:
            return known[1]
        txn = self._read(info.key)
        if tag is not None:
            self._parsed[info.key] = (tag, txn)
        return txn

    def delete(self, txn: Transaction) -> None:
        """Forget a finished transaction (retention of old epochs)."""
        if not txn.finished:
            raise TransactionStateError(f"transaction {txn.transaction_id} is {txn.state.value}: not finished")
        self.objects.delete(transaction_key(txn.sink, txn.checkpoint_id))
        self.objects.delete(decision_key(txn.sink, txn.checkpoint_id))
