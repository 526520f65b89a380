"""Kafka records decoded into Arrow record batches, in a source's format.

:class:`RecordDecoder` turns records (or one partition's records read as columns) into Arrow
batches of at most :data:`CHUNK_ROWS` rows: format ``raw`` emits the record as it is, format
``json`` decodes each value as a JSON object and emits ``topic, partition, offset, timestamp``
plus the spec's ``json_fields`` (Arrow's JSON reader where it gives the same rows,
:mod:`barrierflow.kafka_io.json_columns`; record by record otherwise). A record whose value is
not a JSON object, lacks a field, holds ``null`` or a value of the wrong type is not emitted: it
becomes a dead letter (:attr:`RecordDecoder.dead_letters`) naming its partition, offset and
what is wrong. JSON field types: ``string``, ``long`` (an integer), ``double`` (a number),
``boolean`` and ``timestamp`` (an ISO-8601 string, UTC when it has no offset, or a number of
epoch milliseconds).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.kafka_io.json_columns import MAX_EPOCH_MS, arrow_type, decode_columns, iso_timestamp_us
from barrierflow.kafka_io.partition_ids import partition_id
from barrierflow.spec.kafka_params import KAFKA_METADATA_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from kafka.consumer.fetcher import ConsumerRecord

    from barrierflow.kafka_io.consumer import Columns
    from barrierflow.spec.kafka_params import KafkaSource

#: The columns every format starts with (a json field may not be named like one: the spec refuses it).
METADATA_COLUMNS = KAFKA_METADATA_COLUMNS
#: Rows per Arrow record batch a decoder yields.
CHUNK_ROWS = 10_000
_INT64 = (-(2**63), 2**63 - 1)


def _timestamp_us(ms: int | None) -> int | None:
    return None if ms is None or ms < 0 else ms * 1000


def timestamps_us(millis: list[int | None]) -> pa.Array:
    """The ``timestamp`` column of records' epoch-ms timestamps (None or negative: null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = pa.array(millis, type=pa.int64())
    if len(array) and (array.null_count or pc.min(array).as_py() < 0):
        array = pc.if_else(pc.less(array, 0), pa.scalar(None, pa.int64()), array)
    return pc.multiply(array, 1000).cast(pa.timestamp("us", tz="UTC"))


class _Invalid(Exception):
    """A JSON value does not fit its field; the message is the dead-letter reason."""


def _coerce(name: str, kind: str, value: Any) -> Any:
    """``value`` converted to the Arrow-ready Python value of ``kind``, or :class:`_Invalid`."""
    if value is None:
        raise _Invalid(f"field {name!r} is null, expected {kind}")
    if kind == "string":
        if isinstance(value, str):
            return value
    elif kind == "boolean":
        if isinstance(value, bool):
            return value
    elif kind == "long":
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64[0] <= value <= _INT64[1]:
                raise _Invalid(f"field {name!r} is out of the long range: {value}")
            return value
    elif kind == "double":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind == "timestamp":
        if isinstance(value, str):
            try:
                return iso_timestamp_us(value)
            except ValueError as exc:
                raise _Invalid(f"field {name!r} is not an ISO-8601 timestamp: {value[:60]!r}") from exc
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            if abs(value) > MAX_EPOCH_MS:
                raise _Invalid(f"field {name!r} is out of the timestamp range: {value} ms")
            return int(value * 1000)
    raise _Invalid(f"field {name!r} should be {kind}, got {type(value).__name__} {json.dumps(value)[:60]}")


def _payload(value: bytes | None) -> dict[str, Any]:
    if value is None:
        return {"payload": None}
    try:
        return {"payload": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"payload": base64.b64encode(value).decode("ascii"), "payload_encoding": "base64"}


