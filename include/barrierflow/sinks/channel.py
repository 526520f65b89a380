"""Writing a stage's output to a channel (a Kafka topic read by the next stages), with barriers.

:class:`ChannelWriter` is the stage query's ``foreachBatch`` function. For micro-batch ``V``:

Step 1. In the executors (``df.mapInArrow`` with :class:`ChannelTask`; nothing is collected
        to the driver but one count per task): each Spark task cuts its rows by target
        partition into Arrow record batches of a few thousand rows and produces each as one
        Kafka record (:mod:`barrierflow.kafka_io.row_batches`: an Arrow IPC stream, header
        ``bf-rows`` = its row count, header ``bf-attempt`` = the pipeline attempt), in real
        producer batches (confluent-kafka: ``linger.ms``, ``batch.size``, idempotent,
        ``acks=all``; :mod:`barrierflow.kafka_io.producer`). With ``key_column`` the key's
        text (the Kafka sink's key) picks the partition (``crc32(key) % partitions``), otherwise
        (and for a null key) rows are spread round-robin by row index within the task,
        starting at the task's partition id.
Step 2. Each task returns only after every one of its records was acknowledged (or fails the
        task); the driver sums the tasks' counts into :attr:`ChannelWriter.written`.
Step 3. If ``V`` is the stage's barrier batch of checkpoint ``n`` (``offsets/V`` carries a newer
        barrier than ``offsets/V-1``, see :mod:`barrierflow.barriers.offsets`), the driver appends
        one barrier record (:mod:`barrierflow.barriers.records`) to every partition of the topic
        and waits for the acknowledgements.

The driver reaches Step 3 only after the Spark job of Step 1 finished, i.e. after every task
of ``V`` had all its records acknowledged, and Spark runs batch ``V + 1`` only after
``foreachBatch`` of ``V`` returned, so on every partition the barrier of ``n`` follows all
records of epoch ``n`` and precedes every later record: the FIFO property the downstream
alignment relies on.

Delivery is at-least-once per pipeline attempt: a batch replayed after a crash writes its rows
(and its barrier) again. That is safe because a crash of any stage restores the whole pipeline
to a global checkpoint with a new attempt, and downstream sources skip what an older attempt
wrote after the restored barrier. Within an attempt a record is written once: the idempotent
producer's retries do not duplicate, and a Spark task that is retried (attempt number > 0:
a failure or speculation; it would write its rows a second time in the same attempt) fails
with a :class:`SinkError` instead, so the stage stops and the pipeline restarts as a new attempt.

Errors: brokers that do not answer are retried by the client for ``delivery_timeout`` seconds
(default 30); then the task fails and the driver raises a :class:`SinkError` naming the stage,
the topic, the servers and what to check. Nothing is lost silently: a task fails if any of its
records failed or is unacknowledged.

Nothing of a micro-batch is collected to the driver: the executors produce the rows, in
row batches (:mod:`barrierflow.kafka_io.row_batches`), with the batching producer of
:mod:`barrierflow.kafka_io.producer`; the driver writes only the barrier records.
bench/results/channel-transport/ measures this transport.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.records import BarrierMarker, data_headers
from barrierflow.errors import SinkError
from barrierflow.kafka_io import BatchProducer, KafkaIOError, KafkaSecurityError, ProducerSettings, shared_producer
from barrierflow.kafka_io.row_batches import by_partition, encode, rows_header, split
from barrierflow.spark import offset_log
from barrierflow.storage.object_dir import as_checkpoint_dir

if TYPE_CHECKING:
    import pyarrow as pa

    from barrierflow.spec.kafka_client import KafkaClientSpec

log = logging.getLogger(__name__)

#: Seconds a record may take to be acknowledged, the client's retries included (the default).
DELIVERY_TIMEOUT = 30.0
#: The schema of what each task of Step 1 returns: its count of records written.
COUNT_SCHEMA = "written long"


def _sticky_barrier(spark_checkpoint: str | Path, batch_id: int) -> SourceOffset | None:
    """The source offset of ``offsets/<batch_id>`` carrying the newest (sticky) barrier; None
    when the batch is not in the log."""
    if batch_id < 0:
        return None
    try:
        offsets = offset_log.read_offsets(spark_checkpoint, batch_id)
    except FileNotFoundError:
        return None
    return max((SourceOffset.from_json(o) for o in offsets if o), key=lambda o: o.barrier, default=None)


def barrier_of(spark_checkpoint: str | Path, batch_id: int) -> int:
    """The (sticky) barrier id in ``offsets/<batch_id>``; 0 when the batch is not in the log."""
    offset = _sticky_barrier(spark_checkpoint, batch_id)
    return offset.barrier if offset is not None else 0


def closing_barrier(spark_checkpoint: str | Path, batch_id: int) -> tuple[int, int | None] | None:
    """``(checkpoint id, trigger time in epoch ms or None)`` of the checkpoint whose barrier
    batch ``batch_id`` is, or None."""
    offset = _sticky_barrier(spark_checkpoint, batch_id)
    if offset is None or offset.barrier <= barrier_of(spark_checkpoint, batch_id - 1):
        return None
    return offset.barrier, offset.barrier_triggered_ms


def closes_epoch(spark_checkpoint: str | Path, batch_id: int) -> int | None:
    """The checkpoint whose barrier batch ``batch_id`` is, or None."""
    closing = closing_barrier(spark_checkpoint, batch_id)
    return closing[0] if closing is not None else None


def _advice(servers: str, exc: BaseException | None = None) -> str:
    if isinstance(exc, KafkaSecurityError):  # the message names the setting to fix
        return ("fix the channel's 'client' setting; the stage stops, and running the pipeline again restores its last "
                "global checkpoint")
    return (f"check that the brokers {servers} run and are reachable from the driver and from every executor "
            "(the channel's bootstrap address must resolve there); the stage stops, and running the pipeline "
            "again restores its last global checkpoint")


@dataclass(frozen=True)
class ChannelTask:
    """Step 1 and 2 of the module docstring in one Spark task: the ``mapInArrow`` function
    (pickled to the executors). Yields one row, the task's count of records written, after
    every record was acknowledged.

    Raises:
        SinkError: the task is a retry (it would duplicate records within the attempt), or a
            record failed or stayed unacknowledged for ``settings.delivery_timeout`` seconds.
    """

    topic: str
    stage: str
    attempt: int
    batch_id: int
    partitions: tuple[int, ...]
    settings: ProducerSettings
    key_column: str | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        from barrierflow.spark.worker_heap import freeze_long_lived

        freeze_long_lived()
        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        if context is not None and context.attemptNumber() > 0:
            raise SinkError(
                f"stage {self.stage!r}: writing to channel topic {self.topic!r}: task {task} of micro-batch "
                f"{self.batch_id} is attempt {context.attemptNumber()}; a retried task would write its rows to the "
                f"channel a second time in pipeline attempt {self.attempt}, so the stage fails instead. Running the "
                "pipeline again restores its last global checkpoint as a new attempt (downstream stages skip what "
                "this attempt wrote after it)")
        headers = data_headers(self.attempt)
        written = 0
        try:
            producer = shared_producer(self.settings)  # resolves the client's secrets in this executor
            for batch in batches:
                targets = partition_targets(batch, self.partitions, self.key_column, task + written)
                for number, rows in by_partition(batch, targets):
                    for piece in split(rows):
                        producer.send(self.topic, number, encode(piece),
                                      headers=[*headers, rows_header(piece.num_rows)])
                written += batch.num_rows
            producer.settle()
        except KafkaIOError as exc:
            raise SinkError(f"stage {self.stage!r}: writing to channel topic {self.topic!r} on "
                            f"{self.settings.servers} failed in task {task} of micro-batch {self.batch_id}: {exc}; "
                            f"{_advice(self.settings.servers, exc)}") from exc
        yield pa.RecordBatch.from_pydict({"written": pa.array([written], type=pa.int64())})


def partition_targets(batch: pa.RecordBatch, partitions: tuple[int, ...], key_column: str | None,
                      first: int) -> Any:
    """The channel partition of each row of ``batch`` (a NumPy array): with ``key_column``,
    ``partitions[crc32(key text) % len(partitions)]`` (the Kafka sink's key text,
    :func:`~barrierflow.sinks.json_rows.encode_keys`; computed once per distinct key), else and
    for a null key round-robin by row index, starting at ``first``."""
    import numpy as np
    import pyarrow.compute as pc

    from barrierflow.sinks.json_rows import encode_keys

    numbers = np.asarray(partitions, dtype=np.int64)
    count, rows = len(numbers), batch.num_rows
    spread = numbers[(first + np.arange(rows)) % count]
    if key_column is None or key_column not in batch.schema.names or rows == 0:
        return spread
    column = batch.column(key_column)
    if column.null_count == rows:
        return spread
    encoded = pc.dictionary_encode(column)
    keys = encode_keys(encoded.dictionary)
    per_key = np.asarray([0 if k is None else numbers[zlib.crc32(k) % count] for k in keys], dtype=np.int64)
    indices = encoded.indices
    if indices.null_count:
        index = pc.fill_null(indices, 0).to_numpy()
        return np.where(pc.is_null(indices).to_numpy(zero_copy_only=False), spread, per_key[index])
    return per_key[indices.to_numpy()]


#: What the driver finds of a task's :class:`SinkError` in the exception Spark raises for the job.
_TASK_ERROR = re.compile(r"SinkError: (stage .*?: writing to channel topic .*)")


class ChannelWriter:
    """The ``foreachBatch`` function of a stage that writes channel ``topic``; see the module
    docstring. ``written`` counts data rows, ``barriers`` lists the checkpoints forwarded.
    ``delivery_timeout`` bounds each record's acknowledgement, retries included."""

    def __init__(self, *, servers: str, topic: str, stage: str, attempt: int, spark_checkpoint: str | Path,
                 key_column: str | None = None, delivery_timeout: float = DELIVERY_TIMEOUT,
                 client: KafkaClientSpec | None = None) -> None:
        self.servers = servers
        self.topic = topic
        self.stage = stage
        self.attempt = attempt
        self.spark_checkpoint = as_checkpoint_dir(spark_checkpoint)
        self.key_column = key_column
        # The settings travel to the executors (ChannelTask) with the client's secret references,
        # which each executor resolves itself: no secret is pickled.
        self.settings = ProducerSettings(servers=servers, delivery_timeout=delivery_timeout,
                                         client_id=f"barrierflow-{stage}", client=client)
        self.written = 0
        self.barriers: list[int] = []
        self._producer: BatchProducer | None = None
        self._partitions: list[int] | None = None

    def _failed(self, what: str, exc: BaseException) -> SinkError:
        return SinkError(f"stage {self.stage!r}: {what} channel topic {self.topic!r} on {self.servers} failed: "
                         f"{exc}; {_advice(self.servers, exc)}")

    def _open(self) -> BatchProducer:
        """The driver's producer (barrier records) and the topic's partitions, once."""
        if self._producer is None:
            try:
                producer = BatchProducer(self.settings)
                self._partitions = producer.partitions(self.topic)
            except KafkaIOError as exc:
                raise self._failed("connecting to", exc) from exc
            self._producer = producer
        return self._producer

    def __call__(self, df: Any, batch_id: int) -> None:
        self._open()
        assert self._partitions is not None
        task = ChannelTask(topic=self.topic, stage=self.stage, attempt=self.attempt, batch_id=batch_id,
                           partitions=tuple(self._partitions), settings=self.settings, key_column=self.key_column)
        # Steps 1 and 2: the job returns once every task's records were acknowledged.
        try:
            counts = df.mapInArrow(task, COUNT_SCHEMA).collect()
        except Exception as exc:
            found = _TASK_ERROR.search(str(exc))
            if found is None:
                raise  # not the channel's: the stage's transformation or source failed
            raise SinkError(found.group(1).strip()) from exc
        self.written += sum(int(row[0]) for row in counts)
        # Step 3.
        closing = closing_barrier(self.spark_checkpoint, batch_id)
        if closing is not None:
            checkpoint_id, triggered_ms = closing
            self.write_barrier(BarrierMarker(checkpoint_id, self.attempt, self.stage, triggered_ms))

    def write_barrier(self, marker: BarrierMarker) -> None:
        """Append ``marker`` to every partition of the topic and wait for the acknowledgements.

        Raises:
            SinkError: a barrier record was not acknowledged within ``delivery_timeout``.
        """
        producer = self._open()
        assert self._partitions is not None
        try:
            for number in self._partitions:
                producer.send(self.topic, number, marker.value(), headers=marker.headers())
            producer.settle()
        except KafkaIOError as exc:
            self._producer = None  # closed by the failure; a fresh one next time
            raise self._failed(f"writing barrier {marker.checkpoint_id} to", exc) from exc
        self.barriers.append(marker.checkpoint_id)
        log.info("stage %s: barrier %d written to %d partitions of %s", self.stage, marker.checkpoint_id,
                 len(self._partitions), self.topic)

    def close(self) -> None:
        """Close the driver's producer (every barrier written was acknowledged already)."""
        if self._producer is not None:
            self._producer.close()
            self._producer = None
