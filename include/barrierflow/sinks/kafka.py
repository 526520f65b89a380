"""The Kafka sink: exactly-once through a write-ahead two-phase commit.

Clients: records and markers are produced with confluent-kafka's transactional producer
(:class:`barrierflow.kafka_io.transactions.TransactionalProducer`: real producer batches,
keys placed by the Java client's murmur2 partitioner); the marker topic and the committed
output are read with kafka-python (:mod:`barrierflow.kafka_io.committed_output`: a few
requests per commit; and a second client reading what the first wrote is what the
exactly-once tests want).

Design: write-ahead, not Flink's resume-the-open-transaction design. Flink keeps epoch n's
Kafka transaction open from pre-commit to commit and, after a crash, resumes it from another
process with the recorded producer id and epoch. Neither Python client can resume another
producer's id/epoch, so a Kafka transaction cannot outlive the driver process that opened it.
The write-ahead micro-batches (:mod:`barrierflow.sinks.write_ahead`) already make epoch n durable and
invisible, i.e. they are a write-ahead log; so the whole epoch is produced in one short
transaction at commit time:

* ``pre_commit(txn)``: nothing at the broker; the handle records the records topic, the
  commit-marker topic and the transactional id.
* Written ahead: each micro-batch as its Kafka records (key and value bytes,
  :func:`~barrierflow.sinks.json_rows.encoded_records`), encoded by the executors that write it.
* ``commit(txn)``: with a producer whose ``transactional_id`` is stable per pipeline and sink
  (``bf.<pipeline>.<sink>``; ``init_transactions()`` of a restarted driver therefore fences
  the zombie and aborts its lingering transaction), once per sink object ``init_transactions``;
  then ``begin_transaction``, every row of the transaction's write-ahead batches in batch order
  (value: the row as a JSON object, timestamps as ISO-8601 strings; key: the ``key_column``'s
  value as UTF-8 text when set; headers ``bf-epoch`` = checkpoint id and ``bf-attempt`` =
  attempt that opened the transaction), then one commit-marker record to
  ``commit_marker_topic`` keyed by the ledger's transaction id, then ``commit_transaction``.
  The marker is in the same Kafka transaction as the records, so it is visible exactly when
  they are.
* Idempotence: before producing, the marker topic is read with ``read_committed``; if a marker
  for the transaction id is there, the epoch was already committed (a crash between
  ``commit_transaction`` and the ledger update) and the commit is a no-op.
* ``abort(txn)``: nothing at the broker (no open transaction survives a process); if this
  sink object has an open producer transaction for ``txn``, it is aborted.

Write-ahead data is never deleted here; the template deletes it after the ledger says COMMITTED.

Caveats:

* The marker check needs a broker that hides aborted transactional records from
  ``read_committed`` consumers, as Kafka does; on one that does not (some Kafka-protocol
  imitations) an aborted marker (a driver that crashed
  after producing the marker but before ``commit_transaction``) would be taken as committed.
* A transaction left open by a dead driver: Kafka aborts it after ``transaction_timeout_ms``
  (tests/sinks/test_kafka_sink.py shows it). The sink does not wait for that: the restarted
  driver's ``init_transactions`` (same transactional id) fences the dead producer and aborts
  it before anything is produced.
  Meanwhile a ``read_committed`` reader of the topic waits at that transaction.
* Records travel in producer batches (``linger.ms`` 5, idempotent, ``acks=all``); the marker is
  sent after every record of the epoch was acknowledged, carrying each partition's
  acknowledged offset span (what
  :func:`~barrierflow.kafka_io.committed_output.committed_records` reads).
* The marker topic must exist (it is never auto-created), and its retention must be longer
  than the longest time a pre-committed epoch may wait for a retried commit (the default
  7 days is ample). The sink object's first commit reads it from the beginning, filtered to
  this pipeline/sink; each later commit reads only the markers added since the one before.
* With several partitions in the records topic, order is kept per partition (per key).

Every broker call is bounded by ``timeout`` seconds (reading the marker topic may wait up to
``transaction_timeout_ms`` longer for another producer's open transaction to end); an
unreachable broker, an unknown topic or a fenced producer gives a :class:`SinkError` that
names the servers and what to check.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SinkError
from barrierflow.faults import crash_point
from barrierflow.kafka_io.committed_output import (
    ATTEMPT_HEADER,
    DEFAULT_TIMEOUT,
    EPOCH_HEADER,
    MarkerReader,
    partition_numbers,
    split_servers,
    unreachable_error,
)
from barrierflow.kafka_io.errors import is_connectivity, is_fenced
from barrierflow.sinks.json_rows import KEY_COLUMN, VALUE_COLUMN, encoded_records
from barrierflow.spec.models import KafkaSinkSpec
from barrierflow.transactions.ledger import Transaction
from barrierflow.transactions.two_phase import TwoPhaseCommitSink, mid_commit_crash_point
from barrierflow.transactions.write_ahead import WriteAheadBatches

if TYPE_CHECKING:
    from barrierflow.kafka_io.transactions import TransactionalProducer

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- helpers


def transactional_id_for(pipeline: str, sink: str) -> str:
    """The stable Kafka ``transactional_id`` of a pipeline's sink (same across restarts)."""
    return f"bf.{pipeline}.{sink}"