def newest_event_time(batch: pa.RecordBatch, column: str, newest: datetime | None) -> datetime | None:
    """The newer of ``newest`` and the batch's largest ``column`` (Kafka's record ``timestamp``
    when the batch has no such timestamp column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    if column not in names or not pa.types.is_timestamp(batch.schema.field(column).type):
        column = "timestamp"
    if column not in names:
        return newest
    value = pc.max(batch.column(names.index(column))).as_py()
    if value is None:
        return newest
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value if newest is None or value > newest else newest


@dataclass
class RecordDecoder:
    """Turns Kafka records into Arrow record batches for ``spec.format``.

    Malformed records (format ``json`` only) are collected in :attr:`dead_letters` as
    dead-letter objects (``source``, ``partition`` = ``"topic:p"``, ``offset``, ``payload``,
    ``reason``) instead of being emitted.
    """

    spec: KafkaSource
    #: Decode chunks with Arrow's JSON reader where it gives the same rows
    #: (:mod:`barrierflow.kafka_io.json_columns`); False only to measure the per-record path.
    vectorized: bool = True

    def __post_init__(self) -> None:
        self.dead_letters: list[dict[str, Any]] = []

    def batches(self, records: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        """Arrow batches of at most :data:`CHUNK_ROWS` rows of one topic each, in record order."""
        chunk: list[Any] = []
        for record in records:
            if chunk and record.topic != chunk[0].topic:
                batch = self._batch(chunk)
                chunk = []
                if batch is not None:
                    yield batch
            chunk.append(record)
            if len(chunk) >= CHUNK_ROWS:
                batch = self._batch(chunk)
                chunk = []
                if batch is not None:
                    yield batch
        if chunk:
            batch = self._batch(chunk)
            if batch is not None:
                yield batch

    def column_batches(self, topic: str, partition: int, chunks: Iterable[Columns]) -> Iterator[pa.RecordBatch]:
        """As :meth:`batches` for format ``json``, from one partition's records read as columns
        (:func:`~barrierflow.kafka_io.range_reads.read_range_columns`): no Python object per
        record on the way (a chunk Arrow cannot decode alike goes record by record, with the
        same rows and dead letters)."""
        offsets: list[int] = []
        stamps: list[int | None] = []
        values: list[bytes | None] = []
        for chunk in chunks:
            offsets += chunk.offsets
            stamps += chunk.timestamps
            values += chunk.values
            if len(offsets) >= CHUNK_ROWS:
                batch = self._column_batch(topic, partition, offsets, stamps, values)
                offsets, stamps, values = [], [], []
                if batch is not None:
                    yield batch
        if offsets:
            batch = self._column_batch(topic, partition, offsets, stamps, values)
            if batch is not None:
                yield batch

    def _column_batch(self, topic: str, partition: int, offsets: list[int], stamps: list[int | None],
                      values: list[bytes | None]) -> pa.RecordBatch | None:
        import pyarrow as pa

        carried = self.spec.fields_of(topic)
        columns = decode_columns(values, carried) if self.vectorized else None
        if columns is None:
            from barrierflow.kafka_io.consumer import Record

            return self._json([Record(topic, partition, o, t, None, v, ())
                               for o, t, v in zip(offsets, stamps, values, strict=True)], vectorized=False)
        rows = len(offsets)
        metadata = [pa.array([topic] * rows, type=pa.string()), pa.array([partition] * rows, type=pa.int32()),
                    pa.array(offsets, type=pa.int64()), timestamps_us(stamps)]
        return pa.RecordBatch.from_arrays([*metadata, *self._all_fields(columns, carried, rows)],
                                          names=[*METADATA_COLUMNS, *self.spec.json_fields])

    def _batch(self, records: list[ConsumerRecord]) -> pa.RecordBatch | None:
        if self.spec.format == "raw":
            return self._raw(records)
        return self._json(records)

    @staticmethod
    def _metadata(records: list[ConsumerRecord]) -> list[pa.Array]:
        import pyarrow as pa

        return [
            pa.array([r.topic for r in records], type=pa.string()),
            pa.array([r.partition for r in records], type=pa.int32()),
            pa.array([r.offset for r in records], type=pa.int64()),
            pa.array([_timestamp_us(r.timestamp) for r in records], type=pa.timestamp("us", tz="UTC")),
        ]

    def _raw(self, records: list[ConsumerRecord]) -> pa.RecordBatch:
        import pyarrow as pa

        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        headers = [[{"key": k, "value": v} for k, v in (r.headers or [])] for r in records]
        return pa.RecordBatch.from_arrays(
            [
                *self._metadata(records),
                pa.array([r.key for r in records], type=pa.binary()),
                pa.array([r.value for r in records], type=pa.binary()),
                pa.array(headers, type=pa.list_(header)),
            ],
            names=["topic", "partition", "offset", "timestamp", "key", "value", "headers"],
        )

    def dead_letter(self, topic: str, partition: int, offset: int, value: bytes | None, *, otherwise: str
                    ) -> dict[str, Any]:
        """The dead-letter object this decoder makes of one record (format ``json``) that another
        decoder found malformed (Spark's connector, :mod:`barrierflow.sources.spark_kafka`): the
        same object and reason as this decoder's; ``otherwise`` is the reason when this decoder
        reads the record."""
        from types import SimpleNamespace

        reason = otherwise
        try:
            self._decode(SimpleNamespace(topic=topic, partition=partition, offset=offset, value=value))  # type: ignore[arg-type]
        except _Invalid as exc:
            reason = str(exc)
        return {"source": self.spec.name, "partition": partition_id(topic, partition), "offset": offset,
                **_payload(value), "reason": reason}

    def _decode(self, record: ConsumerRecord, fields: Mapping[str, str] | None = None) -> list[Any]:
        """The values of ``fields`` (default: every json field) in ``record``'s JSON object, or
        :class:`_Invalid` naming what is wrong."""
        if record.value is None:
            raise _Invalid("value is null (a tombstone), expected a JSON object")
        try:
            obj = json.loads(record.value)
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Invalid(f"value is not valid JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise _Invalid(f"value is a JSON {type(obj).__name__}, expected an object")
        row = []
        for name, kind in (self.spec.json_fields if fields is None else fields).items():
            if name not in obj:
                raise _Invalid(f"field {name!r} is missing")
            row.append(_coerce(name, kind, obj[name]))
        return row

    def _json(self, records: list[ConsumerRecord], *, vectorized: bool = True) -> pa.RecordBatch | None:
        import pyarrow as pa

        names = [*METADATA_COLUMNS, *self.spec.json_fields]
        carried = self.spec.fields_of(records[0].topic)  # a chunk is one topic's (batches)
        tried = self.vectorized and vectorized
        columns = decode_columns([r.value for r in records], carried) if tried else None
        if columns is not None:
            return pa.RecordBatch.from_arrays([*self._metadata(records), *self._all_fields(columns, carried,
                                                                                           len(records))],
                                              names=names)
        kept: list[ConsumerRecord] = []
        rows: list[list[Any]] = []
        for record in records:
            try:
                rows.append(self._decode(record, carried))
            except _Invalid as exc:
                self.dead_letters.append(
                    {
                        "source": self.spec.name,
                        "partition": partition_id(record.topic, record.partition),
                        "offset": record.offset,
                        **_payload(record.value),
                        "reason": str(exc),
                    }
                )
                continue
            kept.append(record)
        if not kept:
            return None
        columns = [pa.array([row[i] for row in rows], type=arrow_type(kind))
                   for i, kind in enumerate(carried.values())]
        return pa.RecordBatch.from_arrays([*self._metadata(kept), *self._all_fields(columns, carried, len(kept))],
                                          names=names)

    def _all_fields(self, columns: list[pa.Array], carried: Mapping[str, str], rows: int) -> list[pa.Array]:
        """A column per json field in the spec's order: ``columns`` (of the ``carried`` fields)
        and nulls for the fields this topic's records do not carry (``topic_fields``)."""
        import pyarrow as pa

        if len(carried) == len(self.spec.json_fields):
            return columns
        given = dict(zip(carried, columns, strict=True))
        return [given[name] if name in given else pa.nulls(rows, type=arrow_type(kind))
                for name, kind in self.spec.json_fields.items()]
