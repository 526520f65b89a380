"""Decoding a channel's data records into the reading stage's rows.

A channel's data records are row batches (:mod:`barrierflow.kafka_io.row_batches`: many rows
per Kafka record, Arrow IPC); records written before that format hold one JSON row each, and
are decoded as the Kafka source decodes ``json``. :class:`ChannelDecoder` reads both, in
record order.

Contract: a row batch gives the same rows, types and dead letters as the same rows written one
JSON object per record would (the Kafka sink's encoding, read with the stage's ``json_fields``):

* each field of the topic's ``json_fields`` is taken from the column of that name and cast to
  the field's type when the column's type means the same in JSON (any integer for ``long``;
  integer or finite floating for ``double``; string; boolean; any timestamp for
  ``timestamp``, as an instant in UTC); other columns are ignored;
* otherwise (a field missing, a null value, a type JSON would not accept, NaN or infinity) the
  record's rows are turned into JSON objects and go through the JSON decoder row by row, so
  each bad row becomes a dead letter with the reason the JSON path gives, and the good rows
  are kept;
* the metadata columns of every row of a record are the record's: ``topic``, ``partition``,
  ``offset`` (the record's offset, shared by its rows) and ``timestamp``;
* a value that is not a readable Arrow stream is one dead letter (payload base64) naming the
  record; nothing is raised.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.kafka_io.consumer import Columns, Record
from barrierflow.kafka_io.decoding import METADATA_COLUMNS, RecordDecoder
from barrierflow.kafka_io.partition_ids import partition_id
from barrierflow.kafka_io.row_batches import decode, is_row_batch

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class ChannelDecoder(RecordDecoder):
    """:class:`RecordDecoder` for a channel (see the module docstring). ``first_rows``: each
    row batch gives its first row only (the driver's event-time peeks: a record's place in
    event time is that of its first row, as for a record holding one row)."""

    first_rows: bool = False

    def batches(self, records: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        pending: list[Any] = []
        for record in records:
            if not is_row_batch(record.value):
                pending.append(record)
                continue
            if pending:
                yield from super().batches(pending)
                pending = []
            batch = self._rows(record.topic, record.partition, record.offset, record.timestamp, record.value)
            if batch is not None:
                yield batch
        if pending:
            yield from super().batches(pending)

    def column_batches(self, topic: str, partition: int, chunks: Iterable[Columns]) -> Iterator[pa.RecordBatch]:
        for chunk in chunks:
            kinds = [is_row_batch(v) for v in chunk.values]
            if not any(kinds):
                yield from super().column_batches(topic, partition, [chunk])
                continue
            first, count = 0, len(kinds)
            while first < count:
                last = first
                while last < count and kinds[last] == kinds[first]:
                    last += 1
                if kinds[first]:
                    for i in range(first, last):
                        value = chunk.values[i]
                        assert value is not None
                        batch = self._rows(topic, partition, chunk.offsets[i], chunk.timestamps[i], value)
                        if batch is not None:
                            yield batch
                else:
                    part = Columns(chunk.offsets[first:last], chunk.timestamps[first:last], chunk.values[first:last])
                    yield from super().column_batches(topic, partition, [part])
                first = last

    def _rows(self, topic: str, partition: int, offset: int, stamp: int | None, value: bytes
              ) -> pa.RecordBatch | None:
        """The stage's rows of one row-batch record (None: none kept)."""
        import pyarrow as pa

        from barrierflow.kafka_io.decoding import timestamps_us

        try:
            batch = decode(value)
        except (pa.ArrowInvalid, OSError) as exc:
            self.dead_letters.append({
                "source": self.spec.name, "partition": partition_id(topic, partition), "offset": offset,
                "payload": base64.b64encode(value).decode("ascii"), "payload_encoding": "base64",
                "reason": f"channel record is not a readable Arrow row batch: {exc}"})
            return None
        if self.first_rows:
            batch = batch.slice(0, 1)
        rows = batch.num_rows
        if rows == 0:
            return None
        carried = self.spec.fields_of(topic)
        columns = _cast(batch, carried)
        if columns is None:
            return self._json(_as_json_records(batch, topic, partition, offset, stamp), vectorized=False)
        metadata = [pa.array([topic] * rows, type=pa.string()), pa.array([partition] * rows, type=pa.int32()),
                    pa.array([offset] * rows, type=pa.int64()), timestamps_us([stamp] * rows)]
        return pa.RecordBatch.from_arrays([*metadata, *self._all_fields(columns, carried, rows)],
                                          names=[*METADATA_COLUMNS, *self.spec.json_fields])


def _cast(batch: pa.RecordBatch, carried: Mapping[str, str]) -> list[pa.Array] | None:
    """The ``carried`` fields of ``batch`` as the stage's column types, or None when a field is
    missing, null, or of a type the JSON path would not take as it is (module docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    out = []
    for name, kind in carried.items():
        if name not in names:
            return None
        column = batch.column(names.index(name))
        if column.null_count:
            return None
        given = column.type
        if kind == "long" and pa.types.is_integer(given):
            if given == pa.uint64() and len(column) and pc.max(column).as_py() > 2**63 - 1:
                return None
            out.append(column.cast(pa.int64()))
        elif kind == "double" and (pa.types.is_integer(given) or pa.types.is_floating(given)):
            if pa.types.is_floating(given) and pc.all(pc.is_finite(column)).as_py() is False:
                return None
            out.append(column.cast(pa.float64()))
        elif kind == "string" and (pa.types.is_string(given) or pa.types.is_large_string(given)):
            out.append(column.cast(pa.string()))
        elif kind == "boolean" and pa.types.is_boolean(given):
            out.append(column)
        elif kind == "timestamp" and pa.types.is_timestamp(given):
            out.append(column.cast(pa.timestamp("us", tz="UTC"), safe=False))
        else:
            return None
    return out


def _as_json_records(batch: pa.RecordBatch, topic: str, partition: int, offset: int, stamp: int | None
                     ) -> list[Record]:
    """The rows of ``batch`` as one-row JSON records at ``offset`` (the slow path: the JSON
    decoder then keeps the good rows and dead-letters the others with its reasons)."""
    import msgspec

    encoder = msgspec.json.Encoder()
    return [Record(topic, partition, offset, stamp, None, encoder.encode(row), ())
            for row in batch.to_pylist()]
