"""The Kafka clients barrierflow uses, behind one small interface.

Two Python Kafka clients are in the environment, and each is used where it is the better tool
(figures measured on this 2-core machine against the embedded broker of the time, noida-db 0.2.3: the
issue 29 run, and ``bench/channel_transport.py`` on 2026-11-25 in docs/benchmarks.md, "Channel
transport"; JSON records of a channel's shape, 4 partitions, ``acks=all``):

==========================  ================  ===============================================
what                        client            why
==========================  ================  ===============================================
channel data records        confluent-kafka   librdkafka batches in C: 961,000 records/s
(executors, :mod:`.producer`)                 produced against 39,000/s with kafka-python
                                              (issue 29: 370,000 against 23,000); idempotent,
                                              ``acks=all``; the old one-record-per-request
                                              writer failed at 100,000-record micro-batches
channel barrier records     confluent-kafka   the same producer settings as the data path
(driver)
channel and Kafka source    confluent-kafka   consumed and JSON-decoded 273,000/s against
range reads (:mod:`.consumer`)                58,000/s (issue 29: 361,000 against 44,000);
                                              one reader per Python worker, reused across
                                              ranges. In the two-stage pipeline the reading
                                              stage's driver planning took half the time at
                                              100,000-record micro-batches (1.17x end to
                                              end); at 20,000 it measured 0.82x in one run
                                              (a new assignment per small range): the stage
                                              is bound by re-reading records on the driver
                                              and by decoding, not by the client
transactional Kafka sink    confluent-kafka   one epoch's records in one transaction, real
(:mod:`.transactions`)                        producer batches: 166,000 records/s against
                                              12,000/s with kafka-python at the old sink's
                                              settings (linger 0, one request in flight;
                                              20,000 records, 4 partitions, 2026-11-26,
                                              one run); fencing and aborts as Kafka's
topic admin (create,        kafka-python      a few calls per run or commit; and reading what
partition lists, begin and                    confluent-kafka wrote with the other client is
end offsets: :mod:`.admin`),                  what the exactly-once checks want (the sink's
the sink's marker reads and                   ``committed_records``, the crash tests' second
chaos's output reader                         reader, chaos)
(:mod:`.committed_output`)
==========================  ================  ===============================================

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
