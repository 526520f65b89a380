"""The Kafka clients barrierflow uses, behind one small interface.

Two Python Kafka clients are in the environment, and each is used where it is the better tool
(figures measured on this 2-core machine against the embedded broker, noida-db 0.2.3, issue 29;
``bench/channel_transport.py`` and docs/benchmarks.md have the commands and the latest run):

==========================  ================  ===============================================
what                        client            why
==========================  ================  ===============================================
channel data records        confluent-kafka   librdkafka batches in C: 370,000 records/s
(executors, :mod:`.producer`)                 produced single-threaded against 23,000/s with
                                              kafka-python; idempotent, ``acks=all``
channel barrier records     confluent-kafka   the same producer settings as the data path
(driver)
channel and Kafka source    confluent-kafka   consumed and JSON-decoded 361,000/s against
range reads (:mod:`.consumer`)                44,000/s; one consumer per Python worker,
                                              reused across ranges
topic admin (create,        kafka-python      a few calls per run; kafka-python's admin and
partition lists) and the                      transactional producer are what the sink's
transactional Kafka sink                      exactly-once protocol and its crash tests were
                                              built and proved on (pinning epochs, fencing);
                                              switching it is a change of its own
==========================  ================  ===============================================

Only this package imports ``confluent_kafka``; it raises :class:`KafkaIOError` (a
:class:`~barrierflow.errors.BarrierflowError`) with what failed, and the callers (the channel
sink, the sources) turn it into their own error naming the stage, topic and servers.
"""

from __future__ import annotations

from barrierflow.kafka_io.consumer import ConsumerSettings, RangeReader, Record, shared_reader
from barrierflow.kafka_io.errors import KafkaIOError
from barrierflow.kafka_io.producer import BatchProducer, ProducerSettings, shared_producer

__all__ = ["BatchProducer", "ConsumerSettings", "KafkaIOError", "ProducerSettings", "RangeReader", "Record",
           "shared_producer", "shared_reader"]
