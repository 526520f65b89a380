"""The Kafka clients barrierflow uses, behind one small interface.

Two Python Kafka clients are in the environment, and each is used where it is the better tool
(the measurements behind the choice: bench/results/channel-transport/):

- confluent-kafka (librdkafka, batching in C) for the data path: channel data records produced
  by the executors (:mod:`.producer`: idempotent, ``acks=all``), the driver's channel barrier
  records (the same producer settings), the channel and Kafka source range reads
  (:mod:`.consumer`: one reader per Python worker, reused across ranges) and the transactional
  Kafka sink (:mod:`.transactions`: one epoch's records in one transaction; fencing and aborts
  as Kafka's).
- kafka-python for the few calls per run or commit: topic admin (creation, partition lists,
  begin and end offsets: :mod:`.admin`), the sink's marker reads and chaos's output reader
  (:mod:`.committed_output`): reading what confluent-kafka wrote with the other client is what
  the exactly-once checks want.

The modules, one concept each: :mod:`.admin` (topic metadata, begin and end offsets, topic
creation), :mod:`.range_reads` (a source's offset ranges, over :mod:`.consumer`),
:mod:`.decoding` (records into Arrow batches and dead letters, with :mod:`.json_columns`),
:mod:`.partition_ids` (``"topic:partition"`` keys), :mod:`.row_batches` (a channel's records),
:mod:`.producer` and :mod:`.transactions` (producing), :mod:`.committed_output` (reading back
what the Kafka sink committed), :mod:`.security` (the ``client`` block), :mod:`.kraft_broker`
and :mod:`.embedded_broker` (the broker of ``bootstrap: embedded`` channels and the tests).

Only this package imports ``kafka`` (kafka-python) and ``confluent_kafka``. Its clients raise
:class:`KafkaIOError` (a :class:`~barrierflow.errors.BarrierflowError`) with what failed, and
the callers (the channel sink, the sources) turn it into their own error naming the stage,
topic and servers; the functions that take a source spec (:mod:`.admin`, :mod:`.range_reads`)
or read the sink's output (:mod:`.committed_output`) raise that source's or sink's error
themselves (:class:`~barrierflow.errors.SourceError`, :class:`~barrierflow.errors.SinkError`).

Security: every client, of either library, gets its security settings and allowed client
options from one mapping of the spec's ``client`` block (:mod:`.security`), which resolves the
secret references in the process that builds the client; a refused login or an untrusted
certificate raises :class:`KafkaSecurityError` naming the brokers and the setting.
"""

from __future__ import annotations

from barrierflow.kafka_io.consumer import ConsumerSettings, RangeReader, Record, shared_reader
from barrierflow.kafka_io.errors import KafkaIOError, KafkaSecurityError
from barrierflow.kafka_io.producer import BatchProducer, ProducerSettings, shared_producer

__all__ = ["BatchProducer", "ConsumerSettings", "KafkaIOError", "KafkaSecurityError", "ProducerSettings",
           "RangeReader", "Record", "shared_producer", "shared_reader"]
