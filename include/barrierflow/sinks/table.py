"""What the lakehouse table sinks (Iceberg, Delta) share: one table commit per checkpoint,
made idempotent by what the table itself records.

Layout under the table's location (a storage URI, ``file://`` or ``s3://``)::

    _barrierflow_staging/<stage>/<sink>/batch=<batch>/...   write-ahead micro-batches
                                                            (:mod:`barrierflow.sinks.write_ahead`)
    <data dir>/bf-<stage>-<sink>-c<checkpoint>-a<attempt>-b<batch>-<i>.parquet
                                                            published data files

Table readers never list directories (they read the table's metadata), so write-ahead files are
invisible; the ``_`` prefix also keeps Delta's VACUUM away from them.

Protocol per epoch n (two-phase commit, :class:`~barrierflow.transactions.two_phase.TwoPhaseCommitSink`):

* **pre-commit**: nothing external (the write-ahead batches are durable and invisible); the
  handle lists each batch's files.
* **commit**: read from the table the largest checkpoint id this pipeline/stage/sink committed
  (:meth:`TableSink.committed_checkpoint`). At or above n: the epoch is in the table already
  (a commit that ran before a crash whose ledger record was lost): nothing is done. Else move
  each write-ahead file to its deterministic data-file name (a rename; a file already moved by
  an earlier, interrupted attempt is taken as it is) and make **one** table commit adding them
  all, carrying the checkpoint id (:meth:`TableSink.commit_files`). An epoch without rows makes
  no table commit.
* **abort**: nothing external; the template hands the write-ahead batches on.

Restore rule (what the template's ``restore`` does with this commit): every pre-committed
epoch the restored checkpoint covers is committed, and the table's own record decides whether
that means a table commit (above the table's largest committed checkpoint id) or nothing
(at or below it); checkpoint ids only grow, also across restores, so an epoch is never applied
twice and never skipped.

After a checkpoint's commit (and after a restore) the sink writes the cut record of the
checkpoint in the checkpoint store (:mod:`barrierflow.sinks.cut`): which table version holds
exactly the output up to that checkpoint.
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass
from typing import Any

from barrierflow.errors import SinkError
from barrierflow.sinks.cut import CutLog, TableVersion
from barrierflow.storage import ObjectStore, open_store
from barrierflow.transactions.ledger import Transaction, TxnState
from barrierflow.transactions.two_phase import Decision, TwoPhaseCommitSink, mid_commit_crash_point
from barrierflow.transactions.write_ahead import WriteAheadBatches

log = logging.getLogger(__name__)
STAGING = "_barrierflow_staging"
#: Keys of the commit properties (Iceberg snapshot summary, Delta commit info).
PROP_PIPELINE = "barrierflow.pipeline"
PROP_STAGE = "barrierflow.stage"
PROP_SINK = "barrierflow.sink"
PROP_CHECKPOINT = "barrierflow.checkpoint-id"
PROP_ATTEMPT = "barrierflow.attempt"


def write_ahead_uri(location: str, stage: str, sink: str) -> str:
    """The write-ahead URI of sink ``sink`` of stage ``stage`` inside the table at ``location``."""
    return f"{location.rstrip('/')}/{STAGING}/{stage}/{sink}"


@dataclass(frozen=True)
class DataFile:
    """One published data file: its key under the table's location and its row count."""

    key: str
    rows: int


