"""Writing a stage's output to a channel (a Kafka topic read by the next stages), with barriers.

:class:`ChannelWriter` is the stage query's ``foreachBatch`` function. For micro-batch ``V``:

Step 1. Produce every output row (a JSON object, as the Kafka sink encodes it) with header
        ``bf-attempt`` = the pipeline attempt; with ``key_column`` the key's text picks the
        partition (Kafka's partitioner), otherwise rows are spread round-robin by row index.
Step 2. Wait for every acknowledgement.
Step 3. If ``V`` is the stage's barrier batch of checkpoint ``n`` (``offsets/V`` carries a newer
        barrier than ``offsets/V-1``, see :mod:`barrierflow.barriers.offsets`), append one
        barrier record (:mod:`barrierflow.barriers.records`) to every partition of the topic and
        wait for them.

Spark runs batch ``V + 1`` only after ``foreachBatch`` of ``V`` returned, so on every partition
the barrier of ``n`` follows all records of epoch ``n`` and precedes every later record: the
FIFO property the downstream alignment relies on.

Delivery is at-least-once per attempt: a batch replayed after a crash writes its rows (and
its barrier) again. That is safe because a crash of any stage restores the whole pipeline to
a global checkpoint with a new attempt, and downstream sources skip what an older attempt wrote
after the restored barrier. Records are produced one per Kafka batch (``batch_size=0``). That
was needed for correctness on the earlier embedded broker (tansu), which reported wrong end
offsets after multi-record batches while downstream planning depends on end offsets; the
embedded broker now (noida-db) and Kafka report them right, so it is no longer needed for
correctness, only slow (issue 29 moves channel writing to the executors in real producer
batches).
"""

from __future__ import annotations

import logging
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.records import BarrierMarker, data_headers
from barrierflow.errors import SinkError
from barrierflow.spark import offset_log

if TYPE_CHECKING:
    from kafka import KafkaProducer

log = logging.getLogger(__name__)

#: Bound, in seconds, on connecting and on each acknowledgement.
TIMEOUT = 10.0


def barrier_of(spark_checkpoint: str | Path, batch_id: int) -> int:
    """The (sticky) barrier id in ``offsets/<batch_id>``; 0 when the batch is not in the log."""
    if batch_id < 0:
        return 0
    try:
        offsets = offset_log.read_offsets(spark_checkpoint, batch_id)
    except FileNotFoundError:
        return 0
    return max((SourceOffset.from_json(o).barrier for o in offsets if o), default=0)


def closes_epoch(spark_checkpoint: str | Path, batch_id: int) -> int | None:
    """The checkpoint whose barrier batch ``batch_id`` is, or None."""
    barrier = barrier_of(spark_checkpoint, batch_id)
    return barrier if barrier > barrier_of(spark_checkpoint, batch_id - 1) else None


def ensure_topic(servers: str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions unless it exists (replication 1 on a
    single broker, the cluster's default otherwise is not guessed: create it yourself there).

    Raises:
        SinkError: the brokers cannot be reached, or the topic exists with fewer partitions.
    """
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    listed = [s.strip() for s in servers.split(",") if s.strip()]
    try:
        consumer = KafkaConsumer(bootstrap_servers=listed, group_id=None, enable_auto_commit=False,
                                 bootstrap_timeout_ms=int(TIMEOUT * 1000))
        try:
            existing = consumer.partitions_for_topic(topic)
        finally:
            consumer.close()
        if existing:
            if len(existing) < partitions:
                raise SinkError(f"channel topic {topic!r} on {servers} has {len(existing)} partitions, fewer than "
                                f"the {partitions} the spec asks for; raise them or fix 'partitions'")
            return
        admin = KafkaAdminClient(bootstrap_servers=listed, request_timeout_ms=int(TIMEOUT * 1000))
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
    except KafkaError as exc:
        raise SinkError(f"creating channel topic {topic!r} on {servers} failed: {type(exc).__name__}: {exc}; check "
                        "that the brokers run and are reachable") from exc


class ChannelWriter:
    """The ``foreachBatch`` function of a stage that writes channel ``topic``; see the module
    docstring. ``written`` counts data rows, ``barriers`` lists the checkpoints forwarded."""

    def __init__(self, *, servers: str, topic: str, stage: str, attempt: int, spark_checkpoint: str | Path,
                 key_column: str | None = None) -> None:
        self.servers = servers
        self.topic = topic
        self.stage = stage
        self.attempt = attempt
        self.spark_checkpoint = Path(spark_checkpoint)
        self.key_column = key_column
        self.written = 0
        self.barriers: list[int] = []
        self._producer: KafkaProducer | None = None
        self._partitions: list[int] | None = None

    def _open(self) -> KafkaProducer:
        if self._producer is None:
            from kafka import KafkaProducer
            from kafka.errors import KafkaError

            try:
                self._producer = KafkaProducer(
                    bootstrap_servers=[s.strip() for s in self.servers.split(",") if s.strip()],
                    linger_ms=0, batch_size=0, acks="all", bootstrap_timeout_ms=int(TIMEOUT * 1000))
                numbers = self._producer.partitions_for(self.topic)
            except KafkaError as exc:
                raise SinkError(f"stage {self.stage!r}: connecting to channel topic {self.topic!r} on {self.servers} "
                                f"failed: {type(exc).__name__}: {exc}") from exc
            self._partitions = sorted(numbers)
        return self._producer

    def __call__(self, df: Any, batch_id: int) -> None:
        from barrierflow.sinks.kafka import encode_key, encode_value

        rows = df.toArrow().to_pylist()
        producer = self._open()
        assert self._partitions is not None
        headers = data_headers(self.attempt)
        # Step 1.
        futures = []
        for index, row in enumerate(rows):
            key = encode_key(row.get(self.key_column)) if self.key_column else None
            partition = None
            if key is None:
                partition = self._partitions[index % len(self._partitions)]
            elif self.key_column:
                partition = self._partitions[zlib.crc32(key) % len(self._partitions)]
            futures.append(producer.send(self.topic, value=encode_value(row), key=key, partition=partition,
                                         headers=headers))
        # Step 2.
        self._settle(futures)
        self.written += len(rows)
        # Step 3.
        checkpoint_id = closes_epoch(self.spark_checkpoint, batch_id)
        if checkpoint_id is not None:
            self.write_barrier(BarrierMarker(checkpoint_id, self.attempt, self.stage))

    def write_barrier(self, marker: BarrierMarker) -> None:
        """Append ``marker`` to every partition of the topic and wait for the acknowledgements."""
        producer = self._open()
        assert self._partitions is not None
        self._settle([producer.send(self.topic, value=marker.value(), partition=p, headers=marker.headers())
                      for p in self._partitions])
        self.barriers.append(marker.checkpoint_id)
        log.info("stage %s: barrier %d written to %d partitions of %s", self.stage, marker.checkpoint_id,
                 len(self._partitions), self.topic)

    def _settle(self, futures: list[Any]) -> None:
        from kafka.errors import KafkaError

        if not futures:
            return
        producer = self._open()
        try:
            producer.flush(timeout=TIMEOUT)
            for future in futures:
                future.get(timeout=TIMEOUT)
        except KafkaError as exc:
            raise SinkError(f"stage {self.stage!r}: writing to channel topic {self.topic!r} on {self.servers} "
                            f"failed: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=TIMEOUT)
            self._producer = None
