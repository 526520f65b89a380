"""Newest event time per source partition, for sources that cannot compute it from offsets.

The generator derives event times from offsets; a Kafka partition's event times are only
known to the executor that reads a range. That executor records, per range it read::

    <uri>/source=<name>/partition=<p>/<start:020d>-<end:020d>.json   {"max_event_time", "records"}

(atomic, and named after the range, so a replayed batch overwrites its own file). At a
checkpoint the driver asks :meth:`EventTimeIndex.max_event_time` for the newest event time
of the records before the barrier offset ``E``: it folds every range ending at or before
``E`` into ``partition=<p>/_summary.json`` (``{"through", "max_event_time"}``) and deletes the
folded files, so the directory stays small. Asked for an ``E`` below the summary's ``through``
(after a restore to an older checkpoint) it answers None (unknown) rather than a value that
includes newer records. An unreadable record is logged and also answers None: event times
are report metadata and never stop the job. Missing information is None, never a guess.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from typing import Any

from barrierflow.storage import ObjectNotFoundError, open_store

log = logging.getLogger(__name__)
_RANGE = re.compile(r"/(\d{20})-(\d{20})\.json$")


def _prefix(source: str, partition: str) -> str:
    return f"source={source}/partition={partition.replace('/', '_')}/"


def record_range(uri: str, source: str, partition: str, start: int, end: int,
                 max_event_time: datetime | None, records: int) -> None:
    """Executor side: the newest event time of the records of ``[start, end)`` (None: none had one)."""
    body = {"max_event_time": max_event_time.isoformat() if max_event_time else None, "records": records}
    open_store(uri).put_bytes(f"{_prefix(source, partition)}{start:020d}-{end:020d}.json", json.dumps(body).encode())


def _newer(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a or b
    return a if datetime.fromisoformat(a) >= datetime.fromisoformat(b) else b


class EventTimeIndex:
    """Driver side: the newest event time before an offset, per partition of one source."""

    def __init__(self, uri: str, source: str) -> None:
        self.store = open_store(uri)
        self.source = source

    def max_event_time(self, partition: str, end: int) -> datetime | None:
        prefix = _prefix(self.source, partition)
        summary_key = f"{prefix}_summary.json"
        try:
            summary: dict[str, Any] = json.loads(self.store.get_bytes(summary_key))
            int(summary["through"])
        except ObjectNotFoundError:
            summary = {"through": 0, "max_event_time": None}
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("event-time summary %s is unreadable (%s): event times of %s are unknown; delete it to "
                        "start over", self.store.describe(summary_key), exc, partition)
            return None
        if int(summary["through"]) > end:
            return None  # folded past this offset (a restore went back): not answerable exactly
        folded: list[str] = []
        newest = summary["max_event_time"]
        through = int(summary["through"])
        for info in self.store.list(prefix):
            match = _RANGE.search(info.key)
            if match is None or int(match.group(2)) > end:
                continue
            try:
                newest = _newer(newest, json.loads(self.store.get_bytes(info.key)).get("max_event_time"))
            except (ValueError, AttributeError) as exc:
                log.warning("event-time record %s is unreadable (%s): the event time of %s stays unknown",
                            self.store.describe(info.key), exc, partition)
                return None
            through = max(through, int(match.group(2)))
            folded.append(info.key)
        if folded:
            self.store.put_bytes(summary_key, json.dumps({"through": through, "max_event_time": newest}).encode())
            self.store.delete_many(folded)
        return datetime.fromisoformat(newest) if newest else None