# --------------------------------------------------------------------------- the sink


class KafkaSink(TwoPhaseCommitSink):
    """Exactly-once Kafka output per epoch (write-ahead design, see the module docstring).

    Contracts: records of epoch n are produced, in one Kafka transaction with their commit
    marker, only by :meth:`commit` (after checkpoint n completed), so ``read_committed``
    consumers see them then and only then; a repeated :meth:`commit` of a committed epoch
    produces nothing (marker check; exact on a real Kafka); :meth:`abort` never touches write-ahead
    data. Not thread-safe: the checkpoint coordinator calls it on one thread.
    """

    sink_type = "kafka"

    def __init__(self, *, spec: KafkaSinkSpec, write_ahead_uri: str, timeout: float = DEFAULT_TIMEOUT,
                 **template_kwargs: Any) -> None:
        """``template_kwargs`` are those of :class:`TwoPhaseCommitSink` (name, pipeline, ledger,
        attempt, now); ``timeout`` bounds connecting and every broker request, in seconds.
        Nothing connects to the brokers until the first commit."""
        super().__init__(write_ahead=WriteAheadBatches(write_ahead_uri), **template_kwargs)
        self.spec = spec
        self.servers = split_servers(spec.bootstrap_servers)
        if not self.servers:
            raise SinkError(f"Kafka sink {self.name!r}: bootstrap_servers is empty")
        self.timeout = timeout
        self.transactional_id = transactional_id_for(self.pipeline, self.name)
        self._producer: TransactionalProducer | None = None
        self._open_transaction: str | None = None
        self._topics_checked = False
        #: Reads this sink's commit markers incrementally; ``_committed_ids`` holds the
        #: transaction ids of every marker it returned (about 100 bytes per checkpoint).
        self._markers: MarkerReader | None = None
        self._committed_ids: set[str] = set()

    # -- the template's hooks -------------------------------------------------------------
    def begin_transaction(self, txn_id: str, checkpoint_id: int, batches: list[int]) -> dict[str, Any]:
        return {"batches": batches, "staging": self.write_ahead.uri}

    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        """Nothing at the broker: the write-ahead batches are the durable, invisible epoch."""
        return {"topic": self.spec.topic, "commit_marker_topic": self.spec.commit_marker_topic,
                "transactional_id": self.transactional_id}

    def commit(self, txn: Transaction) -> None:
        """Produce the epoch and its marker in one Kafka transaction; a no-op if its marker is
        already committed.

        Raises:
            SinkError: brokers unreachable, unknown topic, write-ahead batch missing or unreadable,
                producer fenced by another process with the same transactional id. Nothing of
                the epoch is visible then (the Kafka transaction is aborted or times out) and
                the write-ahead batches stay, so the commit can be retried.
        """
        producer = self._transactional_producer()
        if not self._topics_checked:
            partition_numbers(self.servers, self.spec.topic, timeout=self.timeout, client=self.spec.client)
            self._topics_checked = True
        if self._markers is None:
            self._markers = MarkerReader(self.servers, self.spec.commit_marker_topic, pipeline=self.pipeline,
                                         sink=self.name, timeout=self.timeout,
                                         open_transaction_wait=self.spec.transaction_timeout_ms / 1000,
                                         client=self.spec.client)
        self._committed_ids.update(m["transaction_id"] for m in self._markers.read_new())
        if txn.transaction_id in self._committed_ids:
            log.info("Kafka sink %s: transaction %s (epoch %d) already committed to %s; nothing to produce",
                     self.name, txn.transaction_id, txn.checkpoint_id, self.spec.topic)
            return
        try:
            records = self._produce_transaction(producer, txn)
        except Exception as exc:
            self._discard_producer(abort=True)
            if isinstance(exc, SinkError):
                raise
            raise self._error(f"committing transaction {txn.transaction_id} (epoch {txn.checkpoint_id})",
                              exc) from exc
        log.info("Kafka sink %s: committed transaction %s (epoch %d): %d records to %s", self.name,
                 txn.transaction_id, txn.checkpoint_id, records, self.spec.topic)
        mid_commit_crash_point(self.name, 1)

    def abort(self, txn: Transaction) -> None:
        """Nothing at the broker: no Kafka transaction outlives the process that opened it (a
        restarted driver's ``init_transactions`` aborts a crashed one's). Aborts this object's
        open producer transaction for ``txn``, if any. Never deletes write-ahead data."""
        if self._open_transaction == txn.transaction_id and self._producer is not None:
            log.info("Kafka sink %s: aborting the open producer transaction of %s", self.name,
                     txn.transaction_id)
            self._discard_producer(abort=True)

    def close(self) -> None:
        """Close the producer (aborting an open transaction) and the marker reader. The sink
        reconnects if used again."""
        self._discard_producer(abort=True)
        if self._markers is not None:
            self._markers.close()

    # -- producing ------------------------------------------------------------------------
    def _transactional_producer(self) -> TransactionalProducer:
        """The sink's transactional producer, connected and initialised (fencing zombies)."""
        if self._producer is not None:
            return self._producer
        from barrierflow.kafka_io.transactions import TransactionalProducer, TransactionalSettings

        settings = TransactionalSettings(servers=",".join(self.servers), transactional_id=self.transactional_id,
                                         transaction_timeout_ms=self.spec.transaction_timeout_ms,
                                         timeout=self.timeout, client_id=f"barrierflow-{self.pipeline}-{self.name}",
                                         client=self.spec.client)
        try:
            producer = TransactionalProducer(settings)
        except Exception as exc:
            raise self._error(f"initialising transactional id {self.transactional_id!r}", exc) from exc
        log.info("Kafka sink %s: transactional producer %r ready on %s", self.name, self.transactional_id,
                 ",".join(self.servers))
        self._producer = producer
        return producer

    def _produce_transaction(self, producer: TransactionalProducer, txn: Transaction) -> int:
        headers = [(EPOCH_HEADER, str(txn.checkpoint_id).encode()), (ATTEMPT_HEADER, str(txn.attempt).encode())]
        producer.begin()
        self._open_transaction = txn.transaction_id
        records = 0
        for batch in txn.batches:
            table = self.write_ahead.read(batch)
            if table is None:
                continue
            if VALUE_COLUMN not in table.column_names:  # rows, written ahead before records were
                table = encoded_records(table, self.spec.key_column, sink=self.name,
                                        where=f"write-ahead batch {batch}")
            for key, value in zip(table.column(KEY_COLUMN).to_pylist(), table.column(VALUE_COLUMN).to_pylist(),
                                  strict=True):
                producer.send(self.spec.topic, value, key=key, headers=headers)
                records += 1
        ranges = {str(p): [first, last] for p, (first, last) in sorted(producer.settle().items())}
        crash_point("kafka_before_marker", sink=self.name, transaction=txn.transaction_id)
        marker = {
            "transaction_id": txn.transaction_id,
            "pipeline": self.pipeline,
            "sink": self.name,
            "checkpoint_id": txn.checkpoint_id,
            "attempt": txn.attempt,
            "committed_by_attempt": self.attempt,
            "batches": txn.batches,
            "topic": self.spec.topic,
            "records": records,
            "ranges": ranges,
            "transactional_id": self.transactional_id,
            "produced_at": self.now().astimezone(UTC).isoformat(),
        }
        producer.send(self.spec.commit_marker_topic, json.dumps(marker, separators=(",", ":")).encode(),
                      key=txn.transaction_id.encode(), headers=headers)
        producer.settle()
        crash_point("kafka_after_marker", sink=self.name, transaction=txn.transaction_id)
        producer.commit()
        self._open_transaction = None
        return records

    def _discard_producer(self, *, abort: bool) -> None:
        """Abort the open transaction (best effort) and close the producer; the next commit
        builds a new one, whose ``init_transactions`` also aborts anything left behind."""
        producer, self._producer = self._producer, None
        open_txn, self._open_transaction = self._open_transaction, None
        if producer is None:
            return
        if abort and open_txn is not None:
            try:
                producer.abort()
            except Exception as exc:
                log.warning("Kafka sink %s: aborting the producer transaction of %s failed (%s: %s); it ends "
                            "when the transactional id is next initialised or after transaction_timeout_ms",
                            self.name, open_txn, type(exc).__name__, exc)
        producer.close()

    def _error(self, what: str, exc: BaseException) -> SinkError:
        from barrierflow.kafka_io.errors import KafkaSecurityError
        from barrierflow.kafka_io.transactions import TransactionError

        if isinstance(exc, KafkaSecurityError):
            return SinkError(f"Kafka sink {self.name!r}: {what} failed: {exc}. The epoch stays in the write-ahead "
                             "log and pre-committed; it is committed once the setting is fixed (the next run or a "
                             "restore)")
        kind = exc.kind if isinstance(exc, TransactionError) else None
        if kind == "fenced" or (kind is None and is_fenced(exc)):
            return SinkError(
                f"Kafka sink {self.name!r}: {what} failed: the producer was fenced: another process "
                f"initialised transactional id {self.transactional_id!r} on {','.join(self.servers)} (a newer "
                "driver of this pipeline, or a reconcile run). Nothing of this attempt's transaction becomes "
                "visible; make sure only one driver runs the pipeline. The next commit starts a new producer."
            )
        if kind == "unreachable" or (kind is None and is_connectivity(exc)):
            err = unreachable_error(self.servers, what, self.timeout, exc)
            return SinkError(f"Kafka sink {self.name!r}: {str(err).removeprefix('Kafka sink: ')}")
        return SinkError(f"Kafka sink {self.name!r}: {what} on {','.join(self.servers)} failed: "
                         f"{type(exc).__name__}: {exc}")
