"""Dead-letter output for malformed records.

A source that meets a record it cannot decode does not fail the batch: it writes the record
(raw payload, partition, offset, reason) to the dead-letter store and skips it. Layout, one
JSON-lines object per (source, partition, offset range)::

    <dead_letter_uri>/source=<name>/partition=<p>/<start:020d>-<end:020d>.jsonl

Writes are atomic and the name is a function of the range, so a replayed batch overwrites
its own file. After a restore the planner may cut ranges differently, so two files can
hold the same record: ``(source, partition, offset)`` identifies a dead letter; readers and
:func:`count_dead_letters` de-duplicate on it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from barrierflow.storage import open_store


def dead_letter_key(source: str, partition: str, start: int, end: int) -> str:
    safe = partition.replace("/", "_")
    return f"source={source}/partition={safe}/{start:020d}-{end:020d}.jsonl"


def write_dead_letters(
    uri: str, source: str, partition: str, start: int, end: int, records: Iterable[dict[str, Any]]
) -> int:
    """Write ``records`` for the range ``[start, end)``; returns how many were written."""
    lines = [json.dumps(r, sort_keys=True, default=str) for r in records]
    if not lines:
        return 0
    open_store(uri).put_bytes(dead_letter_key(source, partition, start, end), ("\n".join(lines) + "\n").encode())
    return len(lines)


def read_dead_letters(uri: str) -> list[dict[str, Any]]:
    """Every dead letter under ``uri``, de-duplicated on (source, partition, offset)."""
    store = open_store(uri)
    seen: dict[tuple[str, str, int], dict[str, Any]] = {}
    for info in store.list(""):
        if not info.key.endswith(".jsonl"):
            continue
        for line in store.get_bytes(info.key).decode().splitlines():
            if line.strip():
                rec = json.loads(line)
                seen[(rec["source"], str(rec["partition"]), int(rec["offset"]))] = rec
    return [seen[k] for k in sorted(seen)]


def count_dead_letters(uri: str) -> int:
    return len(read_dead_letters(uri))


class DeadLetterTally:
    """Counts the dead letters under ``uri`` as :func:`count_dead_letters` does, reading only
    the files it has not read yet (a file's name is a function of its range, so a file once
    read is only ever overwritten with the same records). For a running pipeline's metrics:
    :meth:`count` lists the store and reads the new files; it keeps the identities it saw."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._read: set[str] = set()
        self._seen: set[tuple[str, str, int]] = set()

    def count(self) -> int:
        store = open_store(self.uri)
        for info in store.list(""):
            if not info.key.endswith(".jsonl") or info.key in self._read:
                continue
            for line in store.get_bytes(info.key).decode().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    self._seen.add((rec["source"], str(rec["partition"]), int(rec["offset"])))
            self._read.add(info.key)
        return len(self._seen)
