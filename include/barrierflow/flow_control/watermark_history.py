"""The per-batch watermark history in the work dir: ``<control dir>/watermarks.jsonl``.

Written by the source's planner (one JSON line per planned batch, see
:class:`BatchRecord`), read by the job runtime for the progress line and the checkpoint
manifests. Bounded: when the file holds more than ``2 * keep`` lines it is rewritten
(atomically) with the newest ``keep``. A line that cannot be parsed (a torn write after a
crash) is skipped when reading. The history is report metadata: it never decides what a batch
contains after the fact (Spark's offset log does).

Each line::

    {"planned_at": "2026-...+00:00", "start": {"0": 100}, "end": {"0": 200}, "barrier": 3,
     "watermarks": {"0": "2026-...+00:00" | null}, "idle": ["3"], "paused": ["1"],
     "pauses": {"1": 2}, "paused_seconds": {"1": 1.5}, "cap": 4000 | null}

``watermarks`` are the partitions' watermarks at the batch's *start* offsets (newest event
time read so far minus the watermark delay), i.e. what the alignment decision used; ``pauses``
and ``paused_seconds`` count since the source reader started; ``cap`` is the per-partition
record cap of adaptive batch sizing (null: off).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from barrierflow.atomic_files import write_atomic

HISTORY_FILE = "watermarks.jsonl"
DEFAULT_KEEP = 500


@dataclass(frozen=True)
class BatchRecord:
    planned_at: datetime
    start: dict[str, int]
    end: dict[str, int]
    barrier: int
    watermarks: dict[str, datetime | None]
    idle: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    pauses: dict[str, int] = field(default_factory=dict)
    paused_seconds: dict[str, float] = field(default_factory=dict)
    cap: int | None = None

    def to_json(self) -> str:
        return json.dumps({
            "planned_at": self.planned_at.isoformat(), "start": self.start, "end": self.end,
            "barrier": self.barrier,
            "watermarks": {p: w.isoformat() if w else None for p, w in self.watermarks.items()},
            "idle": self.idle, "paused": self.paused, "pauses": self.pauses,
            "paused_seconds": self.paused_seconds, "cap": self.cap,
        }, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchRecord:
        return cls(
            planned_at=datetime.fromisoformat(data["planned_at"]),
            start={str(k): int(v) for k, v in data["start"].items()},
            end={str(k): int(v) for k, v in data["end"].items()},
            barrier=int(data["barrier"]),
            watermarks={str(k): datetime.fromisoformat(v) if v else None for k, v in data["watermarks"].items()},
            idle=[str(p) for p in data.get("idle", [])],
            paused=[str(p) for p in data.get("paused", [])],
            pauses={str(k): int(v) for k, v in data.get("pauses", {}).items()},
            paused_seconds={str(k): float(v) for k, v in data.get("paused_seconds", {}).items()},
            cap=None if data.get("cap") is None else int(data["cap"]),
        )


class WatermarkHistory:
    """Append and read the history file in ``directory``; see the module docstring."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.path = Path(directory) / HISTORY_FILE
        self.keep = keep
        self._lines: int | None = None

    def append(self, record: BatchRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._lines is None:
            self._lines = self._count()
        with self.path.open("a", encoding="utf-8") as out:
            out.write(record.to_json() + "\n")
        self._lines += 1
        if self._lines > 2 * self.keep:
            self._trim()

    def records(self) -> list[BatchRecord]:
        """Every readable record, oldest first ([] when there is no history)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(BatchRecord.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        return out

    def latest(self) -> BatchRecord | None:
        records = self.records()
        return records[-1] if records else None

    def ending_at(self, end: dict[str, int]) -> BatchRecord | None:
        """The newest record of a batch that ended at ``end`` (e.g. a barrier batch)."""
        return next((r for r in reversed(self.records()) if r.end == end), None)

    def _count(self) -> int:
        """Lines already there; a torn last line (a crash mid-write) is ended first."""
        try:
            with self.path.open("rb") as f:
                data = f.read()
        except FileNotFoundError:
            return 0
        if data and not data.endswith(b"\n"):
            with self.path.open("a", encoding="utf-8") as out:
                out.write("\n")
        return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)

    def _trim(self) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines()[-self.keep:]
        write_atomic(self.path, "".join(line + "\n" for line in lines))
        self._lines = len(lines)