class TableSink(TwoPhaseCommitSink, abc.ABC):
    """A two-phase-commit sink into a lakehouse table (module docstring). Subclasses say how the
    table records a commit and how files become one commit."""

    def __init__(self, *, location: str, stage: str, pipeline_name: str | None = None, cuts: CutLog | None = None,
                 commit_every: int = 1, **template_kwargs: Any) -> None:
        """``location``: the table's root (storage URI); ``stage``: the stage writing it (a
        single-stage pipeline's stage is the pipeline); ``pipeline_name``: the pipeline as users
        name it (default: the ``pipeline`` the ledger knows, a stage's derived name in a
        pipeline of several stages); ``cuts``: where cut records go (None: none are written)."""
        self.location = location.rstrip("/")
        self.stage = stage
        self.pipeline_name = pipeline_name or template_kwargs["pipeline"]
        #: Commit once every this many completed checkpoints with rows (:meth:`notify_checkpoint_complete`).
        self.commit_every = max(1, commit_every)
        #: The version this process's newest table commit wrote (None: none yet).
        self._latest: TableVersion | None = None
        self.cuts = cuts
        self.table_store: ObjectStore = open_store(self.location)
        super().__init__(write_ahead=WriteAheadBatches(write_ahead_uri(self.location, stage, template_kwargs["name"])),
                         **template_kwargs)

    # -- what a format implements ------------------------------------------------------
    @abc.abstractmethod
    def describe_table(self) -> str:
        """The table as users name it (in messages)."""

    @abc.abstractmethod
    def load(self) -> Any:
        """The table's current state as the format's client opens it (None: no table yet)."""

    @abc.abstractmethod
    def committed_checkpoint(self, table: Any = None) -> int | None:
        """The largest checkpoint id this pipeline, stage and sink committed, read from the table
        itself (``table``: a :meth:`load` result to read it from; None: loaded now); None when it
        committed none (or the table does not exist)."""

    @abc.abstractmethod
    def commit_files(self, txn: Transaction, files: list[DataFile], table: Any) -> TableVersion | None:
        """One table commit adding ``files`` (keys under the table's location), based on
        ``table`` (the :meth:`load` result the commit decision read; None: create the table),
        whose recorded properties are :meth:`commit_properties` of ``txn``. Returns the version
        it wrote (None: the table already held the checkpoint, nothing was written)."""

    def refused_commit(self, txn: Transaction, exc: Exception) -> None:
        """After the table refused ``txn``'s commit (another writer moved it): return when the
        table holds ``txn``'s checkpoint already (another attempt of this sink committed it
        meanwhile: nothing is applied again); otherwise raise.

        Raises:
            SinkError: the table does not hold the checkpoint; names the sink, table and cause.
        """
        recorded = self.committed_checkpoint()
        if recorded is not None and recorded >= txn.checkpoint_id:
            log.info("sink %s: checkpoint %d was committed by another attempt meanwhile (%s)", self.name,
                     txn.checkpoint_id, exc)
            return
        raise SinkError(f"sink {self.name!r}: the commit of checkpoint {txn.checkpoint_id} to "
                        f"{self.describe_table()} failed: {exc}") from exc

    @abc.abstractmethod
    def version_at(self, checkpoint_id: int) -> TableVersion | None:
        """The table version holding exactly this sink's output up to ``checkpoint_id``: the one
        written by its commit of the largest checkpoint id <= ``checkpoint_id``; None when none."""

    @abc.abstractmethod
    def data_key(self, name: str, entry: dict[str, Any]) -> str:
        """Where the data file ``name`` (the pre-commit handle's ``entry`` of its write-ahead
        file: ``key``, ``rows`` and what the format added) is published, as a key under the
        table's location."""

    # -- the protocol --------------------------------------------------------------------
    @property
    def app_id(self) -> str:
        """``<pipeline>/<stage>/<sink>``: who commits (Delta's ``txnAppId``)."""
        return f"{self.pipeline_name}/{self.stage}/{self.name}"

    def is_ours(self, properties: dict[str, Any]) -> int | None:
        """The checkpoint id recorded in a commit's ``properties`` (Iceberg snapshot summary,
        Delta commit info) when this pipeline, stage and sink made it; else None."""
        checkpoint = str(properties.get(PROP_CHECKPOINT, ""))
        if (properties.get(PROP_PIPELINE) == self.pipeline_name and properties.get(PROP_STAGE) == self.stage
                and properties.get(PROP_SINK) == self.name and checkpoint.isdigit()):
            return int(checkpoint)
        return None

    def commit_properties(self, txn: Transaction) -> dict[str, str]:
        return {PROP_PIPELINE: self.pipeline_name, PROP_STAGE: self.stage, PROP_SINK: self.name,
                PROP_CHECKPOINT: str(txn.checkpoint_id), PROP_ATTEMPT: str(txn.attempt)}

    def begin_transaction(self, txn_id: str, checkpoint_id: int, batches: list[int]) -> dict[str, Any]:
        return {"table": self.describe_table(), "write_ahead": self.write_ahead.uri}

    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        files: dict[str, list[dict[str, Any]]] = {}
        for batch in txn.batches:
            files[str(batch)] = [{"key": f["key"], "rows": int(f.get("rows", 0))}
                                 for f in self.write_ahead.listing(batch)["files"]]
        return {"files": files, "rows": sum(f["rows"] for fs in files.values() for f in fs)}

    def commit(self, txn: Transaction) -> None:
        table = self.load()
        committed = self.committed_checkpoint(table)
        if committed is not None and committed >= txn.checkpoint_id:
            log.info("sink %s: %s already holds checkpoint %d (it records %d): epoch %d not committed again",
                     self.name, self.describe_table(), txn.checkpoint_id, committed, txn.checkpoint_id)
            return
        files = self._publish(txn)
        if not files:
            return
        written = self.commit_files(txn, files, table)
        if written is not None:
            self._latest = written
        mid_commit_crash_point(self.name, 1)  # the table commit made, the ledger not yet told

    def abort(self, txn: Transaction) -> None:
        return None

    def _publish(self, txn: Transaction) -> list[DataFile]:
        """Move the epoch's write-ahead files to their data-file keys (idempotent)."""
        published: list[DataFile] = []
        prefix = self.write_ahead.uri[len(self.location) + 1:]
        for batch in txn.batches:
            for index, entry in enumerate(txn.handle.get("files", {}).get(str(batch), [])):
                name = (f"bf-{self.stage}-{self.name}-c{txn.checkpoint_id}-a{txn.attempt}-b{batch}-"
                        f"{index:05d}.parquet")
                target = self.data_key(name, entry)
                source = f"{prefix}/{entry['key']}"
                if self.table_store.exists(source):
                    self.table_store.move(source, target)
                elif not self.table_store.exists(target):
                    raise SinkError(
                        f"sink {self.name!r}: write-ahead file {self.table_store.describe(source)} of batch {batch} is "
                        f"missing and was never published to {self.table_store.describe(target)}; restore a "
                        f"checkpoint before batch {batch}")
                published.append(DataFile(target, int(entry.get("rows", 0))))
        return published

    # -- commit_every: several epochs in one table commit ---------------------------------
    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        """Commit the pre-committed epochs <= ``checkpoint_id`` and write the cut record. With
        ``commit_every`` N > 1 the epochs are held (pre-committed: durable, invisible, in the
        ledger and the manifests) until N of them have rows, then committed in one table commit
        that records the newest checkpoint id (:meth:`commit_group`); held checkpoints get no cut
        record. A restore commits every held epoch its checkpoint covers, in one commit."""
        if self.commit_every == 1:
            super().notify_checkpoint_complete(checkpoint_id, barrier_batch)
        else:
            held = self._held(checkpoint_id)
            if sum(1 for t in held if int(t.handle.get("rows", 0)) > 0) < self.commit_every:
                return
            self.commit_group(held)
        # every pre-committed epoch <= checkpoint_id was committed just now (a failure raised)
        self.record_cut(checkpoint_id, settled=True)

    def _held(self, checkpoint_id: int) -> list[Transaction]:
        return sorted((t for t in self.ledger.list(self.name)
                       if t.state is TxnState.PRECOMMITTED and t.checkpoint_id <= checkpoint_id),
                      key=lambda t: t.checkpoint_id)

    def commit_group(self, txns: list[Transaction]) -> None:
        """Commit ``txns`` (pre-committed, ascending) in one table commit carrying the newest
        one's checkpoint id; the ones at or below the table's recorded checkpoint are in it
        already (a group commit whose ledger records a crash prevented) and are only recorded."""
        group = []
        for txn in txns:
            if self._decide(txn, "COMMIT") == "ABORT":
                self._abort_decided(txn, "decided ABORT before this commit", recovering=True)
            else:
                group.append(txn)
        if not group:
            return
        table = self.load()
        committed = self.committed_checkpoint(table)
        todo = [t for t in group if committed is None or t.checkpoint_id > committed]
        files = [f for t in todo for f in self._publish(t)]
        if files:
            written = self.commit_files(todo[-1], files, table)
            if written is not None:
                self._latest = written
            mid_commit_crash_point(self.name, 1)
        for txn in group:
            self.ledger.transition(txn, TxnState.COMMITTED, now=self.now(), note=f"committed with checkpoint "
                                   f"{group[-1].checkpoint_id}" if txn is not group[-1] else "")
            for batch in txn.batches:
                self.write_ahead.discard(batch)

    def apply(self, decisions: list[Decision]) -> None:
        """As the template's, but with ``commit_every`` > 1 the epochs decided COMMIT are committed
        together in one table commit; then the cut record of the newest committed one is written
        (a start that finishes what a crashed run left, ``reconcile``)."""
        mine = [d for d in decisions if d.sink == self.name and d.action == "COMMIT" and d.checkpoint_id is not None]
        if self.commit_every == 1:
            super().apply(decisions)
        else:
            commits = {d.transaction_id for d in mine}
            super().apply([d for d in decisions if d.transaction_id not in commits])
            self.commit_group(sorted((t for t in self.ledger.list(self.name) if t.transaction_id in commits
                                      and t.state is TxnState.PRECOMMITTED), key=lambda t: t.checkpoint_id))
        if mine:
            self.record_cut(max(d.checkpoint_id for d in mine if d.checkpoint_id is not None))

    # -- cut records ---------------------------------------------------------------------
    def restore(self, target_checkpoint: int | None, barrier_batch: int | None) -> list[Decision]:
        decisions = super().restore(target_checkpoint, barrier_batch)
        if target_checkpoint is not None:
            self.record_cut(target_checkpoint)
        return decisions

    def record_cut(self, checkpoint_id: int, *, settled: bool = False) -> None:
        """Write the cut record of ``checkpoint_id`` (this sink's table version as of it), once
        every epoch <= ``checkpoint_id`` of this sink is committed; else nothing (a later commit
        or a restore writes it). ``settled``: the caller has just committed every pre-committed
        epoch <= ``checkpoint_id`` (the ledger is not listed again to find that out)."""
        if self.cuts is None:
            return
        if not settled and any(t.checkpoint_id <= checkpoint_id and t.state is TxnState.PRECOMMITTED
                               for t in self.ledger.list(self.name)):
            return
        latest = self._latest
        if latest is not None and latest.checkpoint_id is not None and latest.checkpoint_id <= checkpoint_id:
            # This process made the sink's newest commit and the epochs after it up to checkpoint_id
            # (committed in order, none pending) had no rows: that commit's version is the cut's.
            version: TableVersion | None = latest
        else:
            version = self.version_at(checkpoint_id)
        self.cuts.record(checkpoint_id, {self.name: version})
