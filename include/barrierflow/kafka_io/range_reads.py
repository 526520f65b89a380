"""Reading an offset range of a Kafka source's partition (confluent-kafka).

:func:`read_range` (records), :func:`read_range_columns` (offsets, timestamps and values as
columns, for format ``json``) and :func:`read_range_marked` (the records carrying a header: the
channel source's scan for barrier and row-batch records) read the ``read_committed`` records
of ``topic``/``partition`` with ``start <= offset < end`` through a
:class:`~barrierflow.kafka_io.consumer.RangeReader`: the driver's own, or the shared one of
this process (an executor's Python worker reuses one consumer across ranges and micro-batches).

Contract: the same range always yields the same records while retention keeps them; reading
stops when the position passes ``end`` (transaction markers leave gaps); a range that makes no
progress for ``poll_timeout + unavailable_timeout`` seconds, a range deleted by retention and a
refused login each give a :class:`~barrierflow.errors.SourceError` naming the source, the range
and what to check.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SourceError
from barrierflow.kafka_io.admin import bootstrap_servers

if TYPE_CHECKING:
    from barrierflow.kafka_io.consumer import Columns, ConsumerSettings, HeaderFilter, RangeReader
    from barrierflow.spec.kafka_params import KafkaSource


def reader_settings(spec: KafkaSource) -> ConsumerSettings:
    """How ranges of ``spec``'s topics are read (confluent-kafka; see :mod:`barrierflow.kafka_io`)."""
    from barrierflow.kafka_io.consumer import ConsumerSettings

    return ConsumerSettings(servers=",".join(bootstrap_servers(spec)), timeout=max(spec.poll_timeout, 1.0),
                            client_id=f"barrierflow-{spec.name}", client=spec.client)


def read_range(spec: KafkaSource, topic: str, partition: int, start: int, end: int,
               reader: RangeReader | None = None) -> Iterator[Any]:
    """The ``read_committed`` records of ``topic``/``partition`` with ``start <= offset < end``
    (:class:`~barrierflow.kafka_io.consumer.Record` values, with the attribute names of
    kafka-python's ``ConsumerRecord``).

    Read with ``reader`` (the driver's), else with this process's shared reader
    (:func:`~barrierflow.kafka_io.consumer.shared_reader`: an executor's Python worker reuses
    one consumer across ranges and micro-batches). Reading stops when the position passes
    ``end`` (not after ``end - start`` records: transaction markers leave gaps). Raises
    :class:`SourceError` when the position makes no progress for ``poll_timeout +
    unavailable_timeout`` seconds (an outage is waited out) or when the range was deleted by
    retention.
    """
    return _read(spec, topic, partition, start, end, reader, columns=False)


def read_range_columns(spec: KafkaSource, topic: str, partition: int, start: int, end: int,
                       reader: RangeReader | None = None, *, drop: HeaderFilter | None = None) -> Iterator[Columns]:
    """The records of :func:`read_range` as :class:`~barrierflow.kafka_io.consumer.Columns`
    (offsets, timestamps, values), a chunk per fetch, without those ``drop`` picks by their
    headers (:meth:`~barrierflow.kafka_io.consumer.RangeReader.read_columns`); same reader and errors."""
    return _read(spec, topic, partition, start, end, reader, columns=True, drop=drop)


def read_range_marked(spec: KafkaSource, topic: str, partition: int, start: int, end: int,
                      header: str | frozenset[str], reader: RangeReader | None = None) -> Iterator[tuple[int, Any]]:
    """``(offset, headers)`` of the records of :func:`read_range` carrying a header named
    ``header`` (or one of several names: the channel source's scan for barrier and row-batch
    records); same reader and errors."""
    return _read(spec, topic, partition, start, end, reader, columns=False, marked=header)


def _read(spec: KafkaSource, topic: str, partition: int, start: int, end: int, reader: RangeReader | None,
          *, columns: bool, marked: str | frozenset[str] | None = None,
          drop: HeaderFilter | None = None) -> Iterator[Any]:
    from barrierflow.kafka_io import KafkaIOError, KafkaSecurityError
    from barrierflow.kafka_io.consumer import RangeGone, ReadStalled, shared_reader

    where = f"{topic}:{partition} offsets [{start}, {end})"
    if end <= start:
        return
    stall = spec.poll_timeout + spec.unavailable_timeout
    try:
        chosen = reader or shared_reader(reader_settings(spec))
    except KafkaSecurityError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: reading {where}: {exc}") from None
    except KafkaIOError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: reading {where} from {','.join(bootstrap_servers(spec))} "
                          f"failed: {exc}") from exc
    try:
        if marked is not None:
            yield from chosen.read_marked(topic, partition, start, end, marked, stall=stall)
        elif columns:
            yield from chosen.read_columns(topic, partition, start, end, stall=stall, drop=drop)
        else:
            yield from chosen.read(topic, partition, start, end, stall=stall)
    except RangeGone as exc:
        raise SourceError(
            f"Kafka source {spec.name!r}: {where} no longer exist on the broker (deleted by "
            "retention, or the topic was recreated). The checkpoint points at data that is "
            f"gone: restore from a newer checkpoint, or raise the topic's retention. ({exc})"
        ) from exc
    except ReadStalled as exc:
        raise SourceError(
            f"Kafka source {spec.name!r}: reading {where} from "
            f"{','.join(bootstrap_servers(spec))} made no progress for "
            f"poll_timeout + unavailable_timeout = {stall:g}s. Likely causes: the broker is unreachable, the "
            "partition's records up to the planned end were deleted or the topic recreated, "
            "or a transaction is still open (read_committed waits for it). Check the broker "
            f"and the topic, or raise unavailable_timeout. ({exc})"
        ) from exc
    except KafkaSecurityError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: reading {where}: {exc}") from None
    except KafkaIOError as exc:
        raise SourceError(f"Kafka source {spec.name!r}: reading {where} from "
                          f"{','.join(bootstrap_servers(spec))} failed: {exc}") from exc
