"""Many rows in one Kafka record: a channel's data records as Arrow IPC record batches.

A channel (the topic between two stages) carries its rows as Arrow record batches, one Arrow
IPC stream (schema and one batch) per Kafka record, with header :data:`ROWS_HEADER` holding
the record's row count. One Kafka record per row cost a stage pair two Python JSON passes and
two librdkafka messages per row, and the reading stage's driver read every record once more to
find the barriers: a channel moved about 30,000-45,000 rows/s on this 2-core machine
(bench/results/kafka-source/). With rows batched, the writer produces a record per few
thousand rows, the reader decodes them without a Python object per row, and the driver's scan
for barrier records looks at a few records per micro-batch. Flink's network stack does the
same: records travel in buffers, and barriers between buffers.

Contract:

* :func:`split` cuts a record batch into row batches of at most :data:`MAX_ROWS` rows and about
  :data:`MAX_BYTES` bytes (far below Kafka's default 1 MB message limit), rows kept in order;
* :func:`encode` / :func:`decode` round-trip a record batch exactly (types, nulls, order);
* :func:`is_row_batch` tells a row-batch value from a JSON row (channels written before this
  format carry one JSON object per record; readers still read those, one row per record).
  An Arrow IPC stream starts with the continuation marker ``0xFFFFFFFF``, which no JSON text
  does;
* :func:`rows_in` is the row count a record holds: its :data:`ROWS_HEADER`, else 1 (a JSON row).

Offsets stay per Kafka record, so a channel's state (offset ranges), barriers and attempt
cutoffs keep their meaning; a row's ``offset`` column is the offset of the record holding it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SourceError

if TYPE_CHECKING:
    import pyarrow as pa

#: The header holding a row-batch record's row count (ASCII digits).
ROWS_HEADER = "bf-rows"
#: Rows per Kafka record at most.
MAX_ROWS = 16_384
#: Bytes of Arrow buffers per Kafka record, about (a row wider than this travels alone).
MAX_BYTES = 512 * 1024
#: The codec of a row batch's buffers. The broker's work grows with the bytes it stores and
#: serves (the embedded broker's CPU more than the pipeline's stages, at 150,000 rows/s);
#: zstd cut a 16,384-row batch of three int64/timestamp columns from 394 KB to 50 KB for about
#: 0.5 ms to encode and 0.4 ms to decode (lz4: 153 KB, 0.3 + 0.2 ms), on this 2-core machine.
COMPRESSION = "zstd"
#: The first bytes of every Arrow IPC stream (the continuation marker).
_IPC_MAGIC = b"\xff\xff\xff\xff"


def split(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``batch`` as consecutive slices of at most :data:`MAX_ROWS` rows and about
    :data:`MAX_BYTES` bytes each (none for an empty batch); slices share the batch's buffers."""
    rows = batch.num_rows
    if rows == 0:
        return []
    size = max(1, batch.nbytes)
    step = max(1, min(MAX_ROWS, rows * MAX_BYTES // size))
    return [batch.slice(first, step) for first in range(0, rows, step)]


def encode(batch: pa.RecordBatch) -> bytes:
    """One Arrow IPC stream (schema, ``batch``, end marker) as bytes: a Kafka record's value.
    Its buffers are compressed with :data:`COMPRESSION` (readers need nothing to know it: the
    IPC stream names its codec, and uncompressed streams read the same)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=COMPRESSION)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def is_row_batch(value: bytes | None) -> bool:
    """Whether a record's value is a row batch (else a JSON row, or null)."""
    return value is not None and value[:4] == _IPC_MAGIC


def decode(value: bytes) -> pa.RecordBatch:
    """The record batch :func:`encode` wrote (several batches in the stream are combined).

    Raises:
        pyarrow.ArrowInvalid: ``value`` is not an Arrow IPC stream.
    """
    import pyarrow as pa

    table = pa.ipc.open_stream(pa.py_buffer(value)).read_all()
    batches = table.combine_chunks().to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return batches[0]


def rows_header(rows: int) -> tuple[str, bytes]:
    """The :data:`ROWS_HEADER` header of a record holding ``rows`` rows."""
    return ROWS_HEADER, str(rows).encode("ascii")


def rows_in(headers: Iterable[tuple[str, bytes]] | None, where: str = "a channel record") -> int:
    """The rows a channel data record holds: its :data:`ROWS_HEADER` (a row batch), else 1
    (one JSON row). Barrier records are not data records; callers leave them out first.

    Raises:
        SourceError: the header is not a non-negative integer (a record barrierflow did not
            write, or a corrupted one), naming ``where``: counting it as anything would plan
            batches and count channel state wrongly.
    """
    for name, raw in headers or ():
        if name == ROWS_HEADER:
            try:
                rows = int(raw.decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                rows = -1
            if rows < 0:
                raise SourceError(f"{where}: header {ROWS_HEADER!r} is {raw[:40]!r}, not a row count; only barrierflow "
                                  "stages may write to a channel topic (check what else produces to it)")
            return rows
    return 1


def by_partition(batch: pa.RecordBatch, targets: Sequence[int] | Any) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(partition, rows of batch for it)`` for every partition in ``targets`` (a partition
    number per row, a sequence or a NumPy array), rows of each partition in batch order."""
    import numpy as np
    import pyarrow as pa

    chosen = np.asarray(targets, dtype=np.int64)
    if len(chosen) == 0:
        return
    first = int(chosen[0])
    if bool((chosen == first).all()):
        yield first, batch
        return
    order = np.argsort(chosen, kind="stable")
    ordered = chosen[order]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    for part in np.split(order, bounds):
        yield int(chosen[part[0]]), batch.take(pa.array(part))
